"""Affinities, their symmetrisation and the Laplacian's row blocks, built on the workers.

Input: the kNN graph that :func:`taodist.laptao.knn_graph` leaves on the
workers, two (n, k) Dask arrays (neighbour row numbers, distances) chunked
as X's rows. Every step is a task on row blocks, and no task holds more
than its block's rows plus the edges sent to it:

1. *Weights*: each block's rows of ``P`` (entropic or fixed-bandwidth
   Gaussian weights on its neighbours), by the same row function as the
   in-process graph (:func:`taodist.laptao._graph.knn_weights`), so the
   weights are the in-process ones.
2. *Reverse edges*: ``W = (P + P.T) / 2`` needs, in row ``i``, the weight
   ``p_ji`` of every row ``j`` that has ``i`` as a neighbour, and ``j`` may be
   in any block. One task per (source block, target block) pair cuts the
   source's edges that point into the target's rows and reverses them:
   only those edges travel to the target.
3. *Merge*: each target block adds its own rows of ``P`` and the reverse
   edges sent to it, giving its rows of ``W`` (CSR, global column numbers),
   then its degrees and its rows of ``L = D - W``.

The driver holds the row bounds of the blocks and futures; per-row vectors
(the Laplacian's diagonal, products ``L @ V``) come back only when asked for.
"""

import uuid

import numpy as np
import scipy.sparse as sp

from ._graph import knn_weights


def reverse_edges(idx, weights, lo, target_lo, target_hi):
    """The edges of a block's rows that point into rows ``[target_lo, target_hi)``, reversed.

    Parameters
    ----------
    idx : ndarray of shape (m, k)
        The source block's neighbours (global row numbers).
    weights : ndarray of shape (m, k)
        Its rows of ``P``.
    lo : int
        The source block's first row.
    target_lo, target_hi : int
        The target block's rows.

    Returns
    -------
    rows, cols, data : ndarray
        Edges ``(neighbour, source row, p)``: row and column swapped, in
        global row numbers.
    """
    r, c = np.nonzero((idx >= target_lo) & (idx < target_hi))
    return idx[r, c].astype(np.int64), lo + r.astype(np.int64), weights[r, c]


def symmetric_rows(idx, weights, lo, n, *reverse):
    """Rows ``[lo, lo + m)`` of ``W = (P + P.T) / 2`` from the block's ``P`` rows and the reverse edges sent to it.

    Parameters
    ----------
    idx, weights : ndarray of shape (m, k)
        The block's neighbours and its rows of ``P``.
    lo : int
        The block's first row.
    n : int
        Rows of the whole graph (the column count).
    *reverse : tuple of ndarray
        :func:`reverse_edges` of every block (this one included) into these rows.

    Returns
    -------
    W_rows : csr_matrix of shape (m, n)
        Sorted, summed entries, explicit zeros dropped: the layout of the
        in-process ``(P + P.T) / 2``, so its row sums add in the same order.
    """
    m, k = idx.shape
    rows = np.concatenate([np.repeat(np.arange(m, dtype=np.int64), k)] + [r[0] - lo for r in reverse])
    cols = np.concatenate([idx.ravel().astype(np.int64)] + [r[1] for r in reverse])
    data = np.concatenate([weights.ravel()] + [r[2] for r in reverse])
    # each (i, j) appears at most twice, p_ij and p_ji: one addition, as in P + P.T
    W = sp.csr_matrix((data, (rows, cols)), shape=(m, n))
    W.sum_duplicates()
    W.eliminate_zeros()
    W.sort_indices()
    return W / 2


def laplacian_rows(W_rows, lo):
    """Rows ``[lo, lo + m)`` of ``L = D - W`` as CSR, global columns (as :func:`graph_laplacian` on the whole W)."""
    W_rows = sp.csr_matrix(W_rows)
    m, n = W_rows.shape
    deg = np.asarray(W_rows.sum(axis=1)).ravel()
    D = sp.csr_matrix((deg, (np.arange(m), lo + np.arange(m))), shape=(m, n))
    return (D - W_rows).tocsr()


def _block_diagonal(M_rows, lo):
    return M_rows[:, lo:lo + M_rows.shape[0]].diagonal()


def _scaled(M_rows, gamma):
    return gamma * M_rows


def _product(M_rows, V):
    return M_rows @ V


def workers_graph(indices, distances, n_neighbors=10, perplexity=None, bandwidth=None, *, client):
    """The symmetric affinities ``W`` and Laplacian ``L`` of a kNN graph held on the workers, built there.

    Parameters
    ----------
    indices : dask.array.Array of shape (n_samples, k)
        Each row's neighbours (global row numbers, the row itself excluded),
        as :func:`taodist.laptao.knn_graph` returns them; its row chunks are
        the blocks.
    distances : dask.array.Array of shape (n_samples, k)
        Distances to them, chunked as ``indices``.
    n_neighbors : int, default=10
        Sets the default perplexity, ``n_neighbors / 3``.
    perplexity, bandwidth : float, optional
        As for :func:`taodist.laptao.affinity_graph`.
    client : distributed.Client
        The cluster holding the graph.

    Returns
    -------
    graph : WorkersGraph
        Futures of the row blocks of ``W`` and ``L``; equal (up to rounding,
        in practice bit for bit) to ``knn_affinities`` and ``graph_laplacian``
        of the same lists in one process.
    """
    return WorkersGraph(client, indices, distances, n_neighbors, perplexity, bandwidth)


class WorkersGraph:
    """Row blocks of ``W`` and ``L = D - W`` on the workers, as futures; see :func:`workers_graph`.

    Parameters
    ----------
    client : distributed.Client
    indices, distances : dask.array.Array of shape (n_samples, k)
        The kNN graph's lists, chunked by rows.
    n_neighbors : int
    perplexity, bandwidth : float or None

    Attributes
    ----------
    bounds : ndarray of shape (n_blocks + 1,)
        First row of every block, then ``n_samples``.
    W_blocks, L_blocks : list of distributed.Future
        Each block's rows of ``W`` and of ``L``, CSR with global columns.
    """

    def __init__(self, client, indices, distances, n_neighbors, perplexity, bandwidth):
        if indices.chunks[0] != distances.chunks[0]:
            raise ValueError(f"indices and distances must have the same row chunks; got {indices.chunks[0]} "
                             f"and {distances.chunks[0]}.")
        self.client = client
        sizes = [int(s) for s in indices.chunks[0]]
        self.bounds = np.r_[0, np.cumsum(sizes)].astype(np.int64)
        n = int(self.bounds[-1])
        self.shape = (n, n)
        token = uuid.uuid4().hex[:8]
        # the lists are already on the workers (knn_graph's futures): computing them moves nothing
        idx = client.compute(list(indices.rechunk({1: -1}).to_delayed().ravel()))
        dist = client.compute(list(distances.rechunk({1: -1}).to_delayed().ravel()))
        B = len(sizes)
        weights = [client.submit(knn_weights, d, n_neighbors, perplexity, bandwidth, key=f"affinity-p-{token}-{s}")
                   for s, d in enumerate(dist)]
        self.W_blocks, self.L_blocks = [], []
        for t in range(B):
            lo, hi = int(self.bounds[t]), int(self.bounds[t + 1])
            reverse = [client.submit(reverse_edges, idx[s], weights[s], int(self.bounds[s]), lo, hi,
                                     key=f"affinity-reverse-{token}-{s}-{t}") for s in range(B)]
            W = client.submit(symmetric_rows, idx[t], weights[t], lo, n, *reverse, key=f"affinity-w-{token}-{t}")
            self.W_blocks.append(W)
            self.L_blocks.append(client.submit(laplacian_rows, W, lo, key=f"laplacian-{token}-{t}"))

    def diagonal(self):
        """The diagonal of ``L`` (the degrees, for a graph without self-loops), gathered: an (n,) vector.

        Not kept here (a fit asks once, for the first label step's ridge).
        """
        parts = [self.client.submit(_block_diagonal, L, int(lo), pure=False)
                 for L, lo in zip(self.L_blocks, self.bounds[:-1])]
        return np.concatenate(self.client.gather(parts))

    def __matmul__(self, V):
        """``L @ V`` for a dense or sparse ``V`` of n rows: V goes to the blocks, their products come back."""
        V_future = self.client.scatter(V, broadcast=True, hash=False)
        parts = self.client.gather([self.client.submit(_product, L, V_future, pure=False) for L in self.L_blocks])
        return sp.vstack(parts).tocsr() if sp.issparse(parts[0]) else np.concatenate(parts)

    def scaled_laplacian_blocks(self, gamma):
        """Futures of the row blocks of ``gamma L``, each computed where its ``L`` block is."""
        return [self.client.submit(_scaled, L, float(gamma), pure=False) for L in self.L_blocks]

    def gather_W(self):
        """The whole ``W`` in this process: for tests and small graphs only."""
        return sp.vstack(self.client.gather(self.W_blocks)).tocsr()

    def gather_L(self):
        """The whole ``L`` in this process: for tests and small graphs only."""
        return sp.vstack(self.client.gather(self.L_blocks)).tocsr()
