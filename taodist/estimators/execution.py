"""Where a fit runs: the one seam between the estimators and execution.

The estimators describe *what* to fit; this module decides *where*: NumPy
input without a client runs in this process (:class:`~taodist.tao.executor.LocalExecutor`
on threads, joblib processes for forest trees), anything else on a Dask
cluster through :mod:`taodist.dask`. The Dask layer sits below the
estimators and above the optimiser: it runs TAO's chunk operations and
forest trees on workers and never imports an estimator. It is imported
only when a fit needs it, because it imports ``distributed``.

Also here, because every estimator needs them: the feature scalings that
make the l1 penalty unit-free, the decorator that maps prediction
over the blocks of a Dask array, and the one that turns a lost scheduler into
one clear error (:func:`cluster_fit`).
"""

import contextlib
import functools
import warnings

import numpy as np
import scipy.sparse as sp

from ..tao.bagging import fit_trees_locally
from ..tao.executor import Execution, LocalExecutor
from ..tao.optimizer import tao_optimize
from ..utils.parallel import effective_n_jobs
from ..utils.rows import abs_max, check_sparse_structure, dense_sample, has_sparse_chunks
from ..utils.validation import check_dask_X, is_dask_collection
from .dask_frames import is_dask_dataframe


def cluster_fit(fit):
    """Decorate an estimator's ``fit(self, X, ..., client=None)``: a fit on a cluster whose scheduler dies
    ends with one :class:`taodist.dask.SchedulerLostError` naming it, not with whichever low-level error
    the fit met first. Fits in this process are left as they are (``distributed`` is not imported)."""

    @functools.wraps(fit)
    def guarded(self, X, *args, **kwargs):
        client = kwargs.get("client")
        if client is None and not is_dask_collection(X):
            return fit(self, X, *args, **kwargs)
        from ..dask._client import lost_scheduler_as_one_error

        with lost_scheduler_as_one_error(client):
            return fit(self, X, *args, **kwargs)

    return guarded


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


def feature_offset(X, client=None):
    """Per-feature shift that moves a column far from zero to start at zero; 0 for every other column.

    A column is far from zero when its range does not contain 0 and is shorter than its distance from it
    (a year, a longitude, an air pressure): the shift is its least value.
    Divided by ``max |x|`` such a column varies over a sliver of [-1, 1], so a hyperplane that uses it pays
    a penalty many times that of a column starting at zero, and its weight is ill-conditioned against the
    bias; shifted, it is like any other column, and the fit does not depend on where the column's zero lies
    (as CART's does not). The shift is exact in floating point (the column lies within a factor of two of
    it), and every other column -- sparse rows, pixels, standardised or signed data -- is untouched, so those
    fits are unchanged to the bit. NaN entries are ignored. Dask ``X`` is reduced on ``client``'s cluster
    (or the default client's), where its blocks may already live.
    """
    if sp.issparse(X) or (is_dask_collection(X) and has_sparse_chunks(X)):
        return np.zeros(X.shape[1])  # sparse columns hold zeros: never far from zero
    if is_dask_collection(X):
        import dask
        import dask.array as da

        with computing_where_rows_live(client):
            low, high = dask.compute(da.nanmin(X, axis=0), da.nanmax(X, axis=0))
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column: no shift
            low, high = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
    low, high = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
    spread = high - low
    with np.errstate(invalid="ignore"):
        far = ((low > spread) | (-high > spread)) & (spread > 0)
    return np.where(far, low, 0.0)


@contextlib.contextmanager
def computing_where_rows_live(client=None):
    """Within the block, Dask computations run on ``client``'s cluster, else on the default client's, else in
    this process (the blocks of a Dask array that no cluster holds, e.g. read from Zarr)."""
    if client is None:
        from distributed import default_client

        try:
            client = default_client()
        except ValueError:
            yield
            return
    from ..dask._client import computing_on

    with computing_on(client):
        yield


#: rows at most that :func:`outlier_fences` (and the penalty factors' tests) read, spread over the data at a
#: fixed stride
FENCE_ROWS = 20_000
#: the fewest non-zero distances from the median a column's fence is taken from: with fewer, the 99th percentile
#: falls on the largest one or two, and a column of a few scattered values (a rarely inked pixel) would be cut
#: at values its sampled rows happen to hold
FENCE_MIN_DISTANCES = 100


def strided_rows(X, client=None, *arrays):
    """At most :data:`FENCE_ROWS` rows of ``X`` (and the same entries of each of ``arrays``), every ``step``-th
    from the first: ``(X_rows, *array_rows)`` in memory, the same rows whether ``X`` is NumPy or Dask (read
    from ``client``'s cluster, or the default client's)."""
    step = -(-X.shape[0] // FENCE_ROWS)
    parts = [X[::step], *(a[::step] for a in arrays)]
    if any(is_dask_collection(p) for p in parts):
        import dask

        with computing_where_rows_live(client):
            parts = list(dask.compute(*parts))
    return tuple(parts)


def outlier_fences(X, k, client=None):
    """Per-column bounds, shape ``(2, n_features)`` (lower, upper), that a value far outside its column's range
    is clipped to; or None.

    Each column's bounds are ``median -+ k q``, ``q`` the 99th percentile of the column's non-zero distances from
    its median: a column reaches past them only where a few values lie far beyond the rest (a data entry error,
    a code such as 99999 for "unknown"). Such a value divided into the column's ``max |x|`` scale makes every
    hyperplane weight on the column hundreds of times more expensive, and a hyperplane that uses the column
    sends that row far to one side, where a CART split would hardly notice it. Columns of two values never
    reach their bounds, and a column with fewer than :data:`FENCE_MIN_DISTANCES` values off its median in the
    rows read has none (its 99th percentile would be one of its few values). The statistics are taken on at most
    :data:`FENCE_ROWS` rows at a fixed stride, the same rows in memory and on Dask (gathered from ``client``'s
    cluster, or the default client's), so both fit the same model. NaN entries are ignored; a column without a
    non-zero distance (constant, or all NaN) gets infinite bounds. None for ``k`` None and for sparse rows
    (whose zeros are data: never clipped).
    """
    if k is None or sp.issparse(X) or (is_dask_collection(X) and has_sparse_chunks(X)):
        return None
    sample = np.asarray(strided_rows(X, client)[0], dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: infinite bounds
        median = np.nanmedian(sample, axis=0)
        distance = np.abs(sample - median)
        distance[~(distance > 0)] = np.nan  # zeros and NaN out of the percentile
        q = np.nanquantile(distance, 0.99, axis=0)
    counted = np.count_nonzero(distance > 0, axis=0) >= FENCE_MIN_DISTANCES
    q = np.where(counted & (q > 0), q, np.inf)
    with np.errstate(invalid="ignore"):
        bounds = np.vstack([median - k * q, median + k * q])
    return np.where(np.isnan(bounds), [[-np.inf], [np.inf]], bounds)  # an all-NaN column: no bound


def clip_columns(X, fences):
    """``X`` with every column clipped to ``fences`` (from :func:`outlier_fences`), in ``X``'s float dtype.

    NumPy rows are copied only where a value lies outside its bounds; Dask rows are clipped lazily, block by
    block; sparse rows (predicting with a model fitted on dense rows) have their stored values clipped, and are
    made dense first where a column's bounds leave out 0. ``X`` itself where ``fences`` is None.
    """
    if fences is None:
        return X
    low, high = fences
    if sp.issparse(X):
        if np.any(low > 0) or np.any(high < 0):
            X = X.toarray()
        else:
            X = X.tocsr(copy=True)
            X.data = np.clip(X.data, low[X.indices], high[X.indices]).astype(X.dtype, copy=False)
            return X
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    low, high = low.astype(dtype), high.astype(dtype)
    if is_dask_collection(X):
        return X.astype(dtype, copy=False).clip(low, high)
    X = np.asarray(X, dtype=dtype)
    if X.shape[0] == 0:
        return X
    # column minima and maxima (NaN skipped, never clipped), not a mask of X's size
    outside = (np.fmin.reduce(X, axis=0) < low) | (np.fmax.reduce(X, axis=0) > high)
    if not np.any(outside):
        return X
    X = X.copy()
    X[:, outside] = np.clip(X[:, outside], low[outside], high[outside])
    return X


def shift_columns(X, offset):
    """``X - offset`` in ``X``'s float dtype (NumPy or Dask, lazily); ``X`` itself where ``offset`` is all zero."""
    if not np.any(offset):
        return X
    if sp.issparse(X):  # validation rows given sparse beside dense training rows
        X = X.toarray()
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    return X.astype(dtype, copy=False) - offset.astype(dtype)


def spread_scale(X, rows_per_pass=8192):
    """Per-feature standard deviation of ``X`` rounded to the nearest power of two (1 where a column is
    constant), for NumPy, scipy.sparse or Dask ``X`` (dense or sparse chunks), never densifying sparse rows.

    A column far from zero (a year, say) varies over a sliver of its ``max |x|``: divided by ``max |x|``, a
    coefficient that uses it would pay that many times more penalty than one of a column starting at zero.
    The power of two makes the scale the same whichever way the sums were added (Dask's reduction, NumPy's
    row passes, sparse or dense rows: the same model in and out of a cluster) and divides exactly. Dense sums
    are taken about each column's first value, so a column far from zero keeps its digits, ``rows_per_pass``
    rows at a time (no temporary of X's size); sparse columns are mostly zeros and are summed as they are.
    """
    n = X.shape[0]
    if is_dask_collection(X):
        if has_sparse_chunks(X):
            first = np.zeros(X.shape[1])
            per_block = X.map_blocks(_sums_row, chunks=((2,) * X.numblocks[0], (X.shape[1],)), dtype=np.float64,
                                     meta=np.empty((0, 0)))
            sums = per_block.reshape(X.numblocks[0], 2, X.shape[1]).sum(axis=0).compute()
            total, squares = sums[0], sums[1]
        else:
            import dask

            first = np.asarray(X[0].compute(), dtype=np.float64)
            shifted = X.astype(np.float64) - first
            total, squares = dask.compute(shifted.sum(axis=0), (shifted * shifted).sum(axis=0))
    elif sp.issparse(X):
        first = np.zeros(X.shape[1])
        total, squares = _sums_row(X)
    else:
        first = np.asarray(X[0], dtype=np.float64)
        total, squares = np.zeros(X.shape[1]), np.zeros(X.shape[1])
        for start in range(0, n, rows_per_pass):
            block = np.asarray(X[start:start + rows_per_pass], dtype=np.float64) - first
            total += block.sum(axis=0)
            squares += np.einsum("ij,ij->j", block, block)
    mean = total / n
    std = np.sqrt(np.maximum(squares / n - mean * mean, 0.0))
    spread = np.ones_like(std)
    varies = std > 1e-12 * np.maximum(np.abs(first), 1.0)
    spread[varies] = np.exp2(np.round(np.log2(std[varies])))
    return spread


def _sums_row(block):
    """``[column sums; column sums of squares]`` of a sparse block, in float64."""
    check_sparse_structure(block)
    block = sp.csr_matrix(block, dtype=np.float64)
    return np.vstack([np.asarray(block.sum(axis=0)).ravel(), np.asarray(block.multiply(block).sum(axis=0)).ravel()])


def _abs_max_row(block):
    # the first thing a Dask fit does with a chunk, before as_csr has seen it: scipy's max trusts its indices
    check_sparse_structure(block)
    return abs_max(block)[None, :].astype(np.float64)


def take_scaled_rows(X, rows, scale):
    """A few rows of ``X`` divided column by column by ``scale``, in float64: CSR for sparse rows (never
    densified, for the wide random initial tree), else dense. Densified, the CSR rows equal the dense ones
    bit for bit (the same division of the same values)."""
    if is_dask_collection(X):
        X, rows = X[rows].compute(), slice(None)
    if not sp.issparse(X):
        return dense_sample(X, rows) / scale
    Xr = sp.csr_matrix(X[rows])
    Xr.sort_indices()
    return sp.csr_matrix((Xr.data.astype(np.float64) / scale[Xr.indices], Xr.indices, Xr.indptr), shape=Xr.shape)


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
        if is_dask_dataframe(X):
            return _over_partitions(method, self, X, *args, **kwargs)
        check_dask_X(X)
        probe = np.asarray(method(self, np.zeros((1, X.shape[1]), dtype=np.float64), *args, **kwargs))

        def block(b):
            return method(self, b, *args, **kwargs)

        if probe.ndim == 1:
            return X.map_blocks(block, drop_axis=1, dtype=probe.dtype, meta=np.empty((0,), probe.dtype))
        return X.map_blocks(block, chunks=(X.chunks[0], (probe.shape[1],)), dtype=probe.dtype,
                            meta=np.empty((0, 0), probe.dtype))

    return wrapper


def _over_partitions(method, estimator, X, *args, **kwargs):
    """``method`` mapped over a Dask DataFrame's partitions, lazily: a Dask Series (one value per row) or
    DataFrame (one column per class for ``predict_proba``) with the input's index."""
    import pandas as pd

    probe = np.asarray(method(estimator, X._meta_nonempty.iloc[:1], *args, **kwargs))
    if probe.ndim == 1:
        def part(p):
            return pd.Series(method(estimator, p, *args, **kwargs), index=p.index)

        meta = pd.Series(np.empty(0, probe.dtype))
    else:
        names = list(estimator.classes_) if method.__name__ == "predict_proba" else list(range(probe.shape[1]))

        def part(p):
            return pd.DataFrame(method(estimator, p, *args, **kwargs), index=p.index, columns=names)

        meta = pd.DataFrame(np.empty((0, probe.shape[1]), probe.dtype), columns=names)
    return X.map_partitions(part, meta=meta)


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
    from ..dask._execution import cluster_execution

    with cluster_execution(X, y, sample_weight, client=client, streamable=streamable,
                           max_care_points=max_care_points) as run:
        yield run


def distribute_rows(X, client):
    """NumPy ``X`` as a row-chunked Dask array whose blocks already live on ``client``'s workers."""
    from ..dask._execution import scatter_to_workers

    return scatter_to_workers(X, client)


def fit_trees(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs, *, client=None,
              n_jobs=None):
    """Fit one bagged tree per seed (see :mod:`taodist.tao.bagging`); returns them in seed order.

    NumPy data without a client: joblib worker processes. With a client or
    Dask data: one task per tree on the cluster (never gathering a Dask X).
    """
    if client is None and not is_dask_collection(X):
        return fit_trees_locally(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs,
                                 n_jobs=effective_n_jobs(n_jobs))
    from ..dask._execution import fit_trees_on_cluster

    return fit_trees_on_cluster(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs,
                                client=client)


class ResidentRows:
    """Training rows held for many TAO fits with changing targets (LapTAO's tree steps).

    In process the rows are used as they are; with a ``client``, NumPy rows
    are scattered to the workers once and every fit runs there. A Dask ``X``
    with a ``client`` is never gathered: every fit builds its chunks from X's
    own blocks where they are (read from storage in every pass when they do
    not fit in the workers' memory, see :func:`plan_out_of_core
    <taodist.dask._data.plan_out_of_core>`), dividing them by ``scale``
    there; predictions, leaves and node counts come back as one small array
    per row. The fitted tree is the same either way.
    """

    def __init__(self, X, *, client=None, n_jobs=None, scale=None, max_care_points=None):
        self.X, self.client, self.n_threads = X, client, effective_n_jobs(n_jobs)
        self.scale, self.max_care_points, self.stream = scale, max_care_points, False
        if client is None:
            self._on_workers = None
        elif is_dask_collection(X):
            from ..dask._execution import plan_rows_in_place

            self._on_workers = X
            self.stream, self.max_care_points = plan_rows_in_place(X, client, max_care_points)
        else:
            if scale is not None:
                raise ValueError("NumPy rows are scattered as given: pass them scaled, with scale=None.")
            self._on_workers = distribute_rows(X, client)

    @property
    def in_place(self):
        """Whether the rows are a Dask array's blocks, never brought to this process."""
        return self.client is not None and is_dask_collection(self.X)

    def tao_optimize(self, tree, y, sample_weight, **kwargs):
        """:func:`taodist.tao.optimizer.tao_optimize` of ``tree`` on these rows with targets ``y``.

        With rows in place, ``max_care_points`` is this object's (the caller's,
        or the out-of-core cap when X is streamed and none was given).
        """
        if self.client is None:
            return tao_optimize(tree, self.X, y, sample_weight, n_threads=self.n_threads, **kwargs)
        from ..dask._execution import cluster_blocks_and_executor

        if self.in_place:
            kwargs = {**kwargs, "max_care_points": self.max_care_points, "scale": self.scale}
        blocks, executor = cluster_blocks_and_executor(self._on_workers, y, sample_weight, self.client,
                                                       stream=self.stream)
        try:
            return tao_optimize(tree, blocks, None, None, executor=executor, **kwargs)
        finally:
            executor.close()  # this fit's chunks (and actors) go now

    def take(self, rows):
        """A few rows, scaled, here (a random tree's draws): read on the cluster for rows in place."""
        if not self.in_place:
            return dense_sample(self.X, rows)
        from ..dask._client import computing_on

        with computing_on(self.client):  # the blocks are read on the workers, only the rows come here
            return take_scaled_rows(self.X, rows, self.scale)

    def _per_block(self, fn, width, dtype):
        """``fn(scaled rows)`` of every block of rows in place, computed on the cluster; one array here."""
        from ..dask._client import computing_on

        scale = self.scale

        def block(b):
            return fn(np.divide(np.asarray(b), scale, dtype=np.float64))  # the bits make_chunk computes

        if width is None:
            out = self.X.map_blocks(block, drop_axis=1, dtype=dtype, meta=np.empty((0,), dtype))
        else:
            out = self.X.map_blocks(block, chunks=(self.X.chunks[0], (width,)), dtype=dtype,
                                    meta=np.empty((0, 0), dtype))
        with computing_on(self.client):
            return out.compute()

    def each_block(self, fn):
        """``fn(i, scaled rows of block i)`` for every block of rows in place, run where the block is; the results here.

        What a caller uses to hand what it computes from the rows to
        something else on the cluster without bringing it here.
        """
        import dask

        from ..dask._client import computing_on

        scale = self.scale

        def block(b, i):
            return fn(i, np.divide(np.asarray(b), scale, dtype=np.float64))  # the bits make_chunk computes

        parts = [dask.delayed(block, pure=False)(b, i) for i, b in enumerate(self.X.to_delayed().ravel())]
        with computing_on(self.client):
            return list(dask.compute(*parts))

    def predict(self, tree):
        """``tree.predict`` of every row (n x outputs)."""
        if not self.in_place:
            return tree.predict(self.X)
        return self._per_block(tree.predict, tree.n_outputs, np.float64)

    def apply(self, tree):
        """The leaf every row reaches (n,)."""
        if not self.in_place:
            return tree.apply(self.X)
        return self._per_block(tree.apply, None, np.intp)

    def node_counts(self, tree):
        """Rows reaching each node of ``tree``, counted where the rows are."""
        if not self.in_place:
            return np.asarray(tree.decision_path(self.X).sum(axis=0)).ravel()
        from ..dask._client import computing_on

        n, scale = tree.n_nodes, self.scale
        per_block = self.X.map_blocks(
            lambda b: np.asarray(tree.decision_path(np.divide(np.asarray(b), scale, dtype=np.float64))
                                 .sum(axis=0)).reshape(1, n),
            chunks=((1,) * self.X.numblocks[0], (n,)), dtype=np.int64, meta=np.empty((0, 0), np.int64))
        with computing_on(self.client):
            return per_block.sum(axis=0).compute()
