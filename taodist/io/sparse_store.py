"""Sparse (CSR) matrices in Zarr stores, read back as Dask arrays of scipy.sparse row blocks.

Zarr has no sparse array type, so a CSR matrix is stored as a Zarr group of
its three arrays, appended block by block (neither writing nor reading ever
holds more than one block of rows)::

    <group>/data      stored entries (float32 unless asked otherwise)
    <group>/indices   their column indices (int32; int64 past 2**31 - 1 columns)
    <group>/indptr    int64 row offsets, n_rows + 1 of them
    <group>.attrs["taodist_csr"] = {"shape": [n_rows, n_cols],
                                    "row_chunks": [rows of each Dask chunk, ...],
                                    "write_id": "<uuid>"}

:func:`open_csr` makes one Dask chunk per entry of ``row_chunks``; a chunk
reads only its slice of the three arrays, inside the task that uses it, and
checks it (a store is data from outside: a bad index must not crash a
worker). ``write_id`` makes the task keys of a rewritten store differ from
the old one's.
"""

import uuid

import numpy as np
import scipy.sparse as sp

#: the group attribute that marks a CSR matrix
CSR_KEY = "taodist_csr"

#: default Dask chunk: about this many bytes of stored entries (values + indices)
_CHUNK_BYTES = 64 << 20

#: rows taken from the input at a time while writing a scipy.sparse matrix
_WRITE_ROWS = 65536

#: 1-D Zarr chunk length of the data/indices arrays (entries)
_ENTRY_CHUNK = 1 << 20


def _row_blocks(X):
    """``(first_row, CSR block)`` pieces of a scipy.sparse matrix or a Dask array of sparse chunks."""
    if sp.issparse(X):
        X = sp.csr_matrix(X)  # COO/CSC/arrays: converted once (already in memory)
        for lo in range(0, X.shape[0], _WRITE_ROWS):
            yield lo, X[lo:lo + _WRITE_ROWS]
        return
    lo = 0
    for block in X.to_delayed().ravel():  # one chunk in memory at a time
        part = sp.csr_matrix(block.compute())
        yield lo, part
        lo += part.shape[0]


def _chunk_bounds(indptr, rows_per_chunk, entry_bytes):
    """Row boundaries of the Dask chunks: every ``rows_per_chunk`` rows, or about 64 MiB of entries each."""
    n = indptr.size - 1
    if rows_per_chunk:
        bounds = np.arange(0, n, rows_per_chunk)
    else:
        per_chunk = max(1, _CHUNK_BYTES // entry_bytes)
        bounds = np.unique(np.searchsorted(indptr, np.arange(0, indptr[-1], per_chunk), side="right") - 1)
    return np.unique(np.r_[bounds, n]) if n else np.array([0])


def write_csr(store, component, X, *, rows_per_chunk=None, dtype=np.float32):
    """Write the sparse matrix ``X`` as the CSR group ``component`` of the Zarr store folder ``store``.

    ``component=None`` makes the store's root the group. Entries must be
    finite: the first rows holding NaN or infinity are named in the
    ``ValueError`` (the caller writes under a temporary name, so nothing is
    left behind).
    """
    import zarr

    n, d = X.shape
    index_dtype = np.int32 if d <= np.iinfo(np.int32).max else np.int64
    root = zarr.open_group(str(store), mode="a")
    g = root if component is None else root.create_group(component)
    data = g.create_array("data", shape=(0,), chunks=(_ENTRY_CHUNK,), dtype=dtype)
    indices = g.create_array("indices", shape=(0,), chunks=(_ENTRY_CHUNK,), dtype=index_dtype)
    indptr = [np.zeros(1, dtype=np.int64)]
    for lo, block in _row_blocks(X):
        if not block.has_canonical_format:  # sorted, unique column indices; never edit the caller's matrix
            block = block.copy()
            block.sum_duplicates()
        values = block.data.astype(dtype, copy=False)
        bad = ~np.isfinite(values)
        if bad.any():
            rows = lo + np.searchsorted(block.indptr, np.flatnonzero(bad), side="right") - 1
            raise ValueError(f"{component or 'The array'} has NaN or infinity in rows {np.unique(rows)[:5].tolist()} "
                             "(first few); clean or drop them before converting.")
        data.append(values)
        indices.append(block.indices.astype(index_dtype, copy=False))
        indptr.append(block.indptr[1:].astype(np.int64) + indptr[-1][-1])
    indptr = np.concatenate(indptr)
    if indptr.size != n + 1:
        raise ValueError(f"{component or 'The array'} gave {indptr.size - 1} rows while writing; its shape says {n}.")
    g.create_array("indptr", data=indptr, chunks=(_ENTRY_CHUNK,))
    bounds = _chunk_bounds(indptr, rows_per_chunk, np.dtype(dtype).itemsize + np.dtype(index_dtype).itemsize)
    g.attrs[CSR_KEY] = {"shape": [int(n), int(d)], "row_chunks": np.diff(bounds).astype(int).tolist(),
                        "write_id": uuid.uuid4().hex}


def csr_meta(path, component=None):
    """The ``taodist_csr`` attribute of the group at ``path``/``component``, or None if it is not a CSR group."""
    import zarr

    try:
        node = zarr.open(str(path), mode="r", path=component or "")
    except Exception:  # noqa: BLE001 -- not a Zarr node at all: the dense reader reports it
        return None
    return dict(node.attrs[CSR_KEY]) if isinstance(node, zarr.Group) and CSR_KEY in node.attrs else None


def open_csr(path, component=None):
    """The CSR group at ``path``/``component`` as a lazy Dask array with one scipy.sparse chunk per row block."""
    import dask
    import dask.array as da
    import zarr

    meta = csr_meta(path, component)
    g = zarr.open_group(str(path), mode="r", path=component or "")
    where = f"{path}" + (f" (component {component!r})" if component else "")
    try:
        n, d = (int(v) for v in meta["shape"])
        chunks = [int(c) for c in meta["row_chunks"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{where}: damaged sparse-matrix attributes ({exc!r}).") from None
    if n < 0 or d < 0 or any(c < 0 for c in chunks) or sum(chunks) != n or g["indptr"].shape != (n + 1,):
        raise ValueError(f"{where}: row chunks {sum(chunks)} / indptr {g['indptr'].shape} do not match {n} rows.")
    dtype = g["data"].dtype
    read = dask.delayed(_read_rows, pure=True)
    starts = np.r_[0, np.cumsum(chunks)].astype(int)
    blocks = [da.from_delayed(read(str(path), component, int(lo), int(hi), d, meta.get("write_id")),
                              shape=(int(hi - lo), d), dtype=dtype, meta=sp.csr_matrix((0, d), dtype=dtype))
              for lo, hi in zip(starts[:-1], starts[1:]) if hi > lo]
    if not blocks:
        return da.from_array(sp.csr_matrix((0, d), dtype=dtype), chunks=(1, d), asarray=False)
    return da.concatenate(blocks, axis=0)


def _read_rows(path, component, lo, hi, n_cols, write_id):
    """Rows ``lo:hi`` of a CSR group, checked; ``write_id`` only makes the task key."""
    import zarr

    g = zarr.open_group(path, mode="r", path=component or "")
    ptr = np.asarray(g["indptr"][lo:hi + 1], dtype=np.int64)
    start, stop = int(ptr[0]), int(ptr[-1])
    if np.any(np.diff(ptr) < 0) or start < 0 or stop > g["data"].shape[0] or g["indices"].shape != g["data"].shape:
        raise ValueError(f"{path}: damaged sparse matrix: row offsets of rows {lo}-{hi} are out of order or "
                         "beyond the stored entries.")
    block = sp.csr_matrix((g["data"][start:stop], g["indices"][start:stop], ptr - start), shape=(hi - lo, n_cols))
    try:
        block.check_format(full_check=True)  # column indices in range, sorted: a damaged store fails here
    except ValueError as exc:
        raise ValueError(f"{path}: damaged sparse matrix in rows {lo}-{hi}: {exc}") from None
    return block
