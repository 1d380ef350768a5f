"""Kernels of the blockwise kNN graph: plain NumPy and pynndescent on one or two row blocks, no Dask.

The distributed graph (:mod:`taodist.laptao.distributed_graph`) runs these as
tasks, each on the worker that holds its block; nothing here knows of a
cluster, so every step is testable in process.

:class:`BlockIndex`        a row block's nearest-neighbour index (NN-descent, or brute force
                           for a small block) that answers in global row numbers
:func:`merge_k_best`       each row's k best of several candidate lists (self and repeats dropped)
:func:`neighbour_lists`    one block's neighbours' own neighbour lists, for the rows they own
:func:`candidate_distances` distances from one block's rows to the candidates another block owns

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
    """The neighbour lists of ``indices``' entries that one block owns, ``-1`` for the others.

    Parameters
    ----------
    indices : ndarray of shape (n, k)
        A block's neighbour lists (global row numbers).
    owner_indices : ndarray of shape (n_owner, k)
        The owning block's neighbour lists.
    owner_offset : int
        Global row number of the owning block's first row.

    Returns
    -------
    ndarray of shape (n, k * k), int64
        Row ``r``'s neighbours' neighbours, where the neighbour is the owner's;
        the parts from every block combine by ``np.maximum``.
    """
    local = indices - owner_offset
    mine = (local >= 0) & (local < owner_indices.shape[0])
    out = np.full(indices.shape + (owner_indices.shape[1],), -1, dtype=np.int64)
    out[mine] = owner_indices[local[mine]]
    return out.reshape(indices.shape[0], -1)


def candidate_distances(X, candidates, owner_X, owner_offset):
    """Distances from the rows of ``X`` to their candidates that one block owns, ``inf`` for the others.

    Parameters
    ----------
    X : ndarray of shape (n, n_features)
        A block's rows.
    candidates : ndarray of shape (n, m)
        Global row numbers of candidate neighbours (``-1`` empty).
    owner_X : ndarray of shape (n_owner, n_features)
        The owning block's rows.
    owner_offset : int

    Returns
    -------
    ndarray of shape (n, m), float64
        Combine the parts of every block by ``np.minimum``.
    """
    local = candidates - owner_offset
    r, c = np.nonzero((local >= 0) & (local < owner_X.shape[0]) & (candidates >= 0))
    out = np.full(candidates.shape, np.inf)
    X, owner_X = as_float32_rows(X), as_float32_rows(owner_X)
    for lo in range(0, r.size, PAIRS_PER_BATCH):  # batches: the pairs' row copies stay small
        rr, cc = r[lo:lo + PAIRS_PER_BATCH], c[lo:lo + PAIRS_PER_BATCH]
        diff = X[rr] - owner_X[local[rr, cc]]
        out[rr, cc] = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    return out
