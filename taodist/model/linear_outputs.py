"""A linear leaf's coefficients and outputs: their ``(K, D)`` layout and the products ``X @ coef.T``.

A tree stores the coefficients of all its linear leaves in one CSR matrix,
``tree.leaf_coef``, rows ``i*K .. i*K+K-1`` for leaf ``i``. A single leaf's
coefficients travel as a dense ``(K, D)`` array while small and as CSR
beyond :data:`DENSE_COEF_MAX` entries (:func:`leaf_coef_array`,
:func:`leaf_coef_rows`), so many-class, high-dimensional leaves are never
dense.

The outputs of many leaves at many rows (:func:`add_linear_outputs`) take a
compiled product (numba) that gives scipy's CSR product bit for bit, for
dense rows and for canonical CSR rows; :func:`rows_times_coef` is the
library product, the reference and the path for wide many-class leaves on
sparse rows.
"""

import numba
import numpy as np
import scipy.sparse as sp

#: a leaf's ``(K, D)`` coefficients are handed around as a dense array up to this many entries (8 MB)
#: and as CSR beyond: a 500-class leaf over a 50,000-word vocabulary would be 200 MB dense
DENSE_COEF_MAX = 1 << 20


def leaf_coef_array(rows, n_outputs, n_features):
    """A leaf's ``(K, D)`` coefficients from ``{class: weight row}``: dense when small, else CSR.

    Small leaves stay dense so BLAS computes their outputs (bit for bit as
    before); many-class, high-dimensional leaves are never dense.
    """
    if n_outputs * n_features <= DENSE_COEF_MAX:
        out = np.zeros((n_outputs, n_features))
        for k, w in rows.items():
            out[k] = w
        return out
    classes = np.fromiter(rows, dtype=np.intp, count=len(rows))
    if classes.size == 0:
        return sp.csr_matrix((n_outputs, n_features))
    W = sp.csr_matrix(np.vstack([rows[k] for k in classes]))
    scatter = sp.csr_matrix((np.ones(classes.size), (classes, np.arange(classes.size))),
                            shape=(n_outputs, classes.size))
    return (scatter @ W).tocsr()


def dense_coef_rows(coef, rows):
    """Rows of a dense or CSR coefficient matrix as a dense array."""
    out = coef[rows]
    return out.toarray() if sp.issparse(out) else np.asarray(out, dtype=np.float64)


def linear_output(X, value, coef):
    """``value + X @ coef.T`` as a dense ``(n, K)`` array, for dense or CSR ``X`` and ``coef``."""
    prod = X @ coef.T
    return value + (prod.toarray() if sp.issparse(prod) else np.asarray(prod))


def rows_times_coef(X, coef):
    """``X @ coef.T`` as a dense ``(n, k)`` array for a leaf's CSR coefficient rows ``coef`` (k, D).

    The library path: used for wide many-class leaves on sparse rows, and the
    reference of the compiled product of :func:`add_linear_outputs` (which is
    faster and equal bit for bit). Kept CSR even when small: l1 leaves are
    sparse, and the CSR product skips the zero weights that a BLAS product
    with the densified coefficients would multiply.
    """
    if sp.issparse(X):
        return (X @ coef.T).toarray()
    return np.asarray(coef @ np.asarray(X, dtype=np.float64).T).T


def leaf_coef_rows(tree, leaf):
    """``(K, D)`` coefficients of one leaf of a tree whose leaves have coefficients.

    Dense when small, CSR when large (see :func:`leaf_coef_array`).
    """
    K = tree.n_outputs
    rows = tree.leaf_coef[leaf * K:(leaf + 1) * K]
    return rows.toarray() if K * tree.n_features <= DENSE_COEF_MAX else rows.tocsr()


#: sparse rows take the compiled product while a leaf's feature-major weights ``(D, K)`` have at most this
#: many entries (MNIST: 7,840); a 500-class leaf over a 50,000-word vocabulary takes scipy's product
COMPILED_SPARSE_MAX = 1 << 16


@numba.njit(nogil=True, cache=True)
def _feature_major(indptr, indices, data, first, n_coef, n_features):
    """CSR coefficient rows ``first .. first + n_coef - 1`` as a dense ``(D, K)`` array."""
    weights = np.zeros((n_features, n_coef))
    for k in range(n_coef):
        for jj in range(indptr[first + k], indptr[first + k + 1]):
            weights[indices[jj], k] = data[jj]
    return weights


@numba.njit(nogil=True, cache=True)
def _add_sparse_rows_times_csr(x_indptr, x_indices, x_data, n_features, rows, out_rows, indptr, indices, data, first,
                               out):
    """:func:`_add_rows_times_csr` for canonical CSR rows ``(x_indptr, x_indices, x_data)``.

    Sums the same products in the same feature order, so it gives the dense
    kernel's and scipy's result bit for bit, without scanning the zeros.
    """
    n_coef = out.shape[1]
    weights = _feature_major(indptr, indices, data, first, n_coef, n_features)
    sums = np.empty(n_coef)
    for i in range(rows.size):
        r = rows[i]
        sums[:] = 0.0
        for at in range(x_indptr[r], x_indptr[r + 1]):
            j = x_indices[at]
            x = x_data[at]
            for k in range(n_coef):
                sums[k] += weights[j, k] * x
        for k in range(n_coef):
            out[out_rows[i], k] += sums[k]


@numba.njit(nogil=True, cache=True)
def _add_rows_times_csr(X, rows, out_rows, indptr, indices, data, first, out):
    """``out[out_rows[i], k] += coef[k] . X[rows[i]]`` for the CSR coefficient rows ``first + k``.

    Each sum runs over the products of the row's non-zero entries with the
    coefficients in increasing feature order from 0.0. The coefficient rows
    must have sorted indices without duplicates (canonical CSR), and a
    product left out (a zero entry of the row, or a coefficient not stored)
    would have added an exact zero, so the result is scipy's CSR product bit
    for bit (no fused multiply-add: numba contracts only under fastmath).
    The coefficients are laid out feature-major first, so a non-zero entry
    of the row updates all ``K`` sums from one contiguous row of weights,
    and a row's zero entries cost no products (the coefficient-major order
    read every one).
    """
    n_coef = out.shape[1]
    n_features = X.shape[1]
    weights = _feature_major(indptr, indices, data, first, n_coef, n_features)
    sums = np.empty(n_coef)
    for i in range(rows.size):
        r = rows[i]
        sums[:] = 0.0
        for j in range(n_features):
            x = X[r, j]
            if x != 0.0:
                for k in range(n_coef):
                    sums[k] += weights[j, k] * x
        for k in range(n_coef):
            out[out_rows[i], k] += sums[k]


def add_linear_outputs(X, leaves, rows, coef, n_outputs, out):
    """Add to ``out[j]`` (in place) the product of leaf ``leaves[j]``'s coefficients with row ``rows[j]`` of ``X``.

    A leaf's coefficients are rows ``leaf*K .. leaf*K+K-1`` of the CSR
    matrix ``coef`` (``K = n_outputs``, a tree's ``leaf_coef``).

    Rows are grouped by leaf. The compiled product sums in feature order,
    scipy's stored order, so it needs canonical coefficients (trees keep them
    so); sparse rows take it while a leaf's dense weights ``(D, K)`` have at
    most :data:`COMPILED_SPARSE_MAX` entries, and :func:`rows_times_coef`
    beyond. Either way the sums are scipy's, bit for bit.
    """
    K = n_outputs
    order = np.argsort(leaves, kind="stable")
    bounds = np.flatnonzero(np.diff(leaves[order])) + 1
    sparse = sp.issparse(X)
    compiled = coef.has_canonical_format and (
        not sparse or (X.has_canonical_format and K * X.shape[1] <= COMPILED_SPARSE_MAX))
    if compiled and not sparse:
        X = np.asarray(X)  # a memmap as a plain array view, for numba
    for group in np.split(order, bounds):
        if group.size == 0:
            continue
        leaf = leaves[group[0]]
        if coef.indptr[leaf * K] == coef.indptr[(leaf + 1) * K]:
            continue  # no stored coefficient
        if compiled and sparse:
            _add_sparse_rows_times_csr(X.indptr, X.indices, X.data, X.shape[1], rows[group], group, coef.indptr,
                                       coef.indices, coef.data, leaf * K, out)
        elif compiled:
            _add_rows_times_csr(X, rows[group], group, coef.indptr, coef.indices, coef.data, leaf * K, out)
        else:
            out[group] += rows_times_coef(X[rows[group]], coef[leaf * K:(leaf + 1) * K])
