"""LapTAO estimators: semi-supervised sparse oblique trees.

Zharmagambetov & Carreira-Perpinan, "Semi-supervised learning with decision
trees: Graph Laplacian Tree Alternating Optimization", NeurIPS 2022
(section 3, Appendix A). The problem::

    min_T  sum_labelled ||y_n - T(x_n)||^2 + alpha phi(T) + gamma sum_nm w_nm ||T(x_n) - T(x_m)||^2

is split with auxiliary labels ``z = T(X)`` and solved by an augmented
Lagrangian, alternating

* label step: ``(J + mu I + gamma L) z = J y + mu t + lambda / 2`` (sparse SPD);
* tree step: TAO regression to ``z - lambda / (2 mu)`` with penalty ``alpha / mu``,
  warm-started from the current tree;
* multipliers: ``lambda <- lambda - mu (z - t)``;

for ``mu = mu0 * mu_factor**k``, then fitting the leaves exactly (post-processing).
Classification uses one-hot targets (K columns) as in the paper.
"""

import logging
import numbers
import time

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context, is_classifier
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    check_consistent_length,
    check_is_fitted,
    check_random_state,
    column_or_1d,
    validate_data,
)

from ..estimators.base import MAX_CARE_POINTS_CONSTRAINT
from ..estimators.execution import ResidentRows, cluster_fit, max_abs_scale
from ..model.prune import prune_with_counts
from ..tao.initial_trees import random_tree
from ..tao.node_solvers import NODE_SOLVERS, OBLIQUE_SOLVERS
from ..utils.progress import report
from ..utils.rows import ACCEPT_SPARSE, as_rows, divide_columns, has_sparse_chunks
from ..utils.solver_warnings import silence_inner_solvers
from ..utils.validation import check_dask_X, is_dask_collection
from ._distributed_affinities import WorkersGraph, workers_graph
from ._distributed_graph import knn_graph
from ._graph import affinity_graph, bandwidth_order, graph_laplacian
from ._label_step import LabelStepRows, laplacian_cg, ridge, solve_label_step

logger = logging.getLogger(__name__)

#: times a cluster fit whose label state lives on the workers starts its outer steps again after a lost worker
MAX_FIT_RESTARTS = 4

#: init="graph_labels": the first tree is fitted to the graph's classes as TAOClassifier's defaults fit labels
GRAPH_LABELS_C, GRAPH_LABELS_MAX_ITER, GRAPH_LABELS_TOL = 30.0, 15, 5e-3


def leaf_membership(tree, X):
    """Sparse ``B`` (N x n_leaves) with B[n, j] = 1 iff row n reaches leaf j; and the leaf ids.

    ``X``: rows, or a :class:`~taodist.estimators.execution.ResidentRows` (the leaves found where its rows are).
    """
    leaves = X.apply(tree) if isinstance(X, ResidentRows) else tree.apply(X)
    ids, col = np.unique(leaves, return_inverse=True)
    B = sp.csr_matrix((np.ones(len(leaves)), (np.arange(len(leaves)), col)), shape=(len(leaves), ids.size))
    return B, ids


def exact_leaves(B, labelled, Y, L, gamma):
    """Leaf values ``c`` solving ``(B'JB + gamma B'LB) c = B'J Y`` (eq. 10).

    Solved by least squares, so a leaf with no labelled point and no graph
    link to one (a singular row) gets the minimum-norm value 0.
    """
    BJ = B.T.multiply(labelled.astype(np.float64)[None, :]).tocsr()
    A = (BJ @ B + gamma * (B.T @ (L @ B))).toarray()
    rhs = BJ @ Y
    return np.linalg.lstsq(A, rhs, rcond=None)[0]


def _graph_rows_on_workers(X_in, client):
    """The caller's rows when their kNN graph can be built on the workers, else None.

    That is a dense 2D Dask array with known, non-empty row chunks, fitted
    with a client (checked in that order: a fit without a client never
    imports Dask here). Column chunks are joined (the graph's blocks are
    rows).
    """
    if client is None or not is_dask_collection(X_in) or getattr(X_in, "ndim", 0) != 2 or has_sparse_chunks(X_in):
        return None
    if not hasattr(X_in, "chunks") or any(np.isnan(c) or c == 0 for c in X_in.chunks[0]):
        return None
    return X_in.rechunk({1: -1})


def _is_private_copy(X, X_in):
    """Whether validation surely copied the caller's data (so X may be modified).

    Only arrays and Python sequences are judged; anything else (a DataFrame's
    blocks, say) may share memory with X, so it is treated as shared.
    """
    if isinstance(X_in, np.ndarray):
        return not np.shares_memory(X, X_in)
    return isinstance(X_in, (list, tuple))


class _GraphOrder:
    """The label step's row order: the data's, or reverse Cuthill-McKee (see ``bandwidth_order``)."""

    def __init__(self, L, labelled, Y, *, reorder):
        self.order = self.inverse = None
        if reorder:
            self.order, self.inverse = bandwidth_order(L)
            L = sp.csr_matrix(L)[self.order][:, self.order].tocsr()
        self.L, self.labelled, self.Y = L, self.to_graph(labelled), self.to_graph(Y)

    def to_graph(self, A):
        return A if self.order is None else A[self.order]

    def from_graph(self, A):
        return A if self.inverse is None else A[self.inverse]


class _BaseLapTAO(BaseEstimator):
    _parameter_constraints = {
        "max_depth": [Interval(numbers.Integral, 1, 20, closed="both")],
        "node_type": [StrOptions({"oblique", "axis"})],
        "solver": [StrOptions(OBLIQUE_SOLVERS)],
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "gamma": [Interval(numbers.Real, 0, None, closed="left")],
        "n_neighbors": [Interval(numbers.Integral, 1, None, closed="left")],
        "perplexity": [Interval(numbers.Real, 1, None, closed="neither"), None],
        "bandwidth": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "mu0": [Interval(numbers.Real, 0, None, closed="neither")],
        "mu_factor": [Interval(numbers.Real, 1, None, closed="left")],
        "n_outer": [Interval(numbers.Integral, 0, None, closed="left")],
        "tao_iter": [Interval(numbers.Integral, 1, None, closed="left")],
        "direct_max": [Interval(numbers.Integral, 0, None, closed="left")],
        "cg_tol": [Interval(numbers.Real, 0, 1, closed="neither")],
        "max_care_points": MAX_CARE_POINTS_CONSTRAINT,
        "n_jobs": [numbers.Integral, None],
        "random_state": ["random_state"],
        "init": [StrOptions({"random", "graph_labels"})],
        "exact_leaves": ["boolean"],
    }

    def __init__(self, *, max_depth=4, node_type="oblique", solver="fista", C=1000.0, gamma=0.1, n_neighbors=10,
                 perplexity=None, bandwidth=None, mu0=1e-3, mu_factor=1.5, n_outer=20, tao_iter=2,
                 direct_max=20000, cg_tol=1e-5, max_care_points=None, n_jobs=None, random_state=None, init="random",
                 exact_leaves=True):
        self.max_depth = max_depth
        self.node_type = node_type
        self.solver = solver
        self.C = C
        self.gamma = gamma
        self.n_neighbors = n_neighbors
        self.perplexity = perplexity
        self.bandwidth = bandwidth
        self.mu0 = mu0
        self.mu_factor = mu_factor
        self.n_outer = n_outer
        self.tao_iter = tao_iter
        self.direct_max = direct_max
        self.cg_tol = cg_tol
        self.max_care_points = max_care_points
        self.n_jobs = n_jobs
        self.random_state = random_state
        self.init = init
        self.exact_leaves = exact_leaves

    def _fit_laptao(self, X, Y_labelled, labelled, affinity, client=None, *, owns_X=False, X_in=None):
        """The whole fit on validated X and the targets ``Y_labelled`` of the ``labelled`` rows, stage by stage.

        ``owns_X``: X is a private copy made by validation (the caller's data was
        not float64), so it is scaled in place instead of copied once more.
        ``X_in``: X as the caller gave it; a Dask array with a client has its
        kNN graph built on the workers. ``X`` itself may be that Dask array
        (see :meth:`_rows_in_place`): then X is never brought here, and every
        step that reads it (graph, tree steps, predictions, post-processing)
        runs on the workers from its blocks.
        """
        if client is None:  # before the graph: a missing GPU is said at once
            NODE_SOLVERS[self.solver if self.node_type == "oblique" else "axis"].ensure_usable()
        if is_dask_collection(X):
            from ..dask._client import computing_on

            with computing_on(client):  # X's reductions run on the fit's cluster
                self._feature_scale = max_abs_scale(X)
            L = self._laplacian(X, affinity, X, client)
            rows = ResidentRows(X.astype(np.float64), client=client, scale=self._feature_scale,
                                max_care_points=self.max_care_points)
            return self._fit_stages(rows, Y_labelled, labelled, L, client)
        self._feature_scale = max_abs_scale(X)
        if sp.issparse(X):  # scaled entry by entry; X stays sparse
            Xs = divide_columns(X, self._feature_scale)
        else:
            Xs = np.divide(X, self._feature_scale, out=X if owns_X else None)
        L = self._laplacian(Xs, affinity, _graph_rows_on_workers(X_in, client), client)
        rows = ResidentRows(Xs, client=client, n_jobs=self.n_jobs)
        return self._fit_stages(rows, Y_labelled, labelled, L, client)

    def _fit_stages(self, rows, Y_labelled, labelled, L, client):
        """The augmented Lagrangian and the post-processing, in this process or with the per-row state on the workers.

        With ``L`` on the workers (:class:`WorkersGraph`) every per-row
        quantity of the outer loop (Y, Z, T, the multipliers, the CG's
        vectors, the leaves) lives in the label step's row blocks on the
        workers (:meth:`_fit_on_workers`); otherwise Y is built here and the
        outer loop runs here.
        """
        if isinstance(L, WorkersGraph):
            self.tree_ = self._fit_on_workers(rows, Y_labelled, labelled, L, client)
        else:
            Y = np.zeros((labelled.size, Y_labelled.shape[1]))
            Y[labelled] = Y_labelled
            tree = self._augmented_lagrangian(rows, Y, labelled, L, client)
            self.tree_ = self._post_process(tree, rows, Y, labelled, L)
        self.n_iter_ = self.n_outer
        return self

    def _laplacian(self, Xs, affinity, X_dask=None, client=None):
        """The graph Laplacian: of the kNN graph with entropic affinities, or of the given affinities.

        With ``X_dask`` (the caller's Dask rows, on a cluster) the kNN graph,
        the affinities and ``L`` are built on the workers and stay there: the
        result is then a :class:`WorkersGraph` (row blocks of ``L`` as futures).
        """
        n = Xs.shape[0]
        start = time.perf_counter()
        if affinity is None and X_dask is not None and self.n_neighbors < n:
            L = self._workers_laplacian(X_dask, client)
            self.graph_seconds_ = time.perf_counter() - start
            return L
        if affinity is None:
            W = affinity_graph(Xs, self.n_neighbors, self.perplexity, self.bandwidth, self.random_state)
        else:
            W = sp.csr_matrix(affinity)
            if W.shape != (n, n):
                raise ValueError(f"affinity must be ({n}, {n}) for {n} samples; got {W.shape}.")
        L = graph_laplacian(W)
        self.graph_seconds_ = time.perf_counter() - start
        return L

    def _workers_laplacian(self, X_dask, client):
        """The Laplacian of the kNN graph built on the workers from the caller's Dask rows, left there."""
        # the rows the in-process graph would see: float64, scaled as Xs, computed chunk by chunk there
        Xd = X_dask.astype(np.float64) / self._feature_scale
        seed = self.random_state
        if seed is not None and not isinstance(seed, numbers.Integral):  # a RandomState: one seed drawn from it
            seed = int(check_random_state(seed).randint(2**31 - 1))
        idx, dist = knn_graph(Xd, self.n_neighbors, random_state=seed, client=client)
        graph = workers_graph(idx, dist, self.n_neighbors, self.perplexity, self.bandwidth, client=client)
        graph.W_blocks = None  # L's blocks hold what the fit needs: W's are released on the workers
        from distributed import wait

        with client.as_current():  # wait asks for the current client; the fit's need not be the default
            wait(graph.L_blocks)  # graph_seconds_ then counts the affinities and L, not only their submission
        return graph

    def _augmented_lagrangian(self, rows, Y, labelled, L, client):
        """Alternate label steps (a sparse SPD system) and TAO tree steps on ``rows`` (a :class:`ResidentRows`
        of the scaled rows); returns the tree.

        Label steps run in "graph order": above ``direct_max`` (conjugate
        gradients) the rows are renumbered by reverse Cuthill-McKee so that
        the sparse products read memory locally; Z and the multipliers live
        in that order, tree predictions are permuted into it.
        """
        n, K = Y.shape
        alpha = 1.0 / self.C
        rng = check_random_state(self.random_state)
        direct_max = self.direct_max
        G = _GraphOrder(L, labelled, Y, reorder=n > direct_max)
        # the CG solver is built once and reused by every label step (threads here, actors on a cluster)
        cg = laplacian_cg(G.L, self.gamma, n_jobs=self.n_jobs, client=client) if n > direct_max else None
        Z, info = solve_label_step(G.labelled, G.Y, G.L, self.gamma, 0.0, direct_max=direct_max,
                                   tol=self.cg_tol, cg=cg)
        ones = np.ones(n)
        solver = self.solver if self.node_type == "oblique" else "axis"

        def graph_labels():  # the first label step's classes; the labelled rows keep theirs
            Z0 = G.from_graph(Z)
            return np.where(labelled, Y.argmax(axis=1), Z0.argmax(axis=1)) if is_classifier(self) else Z0

        tree = self._initial_tree(rows, graph_labels, K, ones, solver, rng)

        def tree_step(targets, a):
            # the same tree in process or on a cluster (TAO does not depend on where the chunks are)
            rows.tao_optimize(tree, targets, ones, alpha=a, max_iter=self.tao_iter, tol=0.0, node_solver=solver,
                              max_care_points=self.max_care_points, seed=int(rng.randint(2**31 - 1)))
            return G.to_graph(rows.predict(tree))

        T = tree_step(G.from_graph(Z), alpha)
        Lam = np.zeros_like(Z)
        self.history_ = []
        for k in range(self.n_outer):
            mu = self.mu0 * self.mu_factor**k
            t0 = time.perf_counter()
            Z, info = solve_label_step(G.labelled, G.Y, G.L, self.gamma, mu, T, Lam, Z0=Z,
                                       direct_max=direct_max, tol=self.cg_tol, cg=cg)
            t1 = time.perf_counter()
            T = tree_step(G.from_graph(Z - Lam / (2 * mu)), alpha / mu)
            t2 = time.perf_counter()
            Lam = Lam - mu * (Z - T)
            self.history_.append(self._record(k, mu, G.Y, G.labelled, G.L, Z, T, tree, alpha, info, t1 - t0, t2 - t1))
            report("laptao_outer", iteration=k + 1, n_outer=self.n_outer, mu=mu,
                   constraint=float(np.linalg.norm(Z - T)))
        return tree

    def _initial_tree(self, rows, graph_labels, K, ones, solver, rng):
        """The tree the first tree step starts from (``init``): random, or fitted to ``graph_labels()``.

        ``graph_labels()``: the first label step's labels, as class codes
        (classification: the largest entry of each row of Z) or as Z itself
        (regression), in the rows' order and where the rows are.
        """
        n = rows.X.shape[0]
        task = "classification" if self.init == "graph_labels" and is_classifier(self) else "regression"
        tree = random_tree(rows.take, n, rows.X.shape[1], self.max_depth, K, self.node_type,
                           task=task, leaf_type="constant", rng=rng)
        if self.init == "random":
            return tree
        alpha = 1.0 / (GRAPH_LABELS_C if task == "classification" else self.C)
        rows.tao_optimize(tree, graph_labels(), ones, alpha=alpha, max_iter=GRAPH_LABELS_MAX_ITER,
                          tol=GRAPH_LABELS_TOL, node_solver=solver, max_care_points=self.max_care_points,
                          seed=int(rng.randint(2**31 - 1)))
        tree.task = "regression"  # the leaves' class frequencies become the K outputs the tree steps regress
        return tree

    def _fit_on_workers(self, rows, Y_labelled, labelled, graph, client):
        """The augmented Lagrangian and the post-processing with every per-row quantity on the workers; the tree.

        The label step's row blocks (:class:`LabelStepRows` in
        :class:`~taodist.dask.DistributedLaplacianCG`'s actors, one per row
        block of ``graph``, in X's row order: no reordering, which needs the
        whole graph, and CG at every size, as a direct solve needs the whole
        matrix here) hold their rows of Y, Z, T, the multipliers and the CG's
        vectors, and do the outer loop's row-wise steps; the tree steps read
        their targets from the blocks and hand them the tree's predictions,
        task to actor (rows in place), and the exact leaves' system is summed
        from the blocks' shares. This process sums K-vectors and holds the
        labelled mask and the labelled rows' targets.

        A worker lost with the blocks' state starts the whole augmented
        Lagrangian again on new blocks, from the same random state: the
        result is the tree of a fit without the fault.
        """
        from ..dask import DistributedLaplacianCG  # imports distributed: only for a fit on a cluster

        bounds = graph.bounds
        first = np.searchsorted(np.flatnonzero(labelled), bounds)  # each block's first labelled row
        block_args = [(labelled[a:b], Y_labelled[first[i]:first[i + 1]])
                      for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))]
        cg = DistributedLaplacianCG.from_row_blocks(client, graph.scaled_laplacian_blocks(self.gamma), bounds,
                                                    block_type=LabelStepRows, block_args=block_args)
        rng = check_random_state(self.random_state)
        rng_state = rng.get_state()
        r = ridge(graph)
        for attempt in range(MAX_FIT_RESTARTS + 1):
            try:
                tree = self._outer_steps_on_workers(rows, cg, r, Y_labelled.shape[1], rng)
                return self._post_process_on_workers(tree, rows, cg)
            except Exception as exc:  # noqa: BLE001 -- raised unless a worker holding the blocks was lost
                if attempt == MAX_FIT_RESTARTS or not cg.lost_a_worker(exc):
                    raise
                logger.warning("A worker holding LapTAO's label-step rows was lost: starting the outer steps again")
                rng.set_state(rng_state)
                cg.restart()

    def _outer_steps_on_workers(self, rows, cg, ridge_, K, rng):
        """:meth:`_augmented_lagrangian` with Z, T and the multipliers in the blocks of ``cg``; returns the tree."""
        import dask
        import dask.array as da

        from ..dask import call_block

        n = rows.X.shape[0]
        sizes = tuple(int(b - a) for a, b in zip(cg.bounds[:-1], cg.bounds[1:]))
        if rows.in_place and tuple(rows.X.chunks[0]) != sizes:
            raise RuntimeError(f"The label step's row blocks {sizes} are not X's row chunks {rows.X.chunks[0]}.")
        alpha = 1.0 / self.C
        n_blocks = len(sizes)
        ones = da.ones(n, chunks=(sizes,))
        solver = self.solver if self.node_type == "oblique" else "axis"

        def label_step(mu):
            cg.each("load_step", [(mu, ridge_)] * n_blocks)
            info = cg.iterate(tol=self.cg_tol, max_iter=1000)
            cg.each("keep_solution")
            return info

        def from_blocks(method, width, dtype, *args):
            # what the blocks' ``method`` returns, as the tree step's chunks, task by task (never here)
            peers = cg.peers
            return da.concatenate([
                da.from_delayed(dask.delayed(call_block, pure=False)(*peers[i], method, *args),
                                shape=(m,) if width is None else (m, width), dtype=dtype)
                for i, m in enumerate(sizes)])

        def tree_step(mu, a):
            peers = cg.peers
            targets = from_blocks("targets", K, np.float64, mu)
            rows.tao_optimize(tree, targets, ones, alpha=a, max_iter=self.tao_iter, tol=0.0, node_solver=solver,
                              max_care_points=self.max_care_points, seed=int(rng.randint(2**31 - 1)))
            if rows.in_place:  # predictions made where X's blocks are, handed to the blocks there
                rows.each_block(lambda i, X_block: call_block(*peers[i], "set_predictions", tree.predict(X_block)))
            else:
                T = rows.predict(tree)
                cg.each("set_predictions", [(T[a:b],) for a, b in zip(cg.bounds[:-1],
                                                                       cg.bounds[1:])])

        def graph_labels():
            return from_blocks("graph_classes", None, np.int64) if is_classifier(self) else \
                from_blocks("targets", K, np.float64)

        label_step(0.0)
        tree = self._initial_tree(rows, graph_labels, K, ones, solver, rng)
        tree_step(None, alpha)
        cg.each("update_multipliers", [(None,)] * n_blocks)
        self.history_ = []
        for k in range(self.n_outer):
            mu = self.mu0 * self.mu_factor**k
            t0 = time.perf_counter()
            info = label_step(mu)
            t1 = time.perf_counter()
            tree_step(mu, alpha / mu)
            t2 = time.perf_counter()
            cg.each("update_multipliers", [(mu,)] * n_blocks)
            loss, laplacian, z_minus_t = (sum(v) for v in zip(*cg.each("step_stats")))
            self.history_.append({
                "iteration": k + 1, "mu": mu, "labelled_loss": loss, "laplacian": laplacian,
                "penalty": float(alpha * np.abs(tree.weights.data).sum()), "z_minus_t": float(np.sqrt(z_minus_t)),
                "label_method": info.method, "cg_iterations": info.iterations, "cg_residual": info.residual,
                "label_seconds": t1 - t0, "tree_seconds": t2 - t1,
            })
            report("laptao_outer", iteration=k + 1, n_outer=self.n_outer, mu=mu, constraint=float(np.sqrt(z_minus_t)))
        return tree

    def _post_process_on_workers(self, tree, rows, cg):
        """:meth:`_post_process` with the leaves' system summed from the blocks of ``cg``."""
        from ..dask import call_block

        counts = rows.node_counts(tree)
        tree = prune_with_counts(tree, counts, counts.astype(np.float64))  # as prune(tree, X): unit weights
        if not self.exact_leaves:
            tree.scale_features(1.0 / self._feature_scale)
            return tree
        bounds = cg.bounds
        if rows.in_place:
            peers = cg.peers
            reached = rows.each_block(lambda i, X_block: call_block(*peers[i], "set_leaves", tree.apply(X_block)))
        else:
            leaves = rows.apply(tree)
            reached = cg.each("set_leaves", [(leaves[a:b],) for a, b in zip(bounds[:-1], bounds[1:])])
        ids = np.unique(np.concatenate(reached))
        shares = cg.each("leaf_system", [(ids,)] * (len(bounds) - 1))
        A, rhs = sum(s[0] for s in shares), sum(s[1] for s in shares)
        tree.value[ids] = np.linalg.lstsq(A, rhs, rcond=None)[0]  # as exact_leaves: min-norm for a singular row
        tree.scale_features(1.0 / self._feature_scale)
        return tree

    def _post_process(self, tree, rows, Y, labelled, L):
        """Prune, fit the leaves exactly with the decision nodes fixed (eq. 10, with ``exact_leaves``), back to the
        units of X."""
        counts = rows.node_counts(tree)
        tree = prune_with_counts(tree, counts, counts.astype(np.float64))  # as prune(tree, X): unit weights
        if self.exact_leaves:
            B, leaf_ids = leaf_membership(tree, rows)
            tree.value[leaf_ids] = exact_leaves(B, labelled, Y, L, self.gamma)
        tree.scale_features(1.0 / self._feature_scale)
        return tree

    def _record(self, k, mu, Y, labelled, L, Z, T, tree, alpha, info, label_s, tree_s):
        resid = (T - Y)[labelled]
        return {
            "iteration": k + 1,
            "mu": mu,
            "labelled_loss": float(np.sum(resid**2)),
            "laplacian": float(self.gamma * np.einsum("ij,ij->", T, L @ T)),
            "penalty": float(alpha * np.abs(tree.weights.data).sum()),
            "z_minus_t": float(np.linalg.norm(Z - T)),
            "label_method": info.method,
            "cg_iterations": info.iterations,
            "cg_residual": info.residual,
            "label_seconds": label_s,
            "tree_seconds": tree_s,
        }

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        return tags

    def _rows_in_place(self, X, y, client, affinity):
        """The caller's Dask rows and y here, validated without gathering X; None when X is gathered.

        A dense Dask array with known row chunks, fitted with a client (see
        :func:`_graph_rows_on_workers`), stays on the workers for the whole
        fit -- unless its kNN graph is complete (``n_neighbors`` at least
        the rows), which is built here from X. Only X's structure is checked
        here; its values are checked for NaN and infinities as the tree steps'
        chunks are built, as for TAO's Dask fits.
        """
        rows = _graph_rows_on_workers(X, client)
        if rows is None or (affinity is None and self.n_neighbors >= rows.shape[0]):
            return None
        check_dask_X(rows)
        validate_data(self, rows, reset=True, skip_check_array=True)  # n_features_in_, as for NumPy X
        y = np.asarray(y.compute() if is_dask_collection(y) else y)
        check_consistent_length(rows, y)
        return rows, y

    @staticmethod
    def _check_n_samples(X):
        if X.shape[0] < 2:
            raise ValueError(f"LapTAO links every sample to its nearest others, so it needs at least 2 samples; "
                             f"got n_samples = {X.shape[0]}.")

    def _raw_predict(self, X):
        check_is_fitted(self, "tree_")
        X = validate_data(self, X, dtype=np.float64, reset=False, accept_sparse=ACCEPT_SPARSE)
        return self.tree_.predict(as_rows(X))


class LapTAOClassifier(ClassifierMixin, _BaseLapTAO):
    """Semi-supervised sparse oblique tree (LapTAO); ``y == -1`` marks unlabelled points.

    Parameters
    ----------
    max_depth : int, default=4
    node_type : {"oblique", "axis"}, default="oblique"
    solver : {"fista", "fista-gpu", "saga", "liblinear"}, default="fista"
        Node solver of the TAO regression tree steps (see
        :class:`~taodist.TAOClassifier`). FISTA because it was as accurate
        as liblinear, the paper's solver, on validation splits, in a
        fraction of the time (``bench/bench_laptao.py --split validation``).
    C : float, default=1000.0
        Inverse l1 penalty of the tree (``alpha = 1 / C``). Propagated labels
        of unlabelled points are small numbers (the label mass spreads over
        the graph), so the tree's squared loss is small and the penalty must
        be light.
    gamma : float, default=0.1
        Weight of the graph Laplacian term.
    n_neighbors : int, default=10
        Neighbours of the kNN graph (pynndescent).
    perplexity : float, optional
        Entropic-affinity perplexity (default ``n_neighbors / 3``).
    bandwidth : float, optional
        Fixed Gaussian bandwidth instead of entropic affinities.
    mu0 : float, default=1e-3
    mu_factor : float, default=1.5
    n_outer : int, default=20
        Augmented-Lagrangian iterations.
    tao_iter : int, default=2
        TAO iterations per tree step (warm-started).
    direct_max : int, default=20000
        Largest N solved by sparse factorisation; above it, block PCG.
    cg_tol : float, default=1e-5
        CG stops when every column's residual is below ``cg_tol`` times its
        right-hand side. The label step need only be solved well below the
        tree's misfit ``||z - t||``, which stays far larger than the error
        this tolerance leaves.
    max_care_points : int or None, default=None
        Cap on the care points one decision-node fit of a tree step uses (a
        hash-priority sample, as in :class:`taodist.TAOClassifier`); bounds
        the tree step's cost at a million points. None: all care points.
    n_jobs : int or None, default=None
        Threads for the tree step's node fits (joblib convention: -1 = all cores).
    random_state : int, RandomState instance or None, default=None
    init : {"random", "graph_labels"}, default="random"
        The tree the first tree step starts from. ``"random"``: a random
        tree, as in the paper. ``"graph_labels"``: a tree fitted by TAO to
        the first label step's labels (each unlabelled row's class is the
        largest entry of its propagated label, the labelled rows keep
        theirs) as :class:`~taodist.TAOClassifier`'s defaults fit labels
        (``C=30``, 15 iterations); for :class:`LapTAORegressor`, a
        regression tree fitted to the propagated labels for 15 iterations.
        With very few labels among very many rows the outer steps can
        lose what the graph's labels carry; ``n_outer=0`` then keeps the
        tree fitted to them (after one tree step), best with
        ``exact_leaves=False``, as the LapTAO guide shows.
    exact_leaves : bool, default=True
        After the outer steps, fit the leaves exactly with the decision
        nodes fixed (the paper's post-processing, eq. 10: the LapTAO
        objective's best constant per leaf). False keeps the last tree
        step's leaves, the mean of its targets over each leaf's rows. With
        very few labels among very many rows the exact leaves are nearly
        flat (the graph term over the edges between leaves outweighs the
        few labelled rows in each), so their largest class can be wrong
        for a whole leaf. After the outer steps the tree step's targets are
        far from the labels, so False is for fits with ``n_outer=0``; the
        LapTAO guide shows where each pays off.

    Attributes
    ----------
    tree_ : Tree
        Regression tree with one output per class.
    classes_ : ndarray
    history_ : list of dict
        Per outer iteration: mu, labelled loss, Laplacian term, penalty,
        ||z - t||, label-step method, CG iterations and residual, seconds.
    graph_seconds_ : float

    References
    ----------
    A. Zharmagambetov and M. A. Carreira-Perpinan. Semi-supervised learning
    with decision trees: Graph Laplacian Tree Alternating Optimization.
    NeurIPS 2022.
    """

    @_fit_context(prefer_skip_nested_validation=True)
    @silence_inner_solvers
    @cluster_fit
    def fit(self, X, y, affinity=None, *, client=None):
        """Fit on all points; ``y == -1`` marks the unlabelled ones.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Sparse input stays sparse (the kNN graph, the tree steps, prediction).
        y : array-like of shape (n_samples,)
            Class labels, -1 for unlabelled points.
        affinity : sparse matrix (n_samples, n_samples), optional
            A precomputed symmetric affinity matrix instead of the kNN graph.
        client : distributed.Client, optional
            Fit on this cluster: the tree steps run TAO on row chunks
            scattered to the workers (node fits as tasks), and the label
            step's conjugate gradients run there too (Laplacian row blocks on
            the workers) for systems larger than ``direct_max``. When X is
            a Dask array, its kNN graph is built on the workers too
            (:func:`taodist.laptao.knn_graph`, one block per row chunk, no
            rows gathered for it; a slightly different graph from the
            in-process one), and so are the affinities and the Laplacian,
            whose row blocks the label step's CG uses where they are (in X's
            row order, CG at every size), and X is never gathered: the tree
            steps, predictions and post-processing run on its blocks where
            they are (re-read from storage in every pass when they exceed
            half the workers' memory), and every per-row quantity of the
            fit (targets, Z, predictions, multipliers, the CG's vectors,
            leaves) stays in the label step's row blocks on the workers:
            this process holds the labelled mask and sums K-vectors.
            Otherwise the graph is built in this process.

        Returns
        -------
        self : LapTAOClassifier
            The fitted estimator.
        """
        X_in = X
        in_place = self._rows_in_place(X, y, client, affinity)
        if in_place is not None:  # X stays on the workers (a Dask array with a client)
            X, y = in_place
            y = column_or_1d(y, warn=True)
        else:
            X, y = validate_data(self, X, y, dtype=np.float64, accept_sparse=ACCEPT_SPARSE)
            X = as_rows(X)
        self._check_n_samples(X)
        labelled = y != -1
        check_classification_targets(y[labelled])
        if not labelled.any():
            raise ValueError("No labelled point: y is -1 everywhere. LapTAO needs at least one labelled point per class.")
        self.classes_ = np.unique(y[labelled])
        if self.classes_.size < 2:
            raise ValueError(f"The labelled points hold only one class ({self.classes_[0]!r}); at least 2 are needed.")
        # one-hot targets of the labelled rows only: a cluster fit never holds (n, K) values here
        Y_labelled = np.zeros((int(labelled.sum()), self.classes_.size))
        Y_labelled[np.arange(len(Y_labelled)), np.searchsorted(self.classes_, y[labelled])] = 1.0
        return self._fit_laptao(X, Y_labelled, labelled, affinity, client, owns_X=_is_private_copy(X, X_in),
                                X_in=X_in)

    def predict(self, X):
        """Class with the largest tree output.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        y : ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        out = self._raw_predict(X)
        return self.classes_[np.argmax(out, axis=1)]


class LapTAORegressor(RegressorMixin, _BaseLapTAO):
    """Semi-supervised sparse oblique regression tree (LapTAO); NaN in ``y`` marks unlabelled points.

    Parameters
    ----------
    max_depth, node_type, solver, C, gamma, n_neighbors, perplexity, bandwidth, mu0, mu_factor, n_outer, \
tao_iter, direct_max, cg_tol, max_care_points, n_jobs, random_state, init, exact_leaves
        As for :class:`LapTAOClassifier`.
    """

    @_fit_context(prefer_skip_nested_validation=True)
    @silence_inner_solvers
    @cluster_fit
    def fit(self, X, y, affinity=None, *, client=None):
        """Fit on all points; ``y`` is NaN where unlabelled.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Targets, NaN for unlabelled points.
        affinity : sparse matrix (n_samples, n_samples), optional
            As for :meth:`LapTAOClassifier.fit`.
        client : distributed.Client, optional
            As for :meth:`LapTAOClassifier.fit`.

        Returns
        -------
        self : LapTAORegressor
            The fitted estimator.
        """
        X_in = X
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None "
                             "(use NaN for unlabelled points).")
        in_place = self._rows_in_place(X, y, client, affinity)
        if in_place is not None:  # X stays on the workers (a Dask array with a client)
            X, y = in_place
        else:
            X = as_rows(validate_data(self, X, dtype=np.float64, accept_sparse=ACCEPT_SPARSE))
        self._check_n_samples(X)
        y = np.asarray(y, dtype=np.float64)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"y has {y.shape[0]} rows but X has {X.shape[0]}; they must match.")
        Y = y.reshape(len(y), -1)
        labelled = ~np.isnan(Y).any(axis=1)
        if not labelled.any():
            raise ValueError("No labelled point: y is NaN everywhere. LapTAO needs at least one labelled point.")
        if not np.isfinite(Y[labelled]).all():
            raise ValueError("y contains infinity on labelled points.")
        self._y_1d = y.ndim == 1
        return self._fit_laptao(X, Y[labelled], labelled, affinity, client, owns_X=_is_private_copy(X, X_in),
                                X_in=X_in)

    def predict(self, X):
        """The tree's output for each sample.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
            Rows with the training data's columns.

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            In the units of the labelled targets.
        """
        out = self._raw_predict(X)
        return out.ravel() if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags
