"""The depth of ``max_depth="auto"``: from the training rows and classes, and by CART's cross-validation.

All were chosen on validation splits of the suite's dev group (``bench/ablate_defaults.py``;
docs/defaults.md): for classification the rows-per-leaf rule
validated better than CART's cross-validated depth (an oblique tree of a given depth separates
more than CART's), and the rule capped at CART's cross-validated depth better still (on noisy
sets CART's validation sees that a shallow tree is enough); for regression with constant leaves the
cross-validated depth beat every fixed rule; a Lasso leaf fits a model of the columns, not a mean,
so with linear leaves the rule asks for many more rows per leaf, and the same cap keeps a single
tree of Lasso leaves from fitting the noise of a noisy count target.
"""

import math
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from sklearn.model_selection import KFold, StratifiedKFold
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from ..utils.parallel import effective_n_jobs
from ..utils.validation import is_dask_collection

#: rows of the training set per leaf of the complete tree of the rule's depth, for two classes and for
#: regression; a regression leaf fits a mean, which takes fewer rows than a class decision
AUTO_ROWS_PER_LEAF = {"classification": 32, "regression": 16}
#: rows per leaf of a regression tree with linear (Lasso) leaves
AUTO_ROWS_PER_LINEAR_LEAF = 256
#: with K > 2 classes a leaf takes ``sqrt(2 / K)`` times as many rows: more classes need more leaves
#: to be told apart (the dev group preferred it to a fixed 32 on every multi-class set)
AUTO_CLASS_POWER = 0.5
#: the depths ``max_depth="auto"`` keeps to, before the floor that gives every class room
AUTO_DEPTHS = (2, 10)
#: folds of the cross-validation of CART's depth
CV_FOLDS = 5


def auto_depth(n_samples, n_classes, task, linear_leaves=False):
    """The rule's depth: one leaf per ``AUTO_ROWS_PER_LEAF[task]`` training rows
    (:data:`AUTO_ROWS_PER_LINEAR_LEAF` for regression with ``linear_leaves``).

    ``floor(log2(n_samples / rows_per_leaf))`` within :data:`AUTO_DEPTHS`,
    where ``rows_per_leaf`` shrinks by ``(2 / n_classes) ** AUTO_CLASS_POWER``
    with more than two classes; then at least ``ceil(log2(n_classes)) + 1``,
    so the complete tree has two leaves per class (at most depth 20).
    """
    rows_per_leaf = AUTO_ROWS_PER_LINEAR_LEAF if task == "regression" and linear_leaves else AUTO_ROWS_PER_LEAF[task]
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


def cv_cart_losses(X, y, sample_weight, random_state=None, folds=CV_FOLDS, depths=AUTO_DEPTHS, task="regression",
                   n_jobs=None):
    """``{depth: cross-validated weighted loss}`` of CART's tree cut at each depth.

    The loss is the squared error (regression) or the number of errors
    (classification: ``y`` holds class codes), weighted by ``sample_weight``.
    One CART of the largest depth per fold: cut at depth ``d`` it predicts a
    row by the mean (regression) or the heaviest class (classification) of
    its node at that depth (scikit-learn keeps every node's training value),
    so all depths are scored from ``folds`` fits. Where no two splits tie,
    the cut tree is the CART grown to that depth; on ties (nodes of a few
    rows) scikit-learn's random tie-break can differ, which changes a depth's
    score as little as the tie-break itself does. For regression ``y`` is a
    vector or a matrix of targets. Classification folds are stratified when
    every class has ``folds`` rows. The folds' trees are grown on ``n_jobs``
    threads (joblib's convention), which never changes the result.
    """
    lo, hi = depths
    n = X.shape[0]
    classification = task == "classification"
    if classification:
        y = np.asarray(y)
        stratified = np.min(np.bincount(y)[np.unique(y)]) >= folds
        split = (StratifiedKFold if stratified else KFold)(folds, shuffle=True, random_state=random_state)
        learner = DecisionTreeClassifier
    else:
        y = np.asarray(y, dtype=np.float64).reshape(n, -1)
        split, learner = KFold(folds, shuffle=True, random_state=random_state), DecisionTreeRegressor
    sample_weight = np.asarray(sample_weight, dtype=np.float64)
    candidates = range(lo, hi + 1)

    def fold_losses(fold):
        train, val = fold
        cart = learner(max_depth=hi, random_state=random_state).fit(
            X[train], y[train], sample_weight=sample_weight[train])
        if classification:
            predicted = cart.classes_[np.argmax(cart.tree_.value[:, 0, :], axis=1)]  # each node's heaviest class
        else:
            mean = cart.tree_.value[:, :, 0]  # (nodes, outputs)
        out = {}
        for d, nodes in cut_tree_nodes(cart.tree_, cart.apply(X[val]), candidates).items():
            if classification:
                out[d] = float(sample_weight[val] @ (predicted[nodes] != y[val]))
            else:
                out[d] = float(sample_weight[val] @ ((mean[nodes] - y[val]) ** 2).sum(axis=1))
        return out

    splits = list(split.split(np.empty((n, 0)), y if classification else None))
    # scikit-learn grows a tree without the GIL: the folds run on threads. A RandomState shared by the
    # folds would be drawn from in whichever order the threads ran, so it keeps them one after the other.
    threads = 1 if isinstance(random_state, np.random.RandomState) else min(effective_n_jobs(n_jobs), len(splits))
    if threads > 1:
        with ThreadPoolExecutor(threads) as pool:
            per_fold = list(pool.map(fold_losses, splits))
    else:
        per_fold = [fold_losses(f) for f in splits]
    loss = dict.fromkeys(candidates, 0.0)
    for out in per_fold:  # summed in fold order, whichever thread scored a fold
        for d in candidates:
            loss[d] += out[d]
    return loss


def cv_cart_depth(X, y, sample_weight, random_state=None, folds=CV_FOLDS, depths=AUTO_DEPTHS, task="regression",
                  n_jobs=None):
    """The depth within ``depths`` of least :func:`cv_cart_losses` (the shallower on a tie).

    With fewer than ``2 * folds`` rows, the shallowest depth.
    """
    if X.shape[0] < 2 * folds:
        return depths[0]
    loss = cv_cart_losses(X, y, sample_weight, random_state, folds, depths, task, n_jobs)
    return min(loss, key=lambda d: (loss[d], d))


def resolve_auto_depth(X, y, sample_weight, task, n_classes, random_state, rule_rows=None, n_jobs=None,
                       linear_leaves=False, with_deeper=False):
    """The depth of ``max_depth="auto"`` for a fit on ``X``.

    Regression with constant leaves on data in memory: :func:`cv_cart_depth` on all of ``X``.
    One tree (``rule_rows`` None) on data in memory, classification or
    regression with ``linear_leaves``: :func:`auto_depth` of ``X``'s rows
    (for regression a leaf per :data:`AUTO_ROWS_PER_LINEAR_LEAF`), at most
    CART's cross-validated depth (:func:`cv_cart_depth`). Otherwise (Dask
    input, or a forest, which passes the rows one tree draws as
    ``rule_rows``): :func:`auto_depth` of ``rule_rows`` rows (default: all of
    ``X``'s). ``n_jobs``: threads for the cross-validation's CART fits.

    ``with_deeper``: return ``(depth, deeper)``, ``deeper`` CART's
    cross-validated depth where it is deeper than ``depth`` for one
    regression tree of linear leaves in memory (else None): the depth that
    held-out rows may choose instead (a target made of interactions needs
    more leaves than the rule gives).
    """
    in_memory = not is_dask_collection(X)
    deeper = None
    if task == "regression" and not linear_leaves:
        if in_memory:
            depth = cv_cart_depth(X, y, sample_weight, random_state=random_state, n_jobs=n_jobs)
        else:
            depth = auto_depth(X.shape[0] if rule_rows is None else rule_rows, n_classes, task)
        return (depth, deeper) if with_deeper else depth
    depth = auto_depth(X.shape[0] if rule_rows is None else rule_rows, n_classes, task, linear_leaves=linear_leaves)
    if in_memory and rule_rows is None:
        # CART's cross-validated depth is shallow where the target is mostly noise: a deeper tree would fit it
        cv = cv_cart_depth(X, y, sample_weight, random_state=random_state, task=task, n_jobs=n_jobs)
        if task == "regression" and cv > depth:
            deeper = cv
        depth = min(depth, cv)
    return (depth, deeper) if with_deeper else depth
