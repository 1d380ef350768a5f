"""Initial trees: random trees on wide sparse data (drawn on the features the sample uses, never densified); CART's
tree of a sample that lacks a class."""

import time
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.tree import DecisionTreeClassifier

from taodist import TAOClassifier, TAOForestClassifier
from taodist.tao import initial_trees
from taodist.tao.initial_trees import cart_tree, random_tree


def wide_sparse(n=400, n_features=10**6, nnz_per_row=6, seed=0):
    rng = np.random.RandomState(seed)
    cols = rng.randint(0, n_features, size=(n, nnz_per_row))
    X = sp.csr_matrix((rng.uniform(0.5, 2.0, size=n * nnz_per_row), (np.repeat(np.arange(n), nnz_per_row),
                                                                   cols.ravel())), shape=(n, n_features))
    return X, (X[:, :1].toarray().ravel() > 0) | (np.arange(n) % 2 == 0)


@pytest.mark.parametrize("node_type", ["oblique", "axis"])
def test_a_wide_random_tree_uses_only_its_samples_features_and_cuts_the_sample(node_type):
    X, _ = wide_sparse()
    tree = random_tree(lambda idx: X[idx], X.shape[0], X.shape[1], 4, 2, node_type, task="classification",
                       leaf_type="constant", rng=np.random.RandomState(0))
    used = set(np.unique(X.indices))
    internal = np.flatnonzero(~tree.is_leaf)
    if node_type == "oblique":
        assert tree.weights.nnz <= initial_trees._INIT_WEIGHT_ENTRIES
        assert set(np.unique(tree.weights.indices)) <= used
        assert np.allclose(np.linalg.norm(tree.weights[internal].toarray(), axis=1), 1.0)
    else:
        assert set(tree.feature[internal]) <= used
    # every node's hyperplane passes between two of its sample rows: the root sends rows both ways
    leaves = tree.apply(X)
    assert np.unique(leaves).size > 1


def test_a_narrow_random_tree_is_the_same_from_dense_and_csr_samples():
    rng = np.random.RandomState(0)
    Xd = rng.standard_normal((300, 20)) * (rng.uniform(size=(300, 20)) < 0.3)
    trees = [random_tree(lambda idx, X=X: X[idx], 300, 20, 5, 2, "oblique", task="classification",
                         leaf_type="constant", rng=np.random.RandomState(1)) for X in (Xd, sp.csr_matrix(Xd))]
    assert (trees[0].weights != trees[1].weights).nnz == 0
    np.testing.assert_array_equal(trees[0].bias, trees[1].bias)


def test_a_wide_random_tree_never_allocates_per_feature_of_every_node():
    X, _ = wide_sparse()
    tracemalloc.start()
    random_tree(lambda idx: X[idx], X.shape[0], X.shape[1], 4, 2, "oblique", task="classification",
                leaf_type="constant", rng=np.random.RandomState(0))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # dense weights of every feature were 15 x 10^6 float64 (120 MB), the dense row sample 64 x 10^6 (512 MB)
    assert peak < 16 * 2**20, peak


def test_a_fit_on_a_million_sparse_features_stays_small_and_quick():
    X, y = wide_sparse()
    tracemalloc.start()
    start = time.perf_counter()
    clf = TAOClassifier(max_depth=4, max_iter=2, random_state=0).fit(X, y)
    seconds = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # what remains is the node solver's dense iterates of a level (8 nodes x 10^6 weights, a few copies),
    # as any l1 logistic solver keeps a dense weight vector; it was 3.2 GB with the dense initial tree
    assert peak < 400 * 2**20, peak
    assert seconds < 30
    assert clf.tree_.weights.nnz <= initial_trees._INIT_WEIGHT_ENTRIES
    assert clf.score(X, y) > 0.5


def test_cart_initial_tree_of_a_sample_without_a_class_keeps_every_class_column():
    rng = np.random.RandomState(0)
    X = rng.normal(size=(90, 3))
    y = np.digitize(X[:, 0], [-0.5, 0.5])  # codes 0, 1, 2
    y = np.where(y == 1, 3, y)  # code 1 absent from this sample of a 4-class problem
    w = np.ones(len(y))
    tree = cart_tree(X, y, w, 2, 4, "oblique", task="classification", leaf_type="constant", random_state=0)
    cart = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y, sample_weight=w)
    shares = cart.tree_.value[:, 0, :] / cart.tree_.value[:, 0, :].sum(axis=1, keepdims=True)
    assert tree.value.shape == (cart.tree_.node_count, 4)
    np.testing.assert_array_equal(tree.value[:, 1], 0.0)
    np.testing.assert_allclose(tree.value[:, [0, 2, 3]], shares)


def test_a_forest_from_cart_trees_fits_when_a_trees_sample_lacks_a_rare_class():
    rng = np.random.RandomState(1)
    X = rng.normal(size=(120, 4))
    y = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])
    y[:2] = 3  # a class of two rows: most bootstrap samples of 120 rows miss one, some both
    forest = TAOForestClassifier(n_estimators=8, max_depth=2, init="cart", random_state=0, n_jobs=1).fit(X, y)
    missing = [t for t in forest.estimators_ if not np.any(t.tree_.value[:, 3] > 0)]
    assert missing, "no tree's sample lacked the rare class: the test checks nothing"
    assert all(t.tree_.value.shape[1] == 4 for t in forest.estimators_)
    proba = forest.predict_proba(X)
    assert proba.shape == (120, 4) and np.allclose(proba.sum(axis=1), 1.0)
