"""Slow, obviously-correct references for the vectorised code."""

import numpy as np

from ..model.kinds import AXIS, OBLIQUE
from ..model.leaves import pointwise_loss


def naive_apply(tree, X):
    """Route each row on its own, node by node, with plain Python."""
    W = tree.weights.toarray()
    leaves = []
    for x in X:
        i = 0
        while tree.children_left[i] >= 0:
            if tree.kind[i] == OBLIQUE:
                right = float(np.dot(W[i], x)) + tree.bias[i] >= 0
            elif tree.kind[i] == AXIS and tree.missing_column is not None and tree.missing_column[i] >= 0 \
                    and x[tree.missing_column[i]] != 0:
                right = bool(tree.missing_right[i])
            elif tree.kind[i] == AXIS:
                right = x[tree.feature[i]] >= tree.threshold[i]
            else:  # pragma: no cover - malformed tree
                raise AssertionError("decision node with leaf kind")
            i = tree.children_right[i] if right else tree.children_left[i]
        leaves.append(i)
    return np.asarray(leaves)


def naive_objective(tree, X, y, sample_weight, alpha, leaf_alpha=None):
    """E = sum_n s_n L(y_n, T(x_n)) + alpha * l1(node weights) + leaf_alpha * l1(leaf coefficients).

    ``leaf_alpha`` defaults to ``alpha``.
    """
    leaves = naive_apply(tree, X)
    out = tree.leaf_output(X, leaves)
    penalty = alpha * np.abs(tree.weights.data).sum()
    if tree.leaf_coef is not None:
        penalty += (alpha if leaf_alpha is None else leaf_alpha) * np.abs(tree.leaf_coef.data).sum()
    return float(sample_weight @ pointwise_loss(tree.task, out, y) + penalty)


def brute_force_axis_split(X, target, weight):
    """Minimum weighted 0/1 loss over every (feature, threshold) split.

    Thresholds tried: every data value (``x >= v`` goes right) and ``+inf``
    (everything left); this covers every distinct partition.
    """
    best = np.inf
    for f in range(X.shape[1]):
        for t in list(np.unique(X[:, f])) + [np.inf]:
            right = X[:, f] >= t
            best = min(best, float(weight @ (right != target)))
    return best
