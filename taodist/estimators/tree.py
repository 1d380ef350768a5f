"""scikit-learn estimators for single TAO trees: :class:`TAOClassifier` and :class:`TAORegressor`.

The estimators are thin: ``fit`` validates input, prepares the targets (label
coding, or standardisation) and hands the work to :class:`~taodist.estimators.base.BaseTAO`,
which runs :func:`taodist.tao.optimizer.tao_optimize`; the fitted structure is
the flat-array :class:`~taodist.model.tree.Tree` on ``tree_``.
"""

import numbers

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.multiclass import check_classification_targets

from ..model.leaves import LEAF_MODELS
from ..model.tree import canonical_csr
from ..utils.validation import is_dask_collection
from .base import BaseTAO, fit_method, set_init_params, validated_sample_weight
from .execution import lazy_over_row_blocks


def class_weighted(class_weight, classes, codes, sample_weight):
    """``sample_weight`` (None: ones) times each row's class weight, as scikit-learn's ``compute_sample_weight``.

    A dict's classes missing from it weigh 1; a key that is not a class of
    ``y`` is refused (it is a typo or a stale label).
    """
    weights = compute_sample_weight(class_weight, classes[codes]) if not isinstance(class_weight, dict) else None
    if weights is None:
        unknown = [k for k in class_weight if k not in set(classes.tolist())]
        if unknown:
            raise ValueError(f"class_weight names {unknown[:5]}, which are not classes of y; the classes are "
                             f"{classes.tolist()[:10]}{' ...' if len(classes) > 10 else ''}.")
        per_class = np.array([float(class_weight.get(c, 1.0)) for c in classes.tolist()])
        if not np.all(np.isfinite(per_class) & (per_class >= 0)):
            raise ValueError(f"class_weight values must be finite and non-negative; got {class_weight!r}.")
        weights = per_class[codes]
    if sample_weight is None:
        return weights
    sample_weight = np.asarray(sample_weight.compute() if is_dask_collection(sample_weight) else sample_weight,
                               dtype=np.float64)
    return sample_weight * weights


def class_codes(encoder, labels):
    """Validation labels as the training codes; a label the training rows never had is refused."""
    unknown = np.setdiff1d(np.unique(labels), encoder.classes_)
    if len(unknown):
        raise ValueError(f"eval_set: y has labels {unknown[:5].tolist()} that the training y does not; the classes "
                         f"are {encoder.classes_[:10].tolist()}.")
    return encoder.transform(labels)


class TAOClassifier(ClassifierMixin, BaseTAO):
    """Sparse oblique (or axis-aligned) decision tree trained by TAO.

    Tree Alternating Optimisation fits every node of a tree of fixed
    structure in turn, bottom-up, each node solving its reduced problem on the
    points that reach it, so that the objective -- training 0/1 loss plus
    ``1/C`` times the l1 norm of the node weights -- never increases.

    Parameters
    ----------
    max_depth : int or "auto", default="auto"
        Depth of the initial complete tree (pruning can make it smaller).
        ``"auto"``: a leaf per ``32 sqrt(2 / n_classes)`` training rows (32
        for two classes), ``floor(log2(n_samples / rows_per_leaf))`` within
        2..10, and at least ``ceil(log2(n_classes)) + 1`` so every class has
        room; on data in memory, then at most the depth (2..10) of least
        5-fold cross-validated error of scikit-learn's CART cut at each depth
        (five CART fits; Dask input keeps the rule alone, which needs no pass
        over the rows). The depth used is ``max_depth_``. A fixed depth makes
        small data sets overfit and large ones underfit; the rule and its cap
        were chosen on validation splits of real tabular data sets
        (docs/defaults.md): the rule alone beat CART's cross-validated depth,
        and capped by it was better still on small noisy sets.
    node_type : {"oblique", "axis"}, default="oblique"
        Sparse oblique nodes (an l1 logistic regression surrogate) or exact
        axis-aligned splits.
    solver : {"fista", "fista-gpu", "saga", "liblinear"}, default="fista"
        Surrogate solver of oblique nodes. ``"fista"`` solves all the nodes of
        a depth together (compiled FISTA, a few steps warm-started from each
        node's last iterate); ``"fista-gpu"`` is the same on a CUDA GPU
        through PyTorch (``pip install 'taodist[gpu]'``); ``"saga"`` runs a few SAGA epochs per node,
        warm-started likewise; ``"liblinear"`` solves the surrogate to
        convergence from scratch, as in the papers (both through
        scikit-learn). Every answer is accepted only if it does not increase
        the node's 0/1 objective. Ignored for axis nodes. FISTA is the
        default because it was as accurate as SAGA on validation splits in
        a fraction of the time (docs/defaults.md).
    leaf_type : {"constant", "linear"}, default="constant"
        Majority-class leaves, or l1 multinomial logistic (softmax) leaves,
        warm-started from their previous coefficients (thesis section 2.2):
        a few epochs of SAGA on dense rows, compiled FISTA on sparse rows
        (:func:`taodist.model.leaf_fit.fit_softmax` says how that was chosen).
    leaf_classes : int or None, default=None
        With ``leaf_type="linear"``: each leaf keeps only the ``leaf_classes``
        most populous classes of the training points reaching it (weighted
        counts; ties go to the class listed first in ``classes_``) and fits
        its softmax on their points -- a *softmax tree* (thesis section 2.3).
        Every other class gets probability exactly 0 at that leaf, so a
        prediction scores ``leaf_classes`` classes instead of all
        ``n_classes_``. The objective stays the 0/1 loss (the softmax's
        cross-entropy is only the leaf's surrogate), so it never increases.
        None (default): a leaf's softmax covers every class present in it
        and absent classes keep a tiny positive probability. The initial
        tree's leaves are limited first (their ``leaf_classes`` most likely
        classes), so every leaf, reached by training points or not, respects
        the limit.
    C : float, default=30.0
        Inverse l1 penalty: each unit of ``||w||_1`` costs ``1/C``
        misclassified (weighted) samples. Smaller C gives sparser trees.
        Features are max-abs scaled internally (a column far from zero, such
        as a year, shifted to start at zero first), so C does not depend on
        units or on where a column's zero lies.
    leaf_C : float or None, default=None
        Inverse l1 penalty of the linear leaves' coefficients, apart from
        the decision nodes' ``C``; None uses ``C``. Ignored for constant leaves.
    leaf_max_iter : int or None, default=None
        Iterations of a linear leaf's solver each time the leaf is refitted
        (warm-started): SAGA epochs on dense rows, compiled FISTA iterations
        on sparse rows. None: 5 SAGA epochs, at most 100 FISTA iterations
        (:func:`taodist.model.leaf_fit.fit_softmax` says why). A few epochs
        regularise by stopping early; from the clustering initial tree more
        can be better. Ignored for constant leaves.
    refit_leaves : {"until_refused", "new_rows", "always"}, default="until_refused"
        When a linear leaf is refitted. "always": at every TAO iteration,
        warm-started from its current model. "until_refused": the same tree
        with fewer fits (a leaf whose last fit was refused -- it did not
        lower the leaf's objective -- is skipped until its reduced set
        changes). "new_rows": a leaf is refitted only when its reduced set
        differs from that of its last fit, accepted or not, which stops
        refining leaves whose points have settled: faster, and a different
        tree (forests use it, see :class:`TAOForestClassifier`). Constant
        leaves are the same tree under all three.
    leaf_warm_start : {"coef", "gradients"}, default="coef"
        What a softmax leaf's SAGA (dense rows) starts from when the leaf is
        refitted. "coef": its coefficients, with SAGA's gradient memory
        empty, as scikit-learn's ``warm_start`` does (5 epochs when
        ``leaf_max_iter`` is None). "gradients": its coefficients and every
        point's gradient at them, filled in one pass, so the refit's steps
        are variance-reduced from the first one instead of starting on a
        table of zeros (2 epochs when ``leaf_max_iter`` is None). Which
        validates better depends on the data. Ignored for constant leaves and
        for sparse rows (FISTA keeps no memory).
    max_iter : int, default=15
        Maximum number of TAO iterations (sweeps over all depths).
    tol : float, default=0.005
        Stop when the objective decreases by less than this fraction.
    init : {"auto", "random", "cart", "cluster"}, Tree or fitted estimator, default="auto"
        Initial tree: ``"auto"`` is ``"random"`` for classification (it
        validated better than CART's tree), except that a random start whose
        constant leaves all end up predicting one class (common with a rare class: no
        care point is left, so TAO cannot move) is fitted again from CART's
        tree, which is kept if its objective is lower (in memory only; Dask
        input keeps the random start); a random complete tree, scikit-learn's CART grown to
        ``max_depth``, a greedy hierarchical clustering of the classes
        (``"cluster"``: k-means into ``2**max_depth`` clusters -- of the class
        means when there are that many classes, else of the rows; with
        ``leaf_classes=k`` clusters of class means hold at most k classes,
        heaviest classes first -- paired
        greedily level by level into a complete tree, each decision node
        fitted to send rows towards their cluster's leaf; thesis section
        2.3.2, suited to many classes and ``leaf_classes``), or a previous
        taodist tree (warm start).
    n_init : int, default=1
        Number of fits from different initial trees (``init="random"`` or
        ``"cluster"``, drawn from ``random_state``); the one with the lowest
        final objective is kept, as scikit-learn's ``KMeans`` keeps its lowest
        inertia. TAO finds a local optimum near its initial tree, and a
        lower final objective tends to mean a lower test error. Costs
        ``n_init`` fits; ``n_init=1`` is the single fit.
    prune : bool, default=True
        Remove dead branches and pure subtrees after training.
    random_state : int, RandomState instance or None, default=None
        Seeds the random initial tree.
    max_care_points : int or None, default=None
        Largest number of care points an oblique node's surrogate solver
        sees: bigger reduced sets are uniformly subsampled (seeded), with
        weights scaled up to match. The accept test still uses every care
        point, so the objective stays monotone. None (default) disables the
        cap, which trades accuracy for speed.
    n_jobs : int or None, default=-1
        Threads that solve the decision nodes of one depth in parallel (they
        are independent). -1 uses every core, None or 1 one thread. The
        fitted tree does not depend on it.
    categorical_features : "from_dtype", array-like of int, str or bool, or None, default="from_dtype"
        Which input columns are categorical. ``"from_dtype"``: a DataFrame's
        ``category``, ``object`` and ``string`` columns (NumPy input has
        none); or column indices, column names or a boolean mask. A
        categorical column with at most 16 categories becomes one indicator
        per category (the hyperplane's weights on them are a value per
        category at each node; an unseen category is all zeros), one with
        more is target encoded (scikit-learn's ``TargetEncoder``, cross-fitted;
        from a Dask DataFrame, the same encodings from statistics its
        partitions sum).
        Missing values (NaN, None, pandas NA) need no imputation: a numeric
        column with missing training values gets an indicator column beside
        its mean-filled values, so each node learns where its missing values
        go (:mod:`taodist.estimators.tabular`).
    outlier_fence : float or None, default=3.0
        Each column is clipped, in the fit and in prediction, to ``median -+
        outlier_fence * q``, with ``q`` the 99th percentile of the column's
        non-zero distances from its median (on at most 20,000 training rows
        at a fixed stride; ``clip_bounds_``). A value far outside a column's
        range -- a data entry error, a code such as 99999 for "unknown" --
        would otherwise set the scale of the column's l1 penalty and send its
        row far to one side of every hyperplane that uses the column, where
        a CART split hardly notices it. Columns of real data rarely reach
        their fence (docs/defaults.md). None: no clipping. Sparse rows are
        never clipped in the fit.
    penalty_factors : "auto" or None, default="auto"
        "auto": an adaptive l1 penalty. Each column's hyperplane (and linear
        leaf) weights cost ``1 / r`` times as much, ``r`` its relevance to
        the target: ``-log10(p) / 3`` of a univariate F test (the ANOVA of
        the column across the classes; its correlation with a regression
        target), between 0.1 and 1, on at most 20,000 training rows at a
        fixed stride (``penalty_factors_``). A column that says nothing of
        the target -- an identifier, an unrelated measurement -- is then up
        to ten times as dear to use as a column with ``p <= 0.001``, and
        small training sets fit less of their noise. None: every column
        costs the same. Axis-aligned trees of constant leaves have no
        penalty; sparse rows keep the plain one.
    class_weight : dict, "balanced" or None, default=None
        Weights of the classes, multiplying ``sample_weight``: ``{label:
        weight}``, or ``"balanced"`` (``n_samples / (n_classes *
        np.bincount(y))``, as in scikit-learn). The 0/1 loss TAO minimises is
        then the weighted one, so a rare class costs more to misclassify.
    early_stopping : "auto" or bool, default="auto"
        Score every TAO iterate on validation rows, stop after
        ``n_iter_no_change`` iterations without a better score, and keep the
        best iterate (then pruned). The rows are ``fit``'s ``eval_set`` if
        given, else ``validation_fraction`` of the training rows (stratified,
        held out of the fit). ``"auto"``: on above 10,000 training rows, as in
        HistGradientBoosting, for data in memory or with an ``eval_set`` (a
        Dask fit has no rows held out for it); on the suite's dev sets of that
        size it validated better on 6 of 9 (docs/defaults.md). TAO's training
        objective still never increases up to the iterate kept.
    validation_fraction : float, default=0.1
        The part of the training rows early stopping holds out without ``eval_set``.
    n_iter_no_change : int, default=3
        Iterations without a better validation score before stopping.
    verbose : int, default=0
        Print progress (TAO iteration, level, objective, validation score,
        ETA) as ``taodist fit`` does.
    callbacks : list of callables, default=None
        Each is called as ``callback(event, info)`` at the fit's checkpoints
        (events of :mod:`taodist.utils.progress`: ``"tao_level"``,
        ``"tao_iteration"``, ``"tao_validation"``, ``"forest_tree"``; the
        ``info`` dict holds iteration, objective, seconds, ...). Returning True
        from a ``"tao_iteration"`` event stops the iterations there, keeping
        the tree; raising abandons the fit.

    Attributes
    ----------
    tree_ : Tree
        The fitted tree (flat arrays; weights in the units of ``X``), of rows
        clipped to ``clip_bounds_``.
    classes_ : ndarray of shape (n_classes,)
    n_classes_ : int
    history_ : ndarray
        Objective before the first iteration and after each iteration (in
        the internal, max-abs-scaled feature units). Non-increasing.
    n_iter_ : int
        Iterations run.
    validation_score_ : ndarray
        With validation rows: the error (0/1 rate; mean squared error of
        standardised targets for regression) of the initial tree and of each iterate.
    best_iteration_ : int
        With validation rows: the iterate kept (the last one without early stopping).
    feature_importances_ : ndarray of shape (n_features_in_,)
        Each input column's share of the routing decisions made for the
        training rows: every decision node shares its rows among the
        features it uses by the magnitude of its weights on max-abs-scaled
        features (an axis node gives all to its feature); summed over the
        nodes and over each column's encoded features, normalised to 1.
    clip_bounds_ : ndarray of shape (2, n_features) or None
        The lower and upper bounds every row's features are clipped to before
        ``tree_`` routes it (``outlier_fence``; infinite where a column has no
        bound), over the encoded features of ``tree_``; None without clipping.
    penalty_factors_ : ndarray of shape (n_features,) or None
        Each encoded feature's l1 penalty factor (``penalty_factors``,
        between 1 and 10); None where every feature's weights cost the same.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The DataFrame's column names (only when fitted on a DataFrame).
    encoder_ : TabularEncoder or None
        How the input's columns became the tree's features
        (``encoder_.feature_names_out_`` names the features of ``tree_``);
        None for Dask input, which is fitted as given.

    See Also
    --------
    TAORegressor, sklearn.tree.DecisionTreeClassifier

    References
    ----------
    M. A. Carreira-Perpinan and P. Tavallali. Alternating optimization of
    decision trees, with application to learning sparse oblique trees.
    NeurIPS 2018.

    Examples
    --------
    >>> from sklearn.datasets import load_iris
    >>> from taodist import TAOClassifier
    >>> X, y = load_iris(return_X_y=True)
    >>> clf = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    >>> clf.score(X, y) > 0.9
    True
    """

    _parameter_constraints = {**BaseTAO._parameter_constraints,
                              "class_weight": [StrOptions({"balanced"}), dict, None]}

    def __init__(self, *, max_depth="auto", node_type="oblique", solver="fista", leaf_type="constant", leaf_classes=None,
                 C=30.0, leaf_C=None, leaf_max_iter=None, refit_leaves="until_refused", leaf_warm_start="coef",
                 max_iter=15, tol=5e-3, init="auto", n_init=1, prune=True, random_state=None, n_jobs=-1,
                 max_care_points=None, categorical_features="from_dtype", outlier_fence=3.0, penalty_factors="auto",
                 class_weight=None, early_stopping="auto", validation_fraction=0.1, n_iter_no_change=3, verbose=0,
                 callbacks=None):
        set_init_params(self, locals())

    @fit_method
    def fit(self, X, y, sample_weight=None, *, client=None, eval_set=None):
        """Fit the tree to class labels ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), or a row-chunked dask array
            NumPy or scipy.sparse input (CSR, CSC, ...; never densified) is
            fitted in this process (threads); dense float32 rows are used
            without a float64 copy (each row chunk converts its own, exactly:
            the same model as from float64 rows); a Dask array (whose chunks may
            be scipy.sparse matrices)
            (e.g. from :func:`taodist.io.open_zarr`) is fitted where its
            chunks live, on a Dask cluster.
        y : array-like of shape (n_samples,)
            Class labels (any hashable type).
        sample_weight : array-like of shape (n_samples,), default=None
        client : distributed.Client, optional
            Cluster to fit on. Default for Dask input: the active client, or
            an embedded LocalCluster started for this fit. Passing a client
            with NumPy input fits on that cluster too.
        eval_set : (X_val, y_val), optional
            Validation rows (any input ``X`` may be; a Dask array or DataFrame
            chunked any way), scored after every TAO iteration
            (``validation_score_``); with ``early_stopping``, the rows early
            stopping uses instead of a part of the training rows.

        Returns
        -------
        self : TAOClassifier
            The fitted estimator.
        """
        streamable = is_dask_collection(X)
        X, y = self._validate_fit_X_y(X, y, client)
        check_classification_targets(y)
        encoder = LabelEncoder().fit(y)
        self.classes_ = encoder.classes_
        self.n_classes_ = len(self.classes_)
        if self.n_classes_ < 2:
            raise ValueError(
                f"TAOClassifier needs samples of at least 2 classes in the data; got 1 class ({self.classes_[0]!r})."
            )
        codes = encoder.transform(y)
        if self.class_weight is not None:
            sample_weight = class_weighted(self.class_weight, self.classes_, codes, sample_weight)
        X, codes, sample_weight, validation = self._with_validation(
            X, codes, sample_weight, eval_set, "classification", lambda labels: class_codes(encoder, labels))
        return self._fit_rows(X, codes, sample_weight, client=client, streamable=streamable, validation=validation)

    def _fit_rows(self, X, codes, sample_weight, classes=None, client=None, streamable=False, validation=None):
        """Fit on validated rows with integer class ``codes`` (forest trees use this)."""
        if classes is not None:  # a forest's tree: every class of the forest, seen or not
            self.classes_, self.n_classes_, self.n_features_in_ = classes, len(classes), X.shape[1]
        if sample_weight is not None and classes is None:
            sample_weight = np.asarray(sample_weight.compute() if is_dask_collection(sample_weight) else sample_weight)
            sample_weight = validated_sample_weight(sample_weight, X.shape[0])
            weighted = np.bincount(codes, weights=sample_weight, minlength=self.n_classes_)
            if np.count_nonzero(weighted > 0) < 2:
                raise ValueError(
                    "TAOClassifier needs at least 2 classes with positive sample weight; "
                    f"got {np.count_nonzero(weighted > 0)} class(es) with weight > 0."
                )
        self._check_leaf_classes()
        return self._fit(X, codes, sample_weight, self.n_classes_, "classification", client, streamable, validation)

    def _check_leaf_classes(self):
        if self.leaf_classes is None:
            return
        if isinstance(self.leaf_classes, (bool, np.bool_)):  # an Integral to Python, but surely a mistake
            raise ValueError(f"leaf_classes must be an int >= 1 or None; got {self.leaf_classes!r}.")
        LEAF_MODELS[self.leaf_type].limited_to(self.leaf_classes)  # refuses leaf types without a class limit
        if self.leaf_classes > self.n_classes_:
            raise ValueError(f"leaf_classes={self.leaf_classes} is more than the {self.n_classes_} classes in y; "
                             f"use at most {self.n_classes_}, or None for every class present in a leaf.")

    @lazy_over_row_blocks
    def predict_proba(self, X):
        """Class probabilities of the leaf each sample reaches.

        Constant leaves give the leaf's (weighted) class distribution; linear
        leaves the softmax of their linear model.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns; a DataFrame's names and
            dtypes are checked, missing values and categories encoded as in
            ``fit``). Dask input gives a lazy result, block by block (a Dask
            DataFrame: a Series or DataFrame with its index).

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns in the order of ``classes_``; rows sum to 1.
        """
        X = self._validate_X_predict(X)
        return self.tree_.predict(X)

    @lazy_over_row_blocks
    def predict(self, X):
        """Predicted class of each sample: the most probable one (ties: the lower class).

        A softmax leaf limited to ``leaf_classes=k`` scores only its k classes.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns; a DataFrame's names and
            dtypes are checked, missing values and categories encoded as in
            ``fit``). Dask input gives a lazy result, block by block (a Dask
            DataFrame: a Series or DataFrame with its index).

        Returns
        -------
        y : ndarray of shape (n_samples,)
            Labels from ``classes_``.
        """
        X = self._validate_X_predict(X, canonical=False)
        return self.classes_[self.tree_.best_classes(X, 1)[:, 0]]

    @lazy_over_row_blocks
    def predict_top(self, X, n=5):
        """The ``n`` most probable classes of each sample, most probable first.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)
        n : int, default=5
            How many classes; at most ``n_classes_`` are returned.

        Returns
        -------
        classes : ndarray of shape (n_samples, min(n, n_classes_))
            ``classes[i, 0]`` is ``predict(X)[i]``. Equal probabilities go to the
            lower class, as ``np.argsort(-predict_proba(X), kind="stable")``
            orders them. A softmax leaf limited to ``leaf_classes=k`` scores only
            its k classes (the top-n costs O(k) per sample, not O(n_classes_));
            classes it gives probability 0 follow in class order.
        """
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, numbers.Integral) or n < 1:
            raise ValueError(f"n must be an int >= 1, the number of classes to return; got {n!r}.")
        X = self._validate_X_predict(X)
        return self.classes_[self.tree_.best_classes(X, n)]


class TAORegressor(RegressorMixin, BaseTAO):
    """Sparse oblique (or axis-aligned) regression tree trained by TAO.

    Same algorithm as :class:`TAOClassifier` with the squared error as loss:
    a decision node's pseudolabel weights are differences of squared errors.
    Targets are standardised internally (and mapped back), so ``C`` does not
    depend on the units of ``y``. Multi-output ``y`` is supported.

    Parameters
    ----------
    max_depth : int or "auto", default="auto"
        ``"auto"``: with linear leaves, a leaf per 256 training rows (depth 2
        to 10), on data in memory at most CART's cross-validated depth (below),
        and with early stopping's held-out rows (above 10,000 rows) also a fit
        at that depth where it is deeper, the better on those rows kept;
        with constant leaves on data in memory, the depth (2..10) of least
        5-fold cross-validated squared error of scikit-learn's CART cut at each
        depth (five CART fits in all), which validated better than any rule of
        the rows for them; on Dask input, the rule alone (a leaf per 16
        training rows with constant leaves, as for :class:`TAOClassifier`).
        The depth used is ``max_depth_``.
    node_type : {"oblique", "axis"}, default="oblique"
    solver : {"fista", "fista-gpu", "saga", "liblinear"}, default="fista"
        As for :class:`TAOClassifier`. FISTA validated as accurate as
        liblinear for regression in a fraction of the time (docs/defaults.md).
    leaf_type : {"linear", "constant"}, default="linear"
        Lasso leaves (a shallow tree of linear models: on the dev group of
        real data sets they validated better than constant leaves at CART's
        cross-validated depth; docs/defaults.md), or mean-vector leaves. With
        linear leaves, the columns are divided by their standard deviation
        (rounded to a power of two) for the penalty, as a Lasso is usually
        fitted; otherwise by ``max |x|`` (a column far from zero, such as a
        year, shifted to start at zero first).
    C : float, default=100.0
        Inverse l1 penalty of the decision nodes' weights, in units of the
        standardised squared error.
    leaf_C : float or None, default=1.0
        Inverse l1 penalty of the Lasso leaves' coefficients; None uses ``C``.
    leaf_max_iter : int or None, default=None
        Coordinate-descent epochs of a Lasso leaf fit (None: 2,000, stopping
        earlier at its tolerance). Ignored for constant leaves.
    refit_leaves : {"until_refused", "new_rows", "always"}, default="until_refused"
        When a leaf is refitted, as in :class:`TAOClassifier`. A Lasso leaf
        is solved to its tolerance, so the three give the same tree up to
        that tolerance; "new_rows" saves the repeated fits.
    max_iter : int, default=15
    tol : float, default=0.005
    init : {"auto", "cart", "random"}, Tree or fitted estimator, default="auto"
        As for :class:`TAOClassifier` (``"cluster"`` is for classifiers
        only). ``"auto"``: CART's tree grown to ``max_depth`` (then improved
        by TAO), which validated better than a random tree for regression; a
        random tree for Dask input, which CART cannot read.
    n_init : int, default=1
        Fits from different random initial trees; the lowest final objective
        is kept (see :class:`TAOClassifier`).
    prune : bool, default=True
    random_state : int, RandomState instance or None, default=None
    n_jobs : int or None, default=-1
    max_care_points : int or None, default=None
    categorical_features : "from_dtype", array-like of int, str or bool, or None, default="from_dtype"
        As for :class:`TAOClassifier` (target encoding of a single output's values).
    outlier_fence : float or None, default=3.0
        As for :class:`TAOClassifier`.
    penalty_factors : "auto" or None, default="auto"
        As for :class:`TAOClassifier` (the test of each column's correlation
        with the target; the least p-value over several outputs). The Lasso
        leaves' coefficients pay the same factors.
    early_stopping, validation_fraction, n_iter_no_change, verbose, callbacks
        As for :class:`TAOClassifier` (validation scored by mean squared error).

    Attributes
    ----------
    tree_ : Tree
    n_outputs_ : int
    history_ : ndarray
        Objective per iteration (standardised targets, scaled features).
    n_iter_ : int
    validation_score_, best_iteration_, feature_importances_, clip_bounds_, penalty_factors_
        As for :class:`TAOClassifier`.
    n_features_in_ : int
    feature_names_in_ : ndarray of str
        The DataFrame's column names (only when fitted on a DataFrame).
    encoder_ : TabularEncoder or None
        How the input's columns became the tree's features
        (``encoder_.feature_names_out_`` names the features of ``tree_``);
        None for Dask input, which is fitted as given.

    See Also
    --------
    TAOClassifier, sklearn.tree.DecisionTreeRegressor

    Examples
    --------
    >>> import numpy as np
    >>> from taodist import TAORegressor
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(300, 3)); y = np.where(X[:, 0] + X[:, 1] > 0, 1.0, -1.0)
    >>> TAORegressor(max_depth=2, random_state=0).fit(X, y).score(X, y) > 0.9
    True
    """

    #: what the classifier's ``leaf_classes`` and ``leaf_warm_start`` are for a regression tree: fixed
    #: (Lasso leaves have no classes to limit and no SAGA memory to fill)
    leaf_classes = None
    leaf_warm_start = "coef"

    def __init__(self, *, max_depth="auto", node_type="oblique", solver="fista", leaf_type="linear", C=100.0,
                 leaf_C=1.0, leaf_max_iter=None, refit_leaves="until_refused", max_iter=15, tol=5e-3,
                 init="auto", n_init=1, prune=True, random_state=None, n_jobs=-1, max_care_points=None,
                 categorical_features="from_dtype", outlier_fence=3.0, penalty_factors="auto", early_stopping="auto",
                 validation_fraction=0.1, n_iter_no_change=3, verbose=0, callbacks=None):
        # Regression defaults differ from classification: the loss is in units of the target
        # variance, so a weaker penalty (larger C) is needed; the squared-error pseudolabel weights
        # span orders of magnitude, which slows SAGA (its step is set by the largest weight), not
        # the preconditioned FISTA.
        set_init_params(self, locals())

    @fit_method
    def fit(self, X, y, sample_weight=None, *, client=None, eval_set=None):
        """Fit the tree to real-valued targets ``y`` (one output or several).

        Each output is standardised for the fit and the tree's outputs mapped
        back after it, so ``C`` does not depend on the units of ``y``.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), or a row-chunked dask array
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
        client : distributed.Client, optional
            As in :meth:`TAOClassifier.fit`.
        eval_set : (X_val, y_val), optional
            As in :meth:`TAOClassifier.fit` (scored by mean squared error).

        Returns
        -------
        self : TAORegressor
            The fitted estimator.
        """
        streamable = is_dask_collection(X)
        X, y = self._validate_fit_X_y(X, y, client, multi_output=True, y_numeric=True)
        X, y, sample_weight, validation = self._with_validation(
            X, y, sample_weight, eval_set, "regression", lambda values: np.asarray(values, dtype=np.float64))
        return self._fit_rows(X, y, sample_weight, client=client, streamable=streamable, validation=validation)

    def _fit_rows(self, X, y, sample_weight, client=None, streamable=False, validation=None):
        """Fit on validated rows (forest trees use this)."""
        if getattr(self, "encoder_", None) is None:  # with an encoder, n_features_in_ counts the input's columns
            self.n_features_in_ = X.shape[1]
        self._y_1d = y.ndim == 1
        Y = y.reshape(len(y), -1)
        self.n_outputs_ = Y.shape[1]
        with np.errstate(over="ignore", invalid="ignore"):
            self._y_mean = Y.mean(axis=0)
            std = Y.std(axis=0)
        if not (np.isfinite(self._y_mean).all() and np.isfinite(std).all()):
            raise ValueError("The regression targets are too large to standardise in float64 (their mean or "
                             "standard deviation overflows); rescale y, e.g. divide it by a power of 10.")
        self._y_scale = np.where(std > 0, std, 1.0)
        if validation is not None:  # the validation targets standardised as the training targets are
            X_val, y_val, stop = validation
            validation = (X_val, (y_val.reshape(len(y_val), -1) - self._y_mean) / self._y_scale, stop)
        return self._fit(X, (Y - self._y_mean) / self._y_scale, sample_weight, self.n_outputs_, "regression", client,
                         streamable, validation)

    def _to_internal(self, tree):
        tree = super()._to_internal(tree)
        tree.value = (tree.value - self._y_mean) / self._y_scale
        if tree.leaf_coef is not None:
            tree.leaf_coef = _scale_leaf_outputs(tree.leaf_coef, 1.0 / self._y_scale)
        if tree.leaf_range is not None:  # (n_nodes, 2, K): the scale is positive, so low stays below high
            tree.leaf_range = (tree.leaf_range - self._y_mean) / self._y_scale
        return tree

    def _to_external(self, tree):
        tree = super()._to_external(tree)
        tree.value = tree.value * self._y_scale + self._y_mean
        if tree.leaf_coef is not None:
            tree.leaf_coef = _scale_leaf_outputs(tree.leaf_coef, self._y_scale)
        if tree.leaf_range is not None:
            tree.leaf_range = tree.leaf_range * self._y_scale + self._y_mean
        return tree

    @lazy_over_row_blocks
    def predict(self, X):
        """Predicted values: the value (or linear model) of the leaf each sample reaches.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns; a DataFrame's names and
            dtypes are checked, missing values and categories encoded as in
            ``fit``). Dask input gives a lazy result, block by block (a Dask
            DataFrame: a Series or DataFrame with its index).

        Returns
        -------
        y : ndarray of shape (n_samples,) or (n_samples, n_outputs)
            In the units of the training targets.
        """
        X = self._validate_X_predict(X)
        out = self.tree_.predict(X)
        return out.ravel() if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


def _scale_leaf_outputs(leaf_coef, scale):
    """Multiply output ``k`` of every linear leaf (rows ``i*K + k``) by ``scale[k]``."""
    K = scale.shape[0]
    row_scale = np.tile(scale, leaf_coef.shape[0] // K)
    return canonical_csr(sp.diags(row_scale) @ leaf_coef)
