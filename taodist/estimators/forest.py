"""TAO forests: bagged TAO trees (thesis section 2.1-2.2).

Each tree is trained by TAO, independently, on its own random sample of the
training set (a bootstrap sample, or ``max_samples`` rows drawn without
replacement), from its own random initial tree. The samples and the tree
fits are in :mod:`taodist.tao.bagging`; :func:`taodist.estimators.execution.fit_trees`
decides where the trees run (worker processes here, or tasks on a Dask
cluster), which does not change the forest.

Prediction: regression averages the trees; classification averages the
trees' class probabilities (``voting="soft"``, the default: a constant
leaf's probabilities are its reduced set's class shares, as in
scikit-learn's RandomForestClassifier) or counts one vote per tree
(``voting="hard"``, the thesis' majority vote for constant leaves).
"""

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, check_random_state

from ..model.leaves import LEAF_MODELS
from ..tao.bagging import out_of_bag_mean
from ..utils.rows import as_rows
from ..utils.validation import is_dask_collection
from .auto import cv_cart_depth, resolve_auto_depth
from .base import BaseTAO, TAOTagsMixin, fit_method, set_init_params, validated_sample_weight
from .execution import clip_columns, fit_trees, lazy_over_row_blocks, outlier_fences
from .relevance import estimator_penalty_factors
from .tabular import per_input_column, predict_table
from .tree import TAOClassifier, TAORegressor, class_codes, class_weighted

#: above this many training rows, a regression forest of linear leaves also tries CART's deeper CV depth
#: and keeps the depth of lower out-of-bag error (below it, the out-of-bag errors chose worse than the rule)
OOB_DEPTH_MIN_ROWS = 10_000


def oob_mean_squared_error(trees, X, y, sample_weight, seeds, n_samples_tree, bootstrap):
    """Weighted mean squared error (summed over outputs) of a regression forest's out-of-bag predictions.

    Over the rows some tree's sample left out, each predicted by those trees
    (:func:`taodist.tao.bagging.out_of_bag_mean`); ``inf`` if there are none (of weight above zero).
    """
    mean, counts = out_of_bag_mean(trees, X, seeds, n_samples_tree, bootstrap)
    seen = counts > 0
    if not np.any(sample_weight[seen] > 0):
        return np.inf
    residual = mean[seen] - np.asarray(y, dtype=np.float64).reshape(X.shape[0], -1)[seen]
    return float(np.average((residual ** 2).sum(axis=1), weights=sample_weight[seen]))


class BaseTAOForest(TAOTagsMixin, BaseEstimator):
    """What the TAO forests share: the trees' parameters and samples, fitting them, counting their size.

    Subclasses define ``__init__`` (their parameters and defaults), ``fit``
    and prediction.
    """

    _parameter_constraints = {
        "n_estimators": [Interval(numbers.Integral, 1, None, closed="left")],
        "bootstrap": ["boolean"],
        "max_samples": [None, Interval(numbers.Real, 0, 1, closed="right"), Interval(numbers.Integral, 1, None, closed="left")],
        # every tree starts from its own initial tree of a kind (not one given tree); no limit (yet) on the
        # classes of softmax leaves; no restarts per tree (bagging already varies the trees)
        **{k: v for k, v in BaseTAO._parameter_constraints.items()
           if k not in ("init", "leaf_classes", "n_init", "n_iter_no_change")},
        "init": [StrOptions({"auto", "random", "cart", "cluster"})],
    }
    _tree_class = None

    #: parameters of the forest's trees that only some forests have (a softmax leaf's warm start)
    _classifier_tree_params = ()

    def _tree_params(self):
        names = ("max_depth", "node_type", "solver", "leaf_type", "C", "leaf_C", "leaf_max_iter", "refit_leaves",
                 "max_iter", "tol", "init", "prune", "max_care_points") + self._classifier_tree_params
        return {k: getattr(self, k) for k in names}

    def _n_samples_tree(self, n):
        if self.max_samples is None:
            return n
        if isinstance(self.max_samples, numbers.Integral):
            if self.max_samples > n and not self.bootstrap:
                raise ValueError(f"max_samples={self.max_samples} exceeds the {n} training samples (bootstrap=False).")
            return int(self.max_samples)
        return max(1, int(round(self.max_samples * n)))

    def _validate_fit_X_y(self, X, y, **kw):
        """As for the single trees (:meth:`BaseTAO._validate_fit_X_y`): validated, encoded rows in memory (sparse
        kept as CSR); Dask input checked without computing X."""
        return BaseTAO._validate_fit_X_y(self, X, y, None, **kw)

    def _fit_forest(self, X, y, sample_weight, fit_kwargs, client):
        if is_dask_collection(sample_weight):
            sample_weight = sample_weight.compute()
        sample_weight = validated_sample_weight(sample_weight, X.shape[0])
        # clipped once for every tree (and in prediction), as the encoder encodes once
        self.clip_bounds_ = outlier_fences(X, self.outlier_fence, client)
        X = clip_columns(X, self.clip_bounds_)
        # the columns' tests too: on the whole training set, not each tree's sample
        task = "classification" if issubclass(self._tree_class, TAOClassifier) else "regression"
        self.penalty_factors_ = estimator_penalty_factors(self, X, y, sample_weight, task, client)
        rng = check_random_state(self.random_state)
        seeds = rng.randint(np.iinfo(np.int32).max, size=self.n_estimators)
        n_tree = self._n_samples_tree(X.shape[0])
        params = self._tree_params()
        depths = [params["max_depth"]]
        if self.max_depth == "auto":
            depths = self._auto_depths(X, y, sample_weight, n_tree)
        args = (X, y, sample_weight)
        indicators = None if self.encoder_ is None else self.encoder_.missing_indicators()

        def make_tree_of_depth(depth):
            def make_tree(seed):
                # every tree fits all of its bootstrap rows (the forest's own early_stopping counts trees, not
                # iterations)
                tree = self._tree_class(**{**params, "max_depth": depth}, random_state=int(seed), n_jobs=1,
                                        early_stopping=False, outlier_fence=None, penalty_factors=None)
                tree._forest_penalty_factors = self.penalty_factors_
                # the trees see the forest's encoded columns as plain numbers: where their axis nodes' missing
                # values are flagged comes from the forest's encoder
                tree._forest_missing_indicators = indicators
                return tree
            return make_tree

        forests = [fit_trees(make_tree_of_depth(d), *args, seeds, n_tree, self.bootstrap, fit_kwargs,
                             client=client, n_jobs=self.n_jobs) for d in depths]
        self.depth_oob_errors_ = None
        if len(depths) > 1:  # the same samples at every depth: the out-of-bag errors compare paired forests
            errors = [oob_mean_squared_error(trees, X, y, sample_weight, seeds, n_tree, self.bootstrap)
                      for trees in forests]
            self.depth_oob_errors_ = dict(zip(depths, errors))
            best = int(np.argmin(errors))  # the first (the rule's depth) on a tie
            depths, forests = depths[best:best + 1], forests[best:best + 1]
        self.max_depth_, trees = depths[0], forests[0]
        self.estimators_ = trees
        self.n_iter_ = np.array([t.n_iter_ for t in trees])
        return self

    def _auto_depths(self, X, y, sample_weight, n_tree):
        """The depths ``max_depth="auto"`` fits forests at: one for every tree (a rule on the rows a tree draws,
        or CART's cross-validated depth); for linear-leaf regression on more than :data:`OOB_DEPTH_MIN_ROWS`
        rows in memory, also CART's cross-validated depth where it is deeper and some rows are left out of the
        samples, the forest of the lower out-of-bag error to be kept."""
        classification = issubclass(self._tree_class, TAOClassifier)
        linear_leaves = LEAF_MODELS[self.leaf_type].has_coef
        rule = resolve_auto_depth(
            X, y, sample_weight, "classification" if classification else "regression",
            len(self.classes_) if classification else 0, self.random_state, rule_rows=n_tree,
            n_jobs=self.n_jobs, linear_leaves=linear_leaves)
        n = X.shape[0]
        if (classification or not linear_leaves or is_dask_collection(X) or n <= OOB_DEPTH_MIN_ROWS
                or (n_tree >= n and not self.bootstrap)):
            return [rule]
        # a Lasso leaf per many rows suits targets near-linear in the columns; where they hold interactions a
        # shallow tree cannot resolve, CART's deeper cross-validated depth does better (docs/defaults.md)
        cv = cv_cart_depth(X, y, sample_weight, random_state=self.random_state, n_jobs=self.n_jobs)
        return [rule, cv] if cv > rule else [rule]

    _with_validation = BaseTAO._with_validation
    _validation_rows = BaseTAO._validation_rows

    def _keep_best_trees(self, validation, task):
        """With validation rows: the error of the first k trees for every k (``validation_score_``); with early
        stopping, only the first ``n_estimators_`` trees, up to the lowest error, are kept. Then the kept
        trees' mean ``feature_importances_``, per input column."""
        self.n_estimators_ = len(self.estimators_)
        if validation is not None:
            self._score_tree_counts(validation, task)
        importances = np.mean([t.feature_importances_ for t in self.estimators_], axis=0)  # the encoded columns
        self.feature_importances_ = per_input_column(self.encoder_, importances)
        return self

    def _score_tree_counts(self, validation, task):
        """``validation_score_``: the error of the first k trees' vote for every k; with ``stop``, the trees cut."""
        X_val, y_val, stop = validation
        if is_dask_collection(X_val):
            X_val = as_rows(X_val.compute())  # scored by every tree in turn
        X_val = clip_columns(X_val, self.clip_bounds_)
        total, scores = None, []
        for k, est in enumerate(self.estimators_, start=1):
            out = est.tree_.predict(X_val)
            if task == "classification" and getattr(self, "voting", "soft") == "hard":
                out = np.eye(out.shape[1])[np.argmax(out, axis=1)]
            total = out if total is None else total + out
            mean = total / k
            if task == "classification":
                scores.append(float(np.mean(np.argmax(mean, axis=1) != y_val)))
            else:
                scores.append(float(np.mean((mean - y_val.reshape(len(y_val), -1)) ** 2)))
        self.validation_score_ = np.asarray(scores)
        if stop:
            self.n_estimators_ = int(np.argmin(self.validation_score_)) + 1  # the fewest trees at the lowest error
            self.estimators_ = self.estimators_[:self.n_estimators_]
            self.n_iter_ = self.n_iter_[:self.n_estimators_]

    def _check_predict(self, X):
        check_is_fitted(self, "estimators_")
        return as_rows(clip_columns(predict_table(self, X, np.float64), getattr(self, "clip_bounds_", None)))

    @lazy_over_row_blocks
    def apply(self, X):
        """Index of the leaf each sample reaches in every tree.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns, encoded as in ``fit``).

        Returns
        -------
        leaves : ndarray of shape (n_samples, n_estimators)
            ``leaves[i, k]`` is a node index of ``estimators_[k].tree_``.
        """
        X = self._check_predict(X)
        return np.column_stack([est.tree_.apply(X) for est in self.estimators_])

    def decision_path(self, X):
        """The nodes each sample visits in every tree, as scikit-learn's forests return them.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns, encoded as in ``fit``).

        Returns
        -------
        indicator : sparse matrix of shape (n_samples, n_nodes)
            Every tree's node indicator, side by side.
        n_nodes_ptr : ndarray of shape (n_estimators + 1,)
            ``indicator[:, n_nodes_ptr[k]:n_nodes_ptr[k + 1]]`` is tree k's.
        """
        X = self._check_predict(X)
        paths = [est.tree_.decision_path(X) for est in self.estimators_]
        ptr = np.concatenate([[0], np.cumsum([p.shape[1] for p in paths])])
        return sp.hstack(paths, format="csr"), ptr

    def n_parameters(self):
        """Total parameters of the forest (thesis Appendix A).

        Returns
        -------
        n_parameters : int
            Summed over the trees: non-zero decision weights and biases, and the leaves' parameters.
        """
        check_is_fitted(self, "estimators_")
        return int(sum(e.tree_.n_parameters() for e in self.estimators_))

    def inference_flops(self, X):
        """Mean non-zero parameters met per prediction, summed over trees.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns, encoded as in ``fit``).

        Returns
        -------
        flops : float
            Over the rows of ``X``, the mean of the non-zero parameters on each tree's root-to-leaf path, summed.
        """
        X = self._check_predict(X)
        return float(sum(e.tree_.inference_flops(X) for e in self.estimators_))


class TAOForestClassifier(ClassifierMixin, BaseTAOForest):
    """A forest of TAO trees trained on bootstrap samples.

    Parameters
    ----------
    n_estimators : int, default=30
        Number of trees (the thesis uses up to 30).
    bootstrap : bool, default=True
        Bootstrap samples; otherwise ``max_samples`` rows without replacement.
    max_samples : int, float or None, default=None
        Rows per tree (a fraction if float); None means all rows.
    max_depth : int or "auto", default="auto"
        Depth of every tree's initial tree. ``"auto"``: :class:`TAOClassifier`'s
        rule applied to the rows of a tree's sample (``max_depth_``), which
        validated better than a fixed depth 10 at a fraction of the fit time;
        for :class:`TAOForestRegressor`, :class:`TAORegressor`'s choice on the
        whole training set.
    node_type, solver, C, leaf_C, leaf_max_iter, leaf_warm_start, max_iter, tol, prune, max_care_points
        As in :class:`TAOClassifier` (per tree).
    leaf_type : {"constant", "linear"}, default="constant"
        As in :class:`TAOClassifier` (per tree). Constant leaves were chosen
        over linear (softmax) leaves on validation splits (docs/defaults.md).
    refit_leaves : {"new_rows", "until_refused", "always"}, default="new_rows"
        As in :class:`TAOClassifier` (per tree), with another default: a
        linear leaf is refitted only when its reduced set changes, which
        fits a forest faster than "until_refused" (the single trees'
        default) at the same validation error.
    init : {"auto", "random", "cart", "cluster"}, default="auto"
        Each tree's initial tree, built on its own sample and seed (see
        :class:`TAOClassifier`; ``"auto"`` as there: random trees for
        classification, CART's trees for regression). "cart" and "cluster"
        need the data in memory.
    random_state : int, RandomState instance or None, default=None
        Seeds every tree's sample and initial tree.
    n_jobs : int or None, default=-1
        Trees fitted in parallel worker processes (in-process fits).
    voting : {"soft", "hard"}, default="soft"
        "soft" averages the trees' class probabilities; "hard" gives each
        tree one vote for its predicted class (the thesis' majority vote for
        constant leaves). Soft was never worse than hard on validation
        splits.
    categorical_features : "from_dtype", array-like of int, str or bool, or None, default="from_dtype"
        As in :class:`TAOClassifier`: the forest encodes the columns once and
        its trees fit the encoded features.
    outlier_fence : float or None, default=3.0
        As in :class:`TAOClassifier`: the forest clips the columns once
        (``clip_bounds_``, from the whole training set) and its trees fit the
        clipped rows.
    penalty_factors : "auto" or None, default=None
        As in :class:`TAOClassifier`: with "auto" the forest tests the
        columns once, on its whole training set (``penalty_factors_``), and
        every tree's penalty takes those factors. None by default for
        classification: a forest's vote already averages away much of what
        its trees fit of the noise, and the adaptive penalty did not make the
        classification forests better than RandomForest on more of the
        suite's sets (docs/defaults.md); :class:`TAOForestRegressor` uses it.
    class_weight : dict, "balanced" or None, default=None
        As in :class:`TAOClassifier`, computed once on the whole training set
        (every tree's sample weighs its rows so).
    early_stopping : "auto" or bool, default=False
        Keep only the first trees, up to the lowest validation error of
        their vote (``n_estimators_`` of them): the trees are fitted in
        parallel, so this chooses the forest's size rather than saving fit
        time. The validation rows are ``fit``'s ``eval_set``, else
        ``validation_fraction`` of the training rows; ``"auto"``: on above
        10,000 rows.
    validation_fraction : float, default=0.1
        As in :class:`TAOClassifier`.
    verbose : int, default=0
        Print the forest's progress (trees done, ETA).
    callbacks : list of callables, default=None
        As in :class:`TAOClassifier`: here they receive ``"forest_tree"``
        events (trees done, total), and TAO's events of trees fitted in this
        process (``n_jobs=1``).

    Attributes
    ----------
    estimators_ : list of TAOClassifier
    n_iter_ : ndarray of shape (n_estimators,)
        TAO iterations of each tree.
    classes_ : ndarray
    feature_importances_ : ndarray of shape (n_features_in_,)
        The mean of the trees' (see :class:`TAOClassifier`).
    n_estimators_ : int
        Trees kept (``n_estimators``, or fewer with ``early_stopping``).
    validation_score_ : ndarray of shape (n_estimators,)
        With validation rows: the error of the first k trees' vote, for every k.
    clip_bounds_ : ndarray of shape (2, n_features) or None
        As in :class:`TAOClassifier`: every row is clipped to them before the
        trees route it (their own ``clip_bounds_`` are None).
    penalty_factors_ : ndarray of shape (n_features,) or None
        As in :class:`TAOClassifier`; the trees' own are the same array.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        Only when fitted on a DataFrame.
    encoder_ : TabularEncoder or None
        As in :class:`TAOClassifier`.

    References
    ----------
    A. Zharmagambetov. Learning tree-based models with manifold
    regularization, PhD thesis, UC Merced, 2022 (section 2.2).
    """

    _tree_class = TAOClassifier
    _classifier_tree_params = ("leaf_warm_start",)
    _parameter_constraints = {**BaseTAOForest._parameter_constraints, "voting": [StrOptions({"soft", "hard"})],
                              "class_weight": [StrOptions({"balanced"}), dict, None]}

    def __init__(self, *, n_estimators=30, bootstrap=True, max_samples=None, max_depth="auto", node_type="oblique",
                 solver="fista", leaf_type="constant", C=30.0, leaf_C=None, leaf_max_iter=None,
                 refit_leaves="new_rows", leaf_warm_start="coef", max_iter=15, tol=5e-3, init="auto",
                 prune=True, random_state=None, n_jobs=-1, max_care_points=None, voting="soft",
                 categorical_features="from_dtype", outlier_fence=3.0, penalty_factors=None, class_weight=None,
                 early_stopping=False,
                 validation_fraction=0.1, verbose=0, callbacks=None):
        set_init_params(self, locals())

    @fit_method
    def fit(self, X, y, sample_weight=None, *, client=None, eval_set=None):
        """Fit the forest; with ``client``, each tree is a task on the cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), default=None
        client : distributed.Client, optional
        eval_set : (X_val, y_val), optional
            Validation rows: the error of the first k trees' vote is recorded
            for every k (``validation_score_``); with ``early_stopping`` the
            forest keeps the first trees up to the lowest error.

        Returns
        -------
        self : TAOForestClassifier
            The fitted forest.
        """
        X, y = self._validate_fit_X_y(X, y)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        if len(self.classes_) < 2:
            raise ValueError(f"TAOForestClassifier needs at least 2 classes; got 1 class ({self.classes_[0]!r}).")
        codes = encoder.transform(y)
        if self.class_weight is not None:
            sample_weight = class_weighted(self.class_weight, self.classes_, codes, sample_weight)
        X, codes, sample_weight, validation = self._with_validation(
            X, codes, sample_weight, eval_set, "classification", lambda labels: class_codes(encoder, labels))
        self._fit_forest(X, codes, sample_weight, {"classes": np.arange(len(self.classes_))}, client)
        return self._keep_best_trees(validation, "classification")

    @lazy_over_row_blocks
    def predict_proba(self, X):
        """Mean class probabilities of the trees (``voting="soft"``) or their vote shares (``"hard"``).

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns, encoded as in ``fit``).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``.
        """
        X = self._check_predict(X)
        K = len(self.classes_)
        out = np.zeros((X.shape[0], K))
        for est in self.estimators_:
            p = est.tree_.predict(X)
            if self.voting == "hard":  # one vote per tree
                out[np.arange(X.shape[0]), np.argmax(p, axis=1)] += 1.0
            else:
                out += p
        return out / len(self.estimators_)

    @lazy_over_row_blocks
    def predict(self, X):
        """Predicted class of each sample: the most probable under :meth:`predict_proba`.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns, encoded as in ``fit``).

        Returns
        -------
        y : ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]


class TAOForestRegressor(RegressorMixin, BaseTAOForest):
    """A forest of TAO regression trees trained on bootstrap samples; predicts their mean.

    Parameters
    ----------
    n_estimators : int, default=60
        Number of trees. Twice the classifier's: the mean of the trees'
        Lasso leaves kept gaining from more trees where the classifier's
        soft vote did not (docs/defaults.md).
    bootstrap, max_samples, max_depth, node_type, solver, C, leaf_C, leaf_max_iter, refit_leaves, \
max_iter, tol, init, prune, random_state, n_jobs, max_care_points, categorical_features, outlier_fence, \
penalty_factors, early_stopping, validation_fraction, verbose, callbacks
        As for :class:`TAOForestClassifier`, with :class:`TAORegressor`'s
        per-tree defaults (``solver="fista"``, ``C=100``, ``leaf_C=1``,
        ``penalty_factors="auto"``: each column's test of its correlation with
        the target, once for all the trees,
        ``max_depth="auto"``: with linear leaves a leaf per 256 rows a tree
        draws, with constant leaves CART's cross-validated depth;
        ``init="auto"``: CART's trees). With linear leaves on more than
        10,000 rows in memory, where CART's cross-validated depth is deeper
        than the rule's, the forest is fitted at both depths with the same
        samples and the one of lower out-of-bag error is kept
        (``depth_oob_errors_``): the rule's shallow trees suit a target
        near-linear in the columns, deeper trees one of interactions. That
        fit takes twice the time.
    leaf_type : {"linear", "constant"}, default="linear"
        Lasso leaves by default.

    Attributes
    ----------
    estimators_ : list of TAORegressor
    max_depth_ : int
        The trees' depth.
    depth_oob_errors_ : dict or None
        With ``max_depth="auto"`` fitted at two depths: each depth's
        out-of-bag mean squared error (weighted, over the rows some tree's
        sample left out); None when one depth was fitted.
    feature_importances_ : ndarray of shape (n_features_in_,)
    clip_bounds_, penalty_factors_ : ndarray or None
        As in :class:`TAOForestClassifier`.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
    encoder_ : TabularEncoder or None
    """

    _tree_class = TAORegressor

    def __init__(self, *, n_estimators=60, bootstrap=True, max_samples=None, max_depth="auto", node_type="oblique",
                 solver="fista", leaf_type="linear", C=100.0, leaf_C=1.0, leaf_max_iter=None,
                 refit_leaves="new_rows", max_iter=15, tol=5e-3, init="auto", prune=True, random_state=None,
                 n_jobs=-1, max_care_points=None, categorical_features="from_dtype", outlier_fence=3.0,
                 penalty_factors="auto",
                 early_stopping=False, validation_fraction=0.1, verbose=0, callbacks=None):
        set_init_params(self, locals())

    @fit_method
    def fit(self, X, y, sample_weight=None, *, client=None, eval_set=None):
        """Fit the forest; with ``client``, each tree is a task on the cluster.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
        client : distributed.Client, optional
        eval_set : (X_val, y_val), optional
            As for :meth:`TAOForestClassifier.fit`, scored by mean squared error.

        Returns
        -------
        self : TAOForestRegressor
            The fitted forest.
        """
        if self.init == "cluster":
            raise ValueError("init='cluster' places classes on leaves (softmax trees): it needs a classifier. Use "
                             "init='random' or init='cart' for a TAOForestRegressor.")
        X, y = self._validate_fit_X_y(X, y, multi_output=True, y_numeric=True)
        self._y_1d = y.ndim == 1
        X, y, sample_weight, validation = self._with_validation(
            X, y, sample_weight, eval_set, "regression", lambda values: np.asarray(values, dtype=np.float64))
        self._fit_forest(X, y, sample_weight, {}, client)
        return self._keep_best_trees(validation, "regression")

    @lazy_over_row_blocks
    def predict(self, X):
        """Mean of the trees' predictions.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns, encoded as in ``fit``).

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            In the units of the training targets.
        """
        X = self._check_predict(X)
        out = np.mean([est.tree_.predict(X) for est in self.estimators_], axis=0)
        return out.ravel() if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

