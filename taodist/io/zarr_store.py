"""Data in Zarr stores: :func:`to_zarr` writes arrays in row chunks, :func:`open_zarr` reads them as Dask arrays.

Dense arrays are Zarr arrays; sparse matrices are stored as CSR groups
(:mod:`taodist.io.sparse_store`). Stores are written atomically and marked
as taodist's (:mod:`taodist.io.atomic`), so that only they are ever replaced.
``dask.array`` is imported when data is written or read, not with taodist.
"""

import os

import numpy as np
import scipy.sparse as sp

from ..utils.rows import has_sparse_chunks
from .atomic import atomic_store, check_replaceable
from .sparse_store import csr_meta, open_csr, write_csr


def open_zarr(path, component=None):
    """Open a Zarr array (or an array inside a Zarr group) as a row-chunked Dask array.

    Parameters
    ----------
    path : str or path-like
        A Zarr store (folder) or fsspec URL.
    component : str, optional
        Array name inside a group (e.g. ``"X"``).

    Returns
    -------
    dask.array.Array
        Lazily read, one Dask chunk per row block of the store (columns
        merged), ready for ``fit(X, y)``. A sparse matrix written by
        :func:`to_zarr` comes back with scipy.sparse CSR chunks, each read
        from its own slice of the store where the task runs.
    """
    import dask.array as da

    if csr_meta(path, component) is not None:
        return open_csr(os.fspath(path), component)
    X = da.from_zarr(os.fspath(path), component=component)
    if X.ndim == 2 and len(X.chunks[1]) > 1:
        X = X.rechunk({1: X.shape[1]})
    return X


def to_zarr(data, path, *, rows_per_chunk=None, dtype=np.float32, overwrite=False):
    """Write arrays to a Zarr store in row chunks, atomically.

    The store is marked as written by taodist (a root attribute). An
    existing path is replaced only if it is such a store and ``overwrite``
    is true; any other existing file or folder is never deleted.

    Parameters
    ----------
    data : array-like, scipy.sparse matrix, dask array, or dict of them
        One array (written as the store itself), or ``{"X": ..., "y": ...}``
        (written as arrays of a group, read back with
        ``open_zarr(path, component="X")``). Sparse data (a scipy.sparse
        matrix, or a Dask array of scipy.sparse chunks) is written as CSR,
        one block of rows at a time, never densified (the layout is in
        :mod:`taodist.io.sparse_store`).
    path : str or path-like
    rows_per_chunk : int, optional
        Default: about 64 MiB of the widest dense array per chunk, or of
        stored entries for sparse data.
    dtype : numpy dtype, default=float32
        Floating arrays are cast to it; integer arrays (labels) keep theirs.
    overwrite : bool, default=False
        Replace an existing store that taodist wrote.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    FileExistsError
        If something exists at ``path`` and it is not a store taodist wrote,
        or ``overwrite`` is false, or ``path`` holds the working directory.
    ValueError
        For non-numeric data or rows with NaN/infinity (their indices are
        given). Nothing is left at ``path`` then: the store is written under
        a temporary name and renamed at the end.
    """
    import dask.array as da

    check_replaceable(path, overwrite)  # before reading any data: a refused write costs nothing

    arrays = data if isinstance(data, dict) else {None: data}
    sparse = {k: v for k, v in arrays.items() if sp.issparse(v) or has_sparse_chunks(v)}
    for name, arr in sparse.items():
        if len(arr.shape) != 2 or not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"{name or 'The sparse array'} must be a numeric 2-D matrix; got shape {arr.shape} "
                             f"and dtype {arr.dtype}.")
    arrays = {k: v if isinstance(v, da.Array) else da.asarray(np.asarray(v))
              for k, v in arrays.items() if k not in sparse}
    lengths = {v.shape[0] for v in arrays.values()} | {v.shape[0] for v in sparse.values()}
    if len(lengths) != 1:
        raise ValueError(f"All arrays must have the same number of rows; got {sorted(lengths)}.")
    widest = max((int(np.prod(v.shape[1:])) for v in arrays.values()), default=1)
    rows = rows_per_chunk or max(1, (64 << 20) // (widest * np.dtype(dtype).itemsize))
    prepared = {}
    for name, arr in arrays.items():
        if not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"Only numeric arrays can be written; {name or 'the array'} has dtype {arr.dtype}.")
        if np.issubdtype(arr.dtype, np.floating):
            arr = arr.astype(dtype)
            bad = np.flatnonzero((~da.isfinite(arr.reshape(arr.shape[0], -1))).any(axis=1).compute())[:5]
            if bad.size:
                raise ValueError(f"{name or 'The array'} has NaN or infinity in rows {bad.tolist()} (first few); "
                                 "clean or drop them before converting.")
        prepared[name] = arr.rechunk((rows,) + arr.shape[1:])

    def write(tmp):
        for name, arr in prepared.items():
            arr.to_zarr(tmp, component=name, overwrite=True)  # ``tmp`` is our own fresh folder
        for name, arr in sparse.items():
            write_csr(tmp, name, arr, rows_per_chunk=rows_per_chunk, dtype=dtype)

    return atomic_store(path, write, overwrite=overwrite)
