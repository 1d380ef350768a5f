"""Where a fit runs: the one seam between the estimators and execution.

The estimators describe *what* to fit; this module decides *where*: NumPy
input without a client runs in this process (:class:`~taodist.tao.executor.LocalExecutor`
on threads, joblib processes for forest trees), anything else on a Dask
cluster through :mod:`taodist.dask`, which is imported only then. As in
``xgboost.dask`` and ``lightgbm.dask``, the Dask layer imports the core and
never the reverse: nothing here imports ``distributed`` at module level.

Also here, because every estimator needs them: what counts as Dask input,
the joblib ``n_jobs`` convention, the max-abs feature scaling that makes the
l1 penalty unit-free, and the decorator that maps prediction over the
blocks of a Dask array.
"""

import contextlib
import functools
import os
from dataclasses import dataclass

import numpy as np

from ..tao.executor import LocalExecutor
from ..utils.rows import abs_max, check_sparse_structure, dense_sample, has_sparse_chunks


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


def effective_n_jobs(n_jobs):
    """joblib's convention: None -> 1, -1 -> all cores, -2 -> all but one."""
    if n_jobs is None:
        return 1
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return max(1, n_jobs)


def max_abs_scale(X):
    """Per-feature ``max |x|`` (1 where a feature is all zero), for NumPy, scipy.sparse or Dask ``X``.

    Dividing by it puts every feature in [-1, 1], so an l1 penalty on the
    weights does not depend on the features' units. Unlike centring, it
    keeps sparse X sparse.
    """
    if is_dask_collection(X) and has_sparse_chunks(X):
        # Dask's max reductions do not take scipy.sparse chunks: one row of maxima per block
        per_block = X.map_blocks(_abs_max_row, chunks=((1,) * X.numblocks[0], (X.shape[1],)), dtype=np.float64,
                                 meta=np.empty((0, 0)))
        scale = per_block.max(axis=0).compute()
    elif is_dask_collection(X):
        import dask.array as da

        scale = da.maximum(X.max(axis=0), -X.min(axis=0)).compute().astype(np.float64)
    else:
        scale = abs_max(X).astype(np.float64)  # max |x| without an |X| temporary; float32 rows: exact
    return np.where(scale > 0, scale, 1.0)


def _abs_max_row(block):
    # the first thing a Dask fit does with a chunk, before as_csr has seen it: scipy's max trusts its indices
    check_sparse_structure(block)
    return abs_max(block)[None, :].astype(np.float64)


def take_rows(X, rows):
    """A few rows of NumPy, scipy.sparse or Dask ``X`` as a dense float64 array (initialisation samples)."""
    if is_dask_collection(X):
        X, rows = X[rows].compute(), slice(None)
    return dense_sample(X, rows)


def lazy_over_row_blocks(method):
    """Make a predict-like method return a lazy Dask array for Dask input.

    NumPy input goes straight to ``method``. A row-chunked Dask array is
    mapped block by block with ``map_blocks``: nothing is computed until the
    caller asks, and each block is predicted where it lives.
    """

    @functools.wraps(method)
    def wrapper(self, X, *args, **kwargs):
        if not is_dask_collection(X):
            return method(self, X, *args, **kwargs)
        check_dask_X(X)
        probe = np.asarray(method(self, np.zeros((1, X.shape[1]), dtype=np.float64), *args, **kwargs))

        def block(b):
            return method(self, b, *args, **kwargs)

        if probe.ndim == 1:
            return X.map_blocks(block, drop_axis=1, dtype=probe.dtype, meta=np.empty((0,), probe.dtype))
        return X.map_blocks(block, chunks=(X.chunks[0], (probe.shape[1],)), dtype=probe.dtype,
                            meta=np.empty((0, 0), probe.dtype))

    return wrapper


@dataclass
class Execution:
    """What :func:`execution` yields: TAO's row blocks, the executor that holds them, the care-point cap."""

    blocks: list
    executor: object
    max_care_points: int | None


@contextlib.contextmanager
def execution(X, y, sample_weight, *, client=None, n_jobs=None, streamable=False, max_care_points=None):
    """The row blocks and executor a single-tree fit runs on.

    NumPy ``X`` without ``client``: one block on a :class:`LocalExecutor`
    with ``n_jobs`` threads. Dask ``X`` (or any ``client``): row blocks on
    the cluster (the given client, the active one, or an embedded
    LocalCluster), every Dask computation inside the ``with`` block running
    there; ``streamable`` Dask input larger than the workers' memory is
    fitted out of core, with a care-point cap unless ``max_care_points`` sets one.
    """
    if client is None and not is_dask_collection(X):
        executor = LocalExecutor(effective_n_jobs(n_jobs))
        try:
            yield Execution([(X, y, sample_weight, 0)], executor, max_care_points)
        finally:
            executor.close()
        return
    from ..dask._backend import cluster_execution

    with cluster_execution(X, y, sample_weight, client=client, streamable=streamable,
                           max_care_points=max_care_points) as run:
        yield run


def distribute_rows(X, client):
    """NumPy ``X`` as a row-chunked Dask array whose blocks already live on ``client``'s workers."""
    from ..dask._backend import scatter_to_workers

    return scatter_to_workers(X, client)


def fit_trees(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs, *, client=None,
              n_jobs=None):
    """Fit one bagged tree per seed (see :mod:`taodist.tao.bagging`); returns them in seed order.

    NumPy data without a client: joblib worker processes. With a client or
    Dask data: one task per tree on the cluster (never gathering a Dask X).
    """
    if client is None and not is_dask_collection(X):
        from ..tao.bagging import fit_trees_locally

        return fit_trees_locally(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs,
                                 n_jobs=effective_n_jobs(n_jobs))
    from ..dask._backend import fit_trees_on_cluster

    return fit_trees_on_cluster(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs,
                                client=client)


class ResidentRows:
    """Training rows held for many TAO fits with changing targets (LapTAO's tree steps).

    In process the rows are used as they are; with a ``client`` they are
    scattered to the workers once and every fit runs there. The fitted tree
    is the same either way.
    """

    def __init__(self, X, *, client=None, n_jobs=None):
        self.X, self.client, self.n_threads = X, client, effective_n_jobs(n_jobs)
        self._on_workers = None if client is None else distribute_rows(X, client)

    def tao_optimize(self, tree, y, sample_weight, **kwargs):
        """:func:`taodist.tao.optimizer.tao_optimize` of ``tree`` on these rows with targets ``y``."""
        from ..tao.optimizer import tao_optimize

        if self.client is None:
            return tao_optimize(tree, self.X, y, sample_weight, n_threads=self.n_threads, **kwargs)
        from ..dask._backend import cluster_blocks_and_executor

        blocks, executor = cluster_blocks_and_executor(self._on_workers, y, sample_weight, self.client)
        try:
            return tao_optimize(tree, blocks, None, None, executor=executor, **kwargs)
        finally:
            executor.close()  # this fit's chunks (and actors) go now


def laplacian_cg(L, gamma, *, n_jobs=None, client=None):
    """LapTAO's reusable label-step CG solver: threads here, or Laplacian row blocks in Dask actors."""
    if client is not None:
        from ..dask import DistributedLaplacianCG

        return DistributedLaplacianCG(client, L, gamma)
    from ..laptao._label_step import LaplacianCG

    return LaplacianCG(L, gamma, effective_n_jobs(n_jobs))
