"""Softmax trees: leaves limited to k classes (``leaf_classes``) and the clustering initial tree."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import make_blobs

from taodist import TAOClassifier, TAORegressor
from taodist.model.leaf_fit import fit_softmax, top_classes
from taodist.model.leaves import softmax
from taodist.tao.initial_trees import _capacity_clusters, random_tree
from taodist.tao.leaf_tasks import LeafJob, fit_leaves_task
from taodist.tao.optimizer import tao_optimize
from taodist.testing import naive_objective


def _blobs(n=1200, classes=8, features=4, seed=0):
    X, y = make_blobs(n, n_features=features, centers=classes, cluster_std=2.0, random_state=seed)
    return X, y


def _brute_top(y, w, K, k):
    """The k classes of largest weight (ties: lower index), by sorting every class."""
    counts = np.array([w[y == c].sum() for c in range(K)])
    ranked = sorted((c for c in range(K) if counts[c] > 0), key=lambda c: (-counts[c], c))
    return sorted(ranked[:k])


# ------------------------------------------------------------ one leaf
@settings(deadline=None, max_examples=200, print_blob=True)
@given(st.integers(0, 2**31 - 1), st.integers(1, 40), st.integers(1, 6), st.integers(1, 6), st.booleans())
def test_top_classes_are_the_k_heaviest_with_ties_to_the_lower_class(seed, n, K, k, integer_weights):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, size=n)
    # integer weights make ties common; zero weights drop a class
    w = rng.integers(0, 3, size=n).astype(float) if integer_weights else rng.uniform(0, 2, size=n)
    assert top_classes(y, w, K, k).tolist() == _brute_top(y, w, K, k)


def test_limited_leaf_fits_its_k_classes_on_their_points_only_and_zeroes_the_rest():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 3))
    y = rng.choice(5, size=500, p=[0.1, 0.35, 0.05, 0.3, 0.2])
    w = np.ones(500)
    value, coef = fit_softmax(X, y, w, n_outputs=5, alpha=1.0, max_classes=2)
    kept = _brute_top(y, w, 5, 2)
    assert np.flatnonzero(np.isfinite(value)).tolist() == kept
    assert np.all(np.isneginf(np.delete(value, kept)))
    assert not coef[np.setdiff1d(np.arange(5), kept)].any()
    # the same as an unlimited fit on the kept classes' points: the others are left out, not relabelled
    rows = np.isin(y, kept)
    v0, c0 = fit_softmax(X[rows], y[rows], w[rows], n_outputs=5, alpha=1.0)
    np.testing.assert_array_equal(value[kept], v0[kept])
    np.testing.assert_array_equal(coef, c0)
    P = softmax(X @ coef.T + value)
    assert np.all(P[:, np.setdiff1d(np.arange(5), kept)] == 0.0)  # exactly zero, not 1e-13
    np.testing.assert_allclose(P.sum(axis=1), 1.0)


def test_a_limit_at_or_above_the_classes_present_fits_the_same_model():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    y = rng.choice([0, 2, 3], size=300)  # classes 1 and 4 of K=5 absent
    w = rng.uniform(0.5, 2, size=300)
    v_none, c_none = fit_softmax(X, y, w, n_outputs=5, alpha=0.5)
    for k in (3, 5):
        v_k, c_k = fit_softmax(X, y, w, n_outputs=5, alpha=0.5, max_classes=k)
        np.testing.assert_array_equal(c_k, c_none)
        np.testing.assert_array_equal(v_k[[0, 2, 3]], v_none[[0, 2, 3]])
        # absent classes: -30 (a tiny probability) without a limit, -inf (exactly zero) with one
        assert np.all(v_none[[1, 4]] == -30.0) and np.all(np.isneginf(v_k[[1, 4]]))


def test_warm_start_from_a_leaf_whose_classes_all_changed_stays_finite():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(200, 3))
    y = rng.choice([2, 3], size=200)
    old_value = np.array([0.5, -0.5, -np.inf, -np.inf])  # the leaf kept classes 0 and 1 before
    value, coef = fit_softmax(X, y, np.ones(200), n_outputs=4, alpha=1.0, max_classes=2,
                              value=old_value, coef=np.zeros((4, 3)))
    assert np.isfinite(value[[2, 3]]).all() and np.isneginf(value[[0, 1]]).all() and np.isfinite(coef).all()


def test_leaf_task_keeps_the_k_most_populous_classes_of_the_reduced_set():
    X, y = _blobs(600, classes=6)
    w = np.random.default_rng(3).uniform(0.2, 2.0, size=600)
    group = {0: ([(np.arange(600), X, y, w)], LeafJob(value=np.zeros(6), coef=np.zeros((6, 4))))}
    for k in (1, 2, 4):
        value, coef, _ = fit_leaves_task(group, task="classification", leaf_type="linear", n_outputs=6, alpha=0.1,
                                      leaf_classes=k)[0]
        assert np.flatnonzero(np.isfinite(value)).tolist() == _brute_top(y, w, 6, k)


# --------------------------------------------------------- whole trees
@pytest.mark.parametrize("init", ["random", "cluster"])
@pytest.mark.parametrize("k", [1, 2, 3])
def test_every_leaf_gives_probability_to_at_most_k_classes(k, init):
    X, y = _blobs()
    clf = TAOClassifier(max_depth=3, leaf_type="linear", leaf_classes=k, init=init, max_iter=4,
                        random_state=0).fit(X, y)
    P = clf.predict_proba(X)
    assert np.all(np.count_nonzero(P, axis=1) <= k)
    np.testing.assert_allclose(P.sum(axis=1), 1.0)
    t = clf.tree_
    leaves = clf.apply(X)
    finite = np.isfinite(t.value[leaves])
    assert np.all(P[~finite] == 0.0)  # outside a leaf's classes: exactly zero
    assert np.all(finite.sum(axis=1) <= k)
    assert np.all(t.classes_scored()[leaves] == finite.sum(axis=1))
    # a class outside a leaf has no weights there: scoring a row costs k class rows, not K
    K = t.n_outputs
    for leaf in np.unique(leaves):
        rows = t.leaf_coef[leaf * K:(leaf + 1) * K]
        assert not np.diff(rows.indptr)[~np.isfinite(t.value[leaf])].any()
    assert clf.score(X, y) > 0.6  # 8 leaves of one class each for 8 overlapping classes reach ~0.75
    assert t.mean_classes_scored(X) <= k
    # every leaf, not only those the rows reach: a leaf whose fits were all refused keeps its initial
    # output, which is limited too
    assert np.all(t.classes_scored()[t.is_leaf] <= k)


@pytest.mark.parametrize("init", ["random", "cart", "cluster"])
def test_initial_leaves_are_limited_without_changing_their_prediction(init):
    X, y = _blobs()
    free = TAOClassifier(max_depth=3, leaf_type="linear", init=init, max_iter=0, prune=False, random_state=0)
    limited = TAOClassifier(max_depth=3, leaf_type="linear", leaf_classes=2, init=init, max_iter=0, prune=False,
                            random_state=0)
    free.fit(X, y), limited.fit(X, y)
    assert np.all(limited.tree_.classes_scored()[limited.tree_.is_leaf] <= 2)
    np.testing.assert_array_equal(limited.predict(X), free.predict(X))


def test_a_warm_start_from_an_unlimited_tree_is_limited():
    X, y = _blobs()
    free = TAOClassifier(max_depth=2, leaf_type="linear", max_iter=2, random_state=0).fit(X, y)
    limited = TAOClassifier(max_depth=2, leaf_type="linear", leaf_classes=3, init=free, max_iter=2,
                            random_state=0).fit(X, y)
    t = limited.tree_
    assert np.all(t.classes_scored()[t.is_leaf] <= 3)
    assert np.all(np.diff(limited.history_) <= 1e-9 * np.abs(limited.history_[:-1]))


def test_limited_trees_count_only_the_kept_classes_in_parameters_and_flops():
    X, y = _blobs()
    full = TAOClassifier(max_depth=2, leaf_type="linear", max_iter=3, random_state=0).fit(X, y)
    two = TAOClassifier(max_depth=2, leaf_type="linear", leaf_classes=2, max_iter=3, random_state=0).fit(X, y)
    assert full.tree_.mean_classes_scored(X) == 8.0
    assert two.tree_.mean_classes_scored(X) <= 2.0
    assert two.tree_.n_parameters() < full.tree_.n_parameters()
    assert two.tree_.inference_flops(X) < full.tree_.inference_flops(X)
    # the per-leaf path costs are what inference_flops averages over rows
    flops, scored = two.tree_.leaf_path_costs()
    leaf_ids = np.flatnonzero(two.tree_.is_leaf)
    per_row = flops[np.searchsorted(leaf_ids, two.apply(X))]
    assert two.tree_.inference_flops(X) == pytest.approx(per_row.mean())


@settings(deadline=None, max_examples=40, print_blob=True)
@given(st.integers(0, 2**31 - 1), st.integers(3, 5), st.integers(1, 5), st.integers(1, 3),
       st.sampled_from(["fista", "saga", "axis"]), st.sampled_from([0.01, 0.3, 3.0]))
def test_objective_never_increases_with_limited_leaves(seed, K, k, depth, solver, alpha):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(20, 80))
    X = rng.normal(size=(n, 3)).round(1)
    y = rng.integers(0, K, size=n)
    y[:K] = np.arange(K)
    w = rng.uniform(0.2, 2.0, size=n)
    node_type = "axis" if solver == "axis" else "oblique"
    tree = random_tree(lambda i: X[i], n, 3, depth, K, node_type, task="classification", leaf_type="linear",
                       rng=np.random.RandomState(seed % 2**31))
    tree.leaf_classes = min(k, K)
    result = tao_optimize(tree, X, y, w, alpha=alpha, max_iter=5, tol=0.0, node_solver=solver)
    E = np.asarray(result.objective)
    assert np.all(np.diff(E) <= 1e-9 * np.maximum(1.0, np.abs(E[:-1]))), E
    assert naive_objective(tree, X, y, w, alpha) == pytest.approx(E[-1], rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("k", [0, -1, 2.5, "2", True])
def test_bad_leaf_classes_are_refused(k):
    X, y = _blobs(200)
    with pytest.raises((ValueError, TypeError), match="leaf_classes"):
        TAOClassifier(leaf_type="linear", leaf_classes=k, max_depth=2).fit(X, y)


def test_leaf_classes_beyond_the_classes_or_without_softmax_leaves_are_refused():
    X, y = _blobs(200)
    with pytest.raises(ValueError, match="leaf_classes=9 is more than the 8 classes"):
        TAOClassifier(leaf_type="linear", leaf_classes=9, max_depth=2).fit(X, y)
    with pytest.raises(ValueError, match="leaf_type='constant'.*Use leaf_type='linear'"):
        TAOClassifier(leaf_classes=2, max_depth=2).fit(X, y)


# --------------------------------------------------- clustering init
@pytest.mark.parametrize("node_type", ["oblique", "axis"])
@pytest.mark.parametrize("leaf_type", ["constant", "linear"])
def test_cluster_init_routes_each_class_to_one_leaf_of_a_complete_tree(node_type, leaf_type):
    # 16 well separated classes on 8 leaves: k-means of the class means puts two classes on each leaf
    X, y = make_blobs(1600, n_features=5, centers=16, cluster_std=1.0, random_state=0)
    clf = TAOClassifier(init="cluster", max_depth=3, max_iter=0, prune=False, node_type=node_type,
                        leaf_type=leaf_type, random_state=0).fit(X, y)
    t = clf.tree_
    assert t.n_leaves() == 8 and np.all(t.node_depth[t.is_leaf] == 3)
    leaves = clf.apply(X)
    in_own_leaf = np.array([np.bincount(leaves[y == c]).max() / np.sum(y == c) for c in range(16)])
    # a node's two groups of classes need not be linearly separable: most, not all, rows follow their class
    assert in_own_leaf.mean() > 0.85
    # each leaf starts from the classes assigned to it: better than chance (1/16) before any TAO iteration
    assert clf.score(X, y) > (0.4 if node_type == "oblique" else 0.2)


def test_cluster_init_with_fewer_classes_than_leaves_clusters_the_rows():
    X, y = _blobs(800, classes=3)
    clf = TAOClassifier(init="cluster", max_depth=3, max_iter=0, prune=False, random_state=0).fit(X, y)
    assert clf.tree_.n_leaves() == 8 and np.all(clf.tree_.node_depth[clf.tree_.is_leaf] == 3)
    assert len(np.unique(clf.apply(X))) >= 6  # rows, not classes, fill the leaves
    assert clf.score(X, y) > 0.8


def test_cluster_init_then_tao_with_limited_leaves_fits_well():
    X, y = make_blobs(1600, n_features=5, centers=16, cluster_std=1.5, random_state=1)
    clf = TAOClassifier(init="cluster", max_depth=3, leaf_type="linear", leaf_classes=4, max_iter=5,
                        random_state=0).fit(X, y)
    assert clf.score(X, y) > 0.9
    assert np.all(np.count_nonzero(clf.predict_proba(X), axis=1) <= 4)
    assert np.all(np.diff(clf.history_) <= 1e-9 * np.abs(clf.history_[:-1]))


@pytest.mark.parametrize("sparse", [False, True])
def test_capacity_clusters_hold_at_most_capacity_points_and_the_heaviest_keep_their_nearest_centre(sparse):
    import scipy.sparse as sp

    rng = np.random.default_rng(0)
    # 30 points in 3 tight groups of 18, 8 and 4: capacity 10 must move 8 points out of the big group
    points = np.concatenate([rng.normal(c, 0.1, size=(m, 2)) for c, m in (((0, 0), 18), ((5, 0), 8), ((0, 5), 4))])
    weight = rng.uniform(1, 10, size=30)
    centers = np.array([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]])
    labels, moved = _capacity_clusters(sp.csr_matrix(points) if sparse else points, weight, centers, 10)
    assert np.bincount(labels, minlength=3).max() <= 10
    big = np.arange(18)
    heaviest = big[np.argsort(-weight[big], kind="stable")[:10]]
    assert np.all(labels[heaviest] == 0)  # the 10 heaviest points of the big group stay in its cluster
    assert moved.shape == centers.shape
    # more points than room: the surplus goes to the nearest centre, the clusters are full
    labels, _ = _capacity_clusters(points, weight, centers, 6)
    assert np.bincount(labels, minlength=3).min() >= 6


def test_cluster_init_limits_each_cluster_to_leaf_classes_so_no_class_is_lost_by_construction():
    # Zipfian class sizes around 4 centres: k-means of the 24 class means lumps 6 classes per centre on
    # 4 of the 8 leaves, and a leaf keeping 3 classes would lose the rows of the other 3
    rng = np.random.default_rng(0)
    centres = rng.normal(0, 10, size=(4, 6))
    means = np.repeat(centres, 6, axis=0) + rng.normal(0, 2.0, size=(24, 6))
    sizes = np.maximum(10, (600 / np.arange(1, 25) ** 0.8).astype(int))
    y = np.repeat(np.arange(24), sizes)
    X = means[y] + rng.normal(0, 0.3, size=(y.size, 6))
    for k in (3, 4):
        clf = TAOClassifier(init="cluster", max_depth=3, max_iter=0, prune=False, leaf_type="linear",
                            leaf_classes=k, random_state=0).fit(X, y)
        t = clf.tree_
        kept = np.isfinite(t.value[clf.apply(X), np.searchsorted(clf.classes_, y)])
        assert kept.mean() > 0.97, k  # plain k-means: 0.86 (k=3), 0.96 (k=4)  # the rows whose class their leaf keeps


@pytest.mark.parametrize("sparse", [False, True])
def test_cluster_init_splits_a_node_of_a_few_rows_exactly_and_silently(sparse):
    import warnings

    import scipy.sparse as sp

    from taodist.tao.initial_trees import _separate

    X = np.array([[0.0, 3.0], [0.0, 1.0], [0.0, 2.0]])
    target = np.array([True, False, True])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # scikit-learn warns that 2 classes in 3 rows look like regression
        w, b = _separate(sp.csr_matrix(X) if sparse else X, target, np.ones(3), "oblique", alpha=0.1)
    np.testing.assert_array_equal(X @ w + b >= 0, target)
    assert np.count_nonzero(w) == 1
    w, b = _separate(np.ones((2, 2)), np.array([True, False]), np.array([1.0, 3.0]), "oblique", alpha=0.1)
    assert not w.any() and b < 0  # rows no feature separates: all to the heavier side


def test_cluster_init_is_refused_for_regression():
    X, y = _blobs(100)
    with pytest.raises(ValueError, match="init='cluster'.*needs a classifier"):
        TAORegressor(init="cluster", max_depth=2).fit(X, y.astype(float))


@pytest.mark.parametrize("leaf_classes", [None, 3])
def test_large_leaves_kept_as_csr_coefficients_give_the_dense_model(monkeypatch, leaf_classes):
    # many-class, high-dimensional leaves ((K, D) above taodist.model.linear_outputs.DENSE_COEF_MAX) are handed
    # around as CSR, never dense; forcing that path on a small problem must give the same tree
    import scipy.sparse as sp

    import taodist.model.leaf_fit as leaf_fit
    import taodist.model.linear_outputs as linear_outputs

    X, y = make_blobs(n_samples=300, centers=5, n_features=6, random_state=0)
    params = dict(max_depth=2, leaf_type="linear", leaf_classes=leaf_classes, max_iter=3, random_state=0)
    dense = TAOClassifier(**params).fit(X, y)
    monkeypatch.setattr(linear_outputs, "DENSE_COEF_MAX", 0)
    seen = []
    fit = leaf_fit.fit_softmax

    def spy(*args, **kwargs):
        out = fit(*args, **kwargs)
        seen.append(sp.issparse(out[1]))
        return out

    monkeypatch.setattr(leaf_fit, "fit_softmax", spy)
    csr = TAOClassifier(**params).fit(X, y)
    assert seen and all(seen)
    np.testing.assert_allclose(csr.tree_.value, dense.tree_.value, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(csr.tree_.leaf_coef.toarray(), dense.tree_.leaf_coef.toarray(), rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(csr.predict(X), dense.predict(X))


# ---------------------------------------------------------- top-n prediction
def _brute_top_n(proba, n):
    """Every class sorted by probability (ties: lower class): what predict_top must match."""
    return np.argsort(-proba, axis=1, kind="stable")[:, :n]


@pytest.mark.parametrize("sparse_input", [False, True])
@pytest.mark.parametrize("leaf_type, leaf_classes", [("constant", None), ("linear", None), ("linear", 3)])
def test_predict_top_is_the_sorted_probabilities_and_predict_its_first_column(leaf_type, leaf_classes,
                                                                               sparse_input):
    import scipy.sparse as sp

    X, y = _blobs(classes=7)
    X[:, 0] = np.where(X[:, 0] > 0, X[:, 0], 0.0)  # zeros for the sparse variant
    Xin = sp.csr_matrix(X) if sparse_input else X
    clf = TAOClassifier(max_depth=3, leaf_type=leaf_type, leaf_classes=leaf_classes, max_iter=3,
                        random_state=0).fit(Xin, y)
    P = clf.predict_proba(Xin)
    for n in (1, 4, 7, 10):
        top = clf.predict_top(Xin, n)
        assert top.shape == (X.shape[0], min(n, 7))
        np.testing.assert_array_equal(top, clf.classes_[_brute_top_n(P, n)])
    np.testing.assert_array_equal(clf.predict(Xin), clf.predict_top(Xin, 1)[:, 0])
    np.testing.assert_array_equal(clf.predict(Xin), clf.classes_[np.argmax(P, axis=1)])


def test_predict_top_with_string_labels_and_ties_to_the_lower_class():
    # constant leaves of a depth-0 tree: one distribution with ties
    X = np.zeros((6, 2))
    y = np.array(["b", "a", "c", "b", "a", "c"])
    clf = TAOClassifier(max_depth=1, max_iter=1, random_state=0).fit(X, y)
    assert clf.predict_top(X[:1], 3).tolist() == [["a", "b", "c"]]
    assert clf.predict(X[:1]).tolist() == ["a"]


def test_a_limited_leaf_scores_only_its_classes_when_predicting(monkeypatch):
    # the top-n path must never build the (n, K) logits of every class
    import taodist.model.leaves as leaves

    X, y = _blobs(classes=8)
    clf = TAOClassifier(max_depth=2, leaf_type="linear", leaf_classes=2, max_iter=2, random_state=0).fit(X, y)
    expected = clf.predict(X)

    def refuse(*args, **kwargs):
        raise AssertionError("predict built the outputs of every class")

    monkeypatch.setattr(leaves.LinearLeaf, "outputs", refuse)
    monkeypatch.setattr(leaves, "softmax", refuse)
    np.testing.assert_array_equal(clf.predict(X), expected)
    assert clf.predict_top(X, 5).shape == (X.shape[0], 5)


@pytest.mark.parametrize("n", [0, -1, 2.5, True, "3"])
def test_predict_top_refuses_a_bad_n(n):
    X, y = _blobs(n=200, classes=3)
    clf = TAOClassifier(max_depth=1, max_iter=1, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        clf.predict_top(X, n)


# ------------------------------------------------ fused CSR prediction (taodist.model.predict_csr)
def _random_softmax_tree(seed, node_type, leaf_classes, D=40, K=12, depth=3):
    """A softmax tree with random decisions (sparse and dense oblique rows, or axis splits) and leaves.

    Leaves score ``leaf_classes`` classes (all K when None, some with an
    empty coefficient row like classes absent from a leaf); one leaf has two
    equal best intercepts and no weights (a tie).
    """
    from taodist.model.kinds import AXIS
    from taodist.model.tree import complete_tree

    rng = np.random.default_rng(seed)
    tree = complete_tree(depth, D, K, "oblique", task="classification", leaf_type="linear")
    tree.leaf_classes = leaf_classes
    internal = np.flatnonzero(tree.children_left >= 0)
    W = rng.normal(size=(internal.size, D)) * (rng.random((internal.size, D)) < rng.choice([0.1, 0.9], internal.size)[:, None])
    W[np.arange(internal.size), rng.integers(0, D, internal.size)] = 1.0  # no node without weights
    tree.set_decision(internal, W, rng.normal(scale=0.1, size=internal.size))
    if node_type == "mixed":  # every other decision node splits on one feature
        axis = internal[::2]
        tree.kind[axis] = AXIS
        tree.feature[axis] = rng.integers(0, D, axis.size)
        tree.threshold[axis] = rng.uniform(0.0, 0.3, axis.size)
    leaves = np.flatnonzero(tree.children_left < 0)
    coefs = []
    for i, leaf in enumerate(leaves):
        k = K if leaf_classes is None else leaf_classes
        scored = np.sort(rng.choice(K, k, replace=False))
        value = np.full(K, -np.inf)
        value[scored] = rng.normal(size=k)
        coef = np.zeros((K, D))
        with_weights = scored[rng.random(k) < 0.8]
        coef[with_weights] = rng.normal(size=(with_weights.size, D)) * (rng.random((with_weights.size, D)) < 0.3)
        if i == 0:  # a tie: the lower class wins
            value[scored] = 0.0
            value[scored[1:3]] = 1.0
            coef[:] = 0.0
        if leaf_classes is None:
            value[~np.isfinite(value)] = -30.0
        tree.value[leaf] = value
        coefs.append(coef)
    tree.set_leaf_coef(leaves, coefs)
    return tree


def _random_csr(seed, n, D, dtype, unsorted):
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    X = sp.random(n, D, density=0.25, format="csr", random_state=seed, dtype=np.float64)
    X.data = rng.uniform(-1, 1, X.nnz)
    X = sp.diags((rng.random(n) > 0.05).astype(np.float64)) @ X  # empty rows
    X = sp.csr_matrix(X)
    X.eliminate_zeros()
    X = X.astype(dtype)
    if unsorted:  # entries of each row in reverse order, as some scipy products leave them
        order = np.concatenate([np.arange(X.indptr[r + 1] - 1, X.indptr[r] - 1, -1) for r in range(n)])
        X = sp.csr_matrix((X.data[order], X.indices[order], X.indptr), shape=X.shape)
    return X


def _balance_splits(tree, X):
    """Biases and thresholds between the middle distinct values of the rows reaching each node.

    Every leaf is reached, and no margin is within rounding of 0 (where the
    summation order, which differs between paths, could decide).
    """
    from taodist.model.kinds import AXIS

    Xd = X.toarray().astype(np.float64)
    reach = {0: np.arange(X.shape[0])}
    for node in range(tree.n_nodes):  # breadth-first: parents first
        rows = reach.get(node, np.arange(0))
        if tree.children_left[node] < 0 or rows.size == 0:
            continue
        if tree.kind[node] == AXIS:
            x = Xd[rows, tree.feature[node]]
            u = np.unique(x)
            tree.threshold[node] = (u[u.size // 2 - 1] + u[u.size // 2]) / 2
            right = x >= tree.threshold[node]
        else:
            m = Xd[rows] @ tree.weights[node].toarray().ravel()
            u = np.unique(m)
            tree.bias[node] = -(u[u.size // 2 - 1] + u[u.size // 2]) / 2
            right = m + tree.bias[node] >= 0
        reach[tree.children_left[node]], reach[tree.children_right[node]] = rows[~right], rows[right]


def _reference_best(tree, X):
    from taodist.utils.rows import as_csr

    Xc = as_csr(X, X.dtype)
    leaves = tree.apply(Xc)
    return tree.leaf_model.best_classes(tree, Xc, leaves, np.arange(leaves.size), 1)[:, 0], leaves


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("node_type", ["oblique", "mixed"])
@pytest.mark.parametrize("leaf_classes", [None, 1, 4])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("leaf_mode", ["block+map", "block+scan", "sparse rows"])
@pytest.mark.parametrize("node_rows", ["dense", "sparse", "shallow dense"])
def test_fused_csr_prediction_gives_the_reference_classes(monkeypatch, seed, node_type, leaf_classes, dtype,
                                                         leaf_mode, node_rows):
    import taodist.model.predict_csr as fused

    if node_rows == "sparse":  # every node reads the row by feature; and blocks of 256 rows
        monkeypatch.setattr(fused, "_DENSE_ROW_BYTES", 0)
        monkeypatch.setattr(fused, "_BLOCK_ROWS", 256)
    elif node_rows == "shallow dense":  # the root and its children dense, the deeper nodes sparse
        monkeypatch.setattr(fused, "_DENSE_ROW_BYTES", 3 * 41 * 4)
    if leaf_mode == "block+scan":
        monkeypatch.setattr(fused, "_LEAF_MAP_BYTES", 0)
    elif leaf_mode == "sparse rows":
        monkeypatch.setattr(fused, "_BLOCK_DENSITY", 2.0)
    tree = _random_softmax_tree(seed, node_type, leaf_classes)
    X = _random_csr(seed, 3000, tree.n_features, dtype, unsorted=seed == 1)
    _balance_splits(tree, X)
    expected, leaves = _reference_best(tree, X)
    assert np.array_equal(np.unique(leaves), np.flatnonzero(tree.children_left < 0))  # every leaf is reached
    np.testing.assert_array_equal(fused.best_classes_csr(tree, X), expected)
    np.testing.assert_array_equal(tree.best_classes(X, 1)[:, 0], expected)  # the path predict takes


def test_fused_csr_prediction_sums_near_ties_again_from_the_float64_coefficients():
    # leaf blocks are float32: two classes whose coefficients are equal in float32 and differ in
    # float64 tie in the block's sums; the kernel must sum them again and pick the reference's class
    import taodist.model.predict_csr as fused

    tree = _random_softmax_tree(0, "oblique", 4)
    X = _random_csr(0, 3000, tree.n_features, np.float64, unsorted=False)
    _balance_splits(tree, X)
    K = tree.n_outputs
    leaf = int(np.flatnonzero(tree.children_left < 0)[1])
    coef = tree.leaf_coef[leaf * K:(leaf + 1) * K].toarray()
    scored = np.flatnonzero(np.isfinite(tree.value[leaf]))
    a = int(scored[np.flatnonzero(coef[scored].any(axis=1))[0]])
    b = int(scored[scored != a][-1])
    coef[a] = coef[a].astype(np.float32)  # on float32's grid, so that b's rounds back to it
    coef[b] = coef[a] * (1 + 2.0 ** -30)  # the same float32 coefficients, larger float64 ones
    assert np.array_equal(coef[b].astype(np.float32), coef[a].astype(np.float32)) and not np.array_equal(coef[b], coef[a])
    tree.value[leaf, scored] = -5.0
    tree.value[leaf, [a, b]] = 100.0
    tree.set_leaf_coef(np.array([leaf]), [coef])
    expected, leaves = _reference_best(tree, X)
    at_leaf = expected[leaves == leaf]
    assert {a, b} <= set(at_leaf.tolist())  # b where its float64 score is larger, a where smaller
    plan = fused._build_plan(tree, X.shape[1])
    assert plan["block_ptr"][plan["leaf_slot"][leaf]] >= 0  # the leaf is scored from its float32 block
    np.testing.assert_array_equal(fused.best_classes_csr(tree, X), expected)


def test_fused_csr_prediction_adds_up_duplicate_entries_and_routes_dense_rows_like_the_reference():
    import scipy.sparse as sp

    from taodist.model.predict_csr import best_classes_csr

    tree = _random_softmax_tree(0, "oblique", 4)
    X = _random_csr(0, 3000, tree.n_features, np.float64, unsorted=False)
    # every entry split in two halves that add up to it exactly (halving is exact)
    half = X.data / 2
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    doubled = sp.csr_matrix((np.concatenate([half, half]), (np.concatenate([rows, rows]),
                                                             np.concatenate([X.indices, X.indices]))), shape=X.shape)
    doubled = sp.csr_matrix((doubled.data, doubled.indices, doubled.indptr), shape=X.shape)  # not summed
    np.testing.assert_array_equal(best_classes_csr(tree, doubled), _reference_best(tree, X)[0])
    # a dense copy of X through the reference path: the same classes again
    np.testing.assert_array_equal(best_classes_csr(tree, X), tree.best_classes(X.toarray(), 1)[:, 0])


def test_predict_of_sparse_rows_is_the_reference_on_a_fitted_softmax_tree():
    import scipy.sparse as sp

    X, y = _blobs(n=1500, classes=10, features=30)
    X = sp.csr_matrix(np.where(np.abs(X) > 4, X, 0.0))
    est = TAOClassifier(max_depth=3, leaf_type="linear", leaf_classes=3, max_iter=2, random_state=0).fit(X, y)
    expected, _ = _reference_best(est.tree_, X)
    np.testing.assert_array_equal(est.predict(X), est.classes_[expected])
    np.testing.assert_array_equal(est.predict(X), est.predict(X.toarray()))


def test_a_kept_prediction_plan_follows_edits_of_the_tree(monkeypatch):
    import taodist.model.predict_csr as fused

    builds = []
    build = fused._build_plan
    monkeypatch.setattr(fused, "_build_plan", lambda tree, n: builds.append(id(tree)) or build(tree, n))
    tree = _random_softmax_tree(0, "oblique", 4)
    X = _random_csr(0, 2000, tree.n_features, np.float64, unsorted=False)
    _balance_splits(tree, X)
    first = fused.best_classes_csr(tree, X)
    np.testing.assert_array_equal(fused.best_classes_csr(tree, X[:500]), first[:500])
    assert len(builds) == 1  # the second call used the kept plan
    # edited in place: a leaf's best scored class made unbeatable, a node's bias moved
    leaf = int(np.flatnonzero(tree.children_left < 0)[3])
    cls = int(np.flatnonzero(np.isfinite(tree.value[leaf]))[-1])
    tree.value[leaf, cls] = 1e6
    tree.bias[0] += 0.5
    expected, leaves = _reference_best(tree, X)
    assert (expected != first).any() and (expected[leaves == leaf] == cls).all()
    np.testing.assert_array_equal(fused.best_classes_csr(tree, X), expected)
    assert len(builds) == 2
    # made corrupt in place after a prediction: refused, as a fresh tree would be
    tree.children_left[1] = 0
    with pytest.raises(ValueError, match="corrupt|cycle|parent"):
        fused.best_classes_csr(tree, X)


def test_prediction_plans_are_kept_for_a_few_trees_only():
    import gc

    import taodist.model.predict_csr as fused

    trees = [_random_softmax_tree(seed, "oblique", 4) for seed in range(fused._PLANS_KEPT + 2)]
    X = _random_csr(0, 200, trees[0].n_features, np.float64, unsorted=False)
    for tree in trees:
        fused.best_classes_csr(tree, X)
    kept = [id(entry[0]()) for entry in fused._plans.values()]
    assert kept == [id(tree) for tree in trees[-fused._PLANS_KEPT:]]  # the last trees predicted with, oldest first
    del trees, tree, kept
    gc.collect()
    assert all(entry[0]() is None for entry in fused._plans.values())  # a kept plan does not keep its tree alive


def test_leaf_max_iter_sets_the_softmax_leaves_epochs():
    X, y = _blobs(n=1200, classes=6, features=8)
    kw = dict(max_depth=3, leaf_type="linear", max_iter=4, random_state=0)
    default = TAOClassifier(**kw).fit(X, y)
    five = TAOClassifier(**kw, leaf_max_iter=5).fit(X, y)  # the default's SAGA epochs on dense rows
    np.testing.assert_array_equal(five.tree_.leaf_coef.toarray(), default.tree_.leaf_coef.toarray())
    np.testing.assert_array_equal(five.history_, default.history_)
    more = TAOClassifier(**kw, leaf_max_iter=30).fit(X, y)
    assert not np.array_equal(more.tree_.leaf_coef.toarray(), default.tree_.leaf_coef.toarray())
    assert np.all(np.diff(more.history_) <= 1e-9 * np.abs(more.history_[:-1]))  # still monotone


@pytest.mark.parametrize("bad", [0, -3, 2.5, "many"])
def test_bad_leaf_max_iter_is_refused(bad):
    X, y = _blobs(n=200, classes=3, features=4)
    with pytest.raises(ValueError, match="leaf_max_iter"):
        TAOClassifier(leaf_type="linear", leaf_max_iter=bad).fit(X, y)
