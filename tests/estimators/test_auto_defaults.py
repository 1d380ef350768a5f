"""The data-dependent defaults: ``max_depth="auto"`` and ``init="auto"``."""

import math

import dask.array as da
import numpy as np
import pytest
import scipy.sparse as sp
from numpy.testing import assert_array_equal
from sklearn.datasets import make_classification, make_regression
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor
from taodist.estimators.auto import auto_depth, cut_tree_nodes, cv_cart_depth, cv_cart_losses, resolve_auto_depth
from taodist.estimators.execution import spread_scale


def brute_auto_depth(n, n_classes, task, linear_leaves=False):
    """The deepest depth in 2..10 whose complete tree still has the rule's rows per leaf, then the class floor."""
    rows_per_leaf = {"classification": 32.0, "regression": 256.0 if linear_leaves else 16.0}[task]
    if n_classes > 2:
        rows_per_leaf *= math.sqrt(2.0 / n_classes)
    depth = 2
    for d in range(2, 11):
        if 2 ** d * rows_per_leaf <= n:
            depth = d
    if n_classes > 2:
        depth = max(depth, math.ceil(math.log2(n_classes)) + 1)
    return depth


@pytest.mark.parametrize("task, linear_leaves", [("classification", False), ("regression", False),
                                                 ("regression", True)])
def test_auto_depth_is_the_deepest_tree_with_the_rows_per_leaf(task, linear_leaves):
    for n in [1, 10, 63, 64, 127, 128, 129, 500, 1023, 1024, 4096, 8191, 8192, 10**5, 10**7]:
        for n_classes in ([2, 3, 5, 10, 26, 100, 5000] if task == "classification" else [0]):
            assert (auto_depth(n, n_classes, task, linear_leaves=linear_leaves)
                    == brute_auto_depth(n, n_classes, task, linear_leaves)), (n, n_classes)


def test_auto_depth_gives_every_class_two_leaves_but_stays_within_twenty():
    assert auto_depth(100, 26, "classification") == 6
    assert auto_depth(100, 10**7, "classification") == 20


def test_cut_tree_nodes_stop_each_row_at_its_paths_node_of_that_depth():
    X, y = make_regression(300, 4, noise=5.0, random_state=0)
    tree = DecisionTreeRegressor(max_depth=7, random_state=0).fit(X, y).tree_
    Xq = make_regression(50, 4, random_state=1)[0]
    path = DecisionTreeRegressor(max_depth=7, random_state=0).fit(X, y).decision_path(Xq).tocsr()
    node_depth = np.zeros(tree.node_count, dtype=int)
    for i in range(tree.node_count):
        for c in (tree.children_left[i], tree.children_right[i]):
            if c >= 0:
                node_depth[c] = node_depth[i] + 1
    leaves = tree.apply(Xq.astype(np.float32))
    cut = cut_tree_nodes(tree, leaves, range(0, 10))
    for d in range(0, 10):
        expected = [row[node_depth[row] <= d].max() for row in np.split(path.indices, path.indptr[1:-1])]
        np.testing.assert_array_equal(cut[d], expected)


def brute_cv_losses(X, y, w, random_state):
    """Per depth 2..10, the folds' weighted squared error of each fold's depth-10 CART cut at that depth,
    each row predicted by the mean of its path's deepest node at that depth (read from the decision path)."""
    losses = dict.fromkeys(range(2, 11), 0.0)
    for tr, va in KFold(5, shuffle=True, random_state=random_state).split(X):
        cart = DecisionTreeRegressor(max_depth=10, random_state=random_state).fit(X[tr], y[tr], sample_weight=w[tr])
        path = cart.decision_path(X[va]).tocsr()
        for d in losses:
            for row, nodes in enumerate(np.split(path.indices, path.indptr[1:-1])):
                node = nodes[len(nodes) - 1 if len(nodes) <= d + 1 else d]  # the root is depth 0
                losses[d] += w[va][row] * (cart.tree_.value[node, 0, 0] - y[va][row]) ** 2
    return losses


@pytest.mark.parametrize("noise", [1.0, 30.0, 200.0])
def test_cv_cart_losses_and_depth_match_a_brute_force_reference(noise):
    X, y = make_regression(400, 5, n_informative=3, noise=noise, random_state=2)
    w = np.random.RandomState(0).uniform(0.5, 2.0, size=400)
    expected = brute_cv_losses(X, y, w, 3)
    losses = cv_cart_losses(X, y, w, random_state=3)
    assert sorted(losses) == list(range(2, 11))
    np.testing.assert_allclose([losses[d] for d in range(2, 11)], [expected[d] for d in range(2, 11)], rtol=1e-9)
    assert cv_cart_depth(X, y, w, random_state=3) == min(expected, key=lambda d: (expected[d], d))


def test_a_cut_cart_predicts_as_a_cart_grown_to_that_depth_where_no_split_ties():
    # well-populated nodes of continuous features (depth 3 of 2,000 rows): the cut tree is CART at depth 3
    X, y = make_regression(2000, 5, n_informative=3, noise=10.0, random_state=2)
    deep = DecisionTreeRegressor(max_depth=10, random_state=0).fit(X, y)
    shallow = DecisionTreeRegressor(max_depth=3, random_state=0).fit(X, y)
    nodes = cut_tree_nodes(deep.tree_, deep.apply(X), [3])[3]
    np.testing.assert_allclose(deep.tree_.value[nodes, 0, 0], shallow.predict(X))


def test_cv_cart_depth_is_shallower_for_noisier_targets_and_the_floor_for_few_rows():
    X, y0 = make_regression(600, 5, n_informative=3, noise=0.0, random_state=2)
    y_noisy = y0 + np.random.RandomState(1).normal(scale=5 * y0.std(), size=600)
    w = np.ones(600)
    assert cv_cart_depth(X, y_noisy, w, random_state=0) < cv_cart_depth(X, y0, w, random_state=0)
    assert cv_cart_depth(X[:9], y0[:9], w[:9]) == 2


def brute_cv_errors(X, y, w, random_state):
    """Weighted cross-validated errors of a classification CART cut at each depth 2..10, row by row:
    each row predicted by the heaviest class of its path's deepest node at that depth."""
    errors = dict.fromkeys(range(2, 11), 0.0)
    for tr, va in StratifiedKFold(5, shuffle=True, random_state=random_state).split(X, y):
        cart = DecisionTreeClassifier(max_depth=10, random_state=random_state).fit(X[tr], y[tr], sample_weight=w[tr])
        path = cart.decision_path(X[va]).tocsr()
        for d in errors:
            for row, nodes in enumerate(np.split(path.indices, path.indptr[1:-1])):
                node = nodes[len(nodes) - 1 if len(nodes) <= d + 1 else d]
                errors[d] += w[va][row] * (cart.classes_[np.argmax(cart.tree_.value[node, 0])] != y[va][row])
    return errors


def noisy_classes(n=1500, flip=0.3, seed=0):
    """Three classes, ``flip`` of the labels redrawn at random: CART's validation wants a shallow tree."""
    X, y = make_classification(n, 6, n_informative=3, n_redundant=0, n_classes=3, random_state=seed)
    rng = np.random.RandomState(seed)
    redraw = rng.rand(n) < flip
    y[redraw] = rng.randint(3, size=redraw.sum())
    return X, y


@pytest.mark.parametrize("flip", [0.0, 0.3])
def test_classification_cv_cart_errors_and_depth_match_a_brute_force_reference(flip):
    X, y = noisy_classes(500, flip, seed=1)
    w = np.random.RandomState(0).uniform(0.5, 2.0, size=500)
    expected = brute_cv_errors(X, y, w, 3)
    errors = cv_cart_losses(X, y, w, random_state=3, task="classification")
    np.testing.assert_allclose([errors[d] for d in range(2, 11)], [expected[d] for d in range(2, 11)], rtol=1e-9)
    assert cv_cart_depth(X, y, w, random_state=3, task="classification") == min(expected, key=lambda d: (expected[d], d))


def test_a_classification_tree_takes_the_rule_capped_at_carts_cross_validated_depth():
    X, y = noisy_classes()
    w = np.ones(len(y))
    rule = auto_depth(len(y), 3, "classification")
    cv = cv_cart_depth(X, y, w, random_state=5, task="classification")
    assert cv < rule  # label noise: the cap binds here
    assert TAOClassifier(max_iter=1, random_state=5).fit(X, y).max_depth_ == cv
    # on a clean, larger set the rule is the shallower and stays
    X, y = make_classification(3000, 8, n_informative=6, n_classes=2, class_sep=2.0, random_state=0)
    assert cv_cart_depth(X, y, np.ones(3000), random_state=0, task="classification") >= auto_depth(3000, 2, "classification")
    assert TAOClassifier(max_iter=1, random_state=0).fit(X, y).max_depth_ == auto_depth(3000, 2, "classification")


def test_a_linear_leaf_regression_tree_takes_the_rule_capped_at_carts_cross_validated_depth():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(8000, 5))
    y = 0.3 * X[:, 0] + rng.poisson(1.0, size=8000)  # a noisy count: CART's validation keeps a shallow tree
    w = np.ones(len(y))
    rule = auto_depth(len(y), 0, "regression", linear_leaves=True)
    cv = cv_cart_depth(X, (y - y.mean()) / y.std(), w, random_state=5)
    assert cv < rule == 4
    assert TAORegressor(max_iter=1, random_state=5).fit(X, y).max_depth_ == cv
    assert resolve_auto_depth(X, y, w, "regression", 0, 5, linear_leaves=True) == cv
    # Dask input and a forest's trees keep the rule alone
    da = pytest.importorskip("dask.array")
    assert resolve_auto_depth(da.from_array(X, chunks=(2000, 5)), y, w, "regression", 0, 5,
                              linear_leaves=True) == rule
    assert resolve_auto_depth(X, y, w, "regression", 0, 5, rule_rows=len(y), linear_leaves=True) == rule


def test_dask_input_and_forests_keep_the_classification_rule_alone():
    da = pytest.importorskip("dask.array")
    X, y = noisy_classes()
    w = np.ones(len(y))
    rule = auto_depth(len(y), 3, "classification")
    assert resolve_auto_depth(X, y, w, "classification", 3, 5) < rule
    assert resolve_auto_depth(da.from_array(X, chunks=(500, 6)), y, w, "classification", 3, 5) == rule
    assert resolve_auto_depth(X, y, w, "classification", 3, 5, rule_rows=len(y)) == rule


@pytest.mark.parametrize("Est, task, params", [(TAOClassifier, "classification", {}),
                                               (TAORegressor, "regression", {}),
                                               (TAORegressor, "regression", {"leaf_type": "constant"})])
def test_a_tree_fits_to_its_auto_depth_and_keeps_an_explicit_one(Est, task, params):
    n = 700 if task == "classification" else 3000
    if task == "classification":
        X, y = make_classification(n, 6, n_informative=4, n_classes=3, random_state=0)
        assert auto_depth(n, 3, task) == brute_auto_depth(n, 3, task)
        expected = min(auto_depth(n, 3, task), cv_cart_depth(X, y, np.ones(n), random_state=0, task=task))
    elif params.get("leaf_type") == "constant":
        X, y = make_regression(n, 6, noise=1.0, random_state=0)
        # CART's cross-validated depth, on the standardised target the fit sees
        expected = cv_cart_depth(X, (y - y.mean()) / y.std(), np.ones(n), random_state=0)
    else:  # linear leaves (the default): the rule of rows per leaf, at most CART's cross-validated depth
        X, y = make_regression(n, 6, noise=1.0, random_state=0)
        expected = brute_auto_depth(n, 0, task, linear_leaves=True)
        assert expected == auto_depth(n, 0, task, linear_leaves=True) == 3
        assert cv_cart_depth(X, (y - y.mean()) / y.std(), np.ones(n), random_state=0) > 3  # the cap does not bind
    est = Est(max_iter=2, random_state=0, **params).fit(X, y)
    assert est.max_depth == "auto"
    assert est.max_depth_ == expected
    assert est.tree_.max_depth <= est.max_depth_
    assert Est(max_depth=3, max_iter=2, random_state=0, **params).fit(X, y).max_depth_ == 3


def test_binary_classification_counts_two_classes():
    X, y = make_classification(2000, 6, random_state=0)
    assert auto_depth(2000, 2, "classification") == 5  # floor(log2(2000 / 32)), not the multi-class rule
    w = np.ones(2000)
    expected = min(5, cv_cart_depth(X, y, w, random_state=0, task="classification"))
    assert TAOClassifier(max_iter=1, random_state=0).fit(X, y).max_depth_ == expected


def test_a_classification_forest_takes_its_auto_depth_from_the_rows_a_tree_draws():
    X, y = make_classification(1200, 5, n_informative=3, n_classes=3, random_state=0)
    forest = TAOForestClassifier(n_estimators=2, max_samples=0.25, max_iter=1, random_state=0).fit(X, y)
    assert forest.max_depth_ == auto_depth(300, 3, "classification") != auto_depth(1200, 3, "classification")
    assert all(t.max_depth_ == forest.max_depth_ for t in forest.estimators_)


def test_a_forest_of_a_subclassed_classification_tree_keeps_the_classification_depth_rule():
    class Tree(TAOClassifier):
        pass

    class Forest(TAOForestClassifier):
        _tree_class = Tree

    X, y = make_classification(1200, 5, n_informative=3, n_classes=3, random_state=0)
    forest = Forest(n_estimators=2, max_samples=0.25, max_iter=1, n_jobs=1, random_state=0).fit(X, y)
    assert forest.max_depth_ == auto_depth(300, 3, "classification") != auto_depth(300, 0, "regression")


def test_a_constant_leaf_regression_forest_takes_carts_cross_validated_depth_on_the_whole_training_set():
    X, y = make_regression(1200, 5, noise=1.0, random_state=0)
    w = np.random.RandomState(0).uniform(0.5, 2.0, size=1200)
    forest = TAOForestRegressor(n_estimators=2, max_samples=0.25, max_iter=1, leaf_type="constant",
                                random_state=4).fit(X, y, sample_weight=w)
    assert forest.max_depth_ == cv_cart_depth(X, y, w, random_state=4)
    assert all(t.max_depth_ == forest.max_depth_ for t in forest.estimators_)


def test_a_linear_leaf_regression_forest_takes_the_rule_on_the_rows_a_tree_draws():
    X, y = make_regression(4000, 5, noise=1.0, random_state=0)
    forest = TAOForestRegressor(n_estimators=2, max_samples=0.5, max_iter=1, random_state=4).fit(X, y)
    assert forest.leaf_type == "linear"
    assert forest.max_depth_ == auto_depth(2000, 0, "regression", linear_leaves=True) == 2
    assert auto_depth(4000, 0, "regression", linear_leaves=True) == 3  # not the whole training set's
    assert all(t.max_depth_ == forest.max_depth_ for t in forest.estimators_)


def test_auto_init_is_cart_for_regression_in_memory_and_random_for_classification():
    X, y = make_regression(400, 5, noise=1.0, random_state=1)
    auto = TAORegressor(max_iter=3, random_state=0).fit(X, y)
    cart = TAORegressor(init="cart", max_iter=3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(auto.history_, cart.history_)
    np.testing.assert_array_equal(auto.predict(X), cart.predict(X))
    Xc, yc = make_classification(400, 5, random_state=1)
    auto = TAOClassifier(max_iter=3, random_state=0).fit(Xc, yc)
    random = TAOClassifier(init="random", max_iter=3, random_state=0).fit(Xc, yc)
    np.testing.assert_array_equal(auto.history_, random.history_)


@pytest.mark.parametrize("task", ["classification", "regression"])
def test_the_cross_validation_s_cart_fits_on_threads_give_the_same_losses(task):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(600, 6))
    y = (X[:, 0] + 0.5 * rng.normal(size=600) > 0).astype(int) if task == "classification" else X[:, 0] ** 2
    w = rng.uniform(0.5, 2.0, size=600)
    one = cv_cart_losses(X, y, w, random_state=0, task=task, n_jobs=1)
    assert cv_cart_losses(X, y, w, random_state=0, task=task, n_jobs=2) == one  # exactly: summed in fold order
    assert cv_cart_losses(X, y, w, random_state=0, task=task, n_jobs=-1) == one
    # a RandomState the folds draw from runs them in order: the same draws as one thread
    assert (cv_cart_losses(X, y, w, random_state=np.random.RandomState(5), task=task, n_jobs=2)
            == cv_cart_losses(X, y, w, random_state=np.random.RandomState(5), task=task, n_jobs=1))


def test_spread_scale_is_the_standard_deviation_rounded_to_a_power_of_two_the_same_on_dask():
    rng = np.random.default_rng(0)
    X = np.c_[rng.normal(1976.0, 3.7, 1000), rng.random(1000), rng.random(1000) < 0.03, np.full(1000, 7.0),
              rng.normal(1e9, 100.0, 1000)]
    expected = np.exp2(np.round(np.log2(X.std(axis=0), where=X.std(axis=0) > 0, out=np.zeros(5))))
    expected[3] = 1.0  # a constant column is left as it is
    assert_array_equal(spread_scale(X, rows_per_pass=300), expected)
    assert_array_equal(spread_scale(da.from_array(X, chunks=(300, 5))), expected)
    assert_array_equal(spread_scale(X.astype(np.float32)), expected)


def test_only_a_regression_tree_with_linear_leaves_divides_columns_by_their_spread():
    X, y = make_regression(400, 4, noise=1.0, random_state=0)
    X[:, 0] += 2000.0  # a year-like column: its max |x| is hundreds of times its spread
    linear = TAORegressor(max_iter=1, random_state=0).fit(X, y)
    # (times each column's penalty factor: the scale also makes a weakly related column's weights dearer)
    assert_array_equal(linear._feature_scale, spread_scale(X) * linear.penalty_factors_)
    constant = TAORegressor(leaf_type="constant", max_iter=1, random_state=0).fit(X, y)
    shifted = X.copy()
    shifted[:, 0] -= X[:, 0].min()  # a column far from zero is fitted from its least value
    assert_array_equal(constant._feature_scale, np.abs(shifted).max(axis=0) * constant.penalty_factors_)
    Xc, yc = make_classification(400, 4, random_state=0)
    classifier = TAOClassifier(max_iter=1, random_state=0, penalty_factors=None).fit(Xc, yc)
    assert_array_equal(classifier._feature_scale, np.abs(Xc).max(axis=0))
    # sparse rows get the same scale, without being densified
    X[X < 0] = 0.0
    assert_array_equal(spread_scale(sp.csr_matrix(X)), spread_scale(X))
    assert_array_equal(spread_scale(da.from_array(sp.csr_matrix(X), chunks=(150, 4), asarray=False)), spread_scale(X))


def _held_out_choice(X, y, rule, deeper):
    """Brute force: the es fits at the two depths, and the one of the lower held-out score (ties: the rule's)."""
    fits = [TAORegressor(max_depth=d, max_iter=2, early_stopping=True, random_state=0).fit(X, y) for d in (rule, deeper)]
    return fits[1] if fits[1].validation_score_.min() < fits[0].validation_score_.min() else fits[0]


@pytest.mark.parametrize("target", ["interactions", "linear"])
def test_above_10000_rows_the_held_out_rows_choose_between_the_rule_and_carts_deeper_cv_depth(target):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(11_000, 3))
    noise = 0.05 * rng.normal(size=11_000)
    y = (np.sin(4 * X[:, 0]) * np.cos(4 * X[:, 1]) if target == "interactions" else X @ [1.0, 2.0, -1.0]) + noise
    auto = TAORegressor(max_iter=2, random_state=0).fit(X, y)
    rule = auto_depth(11_000 - 1_100, 0, "regression", linear_leaves=True)  # the rows left after the held-out tenth
    yz = (y - y.mean()) / y.std()  # (CART's cross-validated depth does not depend on the target's scale)
    deeper = cv_cart_depth(*_fit_rows(X, yz, auto), random_state=0)
    assert deeper > rule  # CART approximates either target with more leaves than the Lasso leaves' rule
    expected = _held_out_choice(X, y, rule, deeper)
    assert auto.max_depth_ == expected.max_depth_
    np.testing.assert_array_equal(auto.predict(X), expected.predict(X))
    np.testing.assert_array_equal(auto.validation_score_, expected.validation_score_)
    if target == "interactions":
        assert auto.max_depth_ == deeper  # the rule's few linear leaves cannot follow the product of waves
    # without early stopping the rule's depth stays (CART's cap does not bind on these targets)
    full = TAORegressor(max_iter=2, early_stopping=False, random_state=0).fit(X, y)
    assert full.max_depth_ == auto_depth(11_000, 0, "regression", linear_leaves=True)


def _fit_rows(X, yz, est):
    """The rows the fit of ``est`` kept after holding out its tenth (stratification does not apply to regression)."""
    from taodist.estimators.validation import split_validation

    Xf, yf, w, _, _ = split_validation(X, yz, np.ones(len(yz)), est.validation_fraction, "regression",
                                       est.random_state)
    return Xf, yf, w


def oob_reference(forest, X):
    """Tree by tree: the mean prediction, per row, of the trees whose bootstrap sample does not hold the row."""
    n = X.shape[0]
    total, count = np.zeros(n), np.zeros(n)
    for est in forest.estimators_:
        out = np.ones(n, dtype=bool)
        out[np.random.RandomState(est.random_state).randint(0, n, size=n)] = False  # a bootstrap sample's rows
        total[out] += est.predict(X[out])
        count[out] += 1
    return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def test_a_large_linear_leaf_regression_forest_keeps_the_depth_of_lower_out_of_bag_error():
    rng = np.random.RandomState(0)
    n = 10_500
    X = rng.uniform(-1, 1, size=(n, 3))
    y = np.sin(6 * X[:, 0]) * np.sign(X[:, 1]) + 0.05 * rng.randn(n)  # interactions: deep trees do better
    w = rng.uniform(0.5, 2.0, size=n)
    forest = TAOForestRegressor(n_estimators=3, max_iter=1, n_jobs=1, random_state=3).fit(X, y, sample_weight=w)
    rule, cv = auto_depth(n, 0, "regression", linear_leaves=True), cv_cart_depth(X, y, w, random_state=3)
    assert list(forest.depth_oob_errors_) == [rule, cv] and cv > rule
    assert forest.max_depth_ == cv == min(forest.depth_oob_errors_, key=forest.depth_oob_errors_.get)
    reference = oob_reference(forest, X)
    seen = ~np.isnan(reference)
    error = np.average((reference[seen] - y[seen]) ** 2, weights=w[seen])
    np.testing.assert_allclose(forest.depth_oob_errors_[cv], error, rtol=1e-10)
    explicit = TAOForestRegressor(n_estimators=3, max_iter=1, n_jobs=1, max_depth=cv, random_state=3).fit(
        X, y, sample_weight=w)
    assert explicit.depth_oob_errors_ is None
    np.testing.assert_array_equal(forest.predict(X), explicit.predict(X))
    # at most 10,000 rows, without out-of-bag rows, or on Dask input: the rule alone
    small = TAOForestRegressor(n_estimators=2, max_iter=1, n_jobs=1, random_state=3).fit(X[:10_000], y[:10_000])
    assert small.depth_oob_errors_ is None
    assert small.max_depth_ == auto_depth(10_000, 0, "regression", linear_leaves=True)
    whole = TAOForestRegressor(n_estimators=2, bootstrap=False, max_iter=1, n_jobs=1, random_state=0).fit(X, y)
    assert whole.depth_oob_errors_ is None and whole.max_depth_ == rule
    da = pytest.importorskip("dask.array")
    lazy = TAOForestRegressor(n_estimators=2, max_iter=1, n_jobs=1, random_state=0).fit(
        da.from_array(X, chunks=5250), da.from_array(y, chunks=5250))
    assert lazy.depth_oob_errors_ is None and lazy.max_depth_ == rule
