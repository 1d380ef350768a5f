"""Tree Alternating Optimisation (TAO) of a tree of fixed structure.

Carreira-Perpinan & Tavallali (NeurIPS 2018, section 3); Zharmagambetov
(thesis 2022, section 2.1, Algorithm 1). Minimises::

    E(tree) = sum_n s_n L(y_n, T(x_n)) + alpha * sum_i ||w_i||_1 + leaf_alpha * sum_leaves ||W_j||_1

with L the 0/1 loss (classification) or squared error (regression), by
sweeping depth levels bottom-up. Nodes of one depth are not descendants of
each other, so their reduced problems are independent:

* a leaf fits its predictor to its reduced set;
* a decision node computes, for every point of its reduced set, the loss of
  going left and of going right through the (fixed) subtrees below it; the
  pseudolabel is the better side and the weight the loss difference. Points
  with zero weight do not care. The node then solves a weighted binary
  problem; a surrogate answer is accepted only if the node's true objective
  does not increase, so ``E`` never increases.

The rows live in chunks (:mod:`taodist.tao.chunks`); an *executor*
(:mod:`taodist.tao.executor`) runs the chunk functions where the chunks are
(threads here, Dask workers in :mod:`taodist.dask`) and runs the node and
leaf fits (:mod:`taodist.tao.node_tasks`, :mod:`taodist.tao.leaf_tasks`) as
independent tasks. The driver below only sees small reductions: per-node
statistics, candidate parameters and their losses. Bottom-up order means a
level's reduced sets depend only on nodes above it, not yet updated in this
sweep.
"""

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from ..model.kinds import AXIS, OBLIQUE
from ..model.leaves import LEAF_WARM_STARTS, leaf_coef_rows
from ..utils.progress import report
from .care_points import (
    AxisSplit,
    ObliqueSplit,
    chunk_node_parts,
    chunk_node_priorities,
    merge_priorities,
    node_stats,
    priority_thresholds,
)
from .chunks import chunk_boundaries, chunk_leaf_rows, chunk_loss, chunk_update
from .executor import LocalExecutor
from .leaf_tasks import LeafFit, LeafJob, LeafKept, fit_leaves_task
from .margins import NO_MARGINS
from .node_solvers import NODE_SOLVERS
from .node_tasks import NodeJob, evaluate_groups, merge_candidates, solve_nodes_task
from .routing import Routing

logger = logging.getLogger(__name__)

#: When a leaf is refitted (``refit_leaves``). "always": at every iteration, as the thesis
#: describes TAO. "until_refused": a leaf whose last fit was refused is skipped while its rows
#: stay the same -- a new fit would start from the same point on the same problem and be refused
#: again, so the tree is the same as with "always" (tested), with fewer fits. "new_rows": a leaf
#: is refitted only when its rows differ from those of its last fit, accepted or refused. Constant
#: leaves give the same tree under all three (Lasso leaves: up to their solver's tolerance); a
#: softmax leaf's fit is a few warm-started SAGA epochs, so "new_rows" stops refining a leaf whose
#: reduced set has settled (an early stop): faster, with higher objectives, and a validation error
#: better on some data sets and worse on others, so single trees keep "until_refused" (the same
#: trees as "always"). Forests take "new_rows" (see ``taodist.estimators.forest``): there it is
#: faster at the same validation error.
REFIT_LEAVES = ("always", "until_refused", "new_rows")


@dataclass
class TAOResult:
    """What :func:`tao_optimize` returns besides the tree."""

    objective: list = field(default_factory=list)  # E before iteration 1, then after each
    n_iter: int = 0
    converged: bool = False
    stopped: bool = False  # a callback or reporter asked to stop before convergence
    seconds: list = field(default_factory=list)
    chunks: list = field(default_factory=list, repr=False)  # the data chunks at the end (for pruning counts)


# ----------------------------------------------------------------- driver
class _Driver:
    """TAO's sweeps over ``tree`` (changed in place) whose rows are ``chunks`` of ``executor``.

    Holds what lasts from level to level and iteration to iteration: the
    tree snapshot the chunks route with (:meth:`routing`), each node's last
    solver iterate (warm starts), its care-point count (group balancing) and
    each leaf's last fit rows (``refit_leaves``).
    """

    def __init__(self, tree, chunks, executor, *, alpha, node_solver, max_care_points, seed, leaf_alpha=None,
                 leaf_max_iter=None, refit_leaves="until_refused", leaf_warm_start="coef", missing_indicators=None):
        if refit_leaves not in REFIT_LEAVES:
            raise ValueError(f"refit_leaves must be one of {REFIT_LEAVES}; got {refit_leaves!r}")
        if leaf_warm_start not in LEAF_WARM_STARTS:
            raise ValueError(f"leaf_warm_start must be one of {LEAF_WARM_STARTS}; got {leaf_warm_start!r}")
        self.tree, self.chunks, self.ex = tree, chunks, executor
        self.refit_leaves = refit_leaves
        self.alpha, self.solver = alpha, node_solver
        self.leaf_alpha = alpha if leaf_alpha is None else leaf_alpha
        self.leaf_max_iter = leaf_max_iter
        self.leaf_warm_start = leaf_warm_start
        self.max_care_points, self.seed, self.iteration = max_care_points, seed, 0
        self.missing_indicators = missing_indicators
        self.last_iterate = {}  # node -> the solver's last (w, b), accepted or not
        self.care_counts = {}  # node -> its care points at the last solve (balances the solver groups)
        self.leaf_rows = {}  # leaf -> (digest of the rows of its last fit, whether that fit was refused)
        self._routing = None
        self._last_routing = None  # the latest snapshot taken (self._routing until the tree changes)
        self._changed = set()  # nodes changed since it

    def routing(self):
        """A snapshot of the tree (tasks may run after the driver moves on), one per state of the tree.

        The same object until the tree changes, so an executor can ship it
        to its workers once rather than with every task. Each names the one
        before and the nodes changed since (:meth:`Routing.of`), so an
        executor may ship only those nodes' rows.
        """
        if self._routing is None:
            self._routing = Routing.of(self.tree.copy(), since=self._last_routing, changed=self._changed)
            self._last_routing, self._changed = self._routing, set()
        return self._routing

    def clear_boundaries(self):
        """Shift the bias of any oblique node with a training point on its hyperplane.

        Accepted updates are cleared as they are made (``_accepted``); this
        does it for the initial tree (a random or warm-start hyperplane can
        pass through a data point), so no training point's route depends on
        the summation order of its margin. No route changes.
        """
        extremes = {}
        for part in self.ex.map_chunks(chunk_boundaries, self.chunks, self.routing()):
            for node, e in part.items():
                extremes[node] = extremes.get(node, NO_MARGINS).merged(e)
        t = self.tree
        updates = {}
        for node, e in extremes.items():
            shift = e.clearing_shift()
            if shift:
                updates[node] = ObliqueSplit(t.weight_row(node), t.bias[node] + shift)
        self.apply_updates(updates)

    def penalty(self):
        t = self.tree
        return self.alpha * np.abs(t.weights.data).sum() + self.leaf_alpha * t.leaf_model.penalty(t)

    def objective(self):
        return float(sum(self.ex.map_chunks(chunk_loss, self.chunks, self.routing())) + self.penalty())

    def iterate(self):
        self.iteration += 1
        depth = self.tree.node_depth
        for d in range(self.tree.max_depth, -1, -1):
            leaves = self.tree.is_leaf & (depth == d)
            if leaves.any():
                self.leaf_step(d)
            level = np.flatnonzero(~self.tree.is_leaf & (depth == d))
            if level.size:
                self.decision_step(d, level)
            report("tao_level", iteration=self.iteration, depth=d, n_nodes=int(leaves.sum() + level.size))

    def leaf_step(self, d):
        """Refit every leaf of depth ``d``: one wait for the executor (the rows' split stays where it is made)."""
        t = self.tree
        model = t.leaf_model
        # constant leaves need only labels and weights: X rows are not shipped to the fits
        parts = self.ex.map_chunks(chunk_leaf_rows, self.chunks, self.routing(), d, model.has_coef, gather=False)
        # a job for every leaf of the depth; leaves that no row reaches get no result
        jobs = {int(leaf): LeafJob(value=t.value[leaf], coef=leaf_coef_rows(t, leaf) if model.has_coef else None,
                                   output_range=None if t.leaf_range is None else t.leaf_range[leaf],
                                   skip_rows=self._skip_rows(int(leaf)))
                for leaf in np.flatnonzero(t.is_leaf & (t.node_depth == d))}
        results = self.ex.run_key_groups(fit_leaves_task, parts, None, jobs, task=t.task, leaf_type=t.leaf_type,
                                         n_outputs=t.n_outputs, alpha=self.leaf_alpha, leaf_classes=t.leaf_classes,
                                         leaf_max_iter=self.leaf_max_iter, leaf_warm_start=self.leaf_warm_start)
        for leaf, result in results.items():
            if result is not None:
                self.leaf_rows[leaf] = (result.rows, isinstance(result, LeafKept))
        accepted = {leaf: results[leaf] for leaf in sorted(results) if isinstance(results[leaf], LeafFit)}
        for leaf, fit in accepted.items():
            t.value[leaf] = fit.value
        if model.has_coef and accepted:
            t.set_leaf_coef(list(accepted), [fit.coef for fit in accepted.values()])
        ranged = [leaf for leaf, fit in accepted.items() if fit.output_range is not None]
        t.set_leaf_range(ranged, [accepted[leaf].output_range for leaf in ranged])
        if accepted:
            self._routing = None
            self._changed.update(accepted)

    def _skip_rows(self, leaf):
        """The rows digest at which ``leaf``'s fit is skipped (see :data:`REFIT_LEAVES`), or None."""
        rows, kept = self.leaf_rows.get(leaf, (None, False))
        if self.refit_leaves == "new_rows" or (self.refit_leaves == "until_refused" and kept):
            return rows
        return None

    def decision_step(self, d, level):
        """Solve the reduced problem of every decision node of one depth.

        One wait for the executor (two with a care-point cap): every node of
        the level is sent to the solver groups with its warm start, the
        groups compute each node's statistics from its parts and solve only
        the nodes that need it (see :func:`~taodist.tao.node_tasks.solve_nodes_task`), the chunks
        evaluate the candidates where they are, and the driver then collects
        the statistics, candidates and evaluations together. On a cluster a
        wait for the statistics before the solves would cost a scheduler
        round trip per level (``bench/bench_dask_overhead.py``); the
        decisions are the same.
        """
        t = self.tree
        routing = self.routing()
        args = (routing, d, self.max_care_points, self.seed, self.iteration)
        if self.max_care_points is None:
            parts, keys, first = self.ex.split_chunks_by_key(chunk_node_parts, self.chunks, *args,
                                                             summary=node_stats)
        else:
            # Two passes keep the samples' memory bounded by k rows per node:
            # the first finds each node's k-th lowest priority overall, the
            # second keeps only the care points at or below it -- the same
            # sample as one pass where every chunk proposes its k lowest.
            first, lowest = self.ex.reduce_chunks(chunk_node_priorities, merge_priorities, self.chunks, *args,
                                                  k=self.max_care_points)
            thresholds = priority_thresholds(lowest, self.max_care_points)
            parts, keys, _ = self.ex.split_chunks_by_key(chunk_node_parts, self.chunks, *args, thresholds)
        jobs = {}
        for node in level:
            node = int(node)
            start = self.last_iterate.get(node)  # the tree's sparse row is read only without one
            w0, b0 = start if start is not None else (t.weight_row(node), t.bias[node])
            jobs[node] = NodeJob(kind=t.kind[node], alpha=self.alpha, w0=w0, b0=b0,
                                 max_care_points=self.max_care_points, n_care=self.care_counts.get(node, 1),
                                 indicator_of=self.missing_indicators if t.kind[node] == AXIS else None)
        whole = NODE_SOLVERS[self.solver].whole_level  # e.g. one GPU: the level in one call
        groups = self.ex.run_key_groups(solve_nodes_task, parts, keys, jobs, solver=self.solver, gather=False,
                                        threads_arg="threads",
                                        n_groups=1 if whole else None)
        evaluations = self.ex.map_chunks(evaluate_groups, self.chunks, routing, d, groups, gather=False)
        first, groups, evaluations = self.ex.gather([first, groups, evaluations])
        stats = {}
        for part in first:
            for node, s in part.items():
                stats[node] = stats.get(node, 0) + s
        updates = {}
        for node in level:
            node = int(node)
            if node not in stats:  # empty node: its loss is constant, w = 0 is optimal
                updates[node] = self._constant_side(node, t.bias[node] >= 0)
                continue
            st = stats[node]
            self.care_counts[node] = int(st.n_care)
            if st.needs_solve():
                continue
            if st.n_care == 0:  # nobody cares: w = 0, everything to the current majority side
                updates[node] = self._constant_side(node, st.sw_right >= st.sw_left)
            else:  # exact optimum: zero loss, zero penalty
                updates[node] = self._constant_side(node, st.w_left == 0)
        candidates = merge_candidates(groups)
        for node, cand in candidates.items():
            if isinstance(cand, ObliqueSplit):
                self.last_iterate[node] = (cand.w, cand.b)
        updates.update(self._accepted(candidates, evaluations, stats))
        self.apply_updates(updates)

    def _accepted(self, candidates, evaluations, stats):
        """Candidates that do not increase their node's objective (evaluated on all care points).

        ``evaluations`` are the chunks' :func:`~taodist.tao.node_tasks.evaluate_groups`, in chunk order.
        """
        if not candidates:
            return {}
        evals = {}
        for part in evaluations:
            for node, e in part.items():
                evals[node] = evals[node].merged(e) if node in evals else e
        accepted = {}
        for node, cand in candidates.items():
            ev = evals[node]
            old_obj = stats[node].care_loss + self.alpha * self._node_penalty(node)
            if isinstance(cand, AxisSplit):
                if ev.loss <= old_obj:
                    accepted[node] = cand
            elif ev.loss + self.alpha * np.abs(cand.w).sum() <= old_obj:
                accepted[node] = ObliqueSplit(cand.w, cand.b + ev.extremes.clearing_shift())
        return accepted

    def _node_penalty(self, node):
        t = self.tree
        if t.kind[node] != OBLIQUE:
            return 0.0
        return np.abs(t.weights.data[t.weights.indptr[node]:t.weights.indptr[node + 1]]).sum()

    def _constant_side(self, node, go_right):
        """A node that sends every point one way, with no weights."""
        if self.tree.kind[node] == AXIS:
            return AxisSplit(0, -np.inf if go_right else np.inf)
        return ObliqueSplit(np.zeros(self.tree.n_features), 1.0 if go_right else -1.0)

    def _unchanged(self, node, update):
        """Whether ``update`` is a constant-side node the tree already has (nothing to redo)."""
        t = self.tree
        if isinstance(update, AxisSplit):
            route = (-1, False) if t.missing_column is None else (t.missing_column[node], t.missing_right[node])
            return (t.feature[node], t.threshold[node], *route) == tuple(update)
        return not np.any(update.w) and self._node_penalty(node) == 0 and t.bias[node] == update.b

    def apply_updates(self, updates):
        """Set the nodes of ``updates`` (``{node: ObliqueSplit or AxisSplit}``) and update the chunks' margins."""
        updates = {k: v for k, v in updates.items() if not self._unchanged(k, v)}
        if not updates:
            return
        t = self.tree
        obl = sorted(k for k, v in updates.items() if isinstance(v, ObliqueSplit))
        if obl:
            t.set_decision(obl, np.stack([updates[k].w for k in obl]), [updates[k].b for k in obl])
        for k, v in updates.items():
            if isinstance(v, AxisSplit):
                t.set_axis_split(k, *v)
        previous, self._routing = self._routing, None
        self._changed.update(updates)
        routing = self.routing()
        if previous is not None:  # only decision nodes changed: the leaves' digests (a hash of every leaf) hold
            routing.keep_leaf_digests(previous)
        nodes = np.array(sorted(updates), dtype=np.intp)
        self.chunks = self.ex.update_chunks(chunk_update, self.chunks, routing, nodes)


def tao_optimize(
    tree,
    X,
    y,
    sample_weight,
    *,
    alpha,
    max_iter,
    tol,
    node_solver,
    callback=None,
    n_threads=1,
    max_care_points=None,
    seed=0,
    executor=None,
    scale=None,
    leaf_alpha=None,
    leaf_max_iter=None,
    refit_leaves="until_refused",
    leaf_warm_start="coef",
    missing_indicators=None,
):
    """Run TAO on ``tree`` in place until ``tol`` or ``max_iter``.

    Parameters
    ----------
    tree : Tree
        Initial tree (modified in place); its structure is kept.
    X : ndarray of shape (n_samples, n_features), or a list of row blocks
        ``(X_block, y_block, sw_block, offset)`` that ``executor`` can turn
        into chunks (the Dask executor takes blocks that live on workers).
    y : ndarray
        Integer class codes (classification) or 2-D targets (regression).
    sample_weight : ndarray of shape (n_samples,)
    alpha : float
        l1 penalty weight (``1 / C``).
    max_iter : int
    tol : float
        Stop when the relative decrease of E falls below ``tol``.
    node_solver : str
        Key of :data:`~taodist.tao.node_solvers.NODE_SOLVERS` ("saga", "liblinear",
        "axis"). The leaves are fitted by the tree's own leaf model
        (``tree.leaf_type``, see :data:`~taodist.model.leaves.LEAF_MODELS`).
    callback : callable, optional
        Called as ``callback(iteration, objective)`` after each iteration; a
        true return value stops the iterations there (``result.stopped``).
    n_threads : int, default=1
        Threads of the default in-process executor.
    max_care_points : int or None, default=None
        Cap on the care points an oblique surrogate solve sees (a
        deterministic pseudo-random sample); the accept test still uses all
        of them.
    seed : int, default=0
        Seeds that sampling.
    executor : taodist.tao.executor.Executor, optional
        Where the row chunks live (default: a :class:`~taodist.tao.executor.LocalExecutor`
        on ``n_threads`` threads, closed on return).
    scale : ndarray, optional
        Per-feature divisor applied to X inside the chunks (default 1).
    leaf_alpha : float, optional
        l1 penalty weight of the leaf models' coefficients (default: ``alpha``).
    leaf_max_iter : int, optional
        Iterations of an iterative leaf solver per leaf fit (default: the
        leaf model's own; see :meth:`~taodist.model.leaves.LeafModel.with_max_iter`).
    refit_leaves : {"always", "until_refused", "new_rows"}, default="until_refused"
        When a leaf is refitted (see :data:`REFIT_LEAVES`).
    leaf_warm_start : {"coef", "gradients"}, default="coef"
        What an iterative leaf fit starts from (see :data:`~taodist.model.leaves.LEAF_WARM_STARTS`).
    missing_indicators : ndarray of int, optional
        Per feature, the column of its missingness indicator (-1: none), as
        :meth:`~taodist.estimators.tabular.TabularEncoder.missing_indicators`
        gives: axis nodes then learn where rows with a missing value go
        (:func:`~taodist.tao.node_solvers.solve_axis_missing`).

    Returns
    -------
    TAOResult
    """
    own = executor is None
    executor = LocalExecutor(n_threads) if own else executor
    try:
        blocks = X if isinstance(X, list) else [(X, y, sample_weight, 0)]
        scale = np.ones(tree.n_features) if scale is None else scale
        chunks = executor.make_chunks(blocks, Routing.of(tree), scale, NODE_SOLVERS[node_solver].float32)
        driver = _Driver(tree, chunks, executor, alpha=alpha, node_solver=node_solver,
                         max_care_points=max_care_points, seed=seed, leaf_alpha=leaf_alpha,
                         leaf_max_iter=leaf_max_iter, refit_leaves=refit_leaves, leaf_warm_start=leaf_warm_start,
                         missing_indicators=missing_indicators)
        driver.clear_boundaries()
        result = _run(driver, max_iter, tol, callback)
        result.chunks = driver.chunks
        return result
    finally:
        if own:
            executor.close()


def _run(driver, max_iter, tol, callback):
    result = TAOResult(objective=[driver.objective()])
    for it in range(1, max_iter + 1):
        start = time.perf_counter()
        driver.iterate()
        result.objective.append(driver.objective())
        result.seconds.append(time.perf_counter() - start)
        result.n_iter = it
        prev, cur = result.objective[-2], result.objective[-1]
        logger.info("TAO iteration %d: objective %.6g (%.2fs)", it, cur, result.seconds[-1])
        stop = callback is not None and bool(callback(it, cur))
        stop = report("tao_iteration", iteration=it, max_iter=max_iter, objective=cur,
                      seconds=result.seconds[-1]) or stop
        if prev - cur <= tol * abs(prev):
            result.converged = True
            break
        if stop:  # a validation set's early stopping, or a user's callback, ends the iterations here
            result.stopped = True
            break
    return result
