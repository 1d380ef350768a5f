"""The depth of ``max_depth="auto"``: from the training rows and classes, or by CART's cross-validation.

Both were chosen on validation splits of the suite's dev group (``bench/ablate_defaults.py``;
docs/defaults.md): for classification the rows-per-leaf rule
validated better than CART's cross-validated depth (an oblique tree of a given depth separates
more than CART's); for regression the cross-validated depth beat every fixed rule.
"""

import math

import numpy as np
from sklearn.model_selection import KFold
from sklearn.tree import DecisionTreeRegressor

from ..utils.validation import is_dask_collection

#: rows of the training set per leaf of the complete tree of the rule's depth, for two classes and for
#: regression; a regression leaf fits a mean, which takes fewer rows than a class decision
AUTO_ROWS_PER_LEAF = {"classification": 32, "regression": 16}
#: with K > 2 classes a leaf takes ``sqrt(2 / K)`` times as many rows: more classes need more leaves
#: to be told apart (the dev group preferred it to a fixed 32 on every multi-class set)
AUTO_CLASS_POWER = 0.5
#: the depths ``max_depth="auto"`` keeps to, before the floor that gives every class room
AUTO_DEPTHS = (2, 10)
#: folds of the cross-validation of CART's depth
CV_FOLDS = 5


def auto_depth(n_samples, n_classes, task):
    """The rule's depth: one leaf per ``AUTO_ROWS_PER_LEAF[task]`` training rows.

    ``floor(log2(n_samples / rows_per_leaf))`` within :data:`AUTO_DEPTHS`,
    where ``rows_per_leaf`` shrinks by ``(2 / n_classes) ** AUTO_CLASS_POWER``
    with more than two classes; then at least ``ceil(log2(n_classes)) + 1``,
    so the complete tree has two leaves per class (at most depth 20).
    """
    rows_per_leaf = AUTO_ROWS_PER_LEAF[task]
    if n_classes > 2:
        rows_per_leaf *= (2.0 / n_classes) ** AUTO_CLASS_POWER
    depth = math.floor(math.log2(max(n_samples / rows_per_leaf, 1.0)))
    depth = min(max(depth, AUTO_DEPTHS[0]), AUTO_DEPTHS[1])
    if n_classes > 2:
        depth = max(depth, math.ceil(math.log2(n_classes)) + 1)
    return min(depth, 20)


def cut_tree_nodes(tree, leaves, depths):
    """Per depth ``d`` in ``depths``: the node each row of ``leaves`` reaches in ``tree`` cut at depth ``d``.

    ``tree`` is a scikit-learn ``tree_``; a row stops at its leaf or at its
    path's node of depth ``d``, whichever comes first.
    """
    n = tree.node_count
    parent, depth = np.full(n, -1), np.zeros(n, dtype=np.int64)
    for i in range(n):  # scikit-learn numbers children after their parents
        for child in (tree.children_left[i], tree.children_right[i]):
            if child >= 0:
                parent[child], depth[child] = i, depth[i] + 1
    ancestor = np.arange(n)  # each node's ancestor at the current cut (itself if not deeper)
    out = {}
    for d in range(int(depth.max()), min(depths) - 1, -1):
        deeper = depth[ancestor] > d
        ancestor[deeper] = parent[ancestor[deeper]]
        if d in depths:
            out[d] = ancestor[leaves]
    return {d: out.get(d, leaves) for d in depths}


def cv_cart_losses(X, y, sample_weight, random_state=None, folds=CV_FOLDS, depths=AUTO_DEPTHS):
    """``{depth: cross-validated weighted squared error}`` of CART's regression tree cut at each depth.

    One CART of the largest depth per fold: cut at depth ``d`` it predicts a
    row by the mean of its node at that depth (scikit-learn keeps every node's
    training mean), so all depths are scored from ``folds`` fits. Where no two
    splits tie, the cut tree is the CART grown to that depth; on ties (nodes of
    a few rows) scikit-learn's random tie-break can differ, which changes a
    depth's score as little as the tie-break itself does. ``y`` is a vector or
    a matrix of targets.
    """
    lo, hi = depths
    n = X.shape[0]
    y = np.asarray(y, dtype=np.float64).reshape(n, -1)
    sample_weight = np.asarray(sample_weight, dtype=np.float64)
    candidates = range(lo, hi + 1)
    loss = dict.fromkeys(candidates, 0.0)
    for train, val in KFold(folds, shuffle=True, random_state=random_state).split(np.empty((n, 0))):
        cart = DecisionTreeRegressor(max_depth=hi, random_state=random_state).fit(
            X[train], y[train], sample_weight=sample_weight[train])
        mean = cart.tree_.value[:, :, 0]  # (nodes, outputs)
        for d, nodes in cut_tree_nodes(cart.tree_, cart.apply(X[val]), candidates).items():
            loss[d] += float(sample_weight[val] @ ((mean[nodes] - y[val]) ** 2).sum(axis=1))
    return loss


def cv_cart_depth(X, y, sample_weight, random_state=None, folds=CV_FOLDS, depths=AUTO_DEPTHS):
    """The depth within ``depths`` of least :func:`cv_cart_losses` (the shallower on a tie).

    With fewer than ``2 * folds`` rows, the shallowest depth.
    """
    if X.shape[0] < 2 * folds:
        return depths[0]
    loss = cv_cart_losses(X, y, sample_weight, random_state, folds, depths)
    return min(loss, key=lambda d: (loss[d], d))


def resolve_auto_depth(X, y, sample_weight, task, n_classes, random_state, rule_rows=None):
    """The depth of ``max_depth="auto"`` for a fit on ``X``.

    Regression on data in memory: :func:`cv_cart_depth` on all of ``X``;
    otherwise :func:`auto_depth` of ``rule_rows`` rows (default: all of
    ``X``'s; a forest passes the rows one tree draws).
    """
    if task == "regression" and not is_dask_collection(X):
        return cv_cart_depth(X, y, sample_weight, random_state=random_state)
    return auto_depth(X.shape[0] if rule_rows is None else rule_rows, n_classes, task)
