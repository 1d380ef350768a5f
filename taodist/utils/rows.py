"""Row operations that work the same on dense arrays and scipy.sparse CSR rows.

Estimators accept ``scipy.sparse`` input and never densify it: the rows are
kept as a canonical :class:`scipy.sparse.csr_matrix` (sorted indices, no
duplicates, float64) from validation on, and everything that touches X goes
through these helpers or handles both forms itself. Dense arrays go through
the same numpy calls as before, so dense fits are unchanged to the bit.
"""

import numpy as np
import scipy.sparse as sp

#: ``validate_data``'s ``accept_sparse``: CSC passes through unconverted, for :func:`as_csr` to check its indices
#: before scipy converts it (scipy's CSC -> CSR conversion trusts them: a bad row index crashed it); other
#: sparse formats are converted to CSR there (COO checks its indices when built)
ACCEPT_SPARSE = ("csr", "csc")


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
    check_sparse_structure(X)  # before scipy converts it: its conversions trust the indices
    if not isinstance(X, sp.csr_matrix) or X.dtype != dtype:
        X = sp.csr_matrix(X, dtype=dtype)
    if not X.has_canonical_format:
        X = X.copy()
        X.sum_duplicates()  # also sorts the indices
    return X


def check_sparse_structure(X):
    """Refuse a CSR or CSC matrix whose arrays would make scipy or a compiled kernel read or write outside
    its buffers; other formats pass (COO checks its indices when built, and converts to valid CSR).

    scipy builds ``csr_matrix((data, indices, indptr), shape)`` without
    checking the indices, and both its own conversions and reductions and
    our kernels (which index per-thread buffers of ``n_features``) trust
    them: a stored index outside ``0 .. n_features - 1`` crashed ``apply``,
    and a Dask worker in the fit's first reduction. Two passes over
    ``indices`` (about 0.005 µs per row of a 63-entry document).

    Raises
    ------
    ValueError
        If ``indptr`` does not start at 0, decreases, or ends past the
        stored entries, or a stored index is out of range.
    """
    fmt = getattr(X, "format", None)
    if fmt not in ("csr", "csc"):
        return
    n_major, n_minor = X.shape if fmt == "csr" else X.shape[::-1]
    what = "column" if fmt == "csr" else "row"
    indptr, indices = X.indptr, X.indices
    if indptr.shape[0] != n_major + 1 or indptr[0] != 0:
        raise ValueError(f"Sparse X ({fmt}) is malformed: indptr has {indptr.shape[0]} entries starting at "
                         f"{indptr[0] if indptr.shape[0] else None}; {n_major + 1} starting at 0 are needed. Rebuild "
                         f"it (scipy's X.check_format(full_check=True) says what is wrong).")
    end = int(indptr[-1])
    if end > min(indices.shape[0], X.data.shape[0]) or (n_major and np.any(np.diff(indptr) < 0)):
        raise ValueError(f"Sparse X ({fmt}) is malformed: indptr decreases or ends at {end}, past its "
                         f"{indices.shape[0]} stored entries. Rebuild it (scipy's X.check_format(full_check=True) "
                         f"says what is wrong).")
    if end:
        lo, hi = int(indices[:end].min()), int(indices[:end].max())
        if lo < 0 or hi >= n_minor:
            bad = lo if lo < 0 else hi
            raise ValueError(f"Sparse X stores {what} index {bad}, outside 0..{n_minor - 1} for its {n_minor} "
                             f"{what}s: the matrix is malformed (scipy does not check indices when it is built "
                             f"from (data, indices, indptr)). Rebuild it with the right shape or indices.")


def unsigned_indices(indices):
    """Checked, non-negative int32 / int64 column indices viewed as uint32 / uint64 (no copy).

    numba wraps a negative signed index around the end of the array, a
    select on every element read, which kept the gathers of the softmax
    tree's prediction kernel scalar (a third of its time); an unsigned index
    has none. Only for indices already checked to lie within their array
    (:func:`check_sparse_structure`).
    """
    return indices.view(np.uint32 if indices.dtype.itemsize == 4 else np.uint64)


def as_rows(X, dtype=np.float64):
    """``X`` as float rows: a NumPy array, or a canonical CSR matrix when sparse."""
    return as_csr(X, dtype) if sp.issparse(X) else np.asarray(X, dtype=dtype)


#: ``validate_data``'s ``dtype`` for training rows: float32 is kept (see :func:`as_fit_rows`)
FIT_DTYPES = (np.float64, np.float32)


def as_fit_rows(X):
    """Validated training rows as a fit takes them: dense float32 kept, anything else as :func:`as_rows`.

    Every chunk converts its own rows to float64 when it is made (in
    parallel, scaled in the same pass: :func:`taodist.tao.chunks.make_chunk`),
    and float32 to float64 is exact, so the model is the same as from a
    float64 copy; the fit saves that copy's serial pass and its memory.
    Sparse rows become float64 CSR here.
    """
    if not sp.issparse(X) and X.dtype == np.float32:
        return X
    return as_rows(X)


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
