"""kNN graph, Gaussian (entropic) affinities and the graph Laplacian.

The kNN graph comes from pynndescent; affinities are Gaussian with either a
per-point bandwidth calibrated so that each point's neighbour distribution
has a given perplexity (entropic affinities), or one fixed bandwidth. The
affinity matrix is symmetrised, ``W = (P + P.T) / 2``, and ``L = D - W``.
"""

import numpy as np
import scipy.sparse as sp

#: below this many rows the exact kNN (scikit-learn) is cheaper than building
#: an NN-descent index (and needs no numba compilation)
EXACT_KNN_MAX = 5000


def knn(X, n_neighbors, random_state=None):
    """Indices and distances of each row's ``n_neighbors`` nearest other rows.

    Approximate (pynndescent) above :data:`EXACT_KNN_MAX` rows, exact below.
    Both return each point as its own first neighbour, hence the ``+ 1``
    and the dropped first column.
    """
    k = min(n_neighbors + 1, X.shape[0])
    if X.shape[0] <= EXACT_KNN_MAX:
        from sklearn.neighbors import NearestNeighbors

        dist, idx = NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X)
        return idx[:, 1:], dist[:, 1:].astype(np.float64)
    from pynndescent import NNDescent

    # pynndescent takes CSR rows as they are (sparse distance kernels)
    X32 = X.astype(np.float32) if sp.issparse(X) else np.asarray(X, dtype=np.float32)
    index = NNDescent(X32, n_neighbors=k, random_state=random_state)
    idx, dist = index.neighbor_graph
    return idx[:, 1:], dist[:, 1:].astype(np.float64)


def entropic_bandwidths(sq_dist, perplexity, n_steps=64):
    """Per-row precision ``beta`` with neighbour entropy ``log(perplexity)`` (bisection).

    ``p_j ∝ exp(-beta * d_j^2)`` over a row's neighbours; returns ``beta``
    for every row (vectorised over rows).
    """
    target = np.log(min(perplexity, sq_dist.shape[1] - 1e-9))
    d = sq_dist - sq_dist.min(axis=1, keepdims=True)  # shift for stability; entropy unchanged
    lo = np.zeros(d.shape[0])
    hi = np.full(d.shape[0], np.inf)
    beta = np.ones(d.shape[0]) / np.maximum(d.mean(axis=1), 1e-12)
    for _ in range(n_steps):
        p = np.exp(-beta[:, None] * d)
        s = p.sum(axis=1)
        entropy = np.log(s) + beta * (p * d).sum(axis=1) / s
        too_flat = entropy > target  # entropy too high: sharpen (increase beta)
        lo = np.where(too_flat, beta, lo)
        hi = np.where(too_flat, hi, beta)
        beta = np.where(np.isinf(hi), beta * 2, (lo + hi) / 2)
    return beta


def affinity_graph(X, n_neighbors=10, perplexity=None, bandwidth=None, random_state=None):
    """Symmetric sparse Gaussian affinity matrix ``W`` of the kNN graph.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
    n_neighbors : int
    perplexity : float, optional
        Entropic affinities (per-point bandwidths); default ``n_neighbors / 3``
        unless ``bandwidth`` is given.
    bandwidth : float, optional
        One fixed Gaussian bandwidth ``sigma`` for every point.
    random_state : int, optional
        Seeds pynndescent.
    """
    idx, dist = knn(X, n_neighbors, random_state)
    return knn_affinities(idx, dist, n_neighbors, perplexity, bandwidth)


def knn_weights(dist, n_neighbors=10, perplexity=None, bandwidth=None):
    """Each row's Gaussian weights on its neighbours, before symmetrisation (the rows of ``P``).

    Row by row: a row's weights depend on its own distances only, so a block
    of rows gets the same weights here as in the whole array (the workers'
    affinities, :func:`taodist.laptao.workers_graph`, call this on their
    row blocks).

    Parameters
    ----------
    dist : ndarray of shape (n_rows, k)
        Distances to each row's neighbours.
    n_neighbors : int
        Sets the default perplexity, ``n_neighbors / 3``.
    perplexity, bandwidth : float, optional
        As for :func:`affinity_graph`.

    Returns
    -------
    weights : ndarray of shape (n_rows, k)
        Entropic affinities sum to 1 per row; a fixed bandwidth gives
        ``exp(-d^2 / (2 sigma^2))``.
    """
    sq = dist**2
    if bandwidth is not None:
        return np.exp(-sq / (2 * bandwidth**2))
    beta = entropic_bandwidths(sq, perplexity or max(2.0, n_neighbors / 3))
    weights = np.exp(-beta[:, None] * (sq - sq.min(axis=1, keepdims=True)))
    weights /= weights.sum(axis=1, keepdims=True)
    return weights


def knn_affinities(idx, dist, n_neighbors=10, perplexity=None, bandwidth=None):
    """Symmetric sparse Gaussian affinity matrix ``W`` of a kNN graph given as neighbour lists.

    Parameters
    ----------
    idx : ndarray of shape (n_samples, k)
        Each row's neighbours (row numbers, the row itself excluded).
    dist : ndarray of shape (n_samples, k)
        Distances to them.
    n_neighbors : int
        Sets the default perplexity, ``n_neighbors / 3``.
    perplexity, bandwidth : float, optional
        As for :func:`affinity_graph`.

    Returns
    -------
    W : csr_matrix of shape (n_samples, n_samples)
    """
    weights = knn_weights(dist, n_neighbors, perplexity, bandwidth)
    n = idx.shape[0]
    rows = np.repeat(np.arange(n), idx.shape[1])
    P = sp.csr_matrix((weights.ravel(), (rows, idx.ravel())), shape=(n, n))
    return ((P + P.T) / 2).tocsr()


def graph_laplacian(W):
    """``L = D - W`` as CSR."""
    W = sp.csr_matrix(W)
    return (sp.diags(np.asarray(W.sum(axis=1)).ravel()) - W).tocsr()


def bandwidth_order(L):
    """Reverse Cuthill-McKee order of the graph's rows, and its inverse.

    Neighbours get nearby row numbers, so a sparse product ``L @ V`` reads
    ``V`` almost sequentially instead of at random, and a contiguous row
    block has few columns outside itself (small halos for the distributed CG).
    """
    from scipy.sparse.csgraph import reverse_cuthill_mckee

    order = reverse_cuthill_mckee(sp.csr_matrix(L), symmetric_mode=True).astype(np.intp)
    inverse = np.empty_like(order)
    inverse[order] = np.arange(order.size)
    return order, inverse
