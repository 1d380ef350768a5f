"""Data and tree makers for tests."""

import numpy as np

from ..tao.initial_trees import random_tree


def make_oblique_classification(n_samples=400, n_features=5, random_state=0):
    """Two classes split by the oblique hyperplane ``sum(x) >= 0``.

    Axis-aligned trees need many splits to approximate it; one oblique node
    separates it exactly.
    """
    rng = np.random.default_rng(random_state)
    X = rng.uniform(-1, 1, size=(n_samples, n_features))
    margin = X.sum(axis=1)
    keep = np.abs(margin) > 0.05  # a small gap so the classes are separable
    return X[keep], (margin[keep] >= 0).astype(int)


def random_fitted_tree(depth, n_features, n_outputs, node_type, *, task="classification",
                       leaf_type="constant", random_state=0, density=0.5):
    """A random tree with sparse decision nodes and random leaf parameters."""
    rng = np.random.RandomState(random_state)
    X = rng.normal(size=(50, n_features))
    tree = random_tree(lambda idx: X[idx], len(X), n_features, depth, n_outputs, node_type, task=task,
                       leaf_type=leaf_type, rng=rng)
    internal = np.flatnonzero(~tree.is_leaf)
    if node_type == "oblique":
        W = tree.weights[internal].toarray() * (rng.uniform(size=(internal.size, n_features)) < density)
        tree.set_decision(internal, W, tree.bias[internal])
    leaves = np.flatnonzero(tree.is_leaf)
    tree.value[leaves] = rng.uniform(size=(leaves.size, n_outputs))
    if leaf_type == "linear":
        coefs = [rng.normal(size=(n_outputs, n_features)) * (rng.uniform(size=(n_outputs, n_features)) < density)
                 for _ in leaves]
        tree.set_leaf_coef(leaves, coefs)
    return tree
