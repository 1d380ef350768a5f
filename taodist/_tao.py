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

Routing uses a margin matrix ``M`` (rows x decision nodes): a level's update
recomputes only that level's columns. Bottom-up order means a level's reduced
sets depend only on nodes above it, which are not yet updated in this sweep,
so the paths computed at the start of an iteration stay valid all through it.
"""

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from ._leaves import LEAF_MODELS, pointwise_loss
from ._nodes import FLOAT32_SOLVERS, NODE_SOLVERS
from ._tree import AXIS, OBLIQUE

logger = logging.getLogger(__name__)


@dataclass
class TAOResult:
    """What :func:`tao_optimize` returns besides the tree."""

    objective: list = field(default_factory=list)  # E before iteration 1, then after each
    n_iter: int = 0
    converged: bool = False
    seconds: list = field(default_factory=list)


class _Sweep:
    """State of one TAO run on in-memory data (rows of X, targets, weights)."""

    def __init__(self, tree, X, y, sample_weight, *, alpha, node_solver, leaf_model, map_fn=map,
                 max_care_points=None, seed=0):
        self.tree, self.X, self.y, self.sw = tree, X, y, sample_weight
        self.map = map_fn
        self.max_care_points, self.seed, self.iteration = max_care_points, seed, 0
        self.alpha = alpha
        self.node_solver = NODE_SOLVERS[node_solver]
        self.last_iterate = {}  # node -> the solver's last (w, b), accepted or not
        self.fit_leaf = LEAF_MODELS[leaf_model]
        self.internal = np.flatnonzero(~tree.is_leaf)
        self.column_of = np.full(tree.n_nodes, -1, dtype=np.intp)
        self.column_of[self.internal] = np.arange(self.internal.size)
        self.margins = tree.decision_margins(X, self.internal)
        # the solver may run on a float32 copy (half the memory traffic);
        # routing and accept tests always use X itself
        self.X_solve = X.astype(np.float32) if node_solver in FLOAT32_SOLVERS else X

    # ----------------------------------------------------------- evaluation
    def losses(self, rows, leaves):
        out = self.tree.leaf_output(self.X, leaves, rows)
        return pointwise_loss(self.tree.task, out, self.y[rows])

    def penalty(self):
        t = self.tree
        total = np.abs(t.weights.data).sum()
        if t.leaf_coef is not None:
            total += np.abs(t.leaf_coef.data).sum()
        return self.alpha * total

    def objective(self):
        n = self.X.shape[0]
        leaves = self.tree.descend(self.margins, np.zeros(n, np.intp), self.column_of)
        return float(self.sw @ self.losses(np.arange(n), leaves) + self.penalty())

    def paths(self):
        """``reach[d, n]``: node of depth ``d`` that row ``n`` visits, or -1."""
        t, n = self.tree, self.X.shape[0]
        reach = np.full((t.max_depth + 1, n), -1, dtype=np.intp)
        node = np.zeros(n, dtype=np.intp)
        reach[0] = 0
        active = np.arange(n)
        for d in range(1, t.max_depth + 1):
            active = active[~t.is_leaf[node[active]]]
            nd = node[active]
            right = self.margins[active, self.column_of[nd]] >= 0
            node[active] = np.where(right, t.children_right[nd], t.children_left[nd])
            reach[d, active] = node[active]
        return reach

    # ------------------------------------------------------------ the sweep
    def iterate(self):
        self.iteration += 1
        reach = self.paths()
        depth = self.tree.node_depth
        for d in range(self.tree.max_depth, -1, -1):
            rows = np.flatnonzero(reach[d] >= 0)
            nodes = reach[d, rows]
            at_leaf = self.tree.is_leaf[nodes]
            self.leaf_step(rows[at_leaf], nodes[at_leaf])
            level_nodes = np.flatnonzero((depth == d) & ~self.tree.is_leaf)
            self.decision_step(rows[~at_leaf], nodes[~at_leaf], level_nodes)

    def leaf_step(self, rows, nodes):
        t = self.tree
        linear = t.leaf_type == "linear"
        new_leaves, new_coefs = [], []
        for leaf, g in _groups(nodes, rows):
            if not self.sw[g].any():  # only zero-weight points: the leaf's loss is constant
                continue
            Xg = self.X[g] if linear else None
            value, coef = self.fit_leaf(Xg, self.y[g], self.sw[g], task=t.task, n_outputs=t.n_outputs, alpha=self.alpha)
            if not linear:  # exact solution: always accepted
                t.value[leaf] = value
                continue
            K = t.n_outputs
            old_coef = t.leaf_coef[leaf * K : (leaf + 1) * K]
            old_obj = self.sw[g] @ self.losses(g, np.full(g.size, leaf)) + self.alpha * np.abs(old_coef.data).sum()
            new_out = value + Xg @ coef.T
            new_obj = self.sw[g] @ pointwise_loss(t.task, new_out, self.y[g]) + self.alpha * np.abs(coef).sum()
            if new_obj <= old_obj:
                t.value[leaf] = value
                new_leaves.append(leaf)
                new_coefs.append(coef)
        if new_leaves:
            t.set_leaf_coef(new_leaves, new_coefs)

    def decision_step(self, rows, nodes, level_nodes):
        """Solve the reduced problem of every decision node of one depth."""
        t = self.tree
        left = t.descend(self.margins, t.children_left[nodes], self.column_of, rows)
        right = t.descend(self.margins, t.children_right[nodes], self.column_of, rows)
        gain = self.losses(rows, left) - self.losses(rows, right)  # > 0: right is better
        weight = self.sw[rows] * np.abs(gain)
        target = gain > 0
        groups = list(_groups(nodes, np.arange(rows.size)))
        # nodes of one depth are independent (separability): solve them in
        # parallel; the solvers release the GIL. Results are keyed by node,
        # so the outcome does not depend on scheduling.
        solved = self.map(lambda g: self.solve_node(g[0], rows[g[1]], target[g[1]], weight[g[1]]), groups)
        updates = {node: result for (node, _), result in zip(groups, solved)}
        seen = set(updates)
        for node in level_nodes:
            if node not in seen:  # empty node: its loss is constant, w = 0 is optimal
                updates[node] = self._constant_side(node, self.tree.bias[node] >= 0)
        self.apply_updates({k: v for k, v in updates.items() if v is not None})

    def solve_node(self, node, rows, target, weight):
        """Parameters for one node, or None to keep the current ones."""
        care = weight > 0
        if not care.any():
            current = self.margins[rows, self.column_of[node]] >= 0
            return self._constant_side(node, self.sw[rows] @ current >= self.sw[rows] @ ~current)
        rows, target, weight = rows[care], target[care], weight[care]
        if target.all() or not target.any():  # exact optimum: zero loss, zero penalty
            return self._constant_side(node, bool(target[0]))
        old_right = self.margins[rows, self.column_of[node]] >= 0
        old_obj = weight @ (old_right != target) + self.alpha * self._node_penalty(node)
        if self.tree.kind[node] == AXIS:
            Xc = self.X[rows]
            f, thr = self.node_solver(Xc, target, weight, alpha=self.alpha)  # exact: no warm start
            new_right = Xc[:, f] >= thr
            return (AXIS, f, thr) if weight @ (new_right != target) <= old_obj else None
        # warm start from the solver's own last iterate for this node, even if
        # that iterate was rejected: a few epochs at a time can then make
        # progress that takes several iterations to lower the 0/1 objective
        w0, b0 = self.last_iterate.get(node, (self.tree.weights[node].toarray().ravel(), self.tree.bias[node]))
        sub = self._solver_sample(node, rows.size)
        w, b = self.node_solver(self.X_solve[rows[sub]], target[sub], weight[sub] * (rows.size / sub.size),
                                alpha=self.alpha, w0=w0, b0=b0)
        self.last_iterate[node] = (w, b)
        nz = np.flatnonzero(w)  # sparse w: gather only the columns it uses
        margins = self.X[np.ix_(rows, nz)] @ w[nz] + b
        shift = _clear_boundary(margins)
        new_obj = weight @ ((margins + shift >= 0) != target) + self.alpha * np.abs(w).sum()
        return (OBLIQUE, w, b + shift) if new_obj <= old_obj else None

    def _solver_sample(self, node, n):
        """Indices of the care points the surrogate solver sees.

        All of them, or a uniform sample of ``max_care_points`` (seeded by
        the run, the iteration and the node) whose weights the caller scales
        by ``n / max_care_points`` so the loss-to-penalty balance is kept.
        The accept test always uses every care point, so the objective stays
        monotone whatever the sample.
        """
        if self.max_care_points is None or n <= self.max_care_points:
            return np.arange(n)
        rng = np.random.default_rng([self.seed, self.iteration, node])
        return np.sort(rng.choice(n, self.max_care_points, replace=False))

    def _node_penalty(self, node):
        t = self.tree
        if t.kind[node] != OBLIQUE:
            return 0.0
        return np.abs(t.weights.data[t.weights.indptr[node] : t.weights.indptr[node + 1]]).sum()

    def _constant_side(self, node, go_right):
        """A node that sends every point one way, with no weights."""
        if self.tree.kind[node] == AXIS:
            return (AXIS, 0, -np.inf if go_right else np.inf)
        return (OBLIQUE, np.zeros(self.tree.n_features), 1.0 if go_right else -1.0)

    def apply_updates(self, updates):
        if not updates:
            return
        t = self.tree
        obl = [k for k, v in updates.items() if v[0] == OBLIQUE]
        if obl:
            t.set_decision(obl, np.stack([updates[k][1] for k in obl]), [updates[k][2] for k in obl])
        for k, v in updates.items():
            if v[0] == AXIS:
                t.feature[k], t.threshold[k] = v[1], v[2]
        nodes = np.fromiter(updates, dtype=np.intp)
        self.margins[:, self.column_of[nodes]] = t.decision_margins(self.X, nodes)


def _clear_boundary(margins):
    """Bias shift keeping every care point clear of the hyperplane.

    A point with margin ~1e-17 could be routed differently by two correct
    summation orders (this accept test, the batched router, a user's own
    dot product). When a care point lies that close, move the hyperplane to
    the middle of the gap between the two sides; decisions do not change.
    """
    tol = 1e-9 * (1.0 + np.abs(margins).max())
    if not np.any(np.abs(margins) <= tol):
        return 0.0
    right = margins >= 0
    if right.all():
        return 2 * tol - margins.min()
    if not right.any():
        return -2 * tol - margins.max()
    return -(margins[right].min() + margins[~right].max()) / 2


def _groups(keys, values):
    """Yield ``(key, values with that key)`` for the distinct keys."""
    if keys.size == 0:
        return
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    bounds = np.flatnonzero(np.diff(sk)) + 1
    for start, idx in zip(np.r_[0, bounds], np.split(values[order], bounds)):
        yield int(sk[start]), idx


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
):
    """Run TAO on ``tree`` in place until ``tol`` or ``max_iter``.

    Parameters
    ----------
    tree : Tree
        Initial tree (modified in place); its structure is kept.
    X : ndarray of shape (n_samples, n_features)
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
        Threads solving the decision nodes of one depth concurrently.
    max_care_points : int or None, default=None
        Cap on the care points an oblique surrogate solve sees (a seeded
        uniform sample); the accept test still uses all of them.
    seed : int, default=0
        Seeds that sampling.

    Returns
    -------
    TAOResult
    """
    with ThreadPoolExecutor(max_workers=n_threads) as pool:
        sweep = _Sweep(tree, X, y, sample_weight, alpha=alpha, node_solver=node_solver, leaf_model=leaf_model,
                       map_fn=pool.map if n_threads > 1 else map, max_care_points=max_care_points, seed=seed)
        return _run(sweep, max_iter, tol, callback)


def _run(sweep, max_iter, tol, callback):
    result = TAOResult(objective=[sweep.objective()])
    for it in range(1, max_iter + 1):
        start = time.perf_counter()
        sweep.iterate()
        result.objective.append(sweep.objective())
        result.seconds.append(time.perf_counter() - start)
        result.n_iter = it
        prev, cur = result.objective[-2], result.objective[-1]
        logger.info("TAO iteration %d: objective %.6g (%.2fs)", it, cur, result.seconds[-1])
        if callback is not None:
            callback(it, cur)
        if prev - cur <= tol * abs(prev):
            result.converged = True
            break
    return result
