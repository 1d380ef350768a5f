"""The input-space side of an embedding: joint affinities ``P`` and a spectral start for ``Z``.

``P`` is the t-SNE joint probability matrix built from entropic affinities on
the kNN graph (LapTAO's :func:`taodist.laptao.affinity_graph`: per-point
Gaussian bandwidths with the given perplexity, symmetrised), scaled to sum to
1. Both objectives read it: t-SNE as ``p_nm``, the elastic embedding as its
attractive weights ``w+_nm``.
"""

import numpy as np
import scipy.sparse as sp
from scipy.linalg import eigh
from scipy.sparse.linalg import eigsh
from sklearn.utils import check_random_state

from ..laptao import affinity_graph

#: up to this many points the spectral start is a dense eigendecomposition (exact, no iteration to seed)
DENSE_EIGEN_MAX = 1000
#: standard deviation of the first coordinate of the initial embedding, as in openTSNE: a start this small
#: lets the first gradient steps organise the points before the repulsion spreads them
INIT_STD = 1e-4


def neighbours_for(perplexity, n_neighbors, n_samples):
    """The kNN graph's neighbours per point: ``n_neighbors``, or ``3 * perplexity`` as t-SNE does.

    Raises
    ------
    ValueError
        If there are too few samples for the neighbours, or too few
        neighbours for the perplexity (a point's neighbour distribution
        cannot have more effective neighbours than it has neighbours).
    """
    if n_samples < 3:
        raise ValueError(f"An embedding needs at least 3 samples (each point's neighbours must carry a "
                         f"perplexity above 1); got n_samples = {n_samples}.")
    if n_neighbors is None:
        k = min(n_samples - 1, int(np.ceil(3 * perplexity)))
        if k <= perplexity:
            raise ValueError(f"perplexity={perplexity} is too large for n_samples = {n_samples}: it must be below "
                             f"n_samples - 1 = {n_samples - 1}. Lower the perplexity (t-SNE's usual range is 5-50; "
                             f"about n_samples / 3 or less).")
        return k
    if n_neighbors > n_samples - 1:
        raise ValueError(f"n_neighbors={n_neighbors} must be less than n_samples = {n_samples}.")
    if n_neighbors <= perplexity:
        raise ValueError(f"n_neighbors={n_neighbors} must be larger than perplexity={perplexity} (the effective "
                         "number of neighbours); raise n_neighbors or leave it None (3 * perplexity).")
    return n_neighbors


def joint_affinities(X, perplexity, n_neighbors, random_state=None):
    """Symmetric sparse ``P`` (CSR, sums to 1) of entropic affinities on the kNN graph.

    Parameters
    ----------
    X : ndarray or sparse matrix of shape (n_samples, n_features)
    perplexity : float
    n_neighbors : int
        As checked by :func:`neighbours_for`.
    random_state : int, RandomState instance or None
        Seeds the approximate kNN search (above 5,000 rows).

    Returns
    -------
    P : scipy.sparse.csr_matrix of shape (n_samples, n_samples)
    """
    seed = None if random_state is None else check_random_state(random_state).randint(2**31 - 1)
    W = affinity_graph(X, n_neighbors=n_neighbors, perplexity=perplexity, random_state=seed)
    P = sp.csr_matrix(W / W.sum())
    P.sort_indices()
    return P


def spectral_start(P, n_components, random_state=None):
    """Laplacian eigenmaps of ``P``, scaled down: the initial embedding of both objectives.

    The leading non-trivial eigenvectors of the random-walk matrix
    ``D^-1 P`` (the attractive term's minimisers at a fixed scale: a start the gradient
    refines rather than undoes); they depend on ``X`` only through ``P``, so
    dense and sparse input start alike. Each eigenvector's sign is fixed
    (largest entry positive), then all are scaled together so that the first
    has standard deviation :data:`INIT_STD`.
    """
    n = P.shape[0]
    d = np.asarray(P.sum(axis=1)).ravel()
    inv_sqrt = 1.0 / np.sqrt(d)
    M = sp.diags(inv_sqrt) @ P @ sp.diags(inv_sqrt)
    k = n_components + 1
    if n <= DENSE_EIGEN_MAX or k >= n - 1:
        _, V = eigh(M.toarray(), subset_by_index=[max(n - k, 0), n - 1])
    else:
        v0 = check_random_state(random_state).uniform(size=n)  # eigsh's start, seeded for a reproducible fit
        _, V = eigsh(M, k=k, which="LA", v0=v0, tol=1e-6)
    V = V[:, ::-1]  # both solvers give ascending eigenvalues: largest first
    Y = inv_sqrt[:, None] * V[:, 1:k]
    if Y.shape[1] < n_components:  # fewer points than dimensions + 2: pad with zeros
        Y = np.hstack([Y, np.zeros((n, n_components - Y.shape[1]))])
    signs = np.sign(Y[np.argmax(np.abs(Y), axis=0), np.arange(Y.shape[1])])
    Y = Y * np.where(signs == 0, 1.0, signs)
    std = Y[:, 0].std()
    return np.ascontiguousarray(Y * (INIT_STD / std) if std > 0 else Y)  # eigh's vectors are Fortran-ordered
