"""Row operations that work the same on dense arrays and scipy.sparse CSR rows.

Estimators accept ``scipy.sparse`` input and never densify it: the rows are
kept as a canonical :class:`scipy.sparse.csr_matrix` (sorted indices, no
duplicates, float64) from validation on, and everything that touches X goes
through these helpers or handles both forms itself. Dense arrays go through
the same numpy calls as before, so dense fits are unchanged to the bit.
"""

import numpy as np
import scipy.sparse as sp

#: ``validate_data``'s ``accept_sparse``: other sparse formats are converted to CSR there
ACCEPT_SPARSE = "csr"


def issparse(X):
    return sp.issparse(X)


def has_sparse_chunks(X):
    """Whether ``X`` is a Dask array (or any lazy array with a ``_meta``) whose chunks are scipy.sparse."""
    return sp.issparse(getattr(X, "_meta", None))


def as_csr(X, dtype=np.float64):
    """``X`` as a canonical ``csr_matrix`` of ``dtype``, copying only what needs changing.

    CSC, COO, sparse arrays (``csr_array``) and the like are converted once;
    the compiled kernels rely on sorted column indices within a row.
    """
    if not isinstance(X, sp.csr_matrix) or X.dtype != dtype:
        X = sp.csr_matrix(X, dtype=dtype)
    check_csr_structure(X)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()  # also sorts the indices
    return X


def check_csr_structure(X):
    """Refuse a CSR matrix whose arrays would make a compiled kernel read or write outside its buffers.

    scipy builds ``csr_matrix((data, indices, indptr), shape)`` without
    checking the column indices, and the kernels index per-thread buffers of
    ``n_features`` with them unchecked: a stored index outside
    ``0 .. n_features - 1`` crashed ``apply``. Two passes over ``indices``
    (about 0.03 µs per row of a 63-entry document).

    Raises
    ------
    ValueError
        If ``indptr`` does not start at 0, decreases, or ends past the
        stored entries, or a stored column index is out of range.
    """
    n_rows, n_cols = X.shape
    indptr, indices = X.indptr, X.indices
    if indptr.shape[0] != n_rows + 1 or indptr[0] != 0:
        raise ValueError(f"Sparse X is malformed: indptr has {indptr.shape[0]} entries starting at "
                         f"{indptr[0] if indptr.shape[0] else None}; a CSR matrix of {n_rows} rows needs {n_rows + 1} "
                         f"starting at 0. Rebuild it (scipy's X.check_format(full_check=True) says what is wrong).")
    end = int(indptr[-1])
    if end > min(indices.shape[0], X.data.shape[0]) or (n_rows and np.any(np.diff(indptr) < 0)):
        raise ValueError(f"Sparse X is malformed: indptr decreases or ends at {end}, past its {indices.shape[0]} "
                         f"stored entries. Rebuild it (scipy's X.check_format(full_check=True) says what is wrong).")
    if end:
        lo, hi = int(indices[:end].min()), int(indices[:end].max())
        if lo < 0 or hi >= n_cols:
            bad = lo if lo < 0 else hi
            raise ValueError(f"Sparse X stores column index {bad}, outside 0..{n_cols - 1} for its {n_cols} columns: "
                             f"the matrix is malformed (scipy does not check indices when it is built from "
                             f"(data, indices, indptr)). Rebuild it with the right shape or indices.")


def unsigned_indices(indices):
    """Checked, non-negative int32 / int64 column indices viewed as uint32 / uint64 (no copy).

    numba wraps a negative signed index around the end of the array, a
    select on every element read, which kept the gathers of the softmax
    tree's prediction kernel scalar (a third of its time); an unsigned index
    has none. Only for indices already checked to lie within their array
    (:func:`check_csr_structure`).
    """
    return indices.view(np.uint32 if indices.dtype.itemsize == 4 else np.uint64)


def as_rows(X, dtype=np.float64):
    """``X`` as float rows: a NumPy array, or a canonical CSR matrix when sparse."""
    return as_csr(X, dtype) if sp.issparse(X) else np.asarray(X, dtype=dtype)


def divide_columns(X, scale):
    """``X / scale`` column-wise; sparse ``X`` keeps its sparsity.

    Sparse entries are divided (not multiplied by ``1 / scale``), so they are
    the same bits as the dense ``X / scale``.
    """
    if not sp.issparse(X):
        return X / scale
    return sp.csr_matrix((X.data / scale[X.indices], X.indices, X.indptr), shape=X.shape)


def stack_rows(parts):
    """Row blocks one after another (``np.concatenate``, or ``sp.vstack`` for CSR blocks)."""
    if sp.issparse(parts[0]):
        return as_csr(sp.vstack(parts, format="csr"), parts[0].dtype)
    return np.concatenate(parts)


def columns(X, features, rows=None):
    """Dense ``X[rows][:, features]`` of shape ``(len(rows), len(features))`` (all rows by default).

    Only the selected columns are materialised, never the whole of sparse X.
    """
    if sp.issparse(X):
        return (X if rows is None else X[rows])[:, features].toarray()
    return X[:, features] if rows is None else X[np.ix_(rows, features)]


def first_nonfinite_row(X):
    """Index of the first row holding NaN or infinity, or None (sparse: only stored entries can be)."""
    bad = np.flatnonzero(~np.isfinite(X.data))
    if bad.size == 0:
        return None
    return int(np.searchsorted(X.indptr, bad[0], side="right") - 1)


def abs_max(X):
    """Per-column ``max |x|`` of dense or sparse rows (0 for an empty column)."""
    if not sp.issparse(X):
        return np.maximum(X.max(axis=0), -X.min(axis=0))
    return abs(X).max(axis=0).toarray().ravel()


def dense_sample(X, rows):
    """Dense float64 copy of a few rows of X (initialisation samples, bounded in size by the caller)."""
    Xr = X[rows]
    return Xr.toarray().astype(np.float64, copy=False) if sp.issparse(Xr) else np.asarray(Xr, dtype=np.float64)
