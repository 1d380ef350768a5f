"""Decision-node solvers, behind a registry.

TAO's reduced problem at a decision node is a weighted binary classification:
every care point ``n`` has a pseudolabel ``target[n]`` (True = going right is
better) and a weight ``|l_left(n) - l_right(n)|``; minimise the weighted 0/1
loss plus ``alpha * ||w||_1``.

* ``"fista"`` (default for oblique nodes), ``"saga"`` and ``"liblinear"``:
  the papers' surrogate, an l1-regularised weighted logistic regression,
  ``C = 1 / alpha``. FISTA solves all the nodes of a level in one compiled
  call (:mod:`taodist.solvers.l1_logistic`), a few steps warm-started from each
  node's last iterate; SAGA (scikit-learn) is warm-started likewise and runs
  a few epochs per node; liblinear (scikit-learn, the papers' solver and the
  reference in tests) solves from scratch to convergence. The optimiser
  accepts an answer only if the true node objective does not increase.
* ``"fista-gpu"``: the same level-wide FISTA on a CUDA GPU through PyTorch
  (:mod:`taodist.solvers.l1_logistic_torch`; the optional ``gpu`` extra), every
  node of a level stepping at once.
* ``"axis"``: exact, by sorting each feature and enumerating thresholds.

Solvers return ``(w, b)`` for oblique nodes and ``(feature, threshold)`` for
axis nodes. Decision rule: right iff ``w . x + b >= 0`` / ``x[f] >= t``.

A :class:`NodeSolver` in :data:`NODE_SOLVERS` has a per-node ``solve`` and a
level-wide entry point, :meth:`NodeSolver.solve_level`, that TAO calls with
every decision node of one depth it sends to one task (the nodes of a depth
are independent). The default solves them one by one; a batched CPU or GPU
solver registers its own ``level`` function.
"""

import threading
from collections.abc import Set
from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from ..solvers.l1_logistic import solve_l1_logistic, solve_l1_logistic_level
from ..solvers.l1_logistic_torch import solve_l1_logistic_level_torch, torch_device
from ..solvers.row_kernels import BLOCK_ROWS
from ..utils.rows import as_rows, columns, stack_rows
from ..utils.solver_warnings import sklearn_convergence_ignored

#: liblinear seeds and draws from the C library's global ``rand()`` state, so
#: concurrent calls from threads would make each other's results depend on
#: timing. One call at a time keeps fits reproducible.
LIBLINEAR_LOCK = threading.Lock()


def solve_oblique_liblinear(X, target, weight, *, alpha, w0=None, b0=None):
    """Weighted l1 logistic regression (liblinear) for one decision node.

    Parameters
    ----------
    X : ndarray of shape (n_care, n_features)
    target : ndarray of bool, True where the point should go right.
    weight : ndarray of positive floats.
    alpha : float
        l1 penalty per unit of weighted 0/1 loss (liblinear's ``C = 1/alpha``).
    w0, b0 : ignored
        The node's current parameters (liblinear cannot warm-start).

    Returns
    -------
    w : ndarray of shape (n_features,)
    b : float
    """
    model = LogisticRegression(
        C=1.0 / alpha, l1_ratio=1.0, solver="liblinear", intercept_scaling=10.0, random_state=0, tol=1e-3, max_iter=100
    )
    with LIBLINEAR_LOCK, sklearn_convergence_ignored():
        model.fit(as_rows(X), target.astype(np.int8), sample_weight=weight)
    return model.coef_[0].copy(), float(model.intercept_[0])


#: SAGA epochs per node solve. Warm-started from the node's current weights,
#: a few epochs improve the node without jumping to the surrogate's optimum,
#: which generalises worse than the node near its previous hyperplane.
SAGA_EPOCHS = 6


def solve_oblique_saga(X, target, weight, *, alpha, w0, b0):
    """Weighted l1 logistic regression by SAGA, warm-started from ``(w0, b0)``.

    Runs :data:`SAGA_EPOCHS` epochs of scikit-learn's SAGA solver from the
    node's current parameters. Same objective as
    :func:`solve_oblique_liblinear` (which is the reference in tests); the
    caller's accept test keeps the tree objective monotone either way.
    """
    model = LogisticRegression(
        C=1.0 / alpha, l1_ratio=1.0, solver="saga", warm_start=True, max_iter=SAGA_EPOCHS, tol=0.0, random_state=0
    )
    model.coef_ = np.asarray(w0, dtype=np.float64).reshape(1, -1).copy()
    model.intercept_ = np.array([float(b0)])
    with sklearn_convergence_ignored():
        model.fit(X, target.astype(np.int8), sample_weight=weight)
    return model.coef_[0].astype(np.float64), float(model.intercept_[0])


def axis_split_losses(X, target, weight):
    """Weighted 0/1 loss of every axis-aligned split, by sorting.

    Returns ``(losses, thresholds)`` of shape ``(n + 1, n_features)``: row
    ``k`` is the split that sends the ``k`` smallest values of a feature left
    (``k = 0``: all right, threshold ``-inf``; ``k = n``: all left, ``+inf``).
    Rows where ``k`` falls inside a run of equal values are ``inf`` (no
    threshold separates them).
    """
    n, D = X.shape
    order = np.argsort(X, axis=0, kind="stable")
    values = np.take_along_axis(X, order, axis=0).astype(np.float64)
    w_right = np.where(target, weight, 0.0)[order]  # paid when sent left
    w_left = np.where(target, 0.0, weight)[order]  # paid when sent right
    losses = np.empty((n + 1, D))
    losses[0] = w_left.sum(axis=0)
    losses[1:] = np.cumsum(w_right, axis=0) + (w_left.sum(axis=0) - np.cumsum(w_left, axis=0))
    thresholds = np.empty((n + 1, D))
    thresholds[0], thresholds[n] = -np.inf, np.inf
    lo, hi = values[:-1], values[1:]
    mid = lo + (hi - lo) / 2
    # the midpoint must send ``lo`` left and ``hi`` right; fall back to ``hi``
    thresholds[1:n] = np.where((mid > lo) & (mid <= hi), mid, hi)
    losses[1:n][hi <= lo] = np.inf
    return losses, thresholds


def solve_axis_exact(X, target, weight, *, alpha=None, w0=None, b0=None):
    """Exact weighted 0/1 axis-aligned split: returns ``(feature, threshold)``.

    Ties go to the lowest feature index, then the smallest threshold.
    Sparse ``X`` is solved by :func:`sparse_axis_split` (same split).
    """
    if sp.issparse(X):
        return sparse_axis_split(X, target, weight)
    losses, thresholds = axis_split_losses(X, target, weight)
    k, f = np.unravel_index(np.argmin(losses.T), losses.T.shape)[::-1]
    return int(f), float(thresholds[k, f])


def solve_axis_missing(X, target, weight, indicator_of):
    """:func:`solve_axis_exact` where features may have missing values: ``(feature, threshold, missing_column,
    missing_right)``.

    ``indicator_of[f]`` is the column of feature ``f``'s missingness indicator
    (``-1``: none; see :mod:`taodist.estimators.tabular`), where a missing
    value reads as the feature's filled value. A feature with missing values
    among these care points is split on its observed values, and its rows
    with a missing value go to whichever side costs less -- a default
    direction as XGBoost learns, exact like the rest of the enumeration; a
    tie follows the filled value. Only thresholds with observed points on
    both sides are tried for it (the indicator's own split sends every
    missing value right). Other features are split as by
    :func:`solve_axis_exact`, their missing values at the filled value
    (``missing_column = -1``). Lowest loss wins, then the lowest feature.
    Care points without a missing value give exactly
    :func:`solve_axis_exact`'s split.
    """
    indicator_of = np.asarray(indicator_of)
    has = np.flatnonzero(indicator_of >= 0)
    missing = columns(X, indicator_of[has]) != 0
    with_missing = has[missing.any(axis=0)]
    if with_missing.size == 0:
        return (*solve_axis_exact(X, target, weight), -1, False)
    plain = np.setdiff1d(np.arange(X.shape[1]), with_missing)
    best = (np.inf, X.shape[1], 0.0, -1, False)  # (loss, feature, threshold, missing_column, missing_right)
    if plain.size:
        f, t = solve_axis_exact(X[:, plain], target, weight)
        right = columns(X, [plain[f]])[:, 0] >= t
        best = (float(weight @ (right != target)), int(plain[f]), t, -1, False)
    for f, miss in zip(with_missing, missing[:, np.isin(has, with_missing)].T):
        split = _split_observed(columns(X, [f])[:, 0], miss, target, weight)
        if split is not None and (split[0], f) < best[:2]:
            loss, threshold, go_right = split
            best = (loss, int(f), threshold, int(indicator_of[f]), go_right)
    return best[1:]


def _split_observed(x, miss, target, weight):
    """Best ``(loss, threshold, missing_right)`` on the observed values of one feature (None: fewer than two)."""
    obs = ~miss
    if obs.sum() < 2:
        return None
    losses, thresholds = axis_split_losses(x[obs, None], target[obs], weight[obs])
    inner = losses[1:-1, 0]  # observed points on both sides
    k = int(np.argmin(inner))
    if not np.isfinite(inner[k]):
        return None  # a single observed value: no threshold separates them
    paid_left, paid_right = weight[miss & target].sum(), weight[miss & ~target].sum()
    threshold = float(thresholds[k + 1, 0])
    go_right = paid_right < paid_left if paid_right != paid_left else bool(x[miss][0] >= threshold)
    return float(inner[k] + min(paid_left, paid_right)), threshold, bool(go_right)


def sparse_axis_split(X, target, weight):
    """:func:`solve_axis_exact` for sparse ``X``, never densified.

    A column's implicit zeros are one run of equal values, so they enter the
    sorted order of its stored values as a single entry carrying their
    summed weights; a compiled loop then runs the enumeration of
    :func:`axis_split_losses` column by column (same thresholds, same
    tie-breaking, running sums restarted per column, so a perfect split
    has loss exactly 0 as in the dense enumeration).
    """
    X = sp.csc_matrix(X, dtype=np.float64)  # column access (a copy of the care points only)
    X.sum_duplicates()
    n, D = X.shape
    w_right = np.where(target, weight, 0.0)  # paid when sent left
    w_left = np.where(target, 0.0, weight)  # paid when sent right
    stored = np.diff(X.indptr)
    col = np.repeat(np.arange(D), stored)
    zero_cols = np.flatnonzero(stored < n)  # columns with implicit zeros: one entry each
    zeros_r = _unstored_sums(w_right, col, X.indices, D)[zero_cols]
    zeros_l = _unstored_sums(w_left, col, X.indices, D)[zero_cols]
    col = np.r_[col, zero_cols]
    val = np.r_[X.data, np.zeros(zero_cols.size)]
    wr = np.r_[w_right[X.indices], zeros_r]
    wl = np.r_[w_left[X.indices], zeros_l]
    order = np.lexsort((val, col))
    feature, threshold = _best_sorted_split(col[order], val[order], wr[order], wl[order], D)
    return int(feature), float(threshold)


def _unstored_sums(w, col, rows, D):
    """Per column, the summed ``w`` of the rows it does not store (total minus stored).

    Exactly 0 where none of those rows has positive weight, whatever the
    rounding of the subtraction: that is what makes a perfect split cost 0.
    """
    total = w.sum() - np.bincount(col, w[rows], minlength=D)
    positive = np.count_nonzero(w > 0) - np.bincount(col, w[rows] > 0, minlength=D)
    return np.where(positive > 0, np.maximum(total, 0.0), 0.0)


@numba.njit(cache=True, nogil=True)
def _best_sorted_split(col, val, wr, wl, D):
    """Best split over entries sorted by ``(col, val)``: lowest loss, then lowest feature, then threshold."""
    best_loss, best_f, best_t = np.inf, 0, -np.inf
    i = 0
    for f in range(D):
        j = i
        while j < col.shape[0] and col[j] == f:
            j += 1
        total_l = 0.0
        for k in range(i, j):
            total_l += wl[k]
        if total_l < best_loss:  # everything right
            best_loss, best_f, best_t = total_l, f, -np.inf
        cum_r = cum_l = 0.0
        for k in range(i, j):
            cum_r += wr[k]
            cum_l += wl[k]
            if k == j - 1:  # everything left
                t = np.inf
            elif val[k + 1] > val[k]:
                lo, hi = val[k], val[k + 1]
                mid = lo + (hi - lo) / 2
                t = mid if mid > lo and mid <= hi else hi
            else:  # inside a run of equal values
                continue
            loss = cum_r + (total_l - cum_l)
            if loss < best_loss:
                best_loss, best_f, best_t = loss, f, t
        i = j
    return best_f, best_t


@dataclass(frozen=True)
class NodeProblem:
    """One decision node's reduced problem: care points, pseudolabels, weights, penalty, warm start."""

    X: np.ndarray
    target: np.ndarray
    weight: np.ndarray
    alpha: float
    w0: np.ndarray | None = None
    b0: float | None = None


@dataclass(frozen=True)
class NodeSolver:
    """A decision-node solver in the registry.

    Parameters
    ----------
    solve : callable
        ``solve(X, target, weight, *, alpha, w0, b0)`` for one node.
    float32 : bool, default=False
        Takes float32 care points (the optimiser keeps a float32 copy of X).
    level : callable, optional
        ``level(problems) -> [solution, ...]``: many independent nodes at once
        (a list of :class:`NodeProblem`). Default: ``solve`` node by node.
    check : callable, optional
        Called before a fit uses the solver; raises an actionable error when
        the solver cannot run here (a missing optional dependency or device).
    whole_level : bool, default=False
        Wants every node of a depth in one ``level`` call (a GPU: one launch
        sequence for the level) rather than one call per executor thread or
        worker.
    threads : bool, default=False
        ``level`` takes a ``threads`` keyword: how many threads it may use
        for these nodes (more than one when the executor would otherwise
        leave threads idle, as at the root).
    """

    solve: Callable
    float32: bool = False
    level: Callable | None = None
    check: Callable | None = None
    whole_level: bool = False
    threads: bool = False

    def ensure_usable(self):
        """Raise the solver's actionable error if it cannot run in this process (see ``check``)."""
        if self.check is not None:
            self.check()

    def solve_level(self, problems, threads=1):
        """Solutions of independent :class:`NodeProblem`s, in their order (``threads``: see the class)."""
        if self.level is not None:
            return self.level(problems, threads=threads) if self.threads and threads > 1 else self.level(problems)
        return [self.solve(p.X, p.target, p.weight, alpha=p.alpha, w0=p.w0, b0=p.b0) for p in problems]


#: FISTA iterations per node solve of the level-wide solver, warm-started from the node's last
#: iterate. Few on purpose: like SAGA's few epochs, stopping early keeps each node near its
#: previous hyperplane, and the surrogate's exact optimum generalises worse.
FISTA_MAX_ITER = 10


def solve_oblique_fista(X, target, weight, *, alpha, w0, b0):
    """One node by the level solver's FISTA (:mod:`taodist.solvers.l1_logistic`); see :func:`solve_level_fista`."""
    return solve_l1_logistic(X, target, weight, alpha, w0, b0, max_iter=FISTA_MAX_ITER)


def consecutive_rows(arrays):
    """The one array whose consecutive row slices ``arrays`` are, in order, as a view; else None.

    Node problems whose care points were put into one array
    (``taodist.tao.node_tasks.solve_nodes_task``) are solved from it as it is, not
    copied into another.
    """
    first = arrays[0]
    base = getattr(first, "base", None)
    if not (isinstance(base, np.ndarray) and base.flags.c_contiguous):
        return None
    if not all(isinstance(a, np.ndarray) and a.base is base and a.flags.c_contiguous and a.dtype == first.dtype
               and a.shape[1:] == first.shape[1:] for a in arrays):
        return None
    rows = [a for a in arrays if a.size]  # (an empty slice's address says nothing of where it was cut)
    if not rows or any(a.ctypes.data + a.nbytes != b.ctypes.data for a, b in zip(rows, rows[1:])):
        return None
    shape = (sum(a.shape[0] for a in rows), *first.shape[1:])
    return np.ndarray(shape, dtype=first.dtype, buffer=base, offset=rows[0].ctypes.data - base.ctypes.data)


def _stacked_level(problems):
    """The arrays of :func:`~taodist.solvers.l1_logistic.solve_l1_logistic_level` for ``problems``, stacked."""
    def stacked(name):  # a lone node (the root: all the rows) is used as it is, not copied again
        arrays = [getattr(p, name) for p in problems]
        if len(arrays) == 1:
            return arrays[0]
        whole = consecutive_rows(arrays) if name == "X" else None
        return whole if whole is not None else stack_rows(arrays)

    float32 = all(p.X.dtype == np.float32 for p in problems)
    X = stacked("X").astype(np.float32 if float32 else np.float64, copy=False)  # sparse rows stay CSR
    bounds = np.r_[0, np.cumsum([p.X.shape[0] for p in problems])]
    D = X.shape[1]
    W0 = np.stack([np.zeros(D) if p.w0 is None else np.asarray(p.w0, dtype=np.float64) for p in problems])
    b0 = np.array([0.0 if p.b0 is None else float(p.b0) for p in problems])
    alpha = np.array([p.alpha for p in problems])
    return X, bounds, stacked("target"), stacked("weight"), alpha, W0, b0


def solve_level_fista(problems, threads=1):
    """Every node of ``problems`` at once: their care points stacked, one compiled FISTA call.

    One thread: the executor already runs groups of nodes on its threads (or
    Dask workers), so the solver does not start threads of its own -- unless
    the executor has more threads than groups (the root level in process):
    with ``threads`` > 1 and fewer nodes than that, each node's row blocks
    are spread over ``threads`` numba threads (``row_parallel``, the same
    bits as one thread) when some node has more than one block of rows to
    spread; with none, the parallel kernels are not used, so a small fit
    never waits for them to compile.
    """
    if not problems:
        return []
    row_parallel = (threads > 1 and len(problems) < threads
                    and max(p.X.shape[0] for p in problems) > BLOCK_ROWS)
    W, b, _ = solve_l1_logistic_level(*_stacked_level(problems), max_iter=FISTA_MAX_ITER,
                                      n_threads=threads if row_parallel else 1, row_parallel=row_parallel)
    return [(W[j], float(b[j])) for j in range(len(problems))]


def solve_level_fista_gpu(problems):
    """:func:`solve_level_fista` on the GPU (PyTorch): every node of the level takes its step at once.

    Same method, iterations and guarantees (:mod:`taodist.solvers.l1_logistic_torch`);
    sparse care points are solved by the CPU kernel.
    """
    if not problems:
        return []
    arrays = _stacked_level(problems)
    if sp.issparse(arrays[0]):
        W, b, _ = solve_l1_logistic_level(*arrays, max_iter=FISTA_MAX_ITER, n_threads=1)
    else:
        W, b, _ = solve_l1_logistic_level_torch(*arrays, max_iter=FISTA_MAX_ITER)
    return [(W[j], float(b[j])) for j in range(len(problems))]


def solve_oblique_fista_gpu(X, target, weight, *, alpha, w0, b0):
    """One node by the GPU level solver (see :func:`solve_level_fista_gpu`)."""
    return solve_level_fista_gpu([NodeProblem(X, target, weight, alpha, w0, b0)])[0]


def check_gpu():
    """Raise an actionable error unless PyTorch sees a CUDA GPU (for ``solver="fista-gpu"``)."""
    torch_device()


#: solver name -> :class:`NodeSolver` ("axis" for axis-aligned nodes)
NODE_SOLVERS = {
    "fista": NodeSolver(solve_oblique_fista, float32=True, level=solve_level_fista, threads=True),
    "fista-gpu": NodeSolver(solve_oblique_fista_gpu, float32=True, level=solve_level_fista_gpu, check=check_gpu,
                            whole_level=True),
    "saga": NodeSolver(solve_oblique_saga, float32=True),
    "liblinear": NodeSolver(solve_oblique_liblinear),
    "axis": NodeSolver(solve_axis_exact),
}


class _ObliqueSolverNames(Set):
    """A live view of the registry's oblique solvers (every entry but "axis"), for parameter validation."""

    def __contains__(self, name):
        return name != "axis" and name in NODE_SOLVERS

    def __iter__(self):
        return (name for name in NODE_SOLVERS if name != "axis")

    def __len__(self):
        return sum(1 for _ in self)

    @classmethod
    def _from_iterable(cls, names):  # set operations on the view return plain sets
        return set(names)


#: names an estimator's ``solver`` may take; follows :data:`NODE_SOLVERS` as entries are added
OBLIQUE_SOLVERS = _ObliqueSolverNames()
