import functools
import pickle

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_blobs, make_classification
from sklearn.tree import DecisionTreeClassifier

import taodist.estimators.base as estimator_base
import taodist.model.leaf_fit as leaf_fit
import taodist.tao.care_points as care_points
import taodist.tao.chunks as chunks
import taodist.tao.leaf_losses as leaf_losses
import taodist.tao.node_solvers as nodes_module
import taodist.tao.optimizer as tao_module
from taodist import TAOClassifier, TAORegressor
from taodist.model.kinds import OBLIQUE
from taodist.model.leaf_fit import fit_softmax
from taodist.model.prune import prune
from taodist.tao.care_points import NodeStats, ObliqueSplit, chunk_node_parts, merge_priorities, priority_thresholds
from taodist.tao.initial_trees import random_tree
from taodist.tao.leaf_tasks import rows_digest
from taodist.tao.margins import oblique_margins, row_margins, store_float32_margins, store_rechecked_margins
from taodist.tao.node_solvers import NODE_SOLVERS, consecutive_rows
from taodist.tao.node_tasks import NodeJob, node_problem, solve_nodes_task
from taodist.tao.optimizer import tao_optimize
from taodist.tao.part_rows import ChunkRows, stack_part_rows, take_rows
from taodist.tao.routing import Routing
from taodist.testing import assert_tree_equal, make_oblique_classification, naive_objective
from taodist.utils.rows import stack_rows


@st.composite
def tao_problems(draw):
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    n = draw(st.integers(5, 80))
    d = draw(st.integers(1, 4))
    task = draw(st.sampled_from(["classification", "regression"]))
    X = rng.normal(size=(n, d)).round(draw(st.sampled_from([0, 1, 3])))  # rounding makes ties
    if task == "classification":
        K = draw(st.integers(2, 4))
        y = rng.integers(0, K, size=n)
        y[:K] = np.arange(K)
    else:
        K = draw(st.integers(1, 2))
        y = rng.normal(size=(n, K))
    return dict(
        X=X, y=y, K=K, task=task, seed=seed,
        node_type=draw(st.sampled_from(["oblique", "axis"])),
        solver=draw(st.sampled_from(["fista", "saga", "liblinear"])),
        leaf_type=draw(st.sampled_from(["constant", "linear"])),
        depth=draw(st.integers(1, 3)),
        alpha=draw(st.sampled_from([0.01, 0.3, 3.0])),
        leaf_alpha=draw(st.sampled_from([None, 0.01, 3.0])),
        sample_weight=rng.uniform(0.2, 2.0, size=n),
    )


def _solver(p):
    return p["solver"] if p["node_type"] == "oblique" else "axis"


@settings(deadline=None, max_examples=60, print_blob=True)
@given(tao_problems())
def test_objective_never_increases(p):
    rng = np.random.RandomState(p["seed"] % 2**31)
    tree = random_tree(lambda i: p["X"][i], *p["X"].shape, p["depth"], p["K"], p["node_type"], task=p["task"], leaf_type=p["leaf_type"], rng=rng)
    result = tao_optimize(tree, p["X"], p["y"], p["sample_weight"], alpha=p["alpha"], leaf_alpha=p["leaf_alpha"],
                          max_iter=6, tol=0.0, node_solver=_solver(p))
    E = np.asarray(result.objective)
    assert np.all(np.diff(E) <= 1e-9 * np.maximum(1.0, np.abs(E[:-1]))), E
    # the recorded objective is the true objective of the final tree
    E_final = naive_objective(tree, p["X"], p["y"], p["sample_weight"], p["alpha"], p["leaf_alpha"])
    assert E_final == pytest.approx(E[-1], rel=1e-9, abs=1e-9)


def test_a_training_point_on_the_initial_hyperplane_is_cleared_before_fitting():
    # found by hypothesis: the random root hyperplane passes through row 0 (margin -3e-17), the
    # optimiser never replaces it, and a different summation order routed row 0 the other way
    X = np.array([[0.2, -0.5, -0.4], [-2.4, 1.8, 1.1], [-0.3, 0.8, 0.3], [-0.6, 1.0, -0.3], [-0.3, -0.8, 0.5]])
    y, sw = np.array([0, 1, 1, 1, 1]), np.array([0.9049247, 0.53705463, 0.8227292, 1.11991875, 1.80417694])
    tree = random_tree(lambda i: X[i], 5, 3, 1, 2, "oblique", task="classification", leaf_type="linear",
                       rng=np.random.RandomState(2))
    result = tao_optimize(tree, X, y, sw, alpha=0.01, max_iter=6, tol=0.0, node_solver="saga")
    margins = X @ tree.weights[0].toarray().ravel() + tree.bias[0]
    assert np.abs(margins).min() > 1e-6
    np.testing.assert_array_equal(tree.apply(X), tree.apply_matrix(X))
    assert naive_objective(tree, X, y, sw, 0.01) == pytest.approx(result.objective[-1], rel=1e-9)


@pytest.mark.parametrize("node_type", ["oblique", "axis"])
def test_every_initial_split_cuts_the_points_reaching_its_node(node_type):
    # the sample is the whole data set here (n <= 8 * 2**depth), and the points are distinct,
    # so a node reached by two or more points must send at least one to each child
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 5))
    depth = 7
    tree = random_tree(lambda i: X[i], *X.shape, depth, 2, node_type, task="classification",
                       leaf_type="constant", rng=np.random.RandomState(0))
    reached = np.zeros(tree.n_nodes, dtype=np.int64)
    node = np.zeros(len(X), dtype=np.intp)
    for _ in range(depth + 1):  # walk all points down level by level, counting visits
        np.add.at(reached, node, 1)
        inner = tree.children_left[node] >= 0
        if not inner.any():
            break
        if node_type == "oblique":
            margin = np.einsum("ij,ij->i", X, tree.weights[node].toarray()) + tree.bias[node]
        else:
            margin = X[np.arange(len(X)), np.maximum(tree.feature[node], 0)] - tree.threshold[node]
        child = np.where(margin >= 0, tree.children_right[node], tree.children_left[node])
        node = np.where(inner, child, node)
    internal = np.flatnonzero(tree.children_left >= 0)
    busy = internal[reached[internal] >= 2]
    assert busy.size > 0
    assert np.all(reached[tree.children_left[busy]] > 0) and np.all(reached[tree.children_right[busy]] > 0)
    np.testing.assert_array_equal(np.bincount(tree.apply(X), minlength=tree.n_nodes)[tree.is_leaf],
                                  reached[tree.is_leaf])


@settings(deadline=None, max_examples=30, print_blob=True)
@given(tao_problems())
def test_pruning_never_changes_training_predictions(p):
    rng = np.random.RandomState(p["seed"] % 2**31)
    tree = random_tree(lambda i: p["X"][i], *p["X"].shape, p["depth"] + 1, p["K"], p["node_type"], task=p["task"], leaf_type=p["leaf_type"], rng=rng)
    tao_optimize(tree, p["X"], p["y"], p["sample_weight"], alpha=p["alpha"], max_iter=3, tol=0.0,
                 node_solver=_solver(p))
    pruned = prune(tree, p["X"], p["sample_weight"])
    assert pruned.n_nodes <= tree.n_nodes
    before, after = tree.predict(p["X"]), pruned.predict(p["X"])
    if p["task"] == "classification":
        np.testing.assert_array_equal(before.argmax(axis=1), after.argmax(axis=1))
    else:
        np.testing.assert_array_equal(before, after)


def test_oblique_boundary_reaches_near_zero_error_where_cart_cannot():
    X, y = make_oblique_classification(n_samples=1000, n_features=6, random_state=0)
    tao = TAOClassifier(max_depth=3, C=100.0, random_state=0).fit(X, y)
    cart = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    assert 1 - tao.score(X, y) < 0.01
    assert 1 - cart.score(X, y) > 0.10


def test_cart_init_with_no_iterations_reproduces_cart():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 4)).round(1)  # ties at thresholds
    y = (X[:, 0] + X[:, 1] ** 2 > 0.5).astype(int)
    cart = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, y)
    for node_type in ("axis", "oblique"):
        tao = TAOClassifier(max_depth=4, init="cart", node_type=node_type, max_iter=0, prune=False,
                            random_state=0).fit(X, y)
        Xt = rng.normal(size=(500, 4)).round(1)
        np.testing.assert_array_equal(tao.apply(Xt) >= 0, True)
        np.testing.assert_array_equal(tao.predict(Xt), cart.predict(Xt))


def test_tao_improves_on_its_cart_initialisation():
    X, y = make_oblique_classification(n_samples=800, n_features=4, random_state=1)
    cart = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    tao = TAOClassifier(max_depth=2, init="cart", C=10.0, random_state=0).fit(X, y)
    assert tao.history_[-1] < tao.history_[0]
    assert tao.score(X, y) > cart.score(X, y) + 0.05


def test_regression_fits_a_piecewise_linear_target():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(600, 3))
    y = np.where(X[:, 0] + X[:, 1] > 0, 2 * X[:, 2], -1.0)
    const = TAORegressor(max_depth=3, C=10.0, random_state=0).fit(X, y)
    linear = TAORegressor(max_depth=1, leaf_type="linear", C=100.0, random_state=0).fit(X, y)
    assert const.score(X, y) > 0.8
    assert linear.score(X, y) > 0.97


def test_linear_regression_leaves_do_not_extrapolate_past_their_targets():
    # y = 3x on [0, 1]: an unclipped linear leaf would predict about 150 at x = 50
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, size=(400, 2))
    y = 3 * X[:, 0] + 0.1 * rng.normal(size=400)
    reg = TAORegressor(max_depth=1, leaf_type="linear", C=100.0, random_state=0).fit(X, y)
    far = np.array([[50.0, 0.5], [-50.0, 0.5]])
    # (the range is stored in y's units: standardised and back, to within rounding)
    assert y.min() - 1e-12 <= reg.predict(far).min() and reg.predict(far).max() <= y.max() + 1e-12
    # brute force: every leaf's affine output, clipped to the leaf's stored range
    t = reg.tree_
    Xt = np.vstack([X, far])
    leaves = reg.apply(Xt)
    affine = t.value[leaves, 0] + np.einsum("ij,ij->i", Xt, t.leaf_coef.toarray()[leaves])
    expected = np.clip(affine, t.leaf_range[leaves, 0, 0], t.leaf_range[leaves, 1, 0])
    np.testing.assert_allclose(reg.predict(Xt), expected, rtol=1e-12, atol=1e-12)
    assert not np.allclose(affine, expected)  # the far rows were clipped
    fitted = t.leaf_range[t.is_leaf]
    assert (fitted >= y.min() - 1e-12).all() and (fitted <= y.max() + 1e-12).all()


@pytest.mark.parametrize("max_care_points", [None, 40])
@pytest.mark.parametrize("node_type,solver,leaf_type", [
    ("oblique", "fista", "constant"), ("oblique", "saga", "constant"), ("oblique", "liblinear", "linear"),
    ("oblique", "fista", "linear"), ("axis", "axis", "constant"), ("axis", "axis", "linear"),
])
def test_row_chunking_does_not_change_the_model(max_care_points, node_type, solver, leaf_type):
    X, y = make_oblique_classification(n_samples=600, n_features=5, random_state=3)
    y = y + 2 * (X[:, 1] > 0.3)  # 4 classes
    sw = np.ones(len(y))
    trees = []
    for n_blocks in (1, 3, 7):
        rng = np.random.RandomState(0)
        tree = random_tree(lambda i: X[i], *X.shape, 3, 4, node_type, task="classification",
                           leaf_type=leaf_type, rng=rng)
        bounds = np.linspace(0, len(y), n_blocks + 1).astype(int)
        blocks = [(X[a:b], y[a:b], sw[a:b], a) for a, b in zip(bounds[:-1], bounds[1:])]
        result = tao_optimize(tree, blocks, None, None, alpha=0.1, max_iter=4, tol=0.0, node_solver=solver,
                              max_care_points=max_care_points, seed=11)
        trees.append((tree, result.objective))
    for tree, objective in trees[1:]:
        assert_tree_equal(tree, trees[0][0])
        np.testing.assert_allclose(objective, trees[0][1], rtol=1e-12)


@pytest.mark.parametrize("k", [1, 7, 50, 500])
def test_priority_merge_tree_finds_the_kth_lowest_priority_of_all_chunks(k):
    rng = np.random.default_rng(k)
    priorities = [{node: rng.integers(0, 2**63, size=rng.integers(0, 40), dtype=np.uint64) for node in (1, 2)}
                  for _ in range(9)]
    # what chunk_node_priorities returns: per-chunk stats, each node's k lowest priorities
    parts = [([{"chunk": i}], {n: np.sort(p)[:k] for n, p in c.items() if p.size}) for i, c in enumerate(priorities)]
    level = parts
    while len(level) > 1:  # the Dask executor's tree of merges: neighbours pair up
        level = [merge_priorities(a, b, k) for a, b in zip(level[::2], level[1::2])] + level[len(level) - len(level) % 2:]
    for merged in (level[0], functools.reduce(lambda a, b: merge_priorities(a, b, k), parts)):
        assert merged[0] == [{"chunk": i} for i in range(9)]  # stats stay in chunk order
        for node in (1, 2):
            everything = np.sort(np.concatenate([c[node] for c in priorities]))
            expected = everything[k - 1] if everything.size >= k else np.iinfo(np.uint64).max
            assert priority_thresholds(merged[1], k)[node] == expected


@pytest.mark.parametrize("Est", [TAOClassifier, TAORegressor])
def test_cached_leaf_losses_give_the_same_tree_with_fewer_leaf_evaluations(monkeypatch, Est):
    # a decision level evaluates each row at two leaves; the one it reaches now was evaluated by the
    # level below (leaves change only when refitted, which changes their digest)
    X, y = make_blobs(600, n_features=6, centers=3, cluster_std=3.0, random_state=3)
    target = y if Est is TAOClassifier else X[:, 0] * y
    evaluated = []
    losses = leaf_losses.row_losses

    def counting(chunk, tree, rows, leaves):
        evaluated[-1] += rows.size
        return losses(chunk, tree, rows, leaves)

    # without the cache: every evaluation computed (and counted)
    def uncached(self, chunk, routing, rows, left, right):
        return counting(chunk, routing.tree, rows, left), counting(chunk, routing.tree, rows, right)

    def uncached_at(self, chunk, routing, rows, leaves):
        return counting(chunk, routing.tree, rows, leaves)

    # the objective's evaluations, per call: after a sweep every row's leaf is one the root level kept
    in_objective = []

    def objective_counting(chunk, routing):
        before = evaluated[-1]
        loss = chunk_loss(chunk, routing)
        in_objective[-1].append(evaluated[-1] - before)
        return loss

    chunk_loss = chunks.chunk_loss
    # a linear leaf's loss on a resident chunk is computed where the cache misses (leaf_losses.row_losses)
    monkeypatch.setattr(leaf_losses, "row_losses", counting)
    monkeypatch.setattr(tao_module, "chunk_loss", objective_counting)
    fits = []
    for cache in (True, False):
        if not cache:
            monkeypatch.setattr(leaf_losses.LeafLossCache, "losses", uncached)
            monkeypatch.setattr(leaf_losses.LeafLossCache, "loss_at", uncached_at)
        evaluated.append(0)
        in_objective.append([])
        fits.append(Est(max_depth=4, leaf_type="linear", max_iter=4, tol=0.0, random_state=0, n_jobs=2)
                    .fit(X, target))
    assert_tree_equal(fits[0].tree_, fits[1].tree_)
    np.testing.assert_array_equal(fits[0].history_, fits[1].history_)
    assert evaluated[0] < 0.75 * evaluated[1]
    # one chunk (600 rows), one objective per history entry: the first computes its losses, the later
    # ones (after a sweep) find them all kept; without the cache every one computes them
    assert len(in_objective[0]) == len(fits[0].history_) > 2
    assert in_objective[0][0] == 600 and in_objective[0][1:] == [0] * (len(in_objective[0]) - 1)
    assert in_objective[1] == [600] * len(fits[1].history_)


@pytest.mark.parametrize("Est", [TAOClassifier, TAORegressor])
def test_the_leaf_loss_cache_stays_within_its_bytes_and_gives_fresh_losses(Est):
    X, y = make_blobs(400, n_features=5, centers=3, cluster_std=3.0, random_state=1)
    target = y if Est is TAOClassifier else X[:, 0] * y
    tree = Est(max_depth=3, leaf_type="linear", max_iter=2, random_state=0).fit(X, target).tree_
    task_y = target if Est is TAORegressor else np.searchsorted(np.unique(target), target)
    chunk = chunks.make_chunk(X, task_y.reshape(len(X), -1) if Est is TAORegressor else task_y, np.ones(len(X)), 0,
                              Routing.of(tree), np.ones(X.shape[1]), False)
    column_bytes = len(X) * (1 if Est is TAOClassifier else 8)  # 0/1 losses as int8, others as float64
    cache = leaf_losses.LeafLossCache(max_bytes=3 * column_bytes)
    leaves = np.flatnonzero(tree.is_leaf)
    assert leaves.size > 3
    rng = np.random.default_rng(0)
    routing = Routing.of(tree)
    for step in range(12):
        if step == 6:  # a refitted leaf: its kept losses must not be read again
            tree.value[leaves[0], 0] += 5.0
            routing = Routing.of(tree)
        rows = rng.choice(len(X), size=150, replace=False)
        at = rng.choice(leaves[:4] if step < 5 else leaves[:2], size=150)  # past step 5: columns kept
        np.testing.assert_array_equal(cache.loss_at(chunk, routing, rows, at),
                                      leaf_losses.row_losses(chunk, tree, rows, at))
        assert len(cache.columns) <= 3
        assert sum(c.nbytes for _, c in cache.columns.values()) <= 3 * column_bytes


def test_a_chunks_leaf_loss_cache_gets_a_share_of_its_rows_bytes():
    X = np.random.default_rng(0).normal(size=(40000, 60))  # 19.2 MB: a quarter is above the floor
    X[X < 0.5] = 0.0
    tree = TAOClassifier(max_depth=2, leaf_type="linear", max_iter=1, random_state=0).fit(X[:300], X[:300, 0] > 1).tree_
    routing = Routing.of(tree)
    budgets = []
    for rows in (X, sp.csr_matrix(X)):  # the sparse rows' quarter (2.6 MB) is below it
        chunk = chunks.make_chunk(rows, np.zeros(len(X), int), np.ones(len(X)), 0, routing, np.ones(60), False)
        budgets.append(chunk.leaf_losses.max_bytes)
    assert budgets == [int(leaf_losses.LEAF_LOSS_CACHE_FRACTION * X.nbytes), leaf_losses.LEAF_LOSS_CACHE_MIN_BYTES]


def test_a_chunks_csr_copy_for_leaf_products_gives_the_same_tree(monkeypatch):
    # mostly-zero dense rows get a CSR copy for the linear leaves' products: the same sums, bit for bit
    X, y = make_blobs(500, n_features=8, centers=3, cluster_std=3.0, random_state=2)
    X[np.random.default_rng(0).random(X.shape) < 0.6] = 0.0
    fits = []
    for density in (0.0, 1.0):  # never / always a CSR copy
        monkeypatch.setattr(leaf_losses, "SPARSE_PRODUCT_DENSITY", density)
        fits.append(TAOClassifier(max_depth=3, leaf_type="linear", max_iter=3, random_state=0, n_jobs=2).fit(X, y))
    assert_tree_equal(fits[0].tree_, fits[1].tree_)
    np.testing.assert_array_equal(fits[0].history_, fits[1].history_)


def test_leaf_digests_kept_across_a_decision_update_are_those_of_the_tree(monkeypatch):
    # the driver hands a decision level's new routing the previous one's leaf digests; they must be
    # what hashing the new tree's leaves gives, or the loss cache would serve stale losses
    X, y = make_blobs(600, n_features=5, centers=4, cluster_std=3.0, random_state=0)
    keep = Routing.keep_leaf_digests
    kept = []

    def checked(self, previous):
        keep(self, previous)
        if "_leaf_digests" in self.__dict__:
            kept.append(1)
            np.testing.assert_array_equal(self.__dict__["_leaf_digests"], Routing.of(self.tree).leaf_digests())

    monkeypatch.setattr(Routing, "keep_leaf_digests", checked)
    TAOClassifier(max_depth=3, leaf_type="linear", max_iter=3, random_state=0, n_jobs=2).fit(X, y)
    assert kept


def test_leaf_digests_change_with_a_leaf_and_only_with_it():
    X, y = make_blobs(300, n_features=4, centers=3, cluster_std=3.0, random_state=0)
    tree = TAOClassifier(max_depth=3, leaf_type="linear", max_iter=2, random_state=0).fit(X, y).tree_
    before = Routing.of(tree.copy()).leaf_digests()
    leaves = np.flatnonzero(tree.is_leaf)
    assert np.all(before[leaves] != 0) and np.all(before[~tree.is_leaf] == 0)
    edited = tree.copy()
    edited.value[leaves[0], 0] += 1e-12
    after = Routing.of(edited).leaf_digests()
    assert after[leaves[0]] != before[leaves[0]]
    np.testing.assert_array_equal(after[leaves[1:]], before[leaves[1:]])
    K = tree.n_outputs
    coef = edited.leaf_coef.tolil()
    coef[leaves[1] * K, 0] += 1.0
    edited.leaf_coef = coef.tocsr()
    assert Routing.of(edited).leaf_digests()[leaves[1]] != before[leaves[1]]


@pytest.mark.parametrize("layout", ["C float64", "C float32", "Fortran", "memmap", "CSR"])
def test_candidate_margins_equal_the_gathered_product(layout, tmp_path):
    rng = np.random.RandomState(0)
    X = rng.randn(300, 12)
    X = {"C float32": X.astype(np.float32), "Fortran": np.asfortranarray(X), "CSR": sp.csr_matrix(X * (X > 0.5))}.get(
        layout, X)
    if layout == "memmap":
        X = np.lib.format.open_memmap(tmp_path / "X.npy", mode="w+", dtype=np.float64, shape=X.shape)
        X[:] = rng.randn(*X.shape)
    rows = rng.choice(300, 120, replace=False)
    w = rng.randn(12) * (rng.rand(12) < 0.5)  # a sparse hyperplane: only its columns are read
    dense = X.toarray() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
    np.testing.assert_allclose(oblique_margins(X, rows, w, 0.3), dense[rows] @ w + 0.3, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("n_rows", [1, 3, 4, 5, 8, 11])
def test_candidate_margins_four_rows_at_a_time_are_the_row_by_row_sums(n_rows):
    # each row's sum in column order from 0.0, bit for bit: the accept test and the boundary shift read them
    rng = np.random.RandomState(n_rows)
    X = rng.randn(40, 30) * 10.0 ** rng.randint(-8, 8, size=(40, 30))  # wide range: rounding shows
    rows = rng.choice(40, n_rows, replace=False)
    cols = np.flatnonzero(rng.rand(30) < 0.6)
    w = rng.randn(cols.size)
    expected = np.empty(n_rows)
    for i, r in enumerate(rows):
        s = 0.0
        for k, c in enumerate(cols):
            s += X[r, c] * w[k]
        expected[i] = s + 0.25
    out = np.empty(n_rows)
    row_margins(X, rows.astype(np.intp), cols, w, 0.25, out)
    np.testing.assert_array_equal(out, expected)


def test_a_level_computes_each_chunks_care_points_once_and_the_model_is_unchanged(monkeypatch):
    X, y = make_oblique_classification(n_samples=1500, n_features=5, random_state=3)
    seen, alive, original = [], [], care_points._care_points

    def counted(chunk, routing, depth):
        alive.append(routing)  # a routing freed during the fit could hand its id to a later one
        seen.append((id(chunk), id(routing), depth))
        return original(chunk, routing, depth)

    monkeypatch.setattr(care_points, "_care_points", counted)
    params = dict(max_depth=3, max_iter=3, random_state=0, n_jobs=2)
    memo = TAOClassifier(**params).fit(X, y)
    assert seen and len(seen) == len(set(seen))  # parts and evaluation of a level shared one computation

    # a chunk that is pickled (a Dask transfer) leaves the memo behind
    routing = Routing.of(memo.tree_)
    chunk = chunks.make_chunk(X[:100], y[:100], np.ones(100), 0, routing, np.ones(5), False)
    care_points._care(chunk, routing, 1)
    assert "_care_memo" in chunk.__dict__ and "_care_memo" not in pickle.loads(pickle.dumps(chunk)).__dict__

    monkeypatch.setattr(care_points, "_care", lambda chunk, routing, depth: original(chunk, routing, depth))
    fresh = TAOClassifier(**params).fit(X, y)
    assert_tree_equal(memo.tree_, fresh.tree_)
    np.testing.assert_array_equal(memo.history_, fresh.history_)


@pytest.mark.parametrize("sparse_rows", [False, True])
def test_visits_read_from_the_margins_equal_those_of_the_decision_path(sparse_rows):
    X, y = make_oblique_classification(n_samples=700, n_features=6, random_state=5)
    X[np.abs(X) < 0.3] = 0.0
    sw = np.random.default_rng(0).uniform(0.1, 3.0, size=y.size)
    tree = TAOClassifier(max_depth=4, max_iter=2, random_state=1, prune=False).fit(X, y).tree_
    routing = Routing.of(tree)
    rows = sp.csr_matrix(X) if sparse_rows else X
    chunk = chunks.make_chunk(rows, y, sw, 0, routing, np.ones(6), False)
    visits, reach = chunks.chunk_visits(chunk, routing)
    path = tree.decision_path(rows)
    np.testing.assert_array_equal(visits, np.asarray(path.sum(axis=0)).ravel())
    np.testing.assert_array_equal(reach, np.asarray(path.T @ sw).ravel())
    assert visits[0] == y.size and visits[tree.is_leaf].sum() == y.size


@pytest.mark.parametrize("margins_of", ["update", "new chunk"])
def test_float32_margins_keep_every_sign_of_the_float64_margins(margins_of):
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(3000, 40))
    X[rng.random(X.shape) < 0.5] = 0.0
    y = (X[:, 0] > 0).astype(int)
    tree = TAOClassifier(max_depth=3, max_iter=1, random_state=0, prune=False).fit(X, y).tree_
    nodes = np.flatnonzero(~tree.is_leaf)
    W = np.zeros((tree.n_nodes, 40))
    W[nodes] = rng.standard_normal((nodes.size, 40)) * (rng.random((nodes.size, 40)) < 0.6)
    # each hyperplane through a row; rows a hair off it, where float32 alone gets signs wrong
    tree.set_decision(nodes, W[nodes], [-X[i] @ W[node] for i, node in enumerate(nodes)])
    for i, node in enumerate(nodes):
        direction = W[node] / (W[node] @ W[node])
        for j, offset in enumerate((1e-9, -1e-9, 1e-7, -1e-7, 1e-6, -1e-6)):
            X[100 + 10 * i + j] = X[i] + offset * direction
    chunk = chunks.make_chunk(X, y, np.ones(y.size), 0, Routing.of(tree), np.ones(40), True)
    assert chunk.X_solve.dtype == np.float32
    reference = tree.decision_margins(X, nodes)
    routing = Routing.of(tree)
    # a new chunk's margins (every row rechecked entry by entry) or an update's (whole rows)
    new = chunk if margins_of == "new chunk" else chunks.chunk_update(chunk, routing, nodes)
    updated = new.margins[:, routing.column_of[nodes]]
    # The rows a hyperplane passes through have float64 margins of ~1e-17 whose sign depends on the
    # product's summation order (OpenBLAS picks kernels by shape): no sign to keep there. Every
    # planted row (1e-9 off and more) must keep the float64 sign.
    determined = np.abs(reference) > 1e-12
    assert determined.sum() >= reference.size - nodes.size
    np.testing.assert_array_equal((updated >= 0)[determined], (reference >= 0)[determined])
    np.testing.assert_allclose(updated, reference, atol=1e-4)
    # the float32 product alone disagrees on some planted sign (the recomputation is what keeps them)
    alone = chunk.X_solve @ W[nodes].T.astype(np.float32) + tree.bias[nodes]
    assert np.any(((alone >= 0) != (reference >= 0))[determined])


def test_a_float32_margin_that_is_not_a_number_is_recomputed_in_float64():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((6, 4))
    W = rng.standard_normal((3, 4))
    product = (X.astype(np.float32) @ W.T.astype(np.float32))
    product[2, 1] = np.nan  # what an overflowing float32 product (inf - inf) gives
    bias, bound, cols, used = np.zeros(3), np.full(3, 1e-9), np.arange(3), np.arange(4)
    near, dest = np.zeros(6, dtype=np.bool_), np.empty((6, 3))
    store_float32_margins(product, bias, bound, 0, dest, cols, near)
    np.testing.assert_array_equal(near, np.arange(6) == 2)  # that row is recomputed whole
    store_rechecked_margins(product, bias, bound, 0, dest, cols, X, used, W)
    assert np.isclose(dest[2, 1], X[2] @ W[1], rtol=1e-14)  # in float64, not the NaN
    np.testing.assert_allclose(dest, X @ W.T, rtol=1e-5)


def test_boundary_statistics_are_the_float64_margins_of_the_rows_at_each_node():
    X, y = make_oblique_classification(2000, 30, random_state=2)
    tree = TAOClassifier(max_depth=4, max_iter=2, random_state=0, prune=False).fit(X, y).tree_
    routing = Routing.of(tree)
    chunk = chunks.make_chunk(X, y, np.ones(y.size), 0, routing, np.ones(30), True)
    assert chunk.X_solve.dtype == np.float32  # the chunk's own margins came from a float32 product
    reference = tree.decision_margins(X, routing.internal)
    path = tree.decision_path(X)
    stats = chunks.chunk_boundaries(chunk, routing)
    reached = np.asarray(path.sum(axis=0)).ravel() > 0
    assert set(stats) == {int(n) for n in routing.internal if tree.kind[n] == OBLIQUE and reached[n]}
    for node, got in stats.items():
        m = reference[path[:, node].toarray().ravel() > 0, routing.column_of[node]]
        np.testing.assert_allclose(got, [np.abs(m).max(), m[m >= 0].min(initial=np.inf),
                                         m[m < 0].max(initial=-np.inf)], rtol=1e-12, atol=1e-12 * got[0])


def _fits_by_policy(monkeypatch, Est, X, target, policies, **params):
    """``{policy: (fitted estimator, [(leaf, rows digest) of every leaf fit run])}`` for ``refit_leaves`` policies."""
    fitted = []
    fit_leaves_task = tao_module.fit_leaves_task

    def recording(group, **kwargs):
        out = fit_leaves_task(group, **kwargs)
        # a result whose digest is the job's skip_rows was skipped, not fitted
        fitted.extend((leaf, r.rows) for leaf, r in out.items() if r is not None and r.rows != group[leaf][1].skip_rows)
        return out

    monkeypatch.setattr(tao_module, "fit_leaves_task", recording)
    out = {}
    for policy in policies:
        fitted.clear()
        est = Est(refit_leaves=policy, max_depth=3, max_iter=6, tol=0.0, random_state=0, n_jobs=2, **params)
        out[policy] = (est.fit(X, target), list(fitted))
    return out


@pytest.mark.parametrize("Est", [TAOClassifier, TAORegressor])
def test_a_refused_leaf_fit_is_not_run_again_on_the_same_rows(monkeypatch, Est):
    # A refused fit leaves the leaf as it was; on the same rows the next fit would start from the same
    # point and be refused again, so skipping it gives the same tree with fewer leaf fits.
    X, y = make_classification(1500, 20, n_informative=10, n_classes=5, random_state=0)
    target = y if Est is TAOClassifier else X[:, 0] * y
    # from a random tree: its leaves' rows settle while some leaf fits are still refused (with
    # liblinear's node fits, the leaves penalised as the nodes and the columns divided by max |x|, the
    # regression tree's scale before its linear leaves took the columns' spread, the plain penalty on every
    # column: under these this regression fit has refused leaf fits to skip)
    monkeypatch.setattr(estimator_base, "spread_scale", estimator_base.max_abs_scale)
    fits = _fits_by_policy(monkeypatch, Est, X, target, ("always", "until_refused"), leaf_type="linear",
                           init="random", solver="liblinear" if Est is TAORegressor else "fista", leaf_C=None,
                           penalty_factors=None)
    (every, every_fits), (refused, refused_fits) = fits["always"], fits["until_refused"]
    assert_tree_equal(every.tree_, refused.tree_)
    np.testing.assert_array_equal(every.history_, refused.history_)
    assert len(refused_fits) < len(every_fits)


def test_new_rows_refits_a_leaf_only_on_rows_it_was_not_fitted_on(monkeypatch):
    X, y = make_classification(1500, 20, n_informative=10, n_classes=5, random_state=0)
    fits = _fits_by_policy(monkeypatch, TAOClassifier, X, y, ("always", "new_rows"), leaf_type="linear")
    every_fits, new_fits = fits["always"][1], fits["new_rows"][1]
    assert len(set(every_fits)) < len(every_fits)  # "always" refits leaves on rows they were fitted on
    assert len(set(new_fits)) == len(new_fits)
    history = fits["new_rows"][0].history_
    assert np.all(np.diff(history) <= 1e-9 * np.abs(history[:-1]))  # skipping a fit keeps TAO monotone


def test_constant_leaves_give_the_same_tree_under_every_refit_policy(monkeypatch):
    X, y = make_classification(800, 8, n_informative=5, n_classes=3, random_state=1)
    fits = _fits_by_policy(monkeypatch, TAOClassifier, X, y, ("always", "until_refused", "new_rows"))
    reference = fits["always"][0]
    for policy in ("until_refused", "new_rows"):
        assert_tree_equal(fits[policy][0].tree_, reference.tree_)
        np.testing.assert_array_equal(fits[policy][0].history_, reference.history_)
    assert len(fits["new_rows"][1]) < len(fits["always"][1])


def test_an_unknown_refit_policy_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="refit_leaves.*'new_rows'"):
        TAOClassifier(refit_leaves="sometimes").fit(np.eye(4), [0, 1, 0, 1])


def test_a_leafs_rows_digest_depends_on_its_rows_not_on_their_chunks():
    rows = np.array([3, 5, 8, 13, 21, 34])
    assert rows_digest([rows[:2], rows[2:]]) == rows_digest([rows]) == rows_digest([rows[:5], rows[5:], rows[:0]])
    assert rows_digest([rows[:-1]]) != rows_digest([rows])
    assert rows_digest([rows + np.array([0, 0, 0, 0, 0, 1])]) != rows_digest([rows])


def test_leaf_warm_start_reaches_every_softmax_leaf_fit(monkeypatch):
    """The estimator's ``leaf_warm_start`` is what each leaf's SAGA is called with; TAO stays monotone."""
    X, y = make_classification(1200, 12, n_informative=8, n_classes=4, random_state=0)
    saga = leaf_fit.saga_logistic_l1
    for warm_start in ("coef", "gradients"):
        seen = []

        def recording(*args, **kwargs):
            seen.append((args[4] is not None, kwargs["warm_memory"], kwargs["epochs"]))
            return saga(*args, **kwargs)

        monkeypatch.setattr(leaf_fit, "saga_logistic_l1", recording)
        est = TAOClassifier(max_depth=3, leaf_type="linear", leaf_warm_start=warm_start, max_iter=4, tol=0.0,
                            random_state=0, n_jobs=1).fit(X, y)
        warm = [memory for started, memory, _ in seen if started]
        assert warm and all(memory == (warm_start == "gradients") for memory in warm)
        # the default epochs follow the warm start (leaf_max_iter=None)
        assert {epochs for *_, epochs in seen} == {leaf_fit.WARM_START_EPOCHS[warm_start]}
        history = est.history_
        assert np.all(np.diff(history) <= 1e-9 * np.abs(history[:-1]))


def test_an_unknown_leaf_warm_start_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match="leaf_warm_start.*'gradients'"):
        TAOClassifier(leaf_warm_start="momentum").fit(np.eye(4), [0, 1, 0, 1])
    with pytest.raises(ValueError, match="warm_start must be one of"):
        fit_softmax(np.eye(4), np.array([0, 1, 0, 1]), np.ones(4), n_outputs=2, alpha=1.0, warm_start="momentum")


def test_rows_stacked_as_they_are_gathered_equal_the_gathered_rows_stacked():
    rng = np.random.RandomState(0)
    A, B = rng.randn(50, 6).astype(np.float32), rng.randn(30, 6).astype(np.float32)
    pieces = [ChunkRows(A, np.array([3, 1, 40])), B[5:9].copy(), ChunkRows(B, np.array([0, 29]))]
    want = stack_rows([take_rows(p) for p in pieces])
    got = stack_part_rows(pieces)
    assert got.dtype == want.dtype == np.float32 and np.array_equal(got, want)
    out = np.empty_like(want)
    assert stack_part_rows(pieces, out=out) is out and np.array_equal(out, want)
    assert np.array_equal(stack_part_rows(pieces[:1], out=np.empty((3, 6), np.float32)), A[[3, 1, 40]])
    with pytest.raises(ValueError, match="C-contiguous float32 array of shape \\(9, 6\\)"):
        stack_part_rows(pieces, out=np.empty((9, 6)))
    raw = np.zeros(A.nbytes + 1, dtype=np.uint8)  # rows as received off the wire: at an odd address
    unaligned = raw[1:].view(np.float32).reshape(A.shape)
    unaligned[:] = A
    assert not unaligned.flags.aligned
    np.testing.assert_array_equal(stack_part_rows([ChunkRows(unaligned, np.array([7, 2])), B[:1]]),
                                  np.vstack([A[[7, 2]], B[:1]]))
    sparse = [ChunkRows(sp.csr_matrix(A), np.array([2, 0])), sp.csr_matrix(B[:3])]
    np.testing.assert_array_equal(stack_part_rows(sparse).toarray(), np.vstack([A[[2, 0]], B[:3]]))
    with pytest.raises(ValueError, match="dense rows only"):
        stack_part_rows(sparse, out=np.empty((5, 6), np.float32))


def test_consecutive_row_slices_of_one_array_are_that_array_without_a_copy():
    buf = np.arange(40, dtype=np.float32).reshape(10, 4)
    whole = consecutive_rows([buf[1:3], buf[3:3], buf[3:7]])
    assert np.shares_memory(whole, buf) and np.array_equal(whole, buf[1:7])
    assert consecutive_rows([buf[3:7], buf[0:3]]) is None  # out of order
    assert consecutive_rows([buf[0:3], buf[4:7]]) is None  # a gap
    assert consecutive_rows([buf[0:3], buf[3:7].copy()]) is None  # rows of another array
    assert consecutive_rows([buf[0:3, :2], buf[3:7, :2]]) is None  # not whole rows


def test_a_node_group_solves_from_one_array_of_care_points_and_finds_the_same_candidates(monkeypatch):
    """The oblique nodes of a group have their care points gathered into one array, which the level
    solver takes as it is (no second copy); the candidates are those of the nodes' problems built one
    by one and stacked."""
    X, y = make_oblique_classification(n_samples=900, n_features=6, random_state=2)
    y = y + 2 * (X[:, 1] > 0.3)  # 4 classes
    sw = np.ones(len(y))
    tree = TAOClassifier(max_depth=3, max_iter=1, prune=False, random_state=0).fit(X, y).tree_  # care points
    routing = Routing.of(tree)
    row_chunks = [chunks.make_chunk(X[a:b], y[a:b], sw[a:b], a, routing, np.ones(X.shape[1]), True)
                  for a, b in ((0, 400), (400, 900))]
    depth = 2
    parts = [chunk_node_parts(c, routing, depth, None, 0, 1) for c in row_chunks]
    group = {}
    for node in sorted(set().union(*parts)):
        w0, b0 = tree.weights[node].toarray().ravel(), tree.bias[node]
        job = NodeJob(kind=tree.kind[node], alpha=0.05, w0=w0, b0=b0, max_care_points=None)
        group[node] = ([p[node] for p in parts if node in p], job)

    stacked = []
    real_stack_rows = nodes_module.stack_rows
    monkeypatch.setattr(nodes_module, "stack_rows", lambda arrays: stacked.append(arrays[0].ndim) or
                        real_stack_rows(arrays))
    got = solve_nodes_task(group, solver="fista")
    assert 2 not in stacked  # the rows were not stacked again (targets and weights were)

    problems = {}
    for node, (node_parts, job) in group.items():
        stats = sum(s for s, _ in node_parts)
        assert isinstance(stats, NodeStats)
        if not stats.needs_solve():
            continue
        problems[node] = node_problem(node_parts, alpha=job.alpha, w0=job.w0, b0=job.b0,
                                      max_care_points=None, n_care=stats.n_care)
    solved = [n for n, p in problems.items() if p is not None]
    assert len(solved) >= 2
    want = NODE_SOLVERS["fista"].solve_level([problems[n] for n in solved])
    assert sorted(n for n, c in got.items() if c is not None) == solved
    for node, (w, b) in zip(solved, want):
        assert isinstance(got[node], ObliqueSplit)
        assert np.array_equal(got[node].w, w) and got[node].b == b
