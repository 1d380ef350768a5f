"""What a tree embedding's tree says about the embedding (thesis Figures 4.2-4.3).

Per decision node, the features with the largest positive and negative
weights (the words or pixels that send a point to one child or the other);
per node, the part of the embedding its training points cover (bounding box
and centroid of their 2-D coordinates ``F(x)``) and, when labels were given to
``fit``, how many points of each class reach it.

The per-node statistics are computed once at fit time
(:func:`node_statistics`) and stored on the estimator, so that a model
loaded from a file, which has no training points, still explains itself;
:func:`explain` turns them and the tree's weights into plain Python (the
JSON of ``taodist inspect --json``).
"""

import numpy as np

from ..model.kinds import AXIS, OBLIQUE


def node_statistics(tree, X, Z, codes=None, n_classes=0):
    """Training counts, coordinate boxes, centroids and class counts of every node of ``tree``.

    A decision node covers its subtree's points, so its row sums its
    children's (its box is the union of theirs).

    Parameters
    ----------
    tree : Tree
    X : {ndarray, csr_matrix} of shape (n_samples, n_features)
        The training rows (routed through ``tree``).
    Z : ndarray of shape (n_samples, n_components)
        Their coordinates, ``tree.predict(X)``.
    codes : ndarray of int of shape (n_samples,), optional
        Each row's class index in ``0 .. n_classes - 1``.
    n_classes : int, default=0

    Returns
    -------
    counts : ndarray of int64 of shape (n_nodes,)
    bounds : ndarray of shape (n_nodes, 2, n_components)
        ``bounds[i, 0]`` the smallest, ``bounds[i, 1]`` the largest
        coordinates of node ``i``'s points; NaN for a node no point reaches.
    centroids : ndarray of shape (n_nodes, n_components)
        Mean coordinates (NaN for a node no point reaches).
    class_counts : ndarray of int64 of shape (n_nodes, n_classes) or None
        None without ``codes``.
    """
    n_nodes, K = tree.n_nodes, Z.shape[1]
    leaf = tree.apply(X)
    counts = np.bincount(leaf, minlength=n_nodes).astype(np.int64)
    sums = np.zeros((n_nodes, K))
    np.add.at(sums, leaf, Z)
    lo = np.full((n_nodes, K), np.inf)
    hi = np.full((n_nodes, K), -np.inf)
    np.minimum.at(lo, leaf, Z)
    np.maximum.at(hi, leaf, Z)
    classes = None
    if codes is not None:
        classes = np.zeros((n_nodes, n_classes), dtype=np.int64)
        np.add.at(classes, (leaf, codes), 1)
    # deepest nodes first: a decision node's children are complete before it is summed
    for i in np.argsort(-tree.node_depth, kind="stable"):
        left, right = tree.children_left[i], tree.children_right[i]
        if left < 0:
            continue
        counts[i] = counts[left] + counts[right]
        sums[i] = sums[left] + sums[right]
        lo[i] = np.minimum(lo[left], lo[right])
        hi[i] = np.maximum(hi[left], hi[right])
        if classes is not None:
            classes[i] = classes[left] + classes[right]
    empty = counts == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        # the rounding of a mean can leave its box by an ulp (points that coincide, as a leaf without weights
        # maps them, sum to n * z, give back z +- an ulp): a centroid lies in its box
        centroids = np.clip(sums / counts[:, None], lo, hi)
    centroids[empty] = np.nan
    lo[empty] = np.nan
    hi[empty] = np.nan
    return counts, np.stack([lo, hi], axis=1), centroids, classes


def top_features(tree, node, n_top):
    """``(positive, negative)``: up to ``n_top`` ``(feature index, weight)`` pairs of each sign at a decision node.

    Positive weights push a point to the right child ("yes": ``w . x + b >=
    0``), negative ones to the left; each list is ordered by ``|weight|``,
    largest first (equal weights: lower index first). An axis-aligned node
    ``x[f] >= t`` counts as weight +1 on ``f``.
    """
    if tree.kind[node] == AXIS:
        return [(int(tree.feature[node]), 1.0)], []
    if tree.kind[node] != OBLIQUE:
        return [], []
    row = tree.weights[node]
    idx, w = row.indices.astype(np.int64), row.data
    out = []
    for sign in (1.0, -1.0):
        keep = sign * w > 0
        order = np.lexsort((idx[keep], -np.abs(w[keep])))[:n_top]
        out.append([(int(idx[keep][j]), float(w[keep][j])) for j in order])
    return out[0], out[1]


def leaf_order(tree):
    """Leaf node ids from left to right (the order a drawing of the tree places them): leaf 1, leaf 2, ..."""
    order, stack = [], [0]
    while stack:
        i = stack.pop()
        if tree.children_left[i] < 0:
            order.append(i)
        else:
            stack += [tree.children_right[i], tree.children_left[i]]
    return order


def _maybe(array, i):
    """``array[i]`` as nested lists (None for NaN: a node no training point reaches), or None without ``array``."""
    if array is None:
        return None
    value = np.asarray(array[i], dtype=np.float64)
    return None if np.isnan(value).any() else value.tolist()


def explain(estimator, n_top=7, feature_names=None):
    """The tree of a fitted :class:`TAOEmbedding` as plain Python (lists, dicts, str, int, float, None).

    See :meth:`TAOEmbedding.explain`, which documents the result.
    """
    tree = estimator.tree_
    if feature_names is None and getattr(estimator, "feature_names_in_", None) is not None:
        feature_names = estimator.feature_names_in_
    if feature_names is not None:
        feature_names = [str(n) for n in feature_names]
        if len(feature_names) != tree.n_features:
            raise ValueError(f"feature_names has {len(feature_names)} names but the tree has {tree.n_features} "
                             "features.")
    name = (lambda j: feature_names[j]) if feature_names is not None else (lambda j: f"x{j}")
    counts = getattr(estimator, "node_counts_", None)
    bounds = getattr(estimator, "node_bounds_", None)
    centroids = getattr(estimator, "node_centroids_", None)
    class_counts = getattr(estimator, "node_class_counts_", None)
    classes = getattr(estimator, "classes_", None)
    depth = tree.node_depth

    def common(i):
        return {"node": int(i), "depth": int(depth[i]),
                "n_train": None if counts is None else int(counts[i]),
                "box": _maybe(bounds, i), "centroid": _maybe(centroids, i),
                "class_counts": None if class_counts is None else [int(c) for c in class_counts[i]]}

    nodes = []
    for i in np.flatnonzero(~tree.is_leaf):
        pos, neg = top_features(tree, i, n_top)
        nodes.append({**common(i), "n_nonzero": int(tree.weights[i].nnz) if tree.kind[i] == OBLIQUE else 1,
                      "top_positive": [{"feature": name(j), "index": j, "weight": w} for j, w in pos],
                      "top_negative": [{"feature": name(j), "index": j, "weight": w} for j, w in neg]})
    leaves = []
    K = tree.n_outputs
    for k, i in enumerate(leaf_order(tree), start=1):
        nnz = tree.leaf_coef[i * K:(i + 1) * K].nnz if tree.leaf_coef is not None else 0
        leaves.append({**common(i), "leaf": k, "n_nonzero": int(nnz),
                       "intercept": [float(v) for v in tree.value[i]]})
    return {
        "n_components": int(K),
        "classes": None if classes is None else [c.item() if hasattr(c, "item") else c for c in classes],
        "decision_nodes": nodes,
        "leaves": leaves,
    }
