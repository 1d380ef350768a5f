"""Compile a fit's kernels on the Dask workers ahead of the fit, while the driver still loads the data.

A worker compiles taodist's numba kernels the first time it runs them
(then loads them from numba's on-disk cache). In a first run that compile
sits inside the fit's first TAO iteration, after the data has been loaded
and scattered. Started as soon as the cluster is up, the same compile
overlaps the loading and the scatter instead: each worker fits a tiny
copy of the estimator on a few random rows of the fit's kind (dense or
sparse, the same dtype and width), which compiles the kernels with the
types the real fit will call them with.
"""

import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone, is_regressor

from ..solvers.l1_logistic import first_run_compiles, solve_l1_logistic_level
from ..solvers.row_kernels import BLOCK_ROWS
from .tree import TAOClassifier, TAORegressor

#: rows of the tiny fit: enough for every class to reach a leaf of a depth-2 tree
_ROWS = 64


def compile_ahead(client, estimator, n_features, *, sparse=False, dtype=np.float32):
    """Start the tiny warm-up fit on every worker of ``client`` whose kernels are not yet cached.

    Returns at once with the tasks' futures: on single-threaded workers the
    real fit's first tasks run after them, so nothing waits twice. A worker
    whose numba cache already holds the kernels skips the fit.

    Parameters
    ----------
    client : distributed.Client
    estimator : TAOClassifier or TAORegressor
        The estimator about to be fitted; a clone of it (depth 2, one TAO
        iteration) is fitted on each worker, in that worker's process.
    n_features : int
        Columns of the training rows.
    sparse : bool, default=False
        Whether the rows are scipy.sparse (CSR kernels) rather than dense.
    dtype : numpy dtype, default=float32
        Dtype of the training rows.

    Returns
    -------
    futures : list of distributed.Future
        One per worker, each resolving to True where it compiled.
    """
    from ..dask._client import cluster_workers

    tiny = clone(estimator).set_params(max_depth=2, max_iter=1, random_state=0)
    workers = sorted(cluster_workers(client))
    # With two workers or more, half compile the tiny fit's kernels and half the row-parallel solver,
    # at the same time: each then loads the other half from the shared cache when the fit needs it.
    parts = [PARTS] if len(workers) == 1 else [PARTS[j % 2:j % 2 + 1] for j in range(len(workers))]
    return [client.submit(compile_kernels, tiny, int(n_features), bool(sparse), np.dtype(dtype).str, parts=part,
                          workers=[address], allow_other_workers=False, pure=False)
            for address, part in zip(workers, parts)]


#: what :func:`compile_kernels` can compile: a tiny fit (and prediction) of the estimator, and the
#: oblique node solver's row-parallel variant, which only a level with few large nodes runs
PARTS = ("fit", "row_parallel")


def compile_kernels(estimator, n_features, sparse, dtype, *, only_if_missing=True, parts=PARTS):
    """Fit ``estimator`` on ``_ROWS`` random rows in this process and predict them, compiling what that uses.

    ``parts`` chooses among :data:`PARTS`. Returns True where it ran (and so
    compiled or loaded the kernels), False where ``only_if_missing`` and
    numba's cache already had the node solver (then nothing is run).
    """
    if only_if_missing and not first_run_compiles():
        return False
    if "row_parallel" in parts and getattr(estimator, "node_type", None) == "oblique" \
            and getattr(estimator, "solver", None) == "fista":
        _compile_row_parallel_solver(n_features, sparse, dtype)
    if "fit" not in parts:
        return True
    rng = np.random.default_rng(0)
    X = rng.random((_ROWS, n_features)).astype(dtype)
    if sparse:
        X[X < 0.5] = 0
        X = sp.csr_matrix(X)
    y = (np.arange(_ROWS) % 3).astype(np.float64 if is_regressor(estimator) else np.int64)
    with warnings.catch_warnings():  # a one-iteration fit of random rows: its warnings say nothing
        warnings.simplefilter("ignore")
        estimator.fit(X, y).predict(X)
    return True


def _compile_row_parallel_solver(n_features, sparse, dtype):
    """The node solver's row-parallel variant, which a tiny fit never runs.

    A level with fewer nodes than the machine's worker threads (the root)
    spreads each node's rows over numba's threads when a node has more than
    one block of rows; that variant compiles on its own, so the warm-up
    solves one such node (two blocks of rows, one iteration) too.
    """
    rng = np.random.default_rng(1)
    X = rng.random((2 * BLOCK_ROWS + 1, n_features)).astype(dtype)
    if sparse:
        X[X < 0.5] = 0
        X = sp.csr_matrix(X)
    n = X.shape[0]
    solve_l1_logistic_level(X, [0, n], np.arange(n) % 2 == 0, np.ones(n), 1.0, np.zeros((1, n_features)), [0.0],
                            max_iter=1, n_threads=2, row_parallel=True)


def compile_common_kernels():
    """Compile, into numba's cache, the kernels of the fits a first run most likely makes.

    Dense float32 and float64 rows and CSR rows for a sparse oblique
    classifier, and dense rows for a regressor with linear leaves: what
    ``taodist compile`` (and a Docker image build) runs so that later
    processes load them instead.

    Returns
    -------
    seconds : dict
        Seconds each kind took, by a short description.
    """
    kinds = {
        "classifier, dense float32 rows": (TAOClassifier(), False, "<f4"),
        "classifier, dense float64 rows": (TAOClassifier(), False, "<f8"),
        "classifier, sparse (CSR) rows": (TAOClassifier(), True, "<f8"),
        "regressor with linear leaves, dense float64 rows": (TAORegressor(leaf_type="linear"), False, "<f8"),
    }
    seconds = {}
    for name, (estimator, sparse, dtype) in kinds.items():
        start = time.perf_counter()
        compile_kernels(estimator.set_params(max_depth=2, max_iter=1, random_state=0), 8, sparse, dtype,
                        only_if_missing=False)
        seconds[name] = time.perf_counter() - start
    return seconds
