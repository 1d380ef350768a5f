"""scikit-learn estimators for single TAO trees.

The estimators are thin: ``fit`` validates input, prepares the data (feature
scaling, label coding, target standardisation), builds the initial tree and
hands the work to :func:`taodist.tao.optimizer.tao_optimize`; the fitted structure is
the flat-array :class:`~taodist.model.tree.Tree` on ``tree_``.
"""

import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import LabelEncoder
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, check_random_state, validate_data

from ..model.leaves import LEAF_MODELS, LEAF_WARM_STARTS
from ..model.prune import prune_with_counts
from ..model.tree import Tree, canonical_csr
from ..tao.chunks import chunk_visits
from ..tao.initial_trees import cart_tree, check_warm_start, cluster_tree, random_tree
from ..tao.node_solvers import NODE_SOLVERS, OBLIQUE_SOLVERS
from ..tao.optimizer import REFIT_LEAVES, tao_optimize
from ..tao.routing import Routing
from ..utils.rows import ACCEPT_SPARSE, FIT_DTYPES, as_fit_rows, as_rows, divide_columns
from ..utils.solver_warnings import silence_inner_solvers
from ..utils.validation import check_dask_X, is_dask_collection
from .execution import distribute_rows, execution, lazy_over_row_blocks, max_abs_scale, take_rows

#: the one rule for ``max_care_points`` (TAO and LapTAO): None, or enough points to fit a hyperplane
MAX_CARE_POINTS_CONSTRAINT = [Interval(numbers.Integral, 10, None, closed="left"), None]


class _BaseTAO(BaseEstimator):
    _parameter_constraints = {
        "max_depth": [Interval(numbers.Integral, 1, 20, closed="both")],
        "node_type": [StrOptions({"oblique", "axis"})],
        # live views of the registries: a registered solver or leaf model is accepted at once
        "solver": [StrOptions(OBLIQUE_SOLVERS)],
        "leaf_type": [StrOptions(LEAF_MODELS.keys())],
        "leaf_classes": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "C": [Interval(numbers.Real, 0, None, closed="neither")],
        "leaf_C": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "leaf_max_iter": [Interval(numbers.Integral, 1, None, closed="left"), None],
        "refit_leaves": [StrOptions(set(REFIT_LEAVES))],
        "leaf_warm_start": [StrOptions(set(LEAF_WARM_STARTS))],
        "max_iter": [Interval(numbers.Integral, 0, None, closed="left")],
        "tol": [Interval(numbers.Real, 0, None, closed="left")],
        "init": [StrOptions({"random", "cart", "cluster"}), Tree, BaseEstimator],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "prune": ["boolean"],
        "random_state": ["random_state"],
        "n_jobs": [numbers.Integral, None],
        "max_care_points": MAX_CARE_POINTS_CONSTRAINT,
    }

    def __init__(
        self,
        *,
        max_depth=8,
        node_type="oblique",
        solver="fista",
        leaf_type="constant",
        leaf_classes=None,
        C=30.0,
        leaf_C=None,
        leaf_max_iter=None,
        refit_leaves="until_refused",
        leaf_warm_start="coef",
        max_iter=15,
        tol=5e-3,
        init="random",
        n_init=1,
        prune=True,
        random_state=None,
        n_jobs=-1,
        max_care_points=None,
    ):
        self.max_depth = max_depth
        self.node_type = node_type
        self.solver = solver
        self.leaf_type = leaf_type
        self.leaf_classes = leaf_classes
        self.C = C
        self.leaf_C = leaf_C
        self.leaf_max_iter = leaf_max_iter
        self.refit_leaves = refit_leaves
        self.leaf_warm_start = leaf_warm_start
        self.max_iter = max_iter
        self.tol = tol
        self.init = init
        self.n_init = n_init
        self.prune = prune
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.max_care_points = max_care_points

    # -------------------------------------------------------------- fitting
    def _validate_fit_X_y(self, X, y, client, **kw):
        """``validate_data`` for NumPy or scipy.sparse input; structural checks only for Dask input.

        Sparse X of any format becomes one canonical CSR matrix here (never dense).

        Dask input (or an explicit client) keeps X distributed: y and sample
        weights, one column each, are brought to the driver.
        """
        if client is None and not is_dask_collection(X):
            X, y = validate_data(self, X, y, dtype=FIT_DTYPES, accept_sparse=ACCEPT_SPARSE, **kw)
            return as_fit_rows(X), y
        if not is_dask_collection(X):  # NumPy with an explicit client: blocks to the workers
            X = distribute_rows(as_fit_rows(validate_data(self, X, dtype=FIT_DTYPES, accept_sparse=ACCEPT_SPARSE)),
                                client)
        check_dask_X(X)
        self.n_features_in_ = X.shape[1]
        y = np.asarray(y.compute() if is_dask_collection(y) else y)
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: [{X.shape[0]}, {y.shape[0]}].")
        if y.ndim == 2 and y.shape[1] == 1 and not kw.get("multi_output"):
            y = y.ravel()
        if kw.get("y_numeric"):
            y = y.astype(np.float64)
            if not np.isfinite(y).all():
                raise ValueError("Input y contains NaN or infinity.")
        return X, y

    def _fit(self, X, y_internal, sample_weight, n_outputs, task, client=None, streamable=False):
        """Run TAO on validated data; ``y_internal`` is codes or standardised Y.

        ``streamable``: X is a Dask array over storage (Zarr), not NumPy rows
        scattered for this fit, so an out-of-core fit may re-read it.
        """
        if is_dask_collection(sample_weight):
            sample_weight = sample_weight.compute()
        sample_weight = validated_sample_weight(sample_weight, X.shape[0])
        if client is None:  # with a client, the workers' hardware is what counts
            NODE_SOLVERS[self.solver if self.node_type == "oblique" else "axis"].ensure_usable()
        rng = check_random_state(self.random_state)
        n_init = self.n_init
        if n_init > 1 and not (isinstance(self.init, str) and self.init in ("random", "cluster")):
            # as scikit-learn's KMeans does with an explicit init array
            warnings.warn(f"init={self.init!r} gives the same initial tree every time: n_init={n_init} would "
                          "repeat one fit, so it runs once (n_init=1). Restarts need init='random' or 'cluster'.",
                          RuntimeWarning)
            n_init = 1
        with execution(X, y_internal, sample_weight, client=client, n_jobs=self.n_jobs, streamable=streamable,
                       max_care_points=self.max_care_points) as run:
            # inside the block: with Dask input these computations run on the fit's cluster
            self._feature_scale = self._feature_scaling(X)
            best = None
            for _ in range(n_init):  # restarts draw from one rng: n_init=1 is the fit it always was
                tree = self._initial_tree(X, y_internal, sample_weight, n_outputs, task, rng)
                tree.leaf_classes = self.leaf_classes  # a warm-start tree takes this fit's limit too
                tree.leaf_model.limit_leaves(tree)
                fit = self._run_tao(tree, run.blocks, rng, run.executor, run.max_care_points)
                if best is None or fit[1].objective[-1] < best[1].objective[-1]:
                    best = fit
            return self._set_fitted(*best)

    def _set_fitted(self, tree, result):
        self.tree_ = self._to_external(tree)
        self.history_ = np.asarray(result.objective)
        self.n_iter_ = result.n_iter
        if not result.converged and self.max_iter > 0:
            warnings.warn(
                f"TAO stopped at max_iter={self.max_iter} before the relative decrease of the "
                f"objective fell below tol={self.tol}; increase max_iter to continue.",
                ConvergenceWarning,
            )
        return self

    def _run_tao(self, tree, blocks, rng, executor, max_care_points):
        """TAO on row ``blocks`` through ``executor``, then pruning: the (internal-units) tree and TAO's result."""
        result = tao_optimize(
            tree,
            blocks,
            None,
            None,
            alpha=1.0 / self.C,
            leaf_alpha=None if self.leaf_C is None else 1.0 / self.leaf_C,
            leaf_max_iter=self.leaf_max_iter,
            refit_leaves=self.refit_leaves,
            leaf_warm_start=self.leaf_warm_start,
            max_iter=self.max_iter,
            tol=self.tol,
            node_solver=self.solver if self.node_type == "oblique" else "axis",
            max_care_points=max_care_points,
            seed=int(rng.randint(2**31 - 1)),
            executor=executor,
            scale=self._feature_scale,
        )
        if self.prune:
            counts = executor.map_chunks(chunk_visits, result.chunks, Routing.of(tree))
            visits = sum(c[0] for c in counts)
            reach = sum(c[1] for c in counts)
            tree = prune_with_counts(tree, visits, reach)
        result.chunks = []  # a restart kept for comparison must not hold its data chunks (on Dask: workers' memory)
        return tree, result

    def _feature_scaling(self, X):
        """Per-feature max-abs scale, so the l1 penalty does not depend on units.

        Axis-aligned trees with constant leaves are scale-invariant and have
        no penalty, so they are not rescaled.
        """
        if self.node_type == "axis" and not LEAF_MODELS[self.leaf_type].has_coef:
            return np.ones(X.shape[1])
        return max_abs_scale(X)

    def _initial_tree(self, X, y, sample_weight, n_outputs, task, rng):
        """The starting tree, in internal (scaled-feature) units."""
        kw = dict(task=task, leaf_type=self.leaf_type)
        scale = self._feature_scale
        if isinstance(self.init, str) and self.init == "random":
            return random_tree(
                lambda idx: take_rows(X, idx) / scale, X.shape[0], X.shape[1],
                self.max_depth, n_outputs, self.node_type, rng=rng, **kw
            )
        if isinstance(self.init, str) and self.init == "cart":
            if is_dask_collection(X):
                raise ValueError("init='cart' needs the data in memory; use init='random' or a warm-start tree with Dask input.")
            return cart_tree(
                divide_columns(X, scale), y, sample_weight, self.max_depth, n_outputs, self.node_type,
                random_state=self.random_state, **kw
            )
        if isinstance(self.init, str) and self.init == "cluster":
            if task != "classification":
                raise ValueError("init='cluster' places classes on leaves (softmax trees, thesis section 2.3.2): it "
                                 "needs a classifier. Use init='random' or init='cart' for regression.")
            if is_dask_collection(X):
                raise ValueError("init='cluster' needs the data in memory; use init='random' or a warm-start tree "
                                 "with Dask input.")
            Xs = X.multiply(1.0 / scale).tocsr() if sp.issparse(X) else X / scale
            return cluster_tree(Xs, y, sample_weight, self.max_depth, n_outputs, self.node_type,
                                leaf_type=self.leaf_type, alpha=1.0 / self.C, rng=rng,
                                leaf_classes=self.leaf_classes if self.leaf_type == "linear" else None)
        init = self.init
        if isinstance(init, BaseEstimator):
            check_is_fitted(init, "tree_")
            init = init.tree_
        return self._to_internal(check_warm_start(init, X.shape[1], n_outputs, task, self.leaf_type))

    def _to_internal(self, tree):
        tree.scale_features(self._feature_scale)
        return tree

    def _to_external(self, tree):
        tree.scale_features(1.0 / self._feature_scale)
        return tree

    # ----------------------------------------------------------- inspection
    def _validate_X_predict(self, X, canonical=True):
        check_is_fitted(self, "tree_")
        # float32 stays float32 (no copy); routing sums in float64 either way
        X = validate_data(self, X, dtype=(np.float64, np.float32), reset=False, accept_sparse=ACCEPT_SPARSE)
        if not canonical and sp.issparse(X):
            return X  # CSR as it comes: Tree.best_classes takes it so (sorting a copy was 0.2 µs a row)
        return as_rows(X, X.dtype)

    @lazy_over_row_blocks
    def apply(self, X):
        """Index of the leaf (in ``tree_``) that each sample reaches.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features)

        Returns
        -------
        leaves : ndarray of shape (n_samples,)
        """
        X = self._validate_X_predict(X)
        return self.tree_.apply(X)

    def decision_path(self, X):
        """Sparse indicator (n_samples, n_nodes) of the nodes each sample visits."""
        X = self._validate_X_predict(X)
        return self.tree_.decision_path(X)

    def get_n_leaves(self):
        """Number of leaves of the fitted tree."""
        check_is_fitted(self, "tree_")
        return self.tree_.n_leaves()

    def get_depth(self):
        """Depth of the fitted tree."""
        check_is_fitted(self, "tree_")
        return self.tree_.max_depth

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.input_tags.sparse = True
        return tags


class TAOClassifier(ClassifierMixin, _BaseTAO):
    """Sparse oblique (or axis-aligned) decision tree trained by TAO.

    Tree Alternating Optimisation fits every node of a tree of fixed
    structure in turn, bottom-up, each node solving its reduced problem on the
    points that reach it, so that the objective -- training 0/1 loss plus
    ``1/C`` times the l1 norm of the node weights -- never increases.

    Parameters
    ----------
    max_depth : int, default=8
        Depth of the initial complete tree (pruning can make it smaller).
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
        default by measurement: as accurate as SAGA or better on letter and
        MNIST at a third of the time (README "Defaults").
    leaf_type : {"constant", "linear"}, default="constant"
        Majority-class leaves, or l1 multinomial logistic (softmax) leaves,
        warm-started from their previous coefficients (thesis section 2.2):
        a few epochs of SAGA on dense rows, compiled FISTA on sparse rows
        (:func:`taodist.model.leaves.fit_softmax` says how that was chosen).
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
        Features are max-abs scaled internally, so C does not depend on units.
        30 was chosen on validation splits of MNIST and letter (README "Defaults").
    leaf_C : float or None, default=None
        Inverse l1 penalty of the linear leaves' coefficients, apart from
        the decision nodes' ``C``; None uses ``C``. Ignored for constant leaves.
    leaf_max_iter : int or None, default=None
        Iterations of a linear leaf's solver each time the leaf is refitted
        (warm-started): SAGA epochs on dense rows, compiled FISTA iterations
        on sparse rows. None: 5 SAGA epochs, at most 100 FISTA iterations
        (:func:`taodist.model.leaves.fit_softmax` says why). A few epochs
        regularise by stopping early; from the clustering initial tree more
        are better (letter, depth 5: 15, README "Defaults"). Ignored for
        constant leaves.
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
        validates better depends on the data: 30-tree forests (validation
        splits, README "Benchmarks") on MNIST 3.13% with "gradients" and 5
        TAO iterations against 3.52% with the defaults, 1.4x faster; on letter
        5.98% against 5.06%, on Fashion-MNIST 10.60% against 10.82% at 15
        iterations but 11.77% at 4. Ignored for constant leaves and for sparse
        rows (FISTA keeps no memory).
    max_iter : int, default=15
        Maximum number of TAO iterations (sweeps over all depths).
    tol : float, default=0.005
        Stop when the objective decreases by less than this fraction.
    init : {"random", "cart", "cluster"}, Tree or fitted estimator, default="random"
        Initial tree: a random complete tree, scikit-learn's CART grown to
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
        inertia. TAO finds a local optimum near its initial tree, and on
        letter the final objective tracks test error across initial trees
        (README "Defaults"). Costs ``n_init`` fits; ``n_init=1`` is the
        single fit.
    prune : bool, default=True
        Remove dead branches and pure subtrees after training.
    random_state : int, RandomState instance or None, default=None
        Seeds the random initial tree.
    max_care_points : int or None, default=None
        Largest number of care points an oblique node's surrogate solver
        sees: bigger reduced sets are uniformly subsampled (seeded), with
        weights scaled up to match. The accept test still uses every care
        point, so the objective stays monotone. None (default) disables the
        cap: on MNIST (depth 8) a cap of 5000 made iterations ~30% faster
        but raised test error from 5.4% to 6.2%.
    n_jobs : int or None, default=-1
        Threads that solve the decision nodes of one depth in parallel (they
        are independent). -1 uses every core, None or 1 one thread. The
        fitted tree does not depend on it.

    Attributes
    ----------
    tree_ : Tree
        The fitted tree (flat arrays; weights in the units of ``X``).
    classes_ : ndarray of shape (n_classes,)
    n_classes_ : int
    history_ : ndarray
        Objective before the first iteration and after each iteration (in
        the internal, max-abs-scaled feature units). Non-increasing.
    n_iter_ : int
        Iterations run.
    n_features_in_ : int

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

    @_fit_context(prefer_skip_nested_validation=True)
    @silence_inner_solvers
    def fit(self, X, y, sample_weight=None, *, client=None):
        """Fit the tree.

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

        Returns
        -------
        self : TAOClassifier
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
        return self._fit_rows(X, encoder.transform(y), sample_weight, client=client, streamable=streamable)

    def _fit_rows(self, X, codes, sample_weight, classes=None, client=None, streamable=False):
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
        return self._fit(X, codes, sample_weight, self.n_classes_, "classification", client, streamable)

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
        """
        X = self._validate_X_predict(X)
        return self.tree_.predict(X)

    @lazy_over_row_blocks
    def predict(self, X):
        """Predicted class of each sample: the most probable one (ties: the lower class).

        A softmax leaf limited to ``leaf_classes=k`` scores only its k classes.
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


class TAORegressor(RegressorMixin, _BaseTAO):
    """Sparse oblique (or axis-aligned) regression tree trained by TAO.

    Same algorithm as :class:`TAOClassifier` with the squared error as loss:
    a decision node's pseudolabel weights are differences of squared errors.
    Targets are standardised internally (and mapped back), so ``C`` does not
    depend on the units of ``y``. Multi-output ``y`` is supported.

    Parameters
    ----------
    max_depth : int, default=6
    node_type : {"oblique", "axis"}, default="oblique"
    solver : {"fista", "fista-gpu", "saga", "liblinear"}, default="liblinear"
        As for :class:`TAOClassifier` (liblinear by measurement on cpu_act,
        README "Defaults").
    leaf_type : {"constant", "linear"}, default="constant"
        Mean-vector leaves, or Lasso leaves.
    C : float, default=100.0
        Inverse l1 penalty, in units of the standardised squared error.
    leaf_C : float or None, default=None
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
    init : {"random", "cart"}, Tree or fitted estimator, default="random"
        ``"cluster"`` is for classifiers only.
    n_init : int, default=1
        Fits from different random initial trees; the lowest final objective
        is kept (see :class:`TAOClassifier`).
    prune : bool, default=True
    random_state : int, RandomState instance or None, default=None
    n_jobs : int or None, default=-1
    max_care_points : int or None, default=None

    Attributes
    ----------
    tree_ : Tree
    n_outputs_ : int
    history_ : ndarray
        Objective per iteration (standardised targets, scaled features).
    n_iter_ : int
    n_features_in_ : int

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

    def __init__(
        self,
        *,
        max_depth=6,
        node_type="oblique",
        solver="liblinear",
        leaf_type="constant",
        C=100.0,
        leaf_C=None,
        leaf_max_iter=None,
        refit_leaves="until_refused",
        max_iter=15,
        tol=5e-3,
        init="random",
        n_init=1,
        prune=True,
        random_state=None,
        n_jobs=-1,
        max_care_points=None,
    ):
        # Regression defaults differ from classification (measured on
        # cpu_act, see README "Defaults"): squared-error pseudolabel weights
        # span orders of magnitude, which slows SAGA (its step is set by the
        # largest weight), and the loss is in units of the target variance,
        # so a weaker penalty (larger C) is needed.
        super().__init__(
            max_depth=max_depth, node_type=node_type, solver=solver, leaf_type=leaf_type, C=C,
            leaf_C=leaf_C, leaf_max_iter=leaf_max_iter, refit_leaves=refit_leaves, max_iter=max_iter, tol=tol, init=init,
            n_init=n_init, prune=prune,
            random_state=random_state,
            n_jobs=n_jobs, max_care_points=max_care_points,
        )

    @_fit_context(prefer_skip_nested_validation=True)
    @silence_inner_solvers
    def fit(self, X, y, sample_weight=None, *, client=None):
        """Fit the tree.

        Parameters
        ----------
        X : {array-like, sparse matrix} of shape (n_samples, n_features), or a row-chunked dask array
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
        sample_weight : array-like of shape (n_samples,), default=None
        client : distributed.Client, optional
            As in :meth:`TAOClassifier.fit`.

        Returns
        -------
        self : TAORegressor
        """
        streamable = is_dask_collection(X)
        X, y = self._validate_fit_X_y(X, y, client, multi_output=True, y_numeric=True)
        return self._fit_rows(X, y, sample_weight, client=client, streamable=streamable)

    def _fit_rows(self, X, y, sample_weight, client=None, streamable=False):
        """Fit on validated rows (forest trees use this)."""
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
        return self._fit(X, (Y - self._y_mean) / self._y_scale, sample_weight, self.n_outputs_, "regression", client,
                         streamable)

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
        """Predicted values, shape (n_samples,) or (n_samples, n_outputs)."""
        X = self._validate_X_predict(X)
        out = self.tree_.predict(X)
        return out.ravel() if self._y_1d else out

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags


def validated_sample_weight(sample_weight, n_samples):
    """Sample weights as float64, refusing what TAO cannot fit.

    Weights must be finite and non-negative (a negative weight rewards
    misclassifying a point: the objective has no minimum), with at least one
    positive.
    """
    sample_weight = _check_sample_weight(sample_weight, np.empty((n_samples, 0)), dtype=np.float64)
    if np.any(sample_weight < 0):
        raise ValueError(f"Sample weights must be non-negative; got {np.count_nonzero(sample_weight < 0)} negative "
                         f"(smallest {sample_weight.min():g}). Drop those samples or give them weight 0.")
    if not np.any(sample_weight > 0):
        raise ValueError("All sample weights are zero: at least one sample needs a positive weight.")
    return sample_weight


def _scale_leaf_outputs(leaf_coef, scale):
    """Multiply output ``k`` of every linear leaf (rows ``i*K + k``) by ``scale[k]``."""
    K = scale.shape[0]
    row_scale = np.tile(scale, leaf_coef.shape[0] // K)
    return canonical_csr(sp.diags(row_scale) @ leaf_coef)
