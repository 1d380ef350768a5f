"""What a tree embedding's tree says (thesis Figures 4.2-4.3): top features, leaf regions, class histograms.

Each is checked against a direct computation from the tree's weights and the training points, in the
estimator, in ``export_text`` and through a model file.
"""

import re

import numpy as np
import pytest
from sklearn.datasets import load_digits

from taodist import TAOEmbedding, export_text, load, save
from taodist.testing import assert_tree_equal

FAST = dict(method="ee", max_depth=3, perplexity=20.0, n_outer=3, tao_iter=5, free_iter=200, random_state=0)


@pytest.fixture(scope="module")
def data():
    X, y = load_digits(return_X_y=True)
    return X[:300], y[:300]


@pytest.fixture(scope="module")
def emb(data):
    return TAOEmbedding(**FAST).fit(*data)


def _preorder_right_first(tree):
    """Node ids in export_text's order: a node, then its "yes" (right) subtree, then its "no" subtree."""
    order, stack = [], [0]
    while stack:
        i = stack.pop()
        order.append(i)
        if tree.children_left[i] >= 0:
            stack += [tree.children_left[i], tree.children_right[i]]
    return order


def _direct_top(tree, node, k, names):
    """The k largest positive and k most negative weights of a node, by name, from its dense weight vector."""
    w = tree.weights[node].toarray().ravel()
    pos = [j for j in np.argsort(-w, kind="stable") if w[j] > 0][:k]
    neg = [j for j in np.argsort(w, kind="stable") if w[j] < 0][:k]
    return [names[j] for j in pos], [names[j] for j in neg]


@pytest.mark.parametrize("k", [1, 3, 7])
def test_export_text_lists_each_decision_nodes_largest_positive_and_negative_weights(emb, k):
    tree = emb.tree_
    names = [f"px{j}" for j in range(tree.n_features)]
    text = export_text(emb, feature_names=names, max_terms=k)
    lines = text.splitlines()
    order = _preorder_right_first(tree)
    assert len(lines) == len(order) == tree.n_nodes
    n_checked = 0
    for node, line in zip(order, lines):
        if tree.children_left[node] < 0:
            assert f"leaf {node}:" in line and "[top +:" not in line
            continue
        found = re.search(r"\[top \+: (.*) \| top -: (.*)\]$", line)
        assert found, line
        plus, minus = _direct_top(tree, node, k, names)
        assert found.group(1).split(", ") == (plus or ["none"])
        assert found.group(2).split(", ") == (minus or ["none"])
        n_checked += 1
    assert n_checked == tree.n_decision_nodes() >= 3


def test_explain_gives_the_same_top_features_with_their_weights(emb):
    info = emb.explain(n_top=5)
    tree = emb.tree_
    assert [n["node"] for n in info["decision_nodes"]] == list(np.flatnonzero(tree.children_left >= 0))
    for node in info["decision_nodes"]:
        w = tree.weights[node["node"]].toarray().ravel()
        plus, minus = _direct_top(tree, node["node"], 5, [f"x{j}" for j in range(tree.n_features)])
        assert [t["feature"] for t in node["top_positive"]] == plus
        assert [t["feature"] for t in node["top_negative"]] == minus
        for t in node["top_positive"] + node["top_negative"]:
            assert t["weight"] == w[t["index"]] and t["feature"] == f"x{t['index']}"
        assert node["n_nonzero"] == np.count_nonzero(w)


def test_feature_names_of_a_dataframe_name_the_top_features(data):
    pd = pytest.importorskip("pandas")
    X, y = data
    frame = pd.DataFrame(X, columns=[f"pixel_{j}" for j in range(X.shape[1])])
    emb = TAOEmbedding(**{**FAST, "n_outer": 1}).fit(frame, y)
    top = emb.explain(n_top=2)["decision_nodes"][0]["top_positive"][0]
    assert top["feature"] == f"pixel_{top['index']}"
    assert f"top +: pixel_{top['index']}" in export_text(emb, max_terms=2).splitlines()[0]


def test_leaf_regions_hold_their_training_points_and_decision_nodes_hold_their_leaves(emb, data):
    X, _ = data
    tree, Z = emb.tree_, emb.embedding_
    leaf = tree.apply(X)
    counts = np.bincount(leaf, minlength=tree.n_nodes)
    np.testing.assert_array_equal(emb.node_counts_[tree.is_leaf], counts[tree.is_leaf])
    for i in np.flatnonzero(tree.is_leaf):
        points = Z[leaf == i]
        if len(points) == 0:
            assert np.isnan(emb.node_bounds_[i]).all() and np.isnan(emb.node_centroids_[i]).all()
            continue
        lo, hi = emb.node_bounds_[i]
        assert (points >= lo).all() and (points <= hi).all()
        np.testing.assert_array_equal(lo, points.min(axis=0))  # the smallest box: every side touches a point
        np.testing.assert_array_equal(hi, points.max(axis=0))
        np.testing.assert_allclose(emb.node_centroids_[i], points.mean(axis=0), rtol=1e-12)
    path = tree.decision_path(X).toarray().astype(bool)
    for i in np.flatnonzero(~tree.is_leaf):
        points = Z[path[:, i]]
        assert emb.node_counts_[i] == len(points)
        np.testing.assert_array_equal(emb.node_bounds_[i], [points.min(axis=0), points.max(axis=0)])
    assert emb.node_counts_[0] == len(X)
    boxes = {leaf["node"]: leaf["box"] for leaf in emb.explain()["leaves"]}
    assert boxes == {i: emb.node_bounds_[i].tolist() for i in np.flatnonzero(tree.is_leaf) if emb.node_counts_[i]}


def test_class_histograms_count_each_nodes_training_points_by_class(emb, data):
    X, y = data
    tree = emb.tree_
    np.testing.assert_array_equal(emb.classes_, np.arange(10))
    np.testing.assert_array_equal(emb.node_class_counts_.sum(axis=1), emb.node_counts_)
    path = tree.decision_path(X).toarray().astype(bool)
    for i in range(tree.n_nodes):
        np.testing.assert_array_equal(emb.node_class_counts_[i], np.bincount(y[path[:, i]], minlength=10))
    info = emb.explain()
    assert info["classes"] == list(range(10))
    assert sum(sum(leaf["class_counts"]) for leaf in info["leaves"]) == len(y)
    for leaf in info["leaves"]:
        assert sum(leaf["class_counts"]) == leaf["n_train"]
        hist = " ".join(f"{c}:{k}" for c, k in zip(range(10), leaf["class_counts"]) if k)
        assert f"n={leaf['n_train']}" in export_text(emb) and (f"classes {hist}]" in export_text(emb))


def test_leaves_are_numbered_left_to_right(emb):
    tree = emb.tree_
    leaves = [leaf["node"] for leaf in emb.explain()["leaves"]]
    assert [leaf["leaf"] for leaf in emb.explain()["leaves"]] == list(range(1, tree.n_leaves() + 1))
    # left to right: the preorder with the "no" (left) child first meets the leaves in this order
    order, stack = [], [0]
    while stack:
        i = stack.pop()
        if tree.children_left[i] < 0:
            order.append(i)
        else:
            stack += [tree.children_right[i], tree.children_left[i]]
    assert leaves == order and sorted(leaves) == list(np.flatnonzero(tree.is_leaf))


def test_labels_do_not_change_the_fit_and_a_refit_without_them_forgets_them(data, emb):
    X, y = data
    plain = TAOEmbedding(**FAST).fit(X)
    assert_tree_equal(plain.tree_, emb.tree_)
    np.testing.assert_array_equal(plain.embedding_, emb.embedding_)
    np.testing.assert_array_equal(plain.node_counts_, emb.node_counts_)
    assert not hasattr(plain, "classes_") and not hasattr(plain, "node_class_counts_")
    assert plain.explain()["classes"] is None and plain.explain()["leaves"][0]["class_counts"] is None
    refit = TAOEmbedding(**{**FAST, "n_outer": 0}).fit(X, y).fit(X)
    assert not hasattr(refit, "classes_") and not hasattr(refit, "node_class_counts_")
    Z = TAOEmbedding(**{**FAST, "n_outer": 0}).fit_transform(X, np.where(y > 4, "high", "low"))
    assert Z.shape == (300, 2)


def test_string_labels_are_counted_and_survive_a_model_file(tmp_path, data):
    X, y = data
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])[y]
    emb = TAOEmbedding(**{**FAST, "n_outer": 1}).fit(X, names)
    assert list(emb.classes_) == sorted(set(names))
    save(emb, tmp_path / "s.npz")
    back = load(tmp_path / "s.npz")
    assert list(back.classes_) == list(emb.classes_) and back.explain() == emb.explain()


def test_a_model_file_keeps_the_transform_and_the_explanation(tmp_path, emb, data):
    X, _ = data
    save(emb, tmp_path / "e.npz")
    back = load(tmp_path / "e.npz")
    np.testing.assert_array_equal(back.transform(X), emb.transform(X))
    new = load_digits().data[300:500]
    np.testing.assert_array_equal(back.transform(new), emb.transform(new))
    assert back.explain() == emb.explain()
    assert export_text(back) == export_text(emb)
    for attr in ("node_counts_", "node_bounds_", "node_centroids_", "node_class_counts_", "classes_"):
        np.testing.assert_array_equal(getattr(back, attr), getattr(emb, attr))


def test_a_file_without_the_statistics_loads_and_explains_what_it_can(tmp_path, data):
    # files written before the statistics existed: the tree's weights are still explained
    X, y = data
    emb = TAOEmbedding(**{**FAST, "n_outer": 0}).fit(X, y)
    for attr in ("node_counts_", "node_bounds_", "node_centroids_", "node_class_counts_", "classes_"):
        delattr(emb, attr)
    save(emb, tmp_path / "old.npz")
    back = load(tmp_path / "old.npz")
    info = back.explain()
    assert info["leaves"][0]["n_train"] is None and info["leaves"][0]["box"] is None
    assert info["decision_nodes"][0]["top_positive"] and "[top +:" in export_text(back)
    assert "n=" not in export_text(back)


def _edit(src, dst, **changes):
    with np.load(src, allow_pickle=False) as d:
        arrays = {k: d[k] for k in d.files}
    for key, value in changes.items():
        if value is None:
            del arrays[f"fitted/{key}"]
        else:
            arrays[f"fitted/{key}"] = value
    np.savez(dst, **arrays)


@pytest.mark.parametrize("change, match", [
    (lambda e: {"node_counts_": e.node_counts_ + 1}, "node_counts_ does not add up"),
    (lambda e: {"node_counts_": -e.node_counts_}, "negative counts"),
    (lambda e: {"node_counts_": e.node_counts_[:-1]}, r"node_counts_ has shape \(\d+,\); expected"),
    (lambda e: {"node_bounds_": e.node_bounds_[:, ::-1]}, "boxes holding their centroids"),
    (lambda e: {"node_centroids_": None}, "holds node_counts_ but not node_centroids_"),
    (lambda e: {"node_class_counts_": e.node_class_counts_[:, ::-1] * 2}, "sum to node_counts_"),
    (lambda e: {"node_class_counts_": None}, "classes_ and node_class_counts_ together"),
    (lambda e: {"node_bounds_": e.node_bounds_[:, 0]}, "expected a 3-D array"),
])
def test_an_edited_file_is_refused_in_one_line_naming_it(tmp_path, emb, change, match):
    save(emb, tmp_path / "e.npz")
    _edit(tmp_path / "e.npz", tmp_path / "bad.npz", **change(emb))
    with pytest.raises(ValueError, match=match) as info:
        load(tmp_path / "bad.npz")
    assert str(tmp_path / "bad.npz") in str(info.value) and "\n" not in str(info.value)


def test_a_tree_estimator_file_holding_embedding_statistics_is_refused(tmp_path, data):
    from taodist import TAORegressor

    X, y = data
    reg = TAORegressor(max_depth=2, random_state=0).fit(X, y.astype(float))
    save(reg, tmp_path / "r.npz")
    _edit(tmp_path / "r.npz", tmp_path / "bad.npz", node_counts_=np.zeros(reg.tree_.n_nodes, dtype=np.int64))
    with pytest.raises(ValueError, match="holds no node_counts_"):
        load(tmp_path / "bad.npz")


@pytest.mark.parametrize("y, match", [
    (np.arange(299), "y has 299 labels but X has 300 rows"),
    (np.linspace(0, 1, 300), "Unknown label type: y holds continuous values"),
    (np.zeros((300, 2)), r"one class label per row \(1-D\); got an array of shape \(300, 2\)"),
    (np.r_[np.nan, np.zeros(299)], "y cannot be read as class labels"),
])
def test_bad_labels_are_refused_in_one_line_before_the_fit(data, y, match):
    X, _ = data
    with pytest.raises(ValueError, match=match) as info:
        TAOEmbedding(**FAST).fit(X, y)
    assert "\n" not in str(info.value)


def test_explain_refuses_a_bad_n_top_and_wrong_feature_names(emb):
    with pytest.raises(ValueError, match="n_top must be an integer >= 0"):
        emb.explain(n_top=-1)
    with pytest.raises(ValueError, match="feature_names has 3 names but the tree has 64 features"):
        emb.explain(feature_names=["a", "b", "c"])
    assert all(n["top_positive"] == [] == n["top_negative"] for n in emb.explain(n_top=0)["decision_nodes"])
