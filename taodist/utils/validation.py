"""Checks of input that every layer may receive: Dask arrays, before anything is computed from them."""

import numpy as np


def is_dask_collection(x):
    """Whether ``x`` is a Dask collection (a Dask array, say)."""
    import dask

    return dask.is_dask_collection(x)


def check_dask_X(X):
    """Validate a Dask array's structure without computing it."""
    if X.ndim != 2:
        raise ValueError(f"Expected a 2D dask array for X, got {X.ndim}D; reshape it to (n_samples, n_features).")
    if len(X.chunks[1]) != 1:
        raise ValueError(
            "X must be chunked along rows only (one chunk across all features). "
            f"Use X.rechunk({{1: {X.shape[1]}}})."
        )
    if any(np.isnan(c) for c in X.chunks[0]):
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first.")
    if np.issubdtype(X.dtype, np.complexfloating) or not np.issubdtype(X.dtype, np.number):
        raise ValueError(f"X must hold real numbers; got dtype {X.dtype}.")
