"""Initial trees for TAO: random complete trees, CART trees, warm starts."""

import numpy as np
import scipy.sparse as sp
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from ._leaves import LEAF_MODELS
from ._tree import AXIS, LEAF, OBLIQUE, Tree, complete_tree


#: bytes of sampled rows the random initialisation may hold (float64)
_INIT_SAMPLE_BYTES = 32 * 2**20


def random_tree(take_rows, n_samples, n_features, depth, n_outputs, node_type, *, task, leaf_type, rng):
    """Complete tree of ``depth`` with random decision nodes (thesis section 2.1).

    Oblique nodes get a unit-norm Gaussian weight vector, axis nodes a random
    feature. Each hyperplane (threshold) passes through the midpoint of two
    random sample points *that reach the node*: nodes are set top-down on a
    row sample routed through the nodes already set, so every initial split
    cuts the node's own region. (Anchoring on points drawn from the whole
    data set leaves deep nodes with empty children: on letter at depth 10
    only 352 of 1024 leaves received a point, and the dead branches were
    pruned away.) Leaves start at zero; the first TAO leaf step fits them.
    ``take_rows(indices)`` returns those training rows (scaled), so only the
    sampled rows are ever read.
    """
    tree = complete_tree(depth, n_features, n_outputs, node_type, task=task, leaf_type=leaf_type)
    internal = np.flatnonzero(~tree.is_leaf)
    n_sample = min(n_samples, max(64, 8 * 2**depth), max(64, _INIT_SAMPLE_BYTES // (8 * max(n_features, 1))))
    sample = take_rows(np.sort(rng.choice(n_samples, size=n_sample, replace=False)))
    members = {0: np.arange(n_sample)}
    W = rng.standard_normal((internal.size, n_features)) if node_type == "oblique" else None
    if W is not None:
        W /= np.linalg.norm(W, axis=1, keepdims=True)
    features = rng.randint(0, n_features, size=internal.size)
    bias = np.empty(internal.size)
    for k, node in enumerate(internal):  # breadth-first: parents before children
        rows = members.pop(node, np.empty(0, dtype=np.intp))
        pool = rows if rows.size >= 2 else np.arange(n_sample)
        first, second = rng.choice(pool.size, size=2, replace=pool.size < 2)
        # midpoint of two rows: through the node's points, but (unlike a single
        # anchor row) with no point exactly on the hyperplane unless they coincide
        anchor = (sample[pool[first]] + sample[pool[second]]) / 2
        if node_type == "oblique":
            bias[k] = -W[k] @ anchor
            margin = sample[rows] @ W[k] + bias[k]
        else:
            # a feature on which the two rows differ, so the threshold cuts the node
            differ = np.flatnonzero(sample[pool[first]] != sample[pool[second]])
            if differ.size:
                features[k] = differ[rng.randint(differ.size)]
            bias[k] = anchor[features[k]]
            margin = sample[rows, features[k]] - bias[k]
        members[tree.children_left[node]] = rows[margin < 0]
        members[tree.children_right[node]] = rows[margin >= 0]
    if node_type == "oblique":
        tree.set_decision(internal, W, bias)
    else:
        tree.feature[internal] = features
        tree.threshold[internal] = bias
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
        value=LEAF_MODELS[leaf_type].from_cart(task, _cart_values(t, task)),
        leaf_coef=sp.csr_matrix((n_nodes * n_outputs, D)) if LEAF_MODELS[leaf_type].has_coef else None,
        task=task,
        leaf_type=leaf_type,
    )
    if node_type == "oblique":
        internal = np.flatnonzero(~leaf)
        W = np.zeros((internal.size, X.shape[1]))
        W[np.arange(internal.size), t.feature[internal]] = 1.0
        tree.set_decision(internal, W, -threshold[internal])
    return tree


def _cart_values(t, task):
    """CART's node outputs in our layout: class distributions or means."""
    if task == "regression":
        return t.value[:, :, 0].astype(np.float64)
    return t.value[:, 0, :] / t.value[:, 0, :].sum(axis=1, keepdims=True)


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
