import numpy as np
import pytest
import scipy.sparse as sp

from taodist.model.kinds import AXIS, LEAF, OBLIQUE
from taodist.model.tree import Tree, complete_tree
from taodist.testing import naive_apply, random_fitted_tree

ALL_TREES = [
    ("oblique", "constant", "classification"),
    ("oblique", "linear", "classification"),
    ("axis", "constant", "regression"),
    ("axis", "linear", "regression"),
]


@pytest.mark.parametrize("node_type,leaf_type,task", ALL_TREES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vectorised_apply_equals_naive_traversal(node_type, leaf_type, task, seed):
    tree = random_fitted_tree(5, 7, 3, node_type, task=task, leaf_type=leaf_type, random_state=seed)
    X = np.random.default_rng(seed).normal(size=(500, 7))
    np.testing.assert_array_equal(tree.apply(X), naive_apply(tree, X))
    np.testing.assert_array_equal(tree.apply_matrix(X), naive_apply(tree, X))


@pytest.mark.parametrize("node_type,leaf_type,task", ALL_TREES)
def test_decision_path_is_the_route_to_the_applied_leaf(node_type, leaf_type, task):
    tree = random_fitted_tree(4, 6, 2, node_type, task=task, leaf_type=leaf_type)
    X = np.random.default_rng(3).normal(size=(200, 6))
    path = tree.decision_path(X).toarray()
    leaves = tree.apply(X)
    assert (path[:, 0] == 1).all()
    np.testing.assert_array_equal(path[np.arange(len(X)), leaves], 1)
    # one node per depth level on the path, never two
    depth = tree.node_depth
    for row in path:
        visited = np.flatnonzero(row)
        assert sorted(depth[visited]) == list(range(len(visited)))


def test_linear_leaf_output_is_affine_in_x():
    tree = random_fitted_tree(3, 4, 3, "oblique", leaf_type="linear", task="regression")
    X = np.random.default_rng(0).normal(size=(50, 4))
    leaves = tree.apply(X)
    expected = np.stack([
        tree.leaf_coef[l * 3:(l + 1) * 3].toarray() @ x + tree.value[l] for x, l in zip(X, leaves)
    ])
    np.testing.assert_allclose(tree.predict(X), expected, rtol=1e-12)


def test_scale_features_gives_the_same_function_of_the_raw_inputs():
    tree = random_fitted_tree(4, 5, 2, "oblique", leaf_type="linear", task="regression")
    s = np.array([1.0, 2.0, 0.5, 10.0, 4.0])
    X = np.random.default_rng(1).normal(size=(300, 5))
    expected = tree.predict(X / s)
    tree.scale_features(1.0 / s)
    np.testing.assert_allclose(tree.predict(X), expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("node_type,leaf_type,task", ALL_TREES)
def test_shift_features_gives_the_same_function_of_the_raw_inputs(node_type, leaf_type, task):
    tree = random_fitted_tree(4, 5, 3, node_type, task=task, leaf_type=leaf_type, random_state=1)
    c = np.array([2000.0, -93.5, 0.0, 1013.0, 7.0])
    X = np.random.default_rng(1).normal(size=(300, 5)) + c
    expected_leaves = naive_apply(tree, X - c)
    expected = tree.predict(X - c)
    tree.shift_features(c)
    np.testing.assert_array_equal(naive_apply(tree, X), expected_leaves)
    np.testing.assert_allclose(tree.predict(X), expected, rtol=1e-9, atol=1e-9)


def _stump():
    """Root oblique node with 2 non-zeros, two constant leaves, K = 3."""
    t = complete_tree(1, 4, 3, "oblique", task="classification", leaf_type="constant")
    t.set_decision([0], np.array([[1.0, 0.0, -2.0, 0.0]]), [0.5])
    return t


def test_parameter_and_flop_counts_follow_the_thesis():
    t = _stump()
    # decision: 2 non-zeros + bias; leaves: K = 3 each
    np.testing.assert_array_equal(t.node_parameters(), [3, 3, 3])
    assert t.n_parameters() == 9
    assert t.n_nonzero_weights() == 2
    assert (t.n_leaves(), t.n_decision_nodes()) == (2, 1)
    X = np.zeros((10, 4))
    assert t.inference_flops(X) == 6.0  # root (3) + one leaf (3)


def test_binary_linear_leaves_count_one_vector():
    t = complete_tree(1, 4, 2, "axis", task="classification", leaf_type="linear")
    t.set_leaf_coef([1], [np.array([[-1.0, 0, 0, 0], [1.0, 0, 0, 0]])])
    assert t.node_parameters()[1] == 1 + 1  # one weight + one bias
    assert t.node_parameters()[2] == 1  # bias only


def test_subtree_renumbers_compactly():
    t = complete_tree(2, 3, 1, "axis", task="regression", leaf_type="constant")
    t.value[:, 0] = np.arange(t.n_nodes)
    sub = t.subtree(2, replace_with_leaf=[5])
    assert sub.n_nodes == 3
    np.testing.assert_array_equal(sub.kind, [AXIS, LEAF, LEAF])
    np.testing.assert_array_equal(sub.value[:, 0], [2, 5, 6])


def test_kinds_are_consistent_with_children():
    t = random_fitted_tree(3, 3, 2, "oblique")
    assert isinstance(t, Tree)
    assert ((t.kind == LEAF) == (t.children_left < 0)).all()
    assert (t.kind[t.children_left >= 0] == OBLIQUE).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n_rows", [1, 7, 8, 9, 203])
def test_compiled_linear_leaf_outputs_equal_the_scipy_product(dtype, n_rows, monkeypatch):
    """Dense rows take the compiled product; it must give scipy's CSR product (the reference) bit for bit."""
    import taodist.model.linear_outputs as linear_outputs
    from taodist.model.linear_outputs import rows_times_coef
    tree = random_fitted_tree(3, 30, 5, "oblique", leaf_type="linear", task="classification")
    rng = np.random.default_rng(n_rows)
    # sparse leaves, as l1 leaves are: about half the weights zero, and one leaf with none
    coef = tree.leaf_coef.toarray()
    coef[rng.random(coef.shape) < 0.5] = 0.0
    first_leaf = np.flatnonzero(tree.is_leaf)[0]
    coef[first_leaf * 5:(first_leaf + 1) * 5] = 0.0
    tree.leaf_coef = sp.csr_matrix(coef)
    X = rng.normal(size=(2 * n_rows + 3, 30)).astype(dtype)
    X[rng.random(X.shape) < 0.4] = 0.0  # zero entries are left out of the compiled sums
    rows = rng.choice(len(X), size=n_rows, replace=False)
    leaves = rng.choice(np.flatnonzero(tree.is_leaf), size=n_rows)
    expected = tree.value[leaves].astype(np.float64)
    for j, (r, leaf) in enumerate(zip(rows, leaves)):
        expected[j] += rows_times_coef(X[[r]], tree.leaf_coef[leaf * 5:(leaf + 1) * 5])[0]
    got = tree.leaf_output(X, leaves, rows)
    np.testing.assert_array_equal(got, expected)  # bit for bit
    # sparse rows: the compiled product over their stored entries, and scipy's (for large leaves), the same
    np.testing.assert_array_equal(tree.leaf_output(sp.csr_matrix(X), leaves, rows), expected)
    monkeypatch.setattr(linear_outputs, "COMPILED_SPARSE_MAX", 0)
    np.testing.assert_array_equal(tree.leaf_output(sp.csr_matrix(X), leaves, rows), expected)


@pytest.mark.parametrize("Est", ["TAOClassifier", "TAORegressor"])
def test_a_fitted_trees_leaf_coefficients_are_canonical_and_its_outputs_the_library_product(Est):
    """Fitting rescales the tree to the input's units; its leaves must stay canonical CSR for the compiled product."""
    import taodist
    from taodist.model.linear_outputs import rows_times_coef

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 8)) * np.array([1, 10, 100, 0.1, 1, 5, 50, 0.5])
    X[rng.random(X.shape) < 0.3] = 0.0
    y = (X[:, 0] + X[:, 1] / 10 > 0).astype(int) + (X[:, 2] > 0)
    tree = getattr(taodist, Est)(max_depth=3, leaf_type="linear", max_iter=3, random_state=0).fit(X, y).tree_
    assert tree.leaf_coef.has_canonical_format
    leaves = rng.choice(np.flatnonzero(tree.is_leaf), size=len(X))
    rows = np.arange(len(X))
    K = tree.n_outputs
    expected = tree.value[leaves].astype(np.float64)
    for j, leaf in enumerate(leaves):
        expected[j] += rows_times_coef(X[[j]], tree.leaf_coef[leaf * K:(leaf + 1) * K])[0]
    if tree.task == "regression" and tree.leaf_range is not None:
        np.clip(expected, tree.leaf_range[leaves, 0], tree.leaf_range[leaves, 1], out=expected)
    np.testing.assert_array_equal(tree.leaf_output(X, leaves, rows), expected)


@pytest.mark.parametrize("canonical", [True, False])
def test_a_weight_row_is_the_dense_row_of_the_weights(canonical):
    tree = random_fitted_tree(3, 6, 2, "oblique", random_state=4)
    if not canonical:  # a duplicate entry (a hand-built tree could hold one) adds up, as toarray() does
        W = tree.weights
        r = int(np.flatnonzero(np.diff(W.indptr))[0])
        at = W.indptr[r + 1]
        tree.weights = sp.csr_matrix((np.insert(W.data, at, 0.5), np.insert(W.indices, at, W.indices[W.indptr[r]]),
                                      W.indptr + (np.arange(W.indptr.size) > r)), shape=W.shape)
        assert not tree.weights.has_canonical_format
    for node in range(tree.n_nodes):
        row = tree.weight_row(node)
        assert row.dtype == np.float64
        np.testing.assert_array_equal(row, tree.weights[node].toarray().ravel())
