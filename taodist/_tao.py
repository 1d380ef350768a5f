"""Tree Alternating Optimisation (TAO) of a tree of fixed structure.

Carreira-Perpinan & Tavallali (NeurIPS 2018, section 3); Zharmagambetov
(thesis 2022, section 2.1, Algorithm 1). Minimises::

    E(tree) = sum_n s_n L(y_n, T(x_n)) + alpha * (sum_i ||w_i||_1 + sum_leaves ||W_j||_1)

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

The rows live in chunks (:mod:`taodist._chunks`); an *executor* runs the
chunk functions where the chunks are (threads here, Dask workers in
:mod:`taodist.dask`) and runs the node and leaf fits as independent tasks.
The driver below only sees small reductions: per-node statistics, candidate
parameters and their losses. Bottom-up order means a level's reduced sets
depend only on nodes above it, not yet updated in this sweep.
"""

import functools
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ._chunks import (
    Routing,
    chunk_boundaries,
    chunk_evaluate,
    chunk_leaf_rows,
    chunk_loss,
    chunk_node_parts,
    chunk_node_priorities,
    chunk_update,
    make_chunk,
    merge_priorities,
    node_stats,
    priority_thresholds,
)
from ._leaves import LEAF_MODELS, pointwise_loss
from ._nodes import FLOAT32_SOLVERS, NODE_SOLVERS
from ._progress import report
from ._tree import AXIS, OBLIQUE

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
def solve_node_task(parts, kind, *, solver, alpha, w0, b0, max_care_points, n_care):
    """Fit one decision node on its care points gathered from the chunks.

    ``parts`` are the chunks' ``(stats, sample)`` for this node (see
    :func:`~taodist._chunks.chunk_node_parts`). With a cap, the
    ``max_care_points`` lowest priorities are kept and the penalty scaled by
    ``max_care_points / n_care`` (the loss/penalty balance of all care
    points). Returns a candidate ``(kind, a, b)`` for :func:`chunk_evaluate`,
    or None when the sample holds one pseudolabel only.
    """
    samples = [sample for _, sample in parts if sample is not None]
    prio, rows, X, target, weight = (np.concatenate(a) for a in zip(*samples))
    if max_care_points is not None and rows.size > max_care_points:
        keep = np.argpartition(prio, max_care_points - 1)[:max_care_points]
        keep = keep[np.argsort(rows[keep])]  # global row order: chunking-independent input
        X, target, weight = X[keep], target[keep], weight[keep]
    if target.size < n_care:
        # A sample stands for all n_care points. Scale the penalty down rather
        # than the weights up (the same minimiser): SAGA's step size ignores
        # sample weights, and weights of n_care / k >> 1 made its steps too
        # long (measured: a 2% sample gave 20% training error instead of 6%).
        alpha = alpha * target.size / n_care
    if target.all() or not target.any():  # the sample saw one side only: keep the node
        return None
    if kind == AXIS:
        f, thr = NODE_SOLVERS["axis"](X, target, weight, alpha=alpha)
        return ("axis", f, thr)
    w, b = NODE_SOLVERS[solver](X, target, weight, alpha=alpha, w0=w0, b0=b0)
    return ("oblique", w, b)


def fit_leaf_task(parts, *, task, leaf_type, n_outputs, alpha, value, coef):
    """Fit one leaf on its reduced set; ``None`` if a linear fit is rejected.

    ``value``/``coef`` are the leaf's current parameters (``coef`` dense
    ``(K, D)`` for linear leaves). Constant leaves are exact and always
    returned; a linear leaf is returned only if its objective (weighted loss
    + alpha * l1) does not increase.
    """
    _, X, y, sw = (None if a[0] is None else np.concatenate(a) for a in zip(*parts))
    if not sw.any():  # only zero-weight points: the leaf's loss is constant
        return None
    new_value, new_coef = LEAF_MODELS[leaf_type](X, y, sw, task=task, n_outputs=n_outputs, alpha=alpha)
    if leaf_type != "linear":
        return new_value, None
    old_obj = sw @ pointwise_loss(task, value + X @ coef.T, y) + alpha * np.abs(coef).sum()
    new_obj = sw @ pointwise_loss(task, new_value + X @ new_coef.T, y) + alpha * np.abs(new_coef).sum()
    return (new_value, new_coef) if new_obj <= old_obj else None


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


# -------------------------------------------------------------- executors
class LocalExecutor:
    """Runs chunk functions and node tasks in this process, on threads.

    Chunks are plain :class:`~taodist._chunks.Chunk` objects. The node and
    leaf solvers release the GIL, so the independent nodes of one depth
    solve in parallel.
    """

    def __init__(self, n_threads=1):
        self.n_threads = n_threads
        self._pool = ThreadPoolExecutor(max_workers=n_threads) if n_threads > 1 else None

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()

    def map(self, fn, items):
        return list(self._pool.map(fn, items) if self._pool is not None and len(items) > 1 else map(fn, items))

    def make_chunks(self, blocks, routing, scale, solve_float32):
        return [make_chunk(X, y, sw, off, routing, scale, solve_float32) for X, y, sw, off in blocks]

    def map_chunks(self, fn, chunks, *args):
        """``fn(chunk, *args)`` for every chunk; the (small) results."""
        return self.map(lambda c: fn(c, *args), chunks)

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        """``combine(a, b, **kwargs)`` over ``fn(chunk, *args)`` of every chunk, in chunk order."""
        return functools.reduce(lambda a, b: combine(a, b, **kwargs), self.map_chunks(fn, chunks, *args))

    def update_chunks(self, fn, chunks, *args):
        """New chunk handles ``fn(chunk, *args)`` (updated in place here)."""
        return self.map(lambda c: fn(c, *args, inplace=True), chunks)

    def scatter_parts(self, fn, chunks, *args, summary=None):
        """Keyed parts ``fn(chunk, *args) -> {key: part}`` left where they are made.

        Returns the part handles, per chunk its keys, and per chunk
        ``summary(part)`` (None without ``summary``): one round trip for all.
        """
        parts = self.map_chunks(fn, chunks, *args)
        return parts, [list(p) for p in parts], [summary(p) if summary else None for p in parts]

    def run_keyed_tasks(self, fn, parts, keys, jobs):
        """``fn([part[key] of every chunk that has key], **jobs[key])`` for each key."""
        order = list(jobs)
        results = self.map(lambda k: fn([p[k] for p in parts if k in p], **jobs[k]), order)
        return dict(zip(order, results))


# ----------------------------------------------------------------- driver
class _Driver:
    def __init__(self, tree, chunks, executor, *, alpha, node_solver, leaf_model, max_care_points, seed):
        self.tree, self.chunks, self.ex = tree, chunks, executor
        self.alpha, self.solver, self.leaf_model = alpha, node_solver, leaf_model
        self.max_care_points, self.seed, self.iteration = max_care_points, seed, 0
        self.last_iterate = {}  # node -> the solver's last (w, b), accepted or not

    def routing(self):
        return Routing.of(self.tree.copy())  # a snapshot: tasks may run after the driver moves on

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
        total = np.abs(t.weights.data).sum()
        if t.leaf_coef is not None:
            total += np.abs(t.leaf_coef.data).sum()
        return self.alpha * total

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
        t = self.tree
        linear = t.leaf_type == "linear"
        parts, keys, _ = self.ex.scatter_parts(chunk_leaf_rows, self.chunks, self.routing(), d, linear)
        K = t.n_outputs
        jobs = {
            leaf: dict(task=t.task, leaf_type=t.leaf_type, n_outputs=K, alpha=self.alpha, value=t.value[leaf],
                       coef=t.leaf_coef[leaf * K:(leaf + 1) * K].toarray() if linear else None)
            for leaf in sorted(set().union(*keys))
        }
        results = self.ex.run_keyed_tasks(fit_leaf_task, parts, keys, jobs)
        accepted = {leaf: r for leaf, r in results.items() if r is not None}
        for leaf, (value, _) in accepted.items():
            t.value[leaf] = value
        if linear and accepted:
            t.set_leaf_coef(list(accepted), [coef for _, coef in accepted.values()])

    def decision_step(self, d, level):
        """Solve the reduced problem of every decision node of one depth."""
        t = self.tree
        routing = self.routing()
        args = (routing, d, self.max_care_points, self.seed, self.iteration)
        if self.max_care_points is None:
            parts, keys, first = self.ex.scatter_parts(chunk_node_parts, self.chunks, *args, summary=node_stats)
        else:
            # Two passes keep the samples' memory bounded by k rows per node:
            # the first finds each node's k-th lowest priority overall, the
            # second keeps only the care points at or below it -- the same
            # sample as one pass where every chunk proposes its k lowest.
            first, lowest = self.ex.reduce_chunks(chunk_node_priorities, merge_priorities, self.chunks, *args,
                                                  k=self.max_care_points)
            thresholds = priority_thresholds(lowest, self.max_care_points)
            parts, keys, _ = self.ex.scatter_parts(chunk_node_parts, self.chunks, *args, thresholds)
        stats = {}
        for part in first:
            for node, s in part.items():
                stats[node] = stats.get(node, 0) + s
        updates, jobs = {}, {}
        for node in level:
            node = int(node)
            if node not in stats:  # empty node: its loss is constant, w = 0 is optimal
                updates[node] = self._constant_side(node, t.bias[node] >= 0)
                continue
            w_right, w_left, _, sw_right, sw_left, n_care = stats[node]
            if n_care == 0:  # nobody cares: w = 0, everything to the current majority side
                updates[node] = self._constant_side(node, sw_right >= sw_left)
            elif w_left == 0 or w_right == 0:  # exact optimum: zero loss, zero penalty
                updates[node] = self._constant_side(node, w_left == 0)
            else:
                w0, b0 = self.last_iterate.get(node, (t.weights[node].toarray().ravel(), t.bias[node]))
                jobs[node] = dict(kind=t.kind[node], solver=self.solver, alpha=self.alpha, w0=w0, b0=b0,
                                  max_care_points=self.max_care_points, n_care=int(n_care))
        candidates = self.ex.run_keyed_tasks(solve_node_task, parts, keys, jobs)
        candidates = {node: c for node, c in candidates.items() if c is not None}
        for node, cand in candidates.items():
            if cand[0] == "oblique":
                self.last_iterate[node] = (cand[1], cand[2])
        updates.update(self._accepted(d, routing, candidates, stats))
        self.apply_updates(updates)

    def _accepted(self, d, routing, candidates, stats):
        """Candidates that do not increase their node's objective (evaluated on all care points)."""
        if not candidates:
            return {}
        evals = {}
        for part in self.ex.map_chunks(chunk_evaluate, self.chunks, routing, d, candidates):
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
        nodes = np.array(sorted(updates), dtype=np.intp)
        self.chunks = self.ex.update_chunks(chunk_update, self.chunks, self.routing(), nodes)


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
    leaf_model,
    callback=None,
    n_threads=1,
    max_care_points=None,
    seed=0,
    executor=None,
    scale=None,
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
    node_solver, leaf_model : str
        Keys of :data:`~taodist._nodes.NODE_SOLVERS` ("saga", "liblinear",
        "axis") and :data:`~taodist._leaves.LEAF_MODELS`.
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
    executor : LocalExecutor or taodist.dask executor, optional
    scale : ndarray, optional
        Per-feature divisor applied to X inside the chunks (default 1).

    Returns
    -------
    TAOResult
    """
    own = executor is None
    executor = LocalExecutor(n_threads) if own else executor
    try:
        blocks = X if isinstance(X, list) else [(X, y, sample_weight, 0)]
        scale = np.ones(tree.n_features) if scale is None else scale
        chunks = executor.make_chunks(blocks, Routing.of(tree), scale, node_solver in FLOAT32_SOLVERS)
        driver = _Driver(tree, chunks, executor, alpha=alpha, node_solver=node_solver, leaf_model=leaf_model,
                         max_care_points=max_care_points, seed=seed)
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
