"""Kernels of the blockwise kNN graph: plain NumPy and pynndescent on one or two row blocks, no Dask.

The distributed graph (:mod:`taodist.laptao.distributed_graph`) runs these as
tasks, each on the worker that holds its block; nothing here knows of a
cluster, so every step is testable in process.

:class:`BlockIndex`        a row block's nearest-neighbour index (NN-descent, or brute force
                           for a small block) that answers in global row numbers
:func:`merge_k_best`       each row's k best of several candidate lists (self and repeats dropped)
:func:`neighbour_lists`    the lists of a block's neighbours that another block owns (refinement, step 1)
:func:`gather_candidates`  a row's new neighbour-of-neighbour candidates (step 2)
:func:`split_by_owner`     the candidates grouped by the block that holds their rows (step 3)
:func:`candidate_distances` distances to the candidates one block holds, measured there (step 4)
:func:`refined_lists`      the measured candidates merged into the lists (step 5)

Distances are Euclidean, computed in float32 (as :func:`taodist.laptao._graph.knn`
does) and returned as float64; indices are int64 global row numbers.
"""

import numpy as np

#: a block of at most this many rows is searched by brute force: an NN-descent index
#: over a few hundred rows costs more than it saves, and needs at least k + 1 rows
EXACT_BLOCK_MAX = 256
#: query slack of pynndescent's search (its default 0.1): larger finds more true
#: neighbours for more distance evaluations
QUERY_EPSILON = 0.1
#: (row, candidate) pairs whose difference vectors are formed at once in refinement
PAIRS_PER_BATCH = 65536
#: query rows brute-forced at once against a small block
QUERIES_PER_BATCH = 4096


def as_float32_rows(X):
    """``X`` as a C-contiguous float32 array (what pynndescent indexes without a copy of its own)."""
    return np.ascontiguousarray(X, dtype=np.float32)


def _brute_force(Q, data, k):
    """Local indices and distances of each row of ``Q``'s ``k`` nearest rows of ``data``, nearest first.

    In float64 (a small block: cheap), query rows in batches so the distance
    matrix stays small; ties are broken by index, the same on every machine.
    """
    data = data.astype(np.float64)
    k = min(k, data.shape[0])
    idx, dist = [], []
    for lo in range(0, Q.shape[0], QUERIES_PER_BATCH):
        q = Q[lo:lo + QUERIES_PER_BATCH].astype(np.float64)
        d = np.maximum((q * q).sum(1)[:, None] + (data * data).sum(1)[None, :] - 2 * (q @ data.T), 0)
        cols = np.broadcast_to(np.arange(data.shape[0]), d.shape)
        order = np.lexsort((cols, d))[:, :k]
        idx.append(order)
        dist.append(np.sqrt(np.take_along_axis(d, order, 1)))
    return np.vstack(idx), np.vstack(dist)


class BlockIndex:
    """A row block's nearest-neighbour index, answering in global row numbers.

    Parameters
    ----------
    X : ndarray of shape (n_rows, n_features)
        The block's rows.
    offset : int
        Global row number of the block's first row.
    n_neighbors : int
        ``k``: neighbours per row the graph keeps.
    seed : int
        Seeds the block's NN-descent (one seed per block, so the index does not
        depend on which worker builds it).
    """

    def __init__(self, X, offset, n_neighbors, seed):
        self.data = as_float32_rows(X)
        self.offset = int(offset)
        self.n_neighbors = int(n_neighbors)
        self.nnd = None
        if self.data.shape[0] > EXACT_BLOCK_MAX:
            from pynndescent import NNDescent

            # k + 1: NN-descent lists each row as its own first neighbour (dropped by merge_k_best)
            self.nnd = NNDescent(self.data, n_neighbors=self.n_neighbors + 1, random_state=seed)
            # the search structures are built (and the search compiled) now, in the build task:
            # pynndescent builds them at the first query, which two threads' queries of one index
            # would then do at once (AttributeError: no '_rp_forest')
            self.nnd.prepare()

    def __sizeof__(self):
        # what Dask's scheduler weighs (sizeof falls back to sys.getsizeof): the rows, and for an
        # NN-descent index its neighbour graph and search graph (about 12 bytes a neighbour), so
        # a query is run where the index is rather than the index shipped to the query rows
        extra = 0 if self.nnd is None else 12 * self.data.shape[0] * (self.n_neighbors + 1)
        return object.__sizeof__(self) + self.data.nbytes + extra

    def self_neighbours(self):
        """Candidate neighbours of the block's own rows within the block: ``(indices, distances)``, self included."""
        if self.nnd is None:
            idx, dist = _brute_force(self.data, self.data, self.n_neighbors + 1)
        else:
            idx, dist = self.nnd.neighbor_graph
        return self._global(idx, dist)

    def query(self, Q):
        """Each row of ``Q``'s ``k`` nearest rows of this block: ``(indices, distances)``."""
        Q = as_float32_rows(Q)
        if self.nnd is None:
            idx, dist = _brute_force(Q, self.data, self.n_neighbors)
        else:
            # pynndescent copies its search state per call, so the answer for a block of queries
            # does not depend on what was asked before (nor on the order tasks ran in)
            idx, dist = self.nnd.query(Q, k=min(self.n_neighbors, self.data.shape[0]), epsilon=QUERY_EPSILON)
        return self._global(idx, dist)

    def _global(self, idx, dist):
        idx = np.asarray(idx, dtype=np.int64)
        missing = idx < 0  # NN-descent pads a list it could not fill with -1
        return np.where(missing, -1, idx + self.offset), np.where(missing, np.inf, dist).astype(np.float64)


def merge_k_best(rows, k, *candidates):
    """Each row's ``k`` nearest of several candidate lists, nearest first.

    Parameters
    ----------
    rows : ndarray of shape (n,)
        Global row numbers of the rows (a row is never its own neighbour).
    k : int
        Neighbours kept per row.
    *candidates : tuple of (indices, distances)
        Candidate lists of shape (n, m_i); index -1 marks an empty slot.

    Returns
    -------
    indices : ndarray of shape (n, k), int64
        Global row numbers, ordered by distance then by row number (so the
        result does not depend on the order of ``candidates``).
    distances : ndarray of shape (n, k), float64
    """
    idx = np.hstack([c[0] for c in candidates]).astype(np.int64, copy=False)
    dist = np.hstack([c[1] for c in candidates]).astype(np.float64, copy=False)
    dist = np.where((idx == np.asarray(rows)[:, None]) | (idx < 0), np.inf, dist)
    # a row met twice (two routes to one neighbour in refinement): keep one copy
    by_index = np.argsort(idx, axis=1, kind="stable")
    sorted_idx = np.take_along_axis(idx, by_index, 1)
    repeat = np.zeros_like(idx, dtype=bool)
    repeat[:, 1:] = sorted_idx[:, 1:] == sorted_idx[:, :-1]
    np.put_along_axis(dist, by_index, np.where(repeat, np.inf, np.take_along_axis(dist, by_index, 1)), 1)
    order = np.lexsort((idx, dist))[:, :k]
    best_idx, best_dist = np.take_along_axis(idx, order, 1), np.take_along_axis(dist, order, 1)
    return np.where(np.isinf(best_dist), -1, best_idx), best_dist


def neighbour_lists(indices, owner_indices, owner_offset):
    """The neighbour lists of the entries of ``indices`` that one block owns, in compact form.

    Parameters
    ----------
    indices : ndarray of shape (n, k)
        A block's neighbour lists (global row numbers, ``-1`` empty).
    owner_indices : ndarray of shape (n_owner, k)
        The owning block's neighbour lists.
    owner_offset : int
        Global row number of the owning block's first row.

    Returns
    -------
    slots : ndarray of shape (m,), int64
        Flat positions in ``indices`` of the entries the owner holds.
    lists : ndarray of shape (m, k), int64
        Those entries' own neighbour lists (only these travel, not a
        padded (n, k, k) array per block).
    """
    local = indices.ravel() - owner_offset
    slots = np.flatnonzero((indices.ravel() >= 0) & (local >= 0) & (local < owner_indices.shape[0]))
    return slots, np.asarray(owner_indices[local[slots]], dtype=np.int64)


def gather_candidates(rows, indices, *parts):
    """Each row's new neighbour-of-neighbour candidates, from every block's :func:`neighbour_lists`.

    Parameters
    ----------
    rows : ndarray of shape (n,)
        Global row numbers of the block's rows.
    indices : ndarray of shape (n, k)
        The block's current neighbour lists.
    *parts : tuple of (slots, lists)
        Every block's answer of :func:`neighbour_lists`.

    Returns
    -------
    ndarray of shape (n, k * k), int64
        Candidates, ``-1`` where a candidate is the row itself, one of its
        current neighbours or met before in the row (nothing is measured twice).
    """
    n, k = indices.shape
    candidates = np.full((n * k, k), -1, dtype=np.int64)
    for slots, lists in parts:
        candidates[slots] = lists
    candidates = candidates.reshape(n, -1)
    both = np.hstack([indices, candidates])
    both = np.where(both == np.asarray(rows)[:, None], -1, both)
    # a stable sort puts a current neighbour before its copies among the candidates
    by_value = np.argsort(both, axis=1, kind="stable")
    sorted_values = np.take_along_axis(both, by_value, 1)
    repeat = np.zeros(both.shape, dtype=bool)
    repeat[:, 1:] = sorted_values[:, 1:] == sorted_values[:, :-1]
    seen = np.empty_like(repeat)
    np.put_along_axis(seen, by_value, repeat, 1)
    return np.where(seen[:, k:], -1, both[:, k:])


def split_by_owner(candidates, offsets):
    """The valid entries of ``candidates`` grouped by the block that owns them.

    Parameters
    ----------
    candidates : ndarray of shape (n, m)
        Global row numbers, ``-1`` empty.
    offsets : sequence of int
        First global row of every block, increasing.

    Returns
    -------
    list of (positions, candidates)
        Per block, the flat positions in ``candidates`` of the entries it owns
        and those entries (what that block is sent to measure).
    """
    flat = candidates.ravel()
    valid = np.flatnonzero(flat >= 0)
    owner = np.searchsorted(np.asarray(offsets), flat[valid], side="right") - 1
    return [(valid[owner == j], flat[valid[owner == j]]) for j in range(len(offsets))]


def candidate_distances(X, pairs, width, owner_X, owner_offset):
    """Distances from rows of ``X`` to candidates that one block owns.

    Parameters
    ----------
    X : ndarray of shape (n, n_features)
        A block's rows.
    pairs : tuple of (positions, candidates)
        That block's share of :func:`split_by_owner` for the owner.
    width : int
        Candidates per row (the flat positions' row length).
    owner_X : ndarray of shape (n_owner, n_features)
        The owning block's rows.
    owner_offset : int

    Returns
    -------
    ndarray of shape (len(positions),), float64
    """
    positions, candidates = pairs
    rows, local = positions // width, candidates - owner_offset
    out = np.empty(positions.size)
    X, owner_X = as_float32_rows(X), as_float32_rows(owner_X)
    for lo in range(0, positions.size, PAIRS_PER_BATCH):  # batches: the pairs' row copies stay small
        diff = X[rows[lo:lo + PAIRS_PER_BATCH]] - owner_X[local[lo:lo + PAIRS_PER_BATCH]]
        out[lo:lo + PAIRS_PER_BATCH] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out


def refined_lists(rows, k, graph, width, *measured):
    """A block's lists after one refinement round: its current lists and the measured candidates merged.

    Parameters
    ----------
    rows : ndarray of shape (n,)
        Global row numbers of the block's rows.
    k : int
    graph : tuple of (indices, distances)
        The current lists, (n, k) each.
    width : int
        Candidates per row.
    *measured : tuple of ((positions, candidates), distances)
        Every owner's share and its distances (:func:`candidate_distances`).

    Returns
    -------
    indices, distances : ndarray of shape (n, k)
        As for :func:`merge_k_best`.
    """
    n = graph[0].shape[0]
    idx, dist = np.full(n * width, -1, dtype=np.int64), np.full(n * width, np.inf)
    for (positions, candidates), d in measured:
        idx[positions], dist[positions] = candidates, d
    return merge_k_best(rows, k, graph, (idx.reshape(n, width), dist.reshape(n, width)))
