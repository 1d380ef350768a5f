"""export_text: a tree's rules as text."""

import time
import tracemalloc

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_iris

from taodist import TAOClassifier, export_text
from taodist.model.tree import complete_tree


def test_an_axis_tree_prints_one_line_per_node_with_its_split_or_leaf():
    X, y = load_iris(return_X_y=True)
    clf = TAOClassifier(max_depth=2, node_type="axis", max_iter=3, random_state=0).fit(X, y)
    tree = clf.tree_
    lines = export_text(clf, feature_names=["sl", "sw", "pl", "pw"]).splitlines()
    assert len(lines) == tree.n_nodes
    expected = sorted((["sl", "sw", "pl", "pw"][tree.feature[i]], tree.threshold[i])
                      for i in range(tree.n_nodes) if tree.children_left[i] >= 0)
    printed = sorted((line.split(">= ")[0].split()[-1], float(line.split(">= ")[1])) for line in lines if " >= " in line)
    assert [n for n, _ in printed] == [n for n, _ in expected]
    np.testing.assert_allclose([t for _, t in printed], [t for _, t in expected], rtol=1e-3)  # 3 significant digits
    assert sum("leaf" in line for line in lines) == tree.n_leaves()


def test_feature_names_of_the_wrong_length_are_refused():
    X, y = load_iris(return_X_y=True)
    clf = TAOClassifier(max_depth=1, max_iter=1, random_state=0).fit(X, y)
    with pytest.raises(ValueError, match="feature_names has 2 names but the tree has 4 features"):
        export_text(clf, feature_names=["a", "b"])


def test_a_model_of_a_billion_features_prints_without_a_name_per_feature():
    tree = complete_tree(1, 10**9, 2, "oblique", task="classification", leaf_type="constant")
    tree.set_decision([0], sp.csr_matrix(([2.0], ([0], [123_456_789])), shape=(1, 10**9)), [0.5])
    tree.value[1:] = [[1.0, 0.0], [0.0, 1.0]]
    tracemalloc.start()
    start = time.perf_counter()
    text = export_text(tree)
    seconds, peak = time.perf_counter() - start, tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "x123456789" in text
    assert seconds < 1 and peak < 2**20  # a list of 10^9 default names was tens of GB
    np.testing.assert_array_equal(tree.weights.indices, [123_456_789])
