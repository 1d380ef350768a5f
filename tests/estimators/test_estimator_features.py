"""What users of scikit-learn's trees expect besides fit and predict: importances, class weights, forests' paths."""

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.utils.class_weight import compute_sample_weight

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor, export_text, load, save
from taodist.model.kinds import AXIS, OBLIQUE


def _brute_force_importances(est, X):
    """Each decision node's training rows, shared over its features by unit-free weight magnitude, summed."""
    if est.clip_bounds_ is not None:  # the tree was fitted to, and routes, rows clipped to their fences
        X = np.clip(X, *est.clip_bounds_)
    tree, path = est.tree_, est.tree_.decision_path(X).toarray()
    low, high = X.min(axis=0), X.max(axis=0)
    far = (low > high - low) & (high > low)  # a column far from zero is fitted shifted to start at zero
    scale = np.abs(X - np.where(far, low, 0.0)).max(axis=0)
    out = np.zeros(X.shape[1])
    for node in range(tree.n_nodes):
        rows = path[:, node].sum()
        if tree.kind[node] == AXIS:
            out[tree.feature[node]] += rows
        elif tree.kind[node] == OBLIQUE:
            mass = np.abs(tree.weights[node].toarray().ravel()) * scale
            if mass.sum() > 0:
                out += rows * mass / mass.sum()
    return out / out.sum()


@pytest.mark.parametrize("node_type", ["oblique", "axis"])
def test_feature_importances_match_a_brute_force_count(node_type):
    X, y = load_breast_cancer(return_X_y=True)
    est = TAOClassifier(max_depth=3, node_type=node_type, random_state=0).fit(X, y)
    np.testing.assert_allclose(est.feature_importances_, _brute_force_importances(est, X), atol=1e-12)
    assert est.feature_importances_.sum() == pytest.approx(1.0)


def test_feature_importances_ignore_units_and_find_the_informative_feature():
    rng = np.random.RandomState(0)
    X = rng.randn(800, 5)
    y = X[:, 3] > 0.2
    a = TAORegressor(max_depth=2, random_state=0).fit(X, y.astype(float))
    assert np.argmax(a.feature_importances_) == 3
    Xs = X * np.array([1.0, 1e3, 1.0, 1e-3, 1.0])  # feature 3 in other units
    b = TAORegressor(max_depth=2, random_state=0).fit(Xs, y.astype(float))
    assert np.argmax(b.feature_importances_) == 3


def test_forest_importances_are_the_mean_of_their_trees_and_are_saved(tmp_path):
    X, y = load_iris(return_X_y=True)
    forest = TAOForestClassifier(n_estimators=4, random_state=0).fit(X, y)
    np.testing.assert_allclose(forest.feature_importances_,
                               np.mean([t.feature_importances_ for t in forest.estimators_], axis=0))
    save(forest, tmp_path / "f.npz")
    np.testing.assert_array_equal(load(tmp_path / "f.npz").feature_importances_, forest.feature_importances_)


def test_importances_of_encoded_columns_add_up_per_input_column():
    pd = pytest.importorskip("pandas")
    rng = np.random.RandomState(0)
    df = pd.DataFrame({"noise": rng.randn(500), "colour": rng.choice(["r", "g", "b"], 500)})
    y = df["colour"].isin(["r", "b"])
    est = TAOClassifier(max_depth=2, random_state=0).fit(df, y)
    assert est.feature_importances_.shape == (2,)
    assert est.feature_importances_.sum() == pytest.approx(1.0)
    assert est.feature_importances_[1] > 2 * est.feature_importances_[0]


@pytest.mark.parametrize("class_weight", ["balanced", {0: 1.0, 1: 4.0}])
def test_class_weight_is_the_model_of_the_matching_sample_weights(class_weight):
    X, y = load_breast_cancer(return_X_y=True)
    weighted = TAOClassifier(max_depth=3, class_weight=class_weight, random_state=0).fit(X, y)
    reference = TAOClassifier(max_depth=3, random_state=0).fit(X, y, sample_weight=compute_sample_weight(
        class_weight, y))
    np.testing.assert_array_equal(weighted.tree_.weights.toarray(), reference.tree_.weights.toarray())
    np.testing.assert_array_equal(weighted.history_, reference.history_)
    # with sample weights too, the two multiply
    both = TAOClassifier(max_depth=3, class_weight=class_weight, random_state=0).fit(X, y, sample_weight=np.full(
        len(y), 2.0))
    doubled = TAOClassifier(max_depth=3, random_state=0).fit(X, y, sample_weight=2.0 * compute_sample_weight(
        class_weight, y))
    np.testing.assert_array_equal(both.tree_.weights.toarray(), doubled.tree_.weights.toarray())
    np.testing.assert_array_equal(both.history_, doubled.history_)


def test_class_weight_naming_an_unknown_class_is_refused():
    X, y = load_iris(return_X_y=True)
    with pytest.raises(ValueError, match=r"class_weight names \[7\], which are not classes of y"):
        TAOClassifier(class_weight={7: 2.0}).fit(X, y)
    with pytest.raises(ValueError, match="class_weight"):
        TAOForestClassifier(class_weight="balanced_subsample").fit(X, y)


def test_forest_apply_and_decision_path_are_their_trees_side_by_side():
    X, y = load_iris(return_X_y=True)
    forest = TAOForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    leaves = forest.apply(X)
    assert leaves.shape == (len(X), 3)
    for k, est in enumerate(forest.estimators_):
        np.testing.assert_array_equal(leaves[:, k], est.tree_.apply(X))
    indicator, ptr = forest.decision_path(X)
    assert ptr.tolist() == [0, *np.cumsum([e.tree_.n_nodes for e in forest.estimators_])]
    for k, est in enumerate(forest.estimators_):
        np.testing.assert_array_equal(indicator[:, ptr[k]:ptr[k + 1]].toarray(), est.tree_.decision_path(X).toarray())


def test_export_text_prints_every_tree_of_a_forest():
    X, y = load_iris(return_X_y=True)
    forest = TAOForestRegressor(n_estimators=2, random_state=0).fit(X, y.astype(float))
    text = export_text(forest)
    assert text.startswith("tree 0 of 2\n") and "\ntree 1 of 2\n" in text
    assert text.split("tree 1 of 2\n")[1] == export_text(forest.estimators_[1])
