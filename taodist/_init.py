"""Initial trees for TAO: random complete trees, CART trees, warm starts."""

import numpy as np
import scipy.sparse as sp
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from ._tree import AXIS, LEAF, OBLIQUE, Tree, complete_tree


def random_tree(take_rows, n_samples, n_features, depth, n_outputs, node_type, *, task, leaf_type, rng):
    """Complete tree of ``depth`` with random decision nodes (thesis section 2.1).

    Oblique nodes get a unit-norm Gaussian weight vector; the bias puts the
    hyperplane through the midpoint of two random training points, so every
    initial split cuts the data. Axis nodes get a random feature and a
    random point's value as threshold. Leaves start at zero; the first TAO
    leaf step fits them. ``take_rows(indices)`` returns those training rows
    (scaled), so only the few sampled rows are ever read.
    """
    tree = complete_tree(depth, n_features, n_outputs, node_type, task=task, leaf_type=leaf_type)
    internal = np.flatnonzero(~tree.is_leaf)
    first = rng.randint(0, n_samples, size=internal.size)
    second = rng.randint(0, n_samples, size=internal.size)
    # midpoints of two random rows: through the data, but (unlike a single
    # anchor row) with no training point exactly on the hyperplane
    anchors = (take_rows(first) + take_rows(second)) / 2
    if node_type == "oblique":
        W = rng.standard_normal((internal.size, n_features))
        W /= np.linalg.norm(W, axis=1, keepdims=True)
        tree.set_decision(internal, W, -np.einsum("ij,ij->i", W, anchors))
    else:
        f = rng.randint(0, n_features, size=internal.size)
        tree.feature[internal] = f
        tree.threshold[internal] = anchors[np.arange(internal.size), f]
    return tree


def cart_tree(X, y, sample_weight, depth, n_outputs, node_type, *, task, leaf_type, random_state):
    """Tree grown by scikit-learn's CART, converted to our arrays.

    CART sends ``x[f] <= t`` left; we send ``x[f] >= t'`` right, so
    ``t' = nextafter(t, +inf)`` reproduces its routing exactly. For oblique
    trees each split becomes a one-hot weight vector.
    """
    Est = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
    cart = Est(max_depth=depth, random_state=random_state).fit(X, y, sample_weight=sample_weight)
    t = cart.tree_
    n_nodes = t.node_count
    leaf = t.children_left < 0
    kind = np.where(leaf, LEAF, OBLIQUE if node_type == "oblique" else AXIS).astype(np.int8)
    threshold = np.where(leaf, 0.0, np.nextafter(t.threshold, np.inf))
    D = X.shape[1]
    tree = Tree(
        children_left=t.children_left.astype(np.int32),
        children_right=t.children_right.astype(np.int32),
        kind=kind,
        weights=sp.csr_matrix((n_nodes, D)),
        bias=np.zeros(n_nodes),
        feature=np.where(kind == AXIS, t.feature, -1).astype(np.int32),
        threshold=np.where(kind == AXIS, threshold, 0.0),
        value=_cart_leaf_values(t, task, leaf_type),
        leaf_coef=sp.csr_matrix((n_nodes * n_outputs, D)) if leaf_type == "linear" else None,
        task=task,
        leaf_type=leaf_type,
    )
    if node_type == "oblique":
        internal = np.flatnonzero(~leaf)
        W = np.zeros((internal.size, X.shape[1]))
        W[np.arange(internal.size), t.feature[internal]] = 1.0
        tree.set_decision(internal, W, -threshold[internal])
    return tree


def _cart_leaf_values(t, task, leaf_type):
    """CART's leaf outputs in our layout (logits for linear classification leaves)."""
    if task == "regression":
        return t.value[:, :, 0].astype(np.float64)
    p = t.value[:, 0, :] / t.value[:, 0, :].sum(axis=1, keepdims=True)
    return np.log(np.maximum(p, 1e-12)) if leaf_type == "linear" else p


def check_warm_start(init, n_features, n_outputs, task, leaf_type):
    """Validate a tree given as ``init`` and return a private copy."""
    if not isinstance(init, Tree):
        raise TypeError(f"init must be 'random', 'cart', a Tree or a fitted taodist estimator; got {type(init).__name__}.")
    for name, have, want in (
        ("n_features", init.n_features, n_features),
        ("n_outputs", init.n_outputs, n_outputs),
        ("task", init.task, task),
        ("leaf_type", init.leaf_type, leaf_type),
    ):
        if have != want:
            raise ValueError(f"The warm-start tree has {name}={have!r} but this fit needs {name}={want!r}.")
    return init.copy()
