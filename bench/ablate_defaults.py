"""Choosing taodist's defaults: candidate settings compared on the suite's dev group, by validation splits.

Each candidate is a TAO tree or forest whose depth may follow a rule of the
training rows and classes (``depth = clip(floor(log2(n / rows_per_leaf)),
floor, cap)``, at least ``ceil(log2(n_classes)) + 1``), so a rule can be
tried before it becomes an estimator default. The test splits and the
report group are never read: every set is split as ``bench_suite.py
--split validation`` splits it.

Prints, per candidate: the mean rank of its validation error among the
candidates and CART (unlimited and CV depth), its wins and losses against
CART with CV depth, the mean training and validation error (classification,
%) or RMSE ratio to CV-CART (regression), the median parameters and the
median fit seconds.

Run from the repository root::

    python bench/ablate_defaults.py --candidates depth8 "rule L=8" "rule L=8 init=cart" --splits 3
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor

from _report import write_report
from _variants import parse_key_values
from bench_quality import register_experimental_solvers
from bench_suite import MODELS, run_set
from suite_data import suite


def rule_depth(n_samples, n_classes, rows_per_leaf, floor=2, cap=10, class_power=0.0, class_depth=True):
    """``clip(floor(log2(n K^class_power / rows_per_leaf)), floor, cap)``, deep enough for ``2 n_classes`` leaves.

    ``class_power`` > 0 gives problems with more classes more leaves for the same rows.
    ``class_depth=False`` drops the ``2 n_classes`` leaves (softmax leaves score every class).
    """
    per_leaf = rows_per_leaf / max(n_classes, 1) ** class_power
    depth = int(math.floor(math.log2(max(n_samples / per_leaf, 1.0))))
    if n_classes > 2 and class_depth:
        depth = max(depth, math.ceil(math.log2(n_classes)) + 1)
    return int(np.clip(depth, floor, cap))


def cv_cart_depth(X, y, task, folds=5, depths=(2, 10), seed=0):
    """The depth (within ``depths``) of the lowest cross-validated error of CART's tree cut at that depth.

    One CART of the largest depth per fold: its tree cut at depth ``d`` predicts with the
    values of its nodes at depth ``d`` (scikit-learn keeps every node's training value).
    """
    from sklearn.model_selection import KFold, StratifiedKFold
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
    split = (StratifiedKFold if task == "classification" else KFold)(folds, shuffle=True, random_state=seed)
    lo, hi = depths
    loss = np.zeros(hi + 1)
    for tr, va in split.split(X, y):
        cart = (DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor)(
            max_depth=hi, random_state=seed).fit(X[tr], y[tr])
        path = cart.decision_path(X[va]).tocsr()
        node_depth = np.zeros(cart.tree_.node_count, dtype=int)
        for i in range(cart.tree_.node_count):  # children come after their parents
            for c in (cart.tree_.children_left[i], cart.tree_.children_right[i]):
                if c >= 0:
                    node_depth[c] = node_depth[i] + 1
        value = cart.tree_.value[:, 0, :]
        for d in range(lo, hi + 1):
            # each row's deepest node on its path at depth <= d
            nodes = np.array([row[node_depth[row] <= d][-1] for row in np.split(path.indices, path.indptr[1:-1])])
            if task == "classification":
                loss[d] += np.sum(cart.classes_[value[nodes].argmax(axis=1)] != y[va])
            else:
                loss[d] += np.sum((value[nodes, 0] - y[va]) ** 2)
    return int(lo + np.argmin(loss[lo:]))


def cv_cart_depth_1se(X, y, seed=0, folds=5, depths=(2, 10)):
    """Regression: the shallowest depth whose cross-validated squared error is within one standard error of the least.

    The standard error is that of the mean of the rows' squared errors at the best depth.
    """
    from sklearn.model_selection import KFold
    from sklearn.tree import DecisionTreeRegressor
    from taodist.estimators.auto import cut_tree_nodes

    X, y = np.asarray(X, dtype=np.float64), np.asarray(y, dtype=np.float64)
    lo, hi = depths
    sq = np.zeros((hi + 1, len(y)))
    for tr, va in KFold(folds, shuffle=True, random_state=seed).split(X):
        cart = DecisionTreeRegressor(max_depth=hi, random_state=seed).fit(X[tr], y[tr])
        mean = cart.tree_.value[:, 0, 0]
        for d, nodes in cut_tree_nodes(cart.tree_, cart.apply(X[va]), range(lo, hi + 1)).items():
            sq[d, va] = (mean[nodes] - y[va]) ** 2
    loss = sq[lo:].mean(axis=1)
    best = int(np.argmin(loss))
    se = sq[lo + best].std(ddof=1) / math.sqrt(len(y))
    return int(lo + np.flatnonzero(loss <= loss[best] + se)[0])


def cut_errors(model, X, y, depths):
    """Holdout errors (count) of a fitted TAOClassifier's tree cut at each of ``depths``.

    Cut at depth ``d``, a row that reaches a decision node of depth ``d`` gets
    the majority class of the fitting rows (``model.fit_codes_``) that reached
    that node; a row whose leaf is shallower keeps its leaf's class.
    """
    tree = model.tree_
    depth = tree.node_depth
    leaf_class = model.predict(X)
    path = model.decision_path(X).tocsr()
    out = {}
    for d in depths:
        cut = path[:, depth == d]  # at most one node of depth d per row
        rows, cols = cut.nonzero()
        nodes = np.flatnonzero(depth == d)[cols]
        internal = ~tree.is_leaf[nodes]
        pred = leaf_class.copy()
        pred[rows[internal]] = model.node_majority_[nodes[internal]]
        out[d] = int(np.sum(pred != y))
    return out


def feature_spread(X, how):
    """Per-feature scale other than the estimators' max |x| (dense X): ``"range"`` (max - min), ``"std"``,
    ``"robust"`` (the 1st to 99th percentile's range, else the range), ``"capq<k>"`` (max |x|, at most k times
    the 99th percentile of |x|) or ``"fence<k>"`` (the largest |x| within k times that percentile). Zero
    spreads are left to the caller."""
    X = np.asarray(X, dtype=np.float64)
    if how == "range":
        return X.max(axis=0) - X.min(axis=0)
    if how == "std":
        return X.std(axis=0)
    if how == "robust":
        lo, hi = np.percentile(X, [1, 99], axis=0)
        return np.where(hi > lo, hi - lo, X.max(axis=0) - X.min(axis=0))
    if how.startswith("capq"):  # max |x|, at most k times the 99th percentile of |x| where that is not 0
        top, q = np.abs(X).max(axis=0), np.quantile(np.abs(X), 0.99, axis=0)
        return np.where(q > 0, np.minimum(top, float(how[4:]) * q), top)
    if how.startswith("fence"):  # the largest |x| within k times the 99th percentile of |x| (where that is not 0)
        a = np.abs(X)
        q = np.quantile(a, 0.99, axis=0)
        fence = np.where(q > 0, float(how[5:]) * q, np.inf)
        return np.where(a <= fence, a, 0.0).max(axis=0)
    raise ValueError(f"unknown scaling {how!r}")


def with_scaling(cls, how):
    """``cls`` with its features divided by :func:`feature_spread` instead of max |x| (an experiment only)."""
    if how is None:
        return cls

    if getattr(cls, "_tree_class", None) is not None:  # a forest: its trees scaled so
        return type(cls.__name__, (cls,), {"_tree_class": with_scaling(cls._tree_class, how)})

    class Scaled(cls):
        def _feature_scaling(self, X, task):
            base = super()._feature_scaling(X, task)
            if np.all(base == 1.0):  # a model that is not rescaled (axis-aligned, constant leaves)
                return base
            spread = feature_spread(X, how)
            return np.where(spread > 0, spread, base)

    Scaled.__name__ = Scaled.__qualname__ = cls.__name__
    return Scaled


def with_relevance_init(cls):
    """``cls`` (a single tree) whose random initial tree is drawn in CART's informative subspace (an experiment
    only): each feature's random hyperplane weights are scaled by the square root of its importance in a CART
    tree of the fit's depth (relative to the largest), so a column CART never splits on starts with weight 0
    (TAO's node steps may still use it). The hyperplanes still pass through the midpoints of two of their
    node's rows, as :func:`taodist.tao.initial_trees.random_tree` draws them."""
    from sklearn.tree import DecisionTreeClassifier

    from taodist.estimators.execution import take_scaled_rows
    from taodist.tao.initial_trees import random_tree

    class Relevance(cls):
        def _initial_tree(self, X, y, sample_weight, n_outputs, task, rng):
            if (not (isinstance(self._init, str) and self._init == "random") or self.node_type != "oblique"
                    or task != "classification" or sp.issparse(X)):
                return super()._initial_tree(X, y, sample_weight, n_outputs, task, rng)
            importance = DecisionTreeClassifier(max_depth=self.max_depth_, random_state=0).fit(
                X, y, sample_weight=sample_weight).feature_importances_
            if not importance.any():
                return super()._initial_tree(X, y, sample_weight, n_outputs, task, rng)
            s = np.sqrt(importance / importance.max())
            scale = self._feature_scale
            tree = random_tree(lambda idx: take_scaled_rows(X, idx, scale) * s, X.shape[0], X.shape[1],
                               self.max_depth_, n_outputs, self.node_type, task=task, leaf_type=self.leaf_type,
                               rng=rng)
            tree.scale_features(s)  # drawn on rows x * s: the same hyperplanes over x
            return tree

    Relevance.__name__ = Relevance.__qualname__ = cls.__name__
    return Relevance


def with_contrast_init(cls, mix=0.0):
    """``cls`` (a single classification tree) whose initial tree's hyperplanes are contrasts of class means (an
    experiment only): each decision node, set top-down on up to 20,000 rows routed through the nodes above it,
    splits its rows' classes into two random groups and takes the difference of the groups' mean rows as its
    direction (plus ``mix`` times a random unit vector, relative to the contrast's unit length), through the
    midpoint of the two means. A column that says nothing of the class averages out of a mean, where a random
    Gaussian direction gives it as much weight as any other. A node with fewer than two classes gets a random
    direction through two of its rows, as :func:`taodist.tao.initial_trees.random_tree` draws them."""
    from taodist.estimators.execution import take_scaled_rows
    from taodist.model.tree import complete_tree

    class Contrast(cls):
        def _initial_tree(self, X, y, sample_weight, n_outputs, task, rng):
            if (not (isinstance(self._init, str) and self._init == "random") or self.node_type != "oblique"
                    or task != "classification" or sp.issparse(X)):
                return super()._initial_tree(X, y, sample_weight, n_outputs, task, rng)
            n, d = X.shape
            rows = np.sort(rng.choice(n, size=min(n, 20_000), replace=False))
            sample = take_scaled_rows(X, rows, self._feature_scale)
            codes = np.asarray(y)[rows]  # class codes
            tree = complete_tree(self.max_depth_, d, n_outputs, "oblique", task=task, leaf_type=self.leaf_type)
            internal = np.flatnonzero(~tree.is_leaf)
            W, bias = np.zeros((internal.size, d)), np.zeros(internal.size)
            members = {0: np.arange(rows.size)}
            for k, node in enumerate(internal):
                at = members.pop(node, np.empty(0, dtype=np.intp))
                present = np.unique(codes[at])
                g = rng.standard_normal(d)
                g /= np.linalg.norm(g)
                if present.size >= 2:
                    group = rng.permutation(present)[:rng.randint(1, present.size)]
                    right = np.isin(codes[at], group)
                    a, b = sample[at[right]].mean(axis=0), sample[at[~right]].mean(axis=0)
                    w = a - b
                    norm = np.linalg.norm(w)
                    w = (w / norm if norm > 0 else g) + mix * g
                    anchor = (a + b) / 2
                else:
                    w = g
                    pool = at if at.size >= 2 else np.arange(rows.size)
                    anchor = sample[rng.choice(pool, size=2)].mean(axis=0)
                W[k] = w / np.linalg.norm(w)
                bias[k] = -W[k] @ anchor
                margin = sample[at] @ W[k] + bias[k]
                members[tree.children_left[node]] = at[margin < 0]
                members[tree.children_right[node]] = at[margin >= 0]
            tree.set_decision(internal, W, bias)
            return tree

    Contrast.__name__ = Contrast.__qualname__ = cls.__name__
    return Contrast


def column_relevance(X, y, sample_weight, how, depth, task):
    """Each column's relevance to the target in ``[floor, 1]``; ``how`` is ``"kind<floor>"`` or
    ``"kind:floor:decades"``.

    ``cart``: the square root of the column's importance in a CART tree of ``depth``, relative to the largest;
    ``anova``: ``-log10 p / decades`` (3 unless given) of the column's univariate F test (scikit-learn's
    ``f_classif`` / ``f_regression``), so that ``p <= 10**-decades`` is fully relevant and a column of noise
    (``p`` uniform) mostly below ``1 / decades``; ``max``: the larger of the two."""
    from sklearn.feature_selection import f_classif, f_regression
    from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

    if ":" in how:
        kind, floor, *rest = how.split(":")
        floor, decades = float(floor), float(rest[0]) if rest else 3.0
    else:
        kind = how.rstrip("0123456789.")
        floor, decades = float(how[len(kind):] or 0.1), 3.0
    r = np.zeros(X.shape[1])
    if kind in ("cart", "max"):
        Est = DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor
        importance = Est(max_depth=depth, random_state=0).fit(X, y, sample_weight=sample_weight).feature_importances_
        r = np.sqrt(importance / importance.max()) if importance.any() else np.ones(X.shape[1])
    if kind in ("anova", "max"):
        with np.errstate(all="ignore"):
            _, p = (f_classif if task == "classification" else f_regression)(X, y)
        r = np.maximum(r, -np.log10(np.clip(np.nan_to_num(p, nan=1.0), 1e-300, 1.0)) / decades)
    if kind not in ("cart", "anova", "max"):
        raise ValueError(f"unknown relevance {how!r}")
    return np.clip(r, floor, 1.0)


def with_relevance_penalty(cls, how):
    """``cls`` (a single tree) with an adaptive l1 penalty (an experiment only): column ``j``'s weights cost
    ``1 / r_j`` times as much, ``r_j`` its :func:`column_relevance` (Zou's adaptive lasso), done as TAO's own
    feature scale divided by ``r_j``. A column that says nothing of the target is ``1 / floor`` times as dear
    to use in a hyperplane; the tree still predicts from raw X."""

    class Adaptive(cls):
        def _fit(self, X, y_internal, sample_weight, *args, **kwargs):
            self._relevance_data = (y_internal, sample_weight)
            return super()._fit(X, y_internal, sample_weight, *args, **kwargs)

        def _feature_scaling(self, X, task):
            base = super()._feature_scaling(X, task)
            if np.all(base == 1.0) or sp.issparse(X):
                return base
            y, w = self._relevance_data
            w = None if w is None else np.asarray(w, dtype=np.float64)
            y = np.asarray(y)
            if task != "classification":
                y = y.ravel() if y.ndim > 1 and y.shape[1] == 1 else y
            return base / column_relevance(np.asarray(X), y, w, how, self.max_depth_, task)

    Adaptive.__name__ = Adaptive.__qualname__ = cls.__name__
    return Adaptive


def with_subspace(forest_cls, fraction):
    """``forest_cls`` whose trees each fit a random ``fraction`` of the columns (Ho's random subspaces; an
    experiment only). A tree's weights are put back on all columns, so the forest predicts as before."""
    if fraction is None:
        return forest_cls

    class SubspaceTree(forest_cls._tree_class):
        def _fit_rows(self, X, y, sample_weight, *args, **kwargs):  # what a forest calls
            d = X.shape[1]
            m = min(d, max(1, int(round(fraction * d))))
            cols = np.sort(np.random.RandomState(self.random_state).choice(d, m, replace=False))
            self._forest_missing_indicators = None  # they index all columns
            super()._fit_rows(X[:, cols], y, sample_weight, *args, **kwargs)
            select = sp.csr_matrix((np.ones(m), (np.arange(m), cols)), shape=(m, d))
            tree = self.tree_
            tree.weights = (tree.weights @ select).tocsr()
            tree.feature = np.where(tree.feature >= 0, cols[np.maximum(tree.feature, 0)], tree.feature)
            if tree.leaf_coef is not None:
                tree.leaf_coef = (tree.leaf_coef @ select).tocsr()
            importances = np.zeros(d)
            importances[cols] = self.feature_importances_
            self.feature_importances_ = importances
            self.n_features_in_ = d
            return self

    class Subspace(forest_cls):
        _tree_class = SubspaceTree

    SubspaceTree.__name__ = SubspaceTree.__qualname__ = forest_cls._tree_class.__name__
    Subspace.__name__ = Subspace.__qualname__ = forest_cls.__name__
    return Subspace


class SkewLog(TransformerMixin, BaseEstimator):
    """Columns of more than two values whose skewness exceeds ``threshold`` (in absolute value) mapped to
    ``sign(x - median) log1p(|x - median| / s)``, ``s`` their mean absolute deviation from the median (an
    experiment only: a monotone map, so CART's splits are unchanged, while a hyperplane sees the bulk of a
    long-tailed column instead of its few largest values)."""

    def __init__(self, threshold=1.0, augment=False):
        self.threshold, self.augment = threshold, augment

    def fit(self, X, y=None):
        from scipy.stats import skew

        X = np.asarray(X, dtype=np.float64)
        self.center_ = np.median(X, axis=0)
        self.scale_ = np.mean(np.abs(X - self.center_), axis=0)
        many = np.array([len(np.unique(X[:50_000, j])) > 2 for j in range(X.shape[1])])
        with np.errstate(all="ignore"):
            skewness = np.nan_to_num(skew(X, axis=0))
        self.columns_ = np.flatnonzero(many & (np.abs(skewness) > self.threshold) & (self.scale_ > 0))
        return self

    def transform(self, X):
        X = np.array(X, dtype=np.float64)
        c = self.columns_
        d = X[:, c] - self.center_[c]
        logs = np.sign(d) * np.log1p(np.abs(d) / self.scale_[c])
        if self.augment:  # the mapped columns beside the raw ones
            return np.hstack([X, logs])
        X[:, c] = logs
        return X


class OffsetShift(TransformerMixin, BaseEstimator):
    """Columns far from zero (their range does not contain 0 and is shorter than their distance from it: a
    year, a longitude, a pressure) shifted to start at 0; every other column unchanged (the experiment that
    chose the estimators' own shift, :func:`taodist.estimators.execution.feature_offset`, which does the same
    since: on the current code this transform changes nothing)."""

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        lo, hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
        spread = hi - lo
        self.offset_ = np.where(((lo > spread) | (-hi > spread)) & (spread > 0), lo, 0.0)
        return self

    def transform(self, X):
        return np.asarray(X, dtype=np.float64) - self.offset_


class Spikes(TransformerMixin, BaseEstimator):
    """A robustness probe, not a candidate default: in the training rows, each column of more than two values
    gets one value far outside its range (``high + factor * (high - low)``, at a row drawn at random), as a data
    entry error or a code such as 99999 for "unknown" would be; rows to predict are left as they are. CART's
    splits hardly notice one such row; a penalty on columns divided by ``max |x|`` does."""

    def __init__(self, factor=100.0):
        self.factor = factor

    def fit_transform(self, X, y=None):
        X = np.array(X, dtype=np.float64)
        rng = np.random.RandomState(0)
        for j in range(X.shape[1]):
            if len(np.unique(X[:50_000, j])) > 2:
                lo, hi = X[:, j].min(), X[:, j].max()
                X[rng.randint(len(X)), j] = hi + self.factor * (hi - lo)
        return X

    def fit(self, X, y=None):
        self.fit_transform(X)
        return self

    def transform(self, X):
        return np.asarray(X, dtype=np.float64)


class FenceClip(TransformerMixin, BaseEstimator):
    """Each column of more than two values clipped to ``median +- k q``, ``q`` the 99th percentile of its rows'
    non-zero distances from the median (fitted on the training rows; rows to predict clipped alike). Columns of
    real data rarely reach past it (2 of the 22 dev sets, on 1 and 6 rows); a value far outside the column's
    range (a data entry error, a code for "unknown") is brought to its fence."""

    def __init__(self, k=4.0):
        self.k = k

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        self.low_ = np.full(X.shape[1], -np.inf)
        self.high_ = np.full(X.shape[1], np.inf)
        for j in range(X.shape[1]):
            x = X[:, j]
            if len(np.unique(x[:50_000])) <= 2:
                continue
            med = np.median(x)
            d = np.abs(x - med)
            d = d[d > 0]
            if d.size:
                q = np.quantile(d, 0.99)
                self.low_[j], self.high_[j] = med - self.k * q, med + self.k * q
        return self

    def transform(self, X):
        return np.clip(np.asarray(X, dtype=np.float64), self.low_, self.high_)


class NoiseColumns(TransformerMixin, BaseEstimator):
    """A robustness probe, not a candidate default: ``n`` columns of standard normal noise appended to the rows
    (fitted rows and rows to predict drawn from different seeds), as columns that say nothing of the target
    (identifiers, unrelated measurements) are in real tables."""

    def __init__(self, n=20):
        self.n = n

    def fit_transform(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        return np.hstack([X, np.random.RandomState(0).standard_normal((len(X), self.n))])

    def fit(self, X, y=None):
        return self

    def transform(self, X):
        X = np.asarray(X, dtype=np.float64)
        return np.hstack([X, np.random.RandomState(1).standard_normal((len(X), self.n))])


class PlusConstant(TransformerMixin, BaseEstimator):
    """``shift`` added to every column of more than two values (a robustness probe, not a candidate default:
    the same data measured from another zero, as a temperature in kelvin or a year is)."""

    def __init__(self, shift=2000.0):
        self.shift = shift

    def fit(self, X, y=None):
        X = np.asarray(X, dtype=np.float64)
        self.columns_ = np.array([len(np.unique(X[:50_000, j])) > 2 for j in range(X.shape[1])])
        return self

    def transform(self, X):
        X = np.array(X, dtype=np.float64)
        X[:, self.columns_] += self.shift
        return X


def feature_transform(how):
    """The column transform ``how`` names (fitted on the training rows only), or None."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import PowerTransformer, QuantileTransformer

    if how is None:
        return None
    if how == "yj":
        return PowerTransformer(standardize=False)
    if how == "quantile":
        return QuantileTransformer(n_quantiles=1000, subsample=100_000, random_state=0)
    if how == "offset":
        return OffsetShift()
    if how.startswith("spikeclip"):
        return make_pipeline(Spikes(), FenceClip(float(how[9:])))
    if how.startswith("clip"):
        return FenceClip(float(how[4:]))
    if how.startswith("noise"):
        return NoiseColumns(int(how[5:] or 20))
    if how.startswith("spike"):
        return Spikes(float(how[5:] or 100.0))
    if how == "plus2000":
        return PlusConstant(2000.0)
    if how == "plus2000offset":
        return make_pipeline(PlusConstant(2000.0), OffsetShift())
    if how.startswith("slog"):
        return SkewLog(float(how[4:] or 1.0))
    if how.startswith("alog"):
        return SkewLog(float(how[4:] or 1.0), augment=True)
    raise ValueError(f"unknown transform {how!r}")


class Candidate(BaseEstimator):
    """A TAO tree or forest with ``params``; with ``rows_per_leaf`` its depth follows :func:`rule_depth`.

    ``hold`` > 0 (classification trees): the tree of the rule's depth is fitted
    on ``1 - hold`` of the rows, its cuts at depths 2 to the rule's are scored
    on the other ``hold`` (stratified), and the least error wins (ties go to
    the shallower, or any depth within ``slack`` % of errors of the least;
    ``reps`` holdouts drawn, their errors summed); then
    ``keep=0`` refits at that depth on every row, ``keep=1`` keeps the cut tree.
    ``initobj=1``: fitted from a random and from CART's tree, the lower objective kept.
    ``cvcap=k``: the rule's depth, at most CART's 5-fold cross-validated depth plus ``k``; with ``cartcap=1``,
    from CART's initial tree where that cap binds.
    ``esrefit=n``: above ``n`` training rows, a tree's iterations are chosen by early stopping on a held-out
    tenth of its rows (the best iterate's number), then the tree is fitted on every row with that many.
    ``esdepth=1`` (regression trees above 10,000 rows, with early stopping): fitted again at CART's 5-fold CV
    depth, and the tree of the better held-out score kept.
    ``scaling``: features divided by :func:`feature_spread` of this kind instead of max |x|.
    ``subspace``: a forest whose trees each fit this fraction of the columns (:func:`with_subspace`).
    ``floor``: the rule's least depth (2); ``kdepth=0``: no ``ceil(log2 K) + 1`` least depth for K classes.
    ``transform``: the columns mapped by :func:`feature_transform` before the fit (and before predicting):
    also the robustness probes ``"plus2000"`` (:class:`PlusConstant`), ``"spike"`` (:class:`Spikes`, training
    rows only) and ``"noise<n>"`` (:class:`NoiseColumns`), and ``"clip<k>"`` / ``"spikeclip<k>"``
    (:class:`FenceClip`, after the spikes).
    ``oob``: a forest fitted twice, at its own depth and at another (``"cv"``: CART's 5-fold cross-validated
    depth; a number: the rule with that many rows per leaf), the one of lower out-of-bag error kept
    (:func:`oob_error`).
    ``classguard=1`` (classification trees): a tree whose leaves predict fewer classes than there are (where its
    depth has leaves enough for all) is fitted again from CART's tree, the lower objective kept; ``classguard=2``:
    only where a class of at least half its fair share (``1 / 2K`` of the rows) is never predicted.
    ``oobaxis``: a forest fitted twice, with oblique and with axis-aligned trees, the one of lower out-of-bag
    error kept.
    ``relinit=1`` (single classification trees): the random initial tree drawn in CART's informative subspace
    (:func:`with_relevance_init`).
    ``contrast=m`` (single classification trees): the initial tree's hyperplanes are contrasts of class means,
    plus ``m`` times a random direction (:func:`with_contrast_init`).
    ``relevance='cart<floor>'|'anova<floor>'`` (single trees): an adaptive l1 penalty, each column's weights
    dearer by ``1 / relevance`` (:func:`with_relevance_penalty`).
    """

    def __init__(self, task, seed, forest=False, rows_per_leaf=None, cap=10, class_power=0.0, params=None,
                 hold=0.0, keep=0, slack=0.0, initobj=0, cvcap=None, reps=1, scaling=None, subspace=None,
                 floor=2, kdepth=1, transform=None, oob=None, cartcap=0, esrefit=0, esdepth=0, oobaxis=0,
                 classguard=0, relinit=0, contrast=None, relevance=None):
        self.relinit, self.contrast, self.relevance = relinit, contrast, relevance
        self.task, self.seed, self.forest = task, seed, forest
        self.classguard = classguard
        self.oobaxis = oobaxis
        self.esdepth = esdepth
        self.esrefit = esrefit
        self.cartcap = cartcap
        self.oob = oob
        self.rows_per_leaf, self.cap, self.class_power, self.params = rows_per_leaf, cap, class_power, params
        self.floor, self.kdepth, self.transform = floor, kdepth, transform
        self.hold, self.keep, self.slack, self.initobj, self.cvcap = hold, keep, slack, initobj, cvcap
        self.reps, self.scaling, self.subspace = reps, scaling, subspace

    def _fit_tree(self, cls, X, y, params):
        if self.esrefit and not self.forest:  # the iterations chosen on a held-out tenth, then a fit on every row
            if len(y) <= self.esrefit:
                return cls(random_state=self.seed, **params).fit(X, y)
            probe = cls(random_state=self.seed, **{**params, "early_stopping": True}).fit(X, y)
            self.best_iteration_ = int(probe.best_iteration_)
            return cls(random_state=self.seed, **{**params, "max_iter": max(self.best_iteration_, 1)}).fit(X, y)
        model = cls(random_state=self.seed, **params).fit(X, y)
        if self.initobj:
            other = cls(random_state=self.seed, **{**params, "init": "cart"}).fit(X, y)
            if other.history_[-1] < model.history_[-1]:
                model = other
        if self.classguard and not self.forest and self.task == "classification":
            tree = model.tree_
            predicted = np.unique(tree.value[tree.is_leaf].argmax(axis=1))
            missing = np.setdiff1d(np.arange(len(model.classes_)), predicted)
            share = np.bincount(np.searchsorted(model.classes_, y), minlength=len(model.classes_)) / len(y)
            if self.classguard == 2:  # only a class of at least half its fair share left out
                missing = missing[share[missing] >= 0.5 / len(model.classes_)]
            if missing.size and predicted.size < 2 ** model.max_depth_:
                self.guarded_ = True
                other = cls(random_state=self.seed, **{**params, "init": "cart"}).fit(X, y)
                if other.history_[-1] < model.history_[-1]:
                    model = other
        return model

    def fit(self, X, y):
        from sklearn.model_selection import train_test_split

        params = dict(self.params or {})
        self.transform_ = feature_transform(self.transform)
        if self.transform_ is not None:
            X = self.transform_.fit_transform(np.asarray(X, dtype=np.float64))
        if self.rows_per_leaf == "cv":
            params["max_depth"] = cv_cart_depth(X, y, self.task, seed=self.seed)
        elif self.rows_per_leaf == "cv1se":
            params["max_depth"] = cv_cart_depth_1se(X, y, seed=self.seed)
        elif self.rows_per_leaf is not None:
            n_classes = len(np.unique(y)) if self.task == "classification" else 1
            params["max_depth"] = rule_depth(len(y), n_classes, self.rows_per_leaf, floor=self.floor, cap=self.cap,
                                             class_power=self.class_power, class_depth=bool(self.kdepth))
        if self.cvcap is not None:
            rule = params["max_depth"]
            params["max_depth"] = min(rule, cv_cart_depth(X, y, self.task, seed=self.seed) + self.cvcap)
            if self.cartcap and params["max_depth"] < rule:  # the cap binds: a noisy set; start from CART's tree
                params["init"] = "cart"
        classification = self.task == "classification"
        if self.forest:
            cls = TAOForestClassifier if classification else TAOForestRegressor
        else:
            cls = TAOClassifier if classification else TAORegressor
        cls = with_subspace(with_scaling(cls, self.scaling), self.subspace)
        if self.relinit and not self.forest:
            cls = with_relevance_init(cls)
        if self.relevance is not None and not self.forest:
            cls = with_relevance_penalty(cls, self.relevance)
        if self.contrast is not None and not self.forest:
            cls = with_contrast_init(cls, float(self.contrast))
        self.cut_depth_ = None
        if self.hold and not self.forest and self.task == "classification":
            X, y = np.asarray(X, dtype=np.float64), np.asarray(y)
            top = params.get("max_depth", 10)
            errors = dict.fromkeys(range(2, top + 1), 0)
            for rep in range(self.reps):  # repeated holdouts, their errors summed
                fit, val = train_test_split(np.arange(len(y)), test_size=self.hold, stratify=y,
                                            random_state=self.seed + 7919 * rep)
                first = self._fit_tree(cls, X[fit], y[fit], params)
                codes = np.searchsorted(first.classes_, y[fit])
                counts = first.decision_path(X[fit]).T.tocsr() @ np.eye(len(first.classes_))[codes]
                first.node_majority_ = first.classes_[np.argmax(counts, axis=1)]
                for d, e in cut_errors(first, X[val], y[val], range(2, top + 1)).items():
                    errors[d] += e
            least = min(errors.values())
            depth = min(d for d in errors if errors[d] <= least + self.slack * self.reps * len(val) / 100)
            self.cut_depth_ = depth
            if self.keep:
                self.model_, self.first_ = None, first
            else:
                params["max_depth"] = depth
        if self.cut_depth_ is None or not self.keep:
            self.model_ = self._fit_tree(cls, X, y, params)
        if self.esdepth and not self.forest and not classification and len(y) > 10_000:
            # the held-out tenth of early stopping also chooses between the rule's depth and CART's CV depth
            other = cls(random_state=self.seed, **{**params, "early_stopping": True,
                                                   "max_depth": cv_cart_depth(X, y, self.task, seed=self.seed)}).fit(X, y)
            if other.validation_score_.min() < self.model_.validation_score_.min():
                self.model_ = other
        self.oob_errors_ = None
        if self.oob is not None and self.forest:
            if self.oob == "cv":
                other_depth = cv_cart_depth(X, y, self.task, seed=self.seed)
            else:
                n_classes = len(np.unique(y)) if classification else 1
                other_depth = rule_depth(len(y), n_classes, float(self.oob), class_power=self.class_power or 0.5)
            other = self._fit_tree(cls, X, y, {**params, "max_depth": other_depth})
            self.oob_errors_ = (oob_error(self.model_, X, y, classification), oob_error(other, X, y, classification))
            if self.oob_errors_[1] < self.oob_errors_[0]:
                self.model_ = other
        if self.oobaxis and self.forest:  # the forest of axis-aligned trees too, the lower out-of-bag error kept
            other = self._fit_tree(cls, X, y, {**params, "node_type": "axis"})
            self.oob_errors_ = (oob_error(self.model_, X, y, classification), oob_error(other, X, y, classification))
            if self.oob_errors_[1] < self.oob_errors_[0]:
                self.model_ = other
        self.depth_ = params.get("max_depth")
        if hasattr(self.model_, "tree_"):
            self.tree_, self.history_ = self.model_.tree_, self.model_.history_
        return self

    def predict(self, X):
        if self.transform_ is not None:
            X = self.transform_.transform(np.asarray(X, dtype=np.float64))
        if self.model_ is None:  # the cut tree
            X = np.asarray(X, dtype=np.float64)
            first, d = self.first_, self.cut_depth_
            tree = first.tree_
            pred = first.predict(X)
            path = first.decision_path(X).tocsr()
            rows, cols = path[:, tree.node_depth == d].nonzero()
            nodes = np.flatnonzero(tree.node_depth == d)[cols]
            internal = ~tree.is_leaf[nodes]
            pred[rows[internal]] = first.node_majority_[nodes[internal]]
            return pred
        return self.model_.predict(X)

    def n_parameters(self):
        if self.model_ is None:
            return self.first_.tree_.n_parameters()  # (an upper bound: the cut tree has fewer)
        return self.model_.n_parameters() if self.forest else self.model_.tree_.n_parameters()


def oob_error(forest, X, y, classification):
    """Out-of-bag error of a fitted TAO forest (bootstrap samples, one sample weight): the error rate of the
    soft vote, or the mean squared error, over the rows some tree did not draw (each row scored by those trees).
    The samples are drawn again from the trees' seeds, as :mod:`taodist.tao.bagging` draws them."""
    from taodist.tao.bagging import sample_counts

    rows = forest._check_predict(X)
    n = rows.shape[0]
    total, seen = None, np.zeros(n)
    for est in forest.estimators_:
        out_of_bag = sample_counts(est.random_state, n, forest._n_samples_tree(n), forest.bootstrap) == 0
        pred = np.zeros((n, 1 if not classification else len(forest.classes_)))
        pred[out_of_bag] = np.asarray(est.tree_.predict(rows[out_of_bag])).reshape(out_of_bag.sum(), -1)
        total = pred if total is None else total + pred
        seen += out_of_bag
    scored = seen > 0
    mean = total[scored] / seen[scored, None]
    if classification:
        return float(np.mean(forest.classes_[np.argmax(mean, axis=1)] != np.asarray(y)[scored]))
    return float(np.mean((mean[:, 0] - np.asarray(y, dtype=np.float64)[scored]) ** 2))


class TransformedPeer(BaseEstimator):
    """A peer of ``bench_suite.MODELS`` fitted to rows mapped by :func:`feature_transform` (a probe's rows,
    so that CART's reaction to the probe is measured beside TAO's)."""

    def __init__(self, make, transform):
        self.make, self.transform = make, transform

    def fit(self, X, y):
        self.transform_ = feature_transform(self.transform)
        self.model_ = self.make().fit(self.transform_.fit_transform(np.asarray(X, dtype=np.float64)), y)
        self.best_estimator_ = getattr(self.model_, "best_estimator_", self.model_)  # bench_suite counts it
        return self

    def predict(self, X):
        return self.model_.predict(self.transform_.transform(np.asarray(X, dtype=np.float64)))


def candidate(spec):
    """``"LABEL: [forest] [L=rows_per_leaf] [cap=..] [Kp=class_power] key=value ..."`` -> (label, model factory).

    ``"LABEL: peer='cvcart' transform='...'"``: a peer of ``bench_suite.MODELS`` (``'cart'``, ``'cvcart'``, ``'rf'``
    or a name without spaces) on transformed rows."""
    label, _, rest = spec.partition(":")
    words = rest.split()
    forest = "forest" in words
    params = parse_key_values(" ".join(w for w in words if w != "forest"), "'LABEL: [forest] [L=..] key=value ...'")
    if "peer" in params:
        peer, transform = params.pop("peer"), params.pop("transform")
        peer = {"cart": "CART", "cvcart": "CART (CV depth)", "rf": "RF"}.get(peer, peer)  # names without spaces
        return label.strip(), lambda task, seed: TransformedPeer(lambda: MODELS[peer](task, seed), transform)
    rows_per_leaf = params.pop("L", None)
    cap = params.pop("cap", 10)
    class_power = params.pop("Kp", 0.0)
    extra = {k: params.pop(k) for k in ("hold", "keep", "slack", "initobj", "cvcap", "reps", "scaling", "subspace",
                                        "floor", "kdepth", "transform", "oob", "cartcap", "esrefit", "esdepth",
                                        "oobaxis", "classguard", "relinit", "contrast", "relevance") if k in params}
    return label.strip(), lambda task, seed: Candidate(task, seed, forest, rows_per_leaf, cap, class_power, params,
                                                       **extra)


def table(results, reference):
    """The ablation table: each candidate's rank, wins and losses against ``reference``, errors, size and time."""
    df = pd.DataFrame(results)
    err = df.groupby(["set", "model"])["error"].mean().unstack()
    ranks = err.rank(axis=1, method="average").mean()
    task = df.groupby("set")["task"].first()
    lines = [f"| candidate | mean rank | vs {reference} (better/worse) | classification val error % (train) | "
             f"regression RMSE / {reference} | parameters (median) | fit s (median) |", "|---|---|---|---|---|---|---|"]
    for m in ranks.sort_values().index:
        d = df[df.model == m]
        cls, reg = d[d.task == "classification"], d[d.task == "regression"]
        ratio = (err.loc[task[task == "regression"].index, m] / err.loc[task[task == "regression"].index, reference])
        better = int((err[m] < err[reference]).sum())  # (per set, mean over splits)
        worse = int((err[m] > err[reference]).sum())
        lines.append(f"| {m} | {ranks[m]:.2f} | {better}/{worse} | {cls.error.mean():.2f} ({cls.train_error.mean():.2f}) "
                     f"| {ratio.mean():.3f} | {d.parameters.median():.0f} | {d.seconds.median():.2f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", nargs="+", required=True, metavar="'LABEL: [forest] [L=..] key=value ...'")
    parser.add_argument("--peers", nargs="+", default=["CART", "CART (CV depth)"],
                        help="peers from bench_suite's models; the last is the reference of the table")
    parser.add_argument("--sets", nargs="+", help="a subset of the dev group")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--out", default="bench/results/ablate_defaults.md")
    args = parser.parse_args()
    register_experimental_solvers()  # the "+candidates" node solvers of bench_quality.py, for solver=...
    models = {m: MODELS[m] for m in args.peers}
    models.update(candidate(spec) for spec in args.candidates)
    sets = suite("dev", args.sets)
    if any(s.group != "dev" for s in sets):
        parser.error("defaults are chosen on the dev group only")
    args.split, args.max_train_rows = "validation", None
    results = []
    for entry in sets:
        print(f"{entry.name} ({entry.task})", flush=True)
        results += run_set(entry, models, args)
        Path(args.out).with_suffix(".json").parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results))
    per_set = pd.DataFrame(results).groupby(["set", "model"])["error"].mean().unstack()[list(models)]
    lines = [f"# Ablation on the dev group: validation splits ({args.splits} per set)", "",
             "Candidates: " + "; ".join(args.candidates), "", *table(results, args.peers[-1]), "",
             "Validation error % or RMSE per set (mean over splits):", "",
             "| set | " + " | ".join(per_set.columns) + " |", "|---|" + "---|" * len(per_set.columns)]
    lines += [f"| {s} | " + " | ".join(f"{v:.4g}" for v in row) + " |" for s, row in per_set.iterrows()]
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
