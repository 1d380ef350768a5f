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

The rows live in chunks (:mod:`taodist.tao.chunks`); an *executor* runs the
chunk functions where the chunks are (threads here, Dask workers in
:mod:`taodist.dask`) and runs the node and leaf fits as independent tasks.
The driver below only sees small reductions: per-node statistics, candidate
parameters and their losses. Bottom-up order means a level's reduced sets
depend only on nodes above it, not yet updated in this sweep.
"""

import hashlib
import logging
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np

from ..model.kinds import AXIS, OBLIQUE
from ..model.leaves import LEAF_MODELS, LEAF_WARM_STARTS, leaf_coef_rows
from ..utils.progress import report
from ..utils.rows import stack_rows
from .chunks import (
    Routing,
    chunk_boundaries,
    chunk_evaluate,
    chunk_leaf_rows,
    chunk_loss,
    chunk_node_parts,
    chunk_node_priorities,
    chunk_update,
    merge_priorities,
    node_stats,
    part_rows_layout,
    priority_thresholds,
    stack_part_rows,
)
from .executor import LocalExecutor
from .node_solvers import NODE_SOLVERS, NodeProblem
from .row_buffers import ROW_BUFFERS

logger = logging.getLogger(__name__)


@dataclass
class TAOResult:
    """What :func:`tao_optimize` returns besides the tree."""

    objective: list = field(default_factory=list)  # E before iteration 1, then after each
    n_iter: int = 0
    converged: bool = False
    seconds: list = field(default_factory=list)
    chunks: list = field(default_factory=list, repr=False)  # the data chunks at the end (for pruning counts)


# ------------------------------------------------------------------ tasks
def node_problem(parts, *, alpha, w0, b0, max_care_points, n_care, out=None):
    """One decision node's :class:`~taodist.tao.node_solvers.NodeProblem` from its care points in the chunks.

    ``parts`` are the chunks' ``(stats, sample)`` for this node (see
    :func:`~taodist.tao.chunks.chunk_node_parts`). With a cap, the
    ``max_care_points`` lowest priorities are kept and the penalty scaled by
    ``max_care_points / n_care`` (the loss/penalty balance of all care
    points). None when the sample holds one pseudolabel only. ``out``: where
    to put the care points' rows, without a cap (see :func:`node_rows_layout`).
    """
    samples = [sample for _, sample in parts if sample is not None]
    prio, rows, X, target, weight = zip(*samples)
    # one chunk's arrays (in process: one chunk per thread) are used as they are: this task's own, and
    # a copy of a node's care points costs as much as a pass of its solver; the rows are copied once
    prio, rows, target, weight = (a[0] if len(a) == 1 else stack_rows(a) for a in (prio, rows, target, weight))
    if max_care_points is not None and rows.size > max_care_points:
        keep = np.argpartition(prio, max_care_points - 1)[:max_care_points]
        keep = keep[np.argsort(rows[keep])]  # global row order: chunking-independent input
        X, target, weight = stack_part_rows(X)[keep], target[keep], weight[keep]
    else:
        X = stack_part_rows(X, out=out)
    if target.size < n_care:
        # A sample stands for all n_care points. Scale the penalty down rather
        # than the weights up (the same minimiser): SAGA's step size ignores
        # sample weights, and weights of n_care / k >> 1 made its steps too
        # long (measured: a 2% sample gave 20% training error instead of 6%).
        alpha = alpha * target.size / n_care
    if target.all() or not target.any():  # the sample saw one side only: keep the node
        return None
    return NodeProblem(X, target, weight, alpha, w0, b0)


def node_rows_layout(parts, job):
    """``(rows, columns, dtype)`` of an oblique node's care-point rows as :func:`node_problem` stacks them.

    None where they cannot go into a given array: an axis-aligned node, a
    care-point cap (a sample of the rows), sparse rows.
    """
    if job["kind"] == AXIS or job["max_care_points"] is not None:
        return None
    return part_rows_layout([sample[2] for _, sample in parts if sample is not None])


def stacked_rows(layouts):
    """A context lending one array for rows of these ``(rows, columns, dtype)`` layouts one after another.

    From the process's pool (:data:`~taodist.tao.row_buffers.ROW_BUFFERS`): its
    memory is not fresh each level. None (nothing lent) without layouts or
    when they differ in columns or dtype.
    """
    if not layouts or len({(d, dtype) for _, d, dtype in layouts}) > 1:
        return nullcontext(None)
    _, d, dtype = layouts[0]
    return ROW_BUFFERS.rows(sum(n for n, _, _ in layouts), d, dtype)


def needs_solve(stats):
    """Whether a node with these statistics (see :func:`~taodist.tao.chunks.chunk_node_parts`) needs a solve.

    Not when no care point has weight (nothing to gain) or all care weight
    wants one side (sending everything there is exact): the driver sets those.
    """
    w_right, w_left, n_care = stats[0], stats[1], stats[5]
    return n_care != 0 and w_left != 0 and w_right != 0


def solve_nodes_task(group, *, solver, threads=1):
    """Candidates ``{node: (kind, a, b) or None}`` for a group of decision nodes of one depth.

    ``group`` maps a node to ``(parts, job)`` (see
    :meth:`~taodist.tao.executor.Executor.run_key_groups`). Oblique nodes go
    to the solver's level-wide entry point together; axis nodes are solved
    exactly. A candidate is ``("oblique", w, b)`` or ``("axis", feature,
    threshold)`` for :func:`~taodist.tao.chunks.chunk_evaluate`. A node's
    statistics are summed from its parts here, so the driver need not wait
    for them first: a node that needs no solve (:func:`needs_solve`) gets
    None, as does one whose sample holds one pseudolabel only. ``threads``:
    how many threads the group may use (the executor's idle ones, see
    :meth:`~taodist.tao.executor.Executor.run_key_groups`).
    """
    out, oblique, solve = {}, {}, []
    for node, (parts, job) in group.items():
        stats = 0
        for part_stats, _ in parts:  # summed in chunk order, as the driver sums them
            stats = stats + part_stats
        if not needs_solve(stats):  # the driver sets such a node from its statistics
            out[node] = None
        else:
            solve.append((node, parts, job, int(stats[5])))
    # the oblique nodes' care points go straight into one array, which the level solver then
    # takes as it is rather than stacking the nodes' rows again (see _nodes._stacked_level);
    # it is lent for the solves only (the solvers' candidates are arrays of their own)
    layouts = [node_rows_layout(parts, job) for _, parts, job, _ in solve]
    with stacked_rows([lay for lay in layouts if lay is not None]) as level_rows:
        start = 0
        for (node, parts, job, n_care), layout in zip(solve, layouts):
            rows = None
            if level_rows is not None and layout is not None:
                rows, start = level_rows[start:start + layout[0]], start + layout[0]
            problem = node_problem(parts, alpha=job["alpha"], w0=job["w0"], b0=job["b0"],
                                   max_care_points=job["max_care_points"], n_care=n_care, out=rows)
            if problem is None:
                out[node] = None
            elif job["kind"] == AXIS:
                out[node] = ("axis", *NODE_SOLVERS["axis"].solve(problem.X, problem.target, problem.weight))
            else:
                oblique[node] = problem
        solutions = NODE_SOLVERS[solver].solve_level(list(oblique.values()), threads=threads)
        out.update({node: ("oblique", w, b) for node, (w, b) in zip(oblique, solutions)})
    return out


def fit_leaves_task(group, *, task, leaf_type, n_outputs, alpha, leaf_classes=None, leaf_max_iter=None,
                    leaf_warm_start="coef"):
    """New parameters ``{leaf: LeafFit, _Unchanged or None}`` for a group of leaves.

    ``leaf_classes`` limits softmax leaves to their most populous classes
    (:meth:`~taodist.model.leaves.LeafModel.limited_to`); ``leaf_max_iter`` sets
    an iterative leaf solver's iterations (:meth:`~taodist.model.leaves.LeafModel.with_max_iter`) and
    ``leaf_warm_start`` what it starts from (:meth:`~taodist.model.leaves.LeafModel.with_warm_start`).

    ``group`` maps a leaf to ``(parts, job)``, ``job`` holding its current
    ``value``, ``coef`` (``(K, D)``, dense or CSR when large; or None) and
    output ``range`` (``(2, K)`` or None), and ``skip_rows``: the digest of
    the rows at which not to fit the leaf (see :data:`REFIT_LEAVES`).
    A fit is a :class:`LeafFit` ``(value, coef, range)``, the range being
    that of the leaf's new targets
    (:meth:`~taodist.model.leaves.LeafModel.output_range`). An exact leaf model's
    fit is always returned; an approximate one only if the leaf's objective
    (weighted loss + alpha * l1, outputs clipped to the range) does not
    increase. :class:`_Unchanged`: the leaf is kept (fit refused or
    skipped); None: kept, its points have no weight. Both results with rows
    carry their digest (:func:`rows_digest`).
    """
    model = LEAF_MODELS[leaf_type].limited_to(leaf_classes).with_max_iter(leaf_max_iter).with_warm_start(leaf_warm_start)
    leaves, problems = [], []
    out, digests = {}, {}
    for leaf, (parts, job) in group.items():
        digests[leaf] = rows_digest(part[0] for part in parts)
        if job.get("skip_rows") == digests[leaf]:
            out[leaf] = _Unchanged(digests[leaf])
            continue
        _, X, y, sw = zip(*parts)
        X = None if X[0] is None else stack_part_rows(X)  # only now the rows are copied, once
        # one chunk's labels and weights (a forest tree's single chunk) are used as they are: the task's own
        y, sw = (a[0] if len(a) == 1 else stack_rows(a) for a in (y, sw))
        if not sw.any():  # only zero-weight points: the leaf's loss is constant
            out[leaf] = None
            continue
        leaves.append(leaf)
        problems.append((X, y, sw, job["value"], job["coef"]))
    fits = model.fit_level(problems, task=task, n_outputs=n_outputs, alpha=alpha)
    for leaf, (X, y, sw, old_value, old_coef), (value, coef) in zip(leaves, problems, fits):
        output_range = model.output_range(y, sw, task=task)
        if not model.exact:
            old = model.objective(X, y, sw, old_value, old_coef, task=task, alpha=alpha,
                                  output_range=group[leaf][1].get("range"))
            if model.objective(X, y, sw, value, coef, task=task, alpha=alpha, output_range=output_range) > old:
                value = None
        out[leaf] = _Unchanged(digests[leaf]) if value is None else LeafFit(value, coef, output_range, digests[leaf])
    return out


class LeafFit(tuple):
    """A leaf's new ``(value, coef, range)``, with the digest of the rows it was fitted on."""

    def __new__(cls, value, coef, output_range, rows):
        self = super().__new__(cls, (value, coef, output_range))
        self.rows = rows
        return self

    def __reduce__(self):
        return LeafFit, (*self, self.rows)


class _Unchanged:
    """A leaf kept as it is, with the digest of its rows (its fit was refused, or skipped)."""

    def __init__(self, rows):
        self.rows = rows


def rows_digest(row_arrays):
    """A digest of a leaf's global rows (its chunks' arrays, in chunk order): equal digests, equal rows."""
    h = hashlib.blake2b(digest_size=16)
    for rows in row_arrays:
        h.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
    return h.hexdigest()


#: When a leaf is refitted (``refit_leaves``). "always": at every iteration, as the thesis
#: describes TAO. "until_refused": a leaf whose last fit was refused is skipped while its rows
#: stay the same -- a new fit would start from the same point on the same problem and be refused
#: again, so the tree is the same as with "always" (tested), with fewer fits. "new_rows": a leaf
#: is refitted only when its rows differ from those of its last fit, accepted or refused. Constant
#: leaves give the same tree under all three (Lasso leaves: up to their solver's tolerance; the
#: same cpu_act forest, README); a softmax leaf's fit is
#: a few warm-started SAGA epochs, so "new_rows" stops refining a leaf whose reduced set has
#: settled (an early stop). Single trees: MNIST, depth 6, C=30, 15 iterations, 54,000 rows, seeds
#: 0 / 1: "always" 69.9 / 48.0 s, "until_refused" 46.4 / 30.3 s (the same trees), "new_rows" 26.2 /
#: 26.4 s with higher objectives (1103 / 1029 against 952 / 929) and validation errors 7.12 / 6.93%
#: against 7.47 / 7.30%, but on letter (depth 6, seeds 0-2) 15.69 / 12.25 / 13.53% against 14.44 /
#: 12.22 / 13.59%: mixed, so trees keep "until_refused". Forests take "new_rows" (see
#: ``taodist.estimators.forest``): there it measured 1.5x faster at the same validation error (README, Benchmarks).
REFIT_LEAVES = ("always", "until_refused", "new_rows")


def merge_candidates(groups):
    """``{node: candidate}`` from the result dicts of :func:`solve_nodes_task` groups, sorted, Nones dropped."""
    merged = {node: cand for group in groups for node, cand in group.items() if cand is not None}
    return {node: merged[node] for node in sorted(merged)}


def evaluate_groups(chunk, routing, depth, groups):
    """:func:`~taodist.tao.chunks.chunk_evaluate` of the candidates of :func:`solve_nodes_task` ``groups``.

    A task on the chunk that takes the groups' results where they were made:
    the candidates need not visit the driver before they are evaluated.
    """
    candidates = merge_candidates(groups)
    return chunk_evaluate(chunk, routing, depth, candidates) if candidates else {}


def clear_boundary(max_abs, min_pos, max_neg):
    """Bias shift keeping every care point clear of a new hyperplane.

    A care point with margin ~1e-17 could be routed differently by two
    correct summation orders (the accept test, the batched router, a user's
    own dot product). When one lies that close, move the hyperplane to the
    middle of the gap between the two sides; no decision changes.
    """
    tol = 1e-9 * (1.0 + max_abs)
    if min_pos > tol and max_neg < -tol:
        return 0.0
    if not np.isfinite(max_neg):  # every care point on the right
        return 2 * tol - min_pos
    if not np.isfinite(min_pos):
        return -2 * tol - max_neg
    return -(min_pos + max_neg) / 2


# ----------------------------------------------------------------- driver
class _Driver:
    def __init__(self, tree, chunks, executor, *, alpha, node_solver, max_care_points, seed, leaf_alpha=None,
                 leaf_max_iter=None, refit_leaves="until_refused", leaf_warm_start="coef"):
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
        stats = {}
        for part in self.ex.map_chunks(chunk_boundaries, self.chunks, self.routing()):
            for node, (max_abs, min_pos, max_neg) in part.items():
                a = stats.get(node, (0.0, np.inf, -np.inf))
                stats[node] = (max(a[0], max_abs), min(a[1], min_pos), max(a[2], max_neg))
        t = self.tree
        updates = {}
        for node, st in stats.items():
            shift = clear_boundary(*st)
            if shift:
                updates[node] = (OBLIQUE, t.weights[node].toarray().ravel(), t.bias[node] + shift)
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
        jobs = {int(leaf): dict(value=t.value[leaf], coef=leaf_coef_rows(t, leaf) if model.has_coef else None,
                                range=None if t.leaf_range is None else t.leaf_range[leaf],
                                skip_rows=self._skip_rows(int(leaf)))
                for leaf in np.flatnonzero(t.is_leaf & (t.node_depth == d))}
        results = self.ex.run_key_groups(fit_leaves_task, parts, None, jobs, task=t.task, leaf_type=t.leaf_type,
                                         n_outputs=t.n_outputs, alpha=self.leaf_alpha, leaf_classes=t.leaf_classes,
                                         leaf_max_iter=self.leaf_max_iter, leaf_warm_start=self.leaf_warm_start)
        for leaf, result in results.items():
            if result is not None:
                self.leaf_rows[leaf] = (result.rows, isinstance(result, _Unchanged))
        accepted = {leaf: results[leaf] for leaf in sorted(results) if isinstance(results[leaf], LeafFit)}
        for leaf, (value, _, _) in accepted.items():
            t.value[leaf] = value
        if model.has_coef and accepted:
            t.set_leaf_coef(list(accepted), [coef for _, coef, _ in accepted.values()])
        ranged = [leaf for leaf, (_, _, output_range) in accepted.items() if output_range is not None]
        t.set_leaf_range(ranged, [accepted[leaf][2] for leaf in ranged])
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
        the nodes that need it (see :func:`solve_nodes_task`), the chunks
        evaluate the candidates where they are, and the driver then collects
        the statistics, candidates and evaluations together. On a cluster a
        wait for the statistics before the solves cost a scheduler round trip
        per level (Dask / in-process 1.56 -> 1.43 on 60,000 MNIST rows,
        ``bench/bench_dask_overhead.py``); the decisions are the same.
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
            w0, b0 = start if start is not None else (t.weights[node].toarray().ravel(), t.bias[node])
            # n_care: last iteration's count, only to balance the groups (the solve counts its own)
            jobs[node] = dict(kind=t.kind[node], alpha=self.alpha, w0=w0, b0=b0,
                              max_care_points=self.max_care_points, n_care=self.care_counts.get(node, 1))
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
            self.care_counts[node] = int(stats[node][5])
            if needs_solve(stats[node]):
                continue
            w_right, w_left, _, sw_right, sw_left, n_care = stats[node]
            if n_care == 0:  # nobody cares: w = 0, everything to the current majority side
                updates[node] = self._constant_side(node, sw_right >= sw_left)
            else:  # exact optimum: zero loss, zero penalty
                updates[node] = self._constant_side(node, w_left == 0)
        candidates = merge_candidates(groups)
        for node, cand in candidates.items():
            if cand[0] == "oblique":
                self.last_iterate[node] = (cand[1], cand[2])
        updates.update(self._accepted(candidates, evaluations, stats))
        self.apply_updates(updates)

    def _accepted(self, candidates, evaluations, stats):
        """Candidates that do not increase their node's objective (evaluated on all care points).

        ``evaluations`` are the chunks' :func:`evaluate_groups`, in chunk order.
        """
        if not candidates:
            return {}
        evals = {}
        for part in evaluations:
            for node, e in part.items():
                if node in evals:
                    a = evals[node]
                    evals[node] = np.array([a[0] + e[0], max(a[1], e[1]), min(a[2], e[2]), max(a[3], e[3])])
                else:
                    evals[node] = e
        accepted = {}
        for node, (kind, a, b) in candidates.items():
            new_loss, max_abs, min_pos, max_neg = evals[node]
            old_obj = stats[node][2] + self.alpha * self._node_penalty(node)
            if kind == "axis":
                if new_loss <= old_obj:
                    accepted[node] = (AXIS, a, b)
            elif new_loss + self.alpha * np.abs(a).sum() <= old_obj:
                accepted[node] = (OBLIQUE, a, b + clear_boundary(max_abs, min_pos, max_neg))
        return accepted

    def _node_penalty(self, node):
        t = self.tree
        if t.kind[node] != OBLIQUE:
            return 0.0
        return np.abs(t.weights.data[t.weights.indptr[node]:t.weights.indptr[node + 1]]).sum()

    def _constant_side(self, node, go_right):
        """A node that sends every point one way, with no weights."""
        if self.tree.kind[node] == AXIS:
            return (AXIS, 0, -np.inf if go_right else np.inf)
        return (OBLIQUE, np.zeros(self.tree.n_features), 1.0 if go_right else -1.0)

    def _unchanged(self, node, update):
        """Whether ``update`` is a constant-side node the tree already has (nothing to redo)."""
        t = self.tree
        if update[0] == AXIS:
            return t.feature[node] == update[1] and t.threshold[node] == update[2]
        return not np.any(update[1]) and self._node_penalty(node) == 0 and t.bias[node] == update[2]

    def apply_updates(self, updates):
        updates = {k: v for k, v in updates.items() if not self._unchanged(k, v)}
        if not updates:
            return
        t = self.tree
        obl = sorted(k for k, v in updates.items() if v[0] == OBLIQUE)
        if obl:
            t.set_decision(obl, np.stack([updates[k][1] for k in obl]), [updates[k][2] for k in obl])
        for k, v in updates.items():
            if v[0] == AXIS:
                t.feature[k], t.threshold[k] = v[1], v[2]
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
        Called as ``callback(iteration, objective)`` after each iteration.
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
                         leaf_max_iter=leaf_max_iter, refit_leaves=refit_leaves, leaf_warm_start=leaf_warm_start)
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
        if callback is not None:
            callback(it, cur)
        report("tao_iteration", iteration=it, max_iter=max_iter, objective=cur, seconds=result.seconds[-1])
        if prev - cur <= tol * abs(prev):
            result.converged = True
            break
    return result
