"""The base of TAO's single-tree estimators: fitting around the optimiser, and inspection.

:class:`BaseTAO` validates input, scales features (so the l1 penalty is
unit-free), builds the initial tree, runs :func:`taodist.tao.optimizer.tao_optimize`
where :func:`taodist.estimators.execution.execution` says, prunes, and maps the
tree back to the input's units. :mod:`taodist.estimators.tree` adds the
classification and regression targets; the forests reuse the validation.
"""

import contextlib
import functools
import numbers
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, _fit_context
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, check_random_state, validate_data

from ..model.importance import feature_importances
from ..model.leaves import LEAF_MODELS, LEAF_WARM_STARTS
from ..model.prune import prune_with_counts
from ..model.tree import Tree
from ..tao.chunks import chunk_update, chunk_visits
from ..tao.initial_trees import cart_tree, check_warm_start, cluster_tree, random_tree
from ..tao.node_solvers import NODE_SOLVERS, OBLIQUE_SOLVERS
from ..tao.optimizer import REFIT_LEAVES, tao_optimize
from ..tao.routing import Routing
from ..utils.progress import ProgressPrinter, reporting
from ..utils.rows import FIT_DTYPES, as_fit_rows, as_rows, divide_columns
from ..utils.solver_warnings import silence_inner_solvers
from ..utils.validation import check_dask_X, is_dask_collection
from .auto import resolve_auto_depth
from .dask_frames import dask_frame_rows, encoded_partitions, is_dask_dataframe
from .execution import (
    clip_columns,
    cluster_fit,
    distribute_rows,
    execution,
    feature_offset,
    lazy_over_row_blocks,
    max_abs_scale,
    outlier_fences,
    shift_columns,
    spread_scale,
    take_scaled_rows,
)
from .relevance import estimator_penalty_factors
from .tabular import CATEGORICAL_FEATURES_CONSTRAINT, fit_table, per_input_column, predict_table
from .validation import ValidationMonitor, split_validation, unpack_eval_set, uses_early_stopping

#: the one rule for ``max_care_points`` (TAO and LapTAO): None, or enough points to fit a hyperplane
MAX_CARE_POINTS_CONSTRAINT = [Interval(numbers.Integral, 10, None, closed="left"), None]


def fit_method(fit):
    """Decorate an estimator's ``fit``: scikit-learn's parameter validation first, the inner solvers' warnings
    silenced, progress events to the estimator's ``callbacks`` (and a printer with ``verbose``), a lost
    scheduler as one error (:func:`~taodist.estimators.execution.cluster_fit`)."""

    @functools.wraps(fit)
    def with_callbacks(self, *args, **kwargs):
        with fit_reporting(self):
            return fit(self, *args, **kwargs)

    return _fit_context(prefer_skip_nested_validation=True)(silence_inner_solvers(cluster_fit(with_callbacks)))


@contextlib.contextmanager
def fit_reporting(estimator):
    """Within a fit, send :mod:`taodist.utils.progress` events to ``estimator.callbacks`` and, with ``verbose``,
    to a :class:`~taodist.utils.progress.ProgressPrinter` -- the reporter ``taodist fit`` prints with -- as well
    as to any reporter already installed around the fit.

    A callback is called as ``callback(event, info)``; returning True from a
    ``"tao_iteration"`` event ends TAO's iterations there (the model is kept),
    raising abandons the fit.
    """
    callbacks = list(getattr(estimator, "callbacks", None) or [])
    for cb in callbacks:
        if not callable(cb):
            raise TypeError(f"callbacks must be callables taking (event, info); got {cb!r}.")
    with contextlib.ExitStack() as stack:
        if getattr(estimator, "verbose", 0):
            callbacks.append(stack.enter_context(ProgressPrinter()))
        if not callbacks:
            yield
            return

        def reporter(event, info):
            stop = False
            for cb in callbacks:
                stop = bool(cb(event, info)) or stop
            return stop

        stack.enter_context(reporting(reporter, also_outer=True))
        yield


class TAOTagsMixin:
    """The scikit-learn tags of TAO's trees and forests: scipy.sparse input is taken as it is, NaN is learned
    from (:mod:`taodist.estimators.tabular`)."""

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.input_tags.sparse = True
        return tags


def driver_target(y, multi_output=False, y_numeric=False):
    """A distributed fit's target as a NumPy array on the driver (a Dask collection computed), checked as far as
    it can be without X: one column unless ``multi_output``, finite numbers with ``y_numeric``."""
    y = np.asarray(y.compute() if is_dask_collection(y) else y)
    if y.ndim == 2 and y.shape[1] == 1 and not multi_output:
        y = y.ravel()
    if y_numeric:
        y = y.astype(np.float64)
        if not np.isfinite(y).all():
            raise ValueError("Input y contains NaN or infinity.")
    return y


def set_init_params(estimator, params):
    """Store ``__init__``'s arguments (``locals()``) on ``estimator`` as they are, as scikit-learn expects.

    Each estimator declares its parameters and defaults in its own
    ``__init__`` signature (what ``get_params`` reads); this stores them
    without validation or logic.
    """
    for name, value in params.items():
        if name != "self":
            setattr(estimator, name, value)


class BaseTAO(TAOTagsMixin, BaseEstimator):
    """What TAO's single-tree estimators share: validation, the fit around :func:`tao_optimize`, inspection.

    Subclasses define ``__init__`` (the parameters, stored as given) and
    ``fit`` (targets to their internal form, then :meth:`_fit`).
    """

    _parameter_constraints = {
        "max_depth": [Interval(numbers.Integral, 1, 20, closed="both"), StrOptions({"auto"})],
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
        "init": [StrOptions({"auto", "random", "cart", "cluster"}), Tree, BaseEstimator],
        "n_init": [Interval(numbers.Integral, 1, None, closed="left")],
        "prune": ["boolean"],
        "random_state": ["random_state"],
        "n_jobs": [numbers.Integral, None],
        "max_care_points": MAX_CARE_POINTS_CONSTRAINT,
        "categorical_features": CATEGORICAL_FEATURES_CONSTRAINT,
        "outlier_fence": [Interval(numbers.Real, 0, None, closed="neither"), None],
        "penalty_factors": [StrOptions({"auto"}), None],
        "early_stopping": [StrOptions({"auto"}), "boolean"],
        "validation_fraction": [Interval(numbers.Real, 0, 1, closed="neither")],
        "n_iter_no_change": [Interval(numbers.Integral, 1, None, closed="left")],
        "verbose": ["verbose"],
        "callbacks": [list, None],
    }

    # -------------------------------------------------------------- fitting
    def _validate_fit_X_y(self, X, y, client, **kw):
        """Validated, encoded rows for NumPy, scipy.sparse or DataFrame input; structural checks only for Dask input.

        Missing values and categorical columns are encoded into numeric
        columns here (:func:`~taodist.estimators.tabular.fit_table`); sparse X
        of any format becomes one canonical CSR matrix (never dense).

        Dask input (or an explicit client) keeps X distributed: y and sample
        weights, one column each, are brought to the driver (y before a Dask
        DataFrame is encoded: its target encoding reads y).
        """
        task = "regression" if kw.get("y_numeric") else "classification"
        if not is_dask_collection(X):
            X, y = fit_table(self, X, y, task, **kw)
            if client is None:
                return as_fit_rows(X), y
            X = distribute_rows(as_fit_rows(X), client)  # NumPy with an explicit client: blocks to the workers
            y = driver_target(y, **kw)
        else:
            y = driver_target(y, **kw)
            X = dask_frame_rows(self, X, y, task)
        check_dask_X(X)
        if self.encoder_ is None:
            self.n_features_in_ = X.shape[1]
        if y.shape[0] != X.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: [{X.shape[0]}, {y.shape[0]}].")
        return X, y

    def _fit(self, X, y_internal, sample_weight, n_outputs, task, client=None, streamable=False, validation=None):
        """Run TAO on validated data; ``y_internal`` is codes or standardised Y.

        ``streamable``: X is a Dask array over storage (Zarr), not NumPy rows
        scattered for this fit, so an out-of-core fit may re-read it.
        ``validation``: ``(X_val, y_val_internal, stop)``, rows scored after every
        iteration; with ``stop``, early stopping keeps the best iterate.
        """
        # a value far outside its column's range is clipped to the column's fence, here and in prediction
        self.clip_bounds_ = outlier_fences(X, self.outlier_fence, client)
        X = clip_columns(X, self.clip_bounds_)
        # columns far from zero (years, longitudes) start at zero inside the fit; the fitted tree takes raw X
        self._feature_offset = feature_offset(X, client)
        X_given, X = X, shift_columns(X, self._feature_offset)
        if validation is not None:
            X_val = clip_columns(validation[0], self.clip_bounds_)
            validation = (shift_columns(X_val, self._feature_offset), *validation[1:])
        self._validation = validation
        if is_dask_collection(sample_weight):
            sample_weight = sample_weight.compute()
        sample_weight = validated_sample_weight(sample_weight, X.shape[0])
        self.penalty_factors_ = estimator_penalty_factors(self, X, y_internal, sample_weight, task, client)
        if client is None:  # with a client, the workers' hardware is what counts
            NODE_SOLVERS[self.solver if self.node_type == "oblique" else "axis"].ensure_usable()
        rng = check_random_state(self.random_state)
        self._init = self._resolved_init(X, task)
        n_init = self.n_init
        if n_init > 1 and not (isinstance(self._init, str) and self._init in ("random", "cluster")):
            # as scikit-learn's KMeans does with an explicit init array
            warnings.warn(f"init={self.init!r} gives the same initial tree every time: n_init={n_init} would "
                          "repeat one fit, so it runs once (n_init=1). Restarts need init='random' or 'cluster'.",
                          RuntimeWarning)
            n_init = 1
        self.max_depth_, deeper = (resolve_auto_depth(X, y_internal, sample_weight, task,
                                                      n_outputs if task == "classification" else 0, self.random_state,
                                                      n_jobs=self.n_jobs,
                                                      linear_leaves=LEAF_MODELS[self.leaf_type].has_coef,
                                                      with_deeper=True)
                                   if self.max_depth == "auto" else (self.max_depth, None))
        if validation is None or not validation[2]:
            deeper = None  # only early stopping's held-out rows choose between two depths
        with execution(X, y_internal, sample_weight, client=client, n_jobs=self.n_jobs, streamable=streamable,
                       max_care_points=self.max_care_points) as run:
            # inside the block: with Dask input these computations run on the fit's cluster
            self._feature_scale = self._feature_scaling(X, task)
            best = None
            for _ in range(n_init):  # restarts draw from one rng: n_init=1 is the fit it always was
                fit = self._fit_from_initial_tree(X, y_internal, sample_weight, n_outputs, task, rng, run)
                if best is None or fit[1].objective[-1] < best[1].objective[-1]:
                    best = fit
            if self._stuck(best[0], task, X, y_internal, sample_weight):
                # A random tree whose leaves all took one class leaves no care point anywhere, so TAO
                # cannot move it (imbalanced classes do this); one that lost a large class stays so too
                # (iris, penguins). CART's tree separates the classes where a split can, and TAO from it
                # keeps the lower objective of the two.
                self._init = "cart"
                fit = self._fit_from_initial_tree(X, y_internal, sample_weight, n_outputs, task, rng, run)
                if fit[1].objective[-1] < best[1].objective[-1]:
                    best = fit
            if deeper is not None:
                best = self._fit_deeper(deeper, best, X, y_internal, sample_weight, n_outputs, task, run)
            self._set_fitted(*best)
            # a weight's effect on the margin is its size in the columns' units, whatever it cost in penalty
            unit_scale = self._feature_scale / (1.0 if self.penalty_factors_ is None else self.penalty_factors_)
            importances = feature_importances(self.tree_, node_counts(self.tree_, X_given), unit_scale)
            self.feature_importances_ = per_input_column(getattr(self, "encoder_", None), importances)
            return self

    def _fit_deeper(self, deeper, best, X, y_internal, sample_weight, n_outputs, task, run):
        """``best`` or TAO at depth ``deeper``, whichever scores better on early stopping's held-out rows.

        The regression rule's depth suits a target near-linear in the columns; one made of interactions
        (temperature over the seasons and hours) needs CART's cross-validated depth. Above 10,000 rows the
        held-out tenth tells the two apart (docs/defaults.md, seventh pass). The deeper fit starts from a
        fresh ``random_state``, as a fit with ``max_depth=deeper`` would.
        """
        shallow, self.max_depth_ = self.max_depth_, deeper
        fit = self._fit_from_initial_tree(X, y_internal, sample_weight, n_outputs, task,
                                          check_random_state(self.random_state), run)
        if min(fit[1].monitor.scores) < min(best[1].monitor.scores):
            return fit
        self.max_depth_ = shallow
        return best

    def _fit_from_initial_tree(self, X, y_internal, sample_weight, n_outputs, task, rng, run):
        """``(tree, result)``: TAO from a new initial tree (``self._init`` at depth ``self.max_depth_``)."""
        tree = self._initial_tree(X, y_internal, sample_weight, n_outputs, task, rng)
        tree.leaf_classes = self.leaf_classes  # a warm-start tree takes this fit's limit too
        tree.leaf_model.limit_leaves(tree)
        return self._run_tao(tree, run.blocks, rng, run.executor, run.max_care_points)

    def _with_validation(self, X, y, sample_weight, eval_set, task, to_internal_y):
        """``(X, y, sample_weight, validation)``: the rows to fit and the validation ``(X_val, y_val, stop)`` or None.

        ``eval_set=(X_val, y_val)`` is scored after every iteration (its rows
        encoded as the training rows; a Dask array may be chunked any way);
        with ``early_stopping`` the iterations also stop after
        ``n_iter_no_change`` without a better score and the best iterate is
        kept. ``early_stopping`` without ``eval_set`` holds out
        ``validation_fraction`` of the training rows (in memory only).
        ``to_internal_y`` codes ``y_val`` as ``y`` is coded.
        """
        # "auto" holds out rows only from data in memory; Dask input needs an eval_set for it
        stop = uses_early_stopping(self.early_stopping, X.shape[0], eval_set is not None or not is_dask_collection(X))
        if eval_set is not None:
            X_val, y_val = unpack_eval_set(eval_set)
            X_val = self._validation_rows(X_val, X.shape[1])
            y_val = np.asarray(y_val.compute() if is_dask_collection(y_val) else y_val)
            if y_val.shape[0] != X_val.shape[0]:
                raise ValueError(f"eval_set: X has {X_val.shape[0]} rows but y has {y_val.shape[0]}; they must match.")
            return X, y, sample_weight, (X_val, to_internal_y(y_val), stop)
        if not stop:
            return X, y, sample_weight, None
        if is_dask_collection(X):
            raise ValueError("early_stopping on Dask input needs validation rows: pass eval_set=(X_val, y_val) to "
                             "fit (a Dask array or DataFrame, chunked any way), or set early_stopping=False.")
        if is_dask_collection(sample_weight):
            sample_weight = sample_weight.compute()
        X, y, sample_weight, X_val, y_val = split_validation(X, y, sample_weight, self.validation_fraction, task,
                                                             self.random_state)
        return X, y, sample_weight, (X_val, y_val, True)

    def _validation_rows(self, X_val, n_columns):
        """``eval_set``'s rows, checked against the training input and encoded as it was."""
        if is_dask_collection(X_val):
            if is_dask_dataframe(X_val):
                validate_data(self, X_val._meta, reset=False, skip_check_array=True)
                X_val = (encoded_partitions(self.encoder_, X_val) if self.encoder_ is not None
                         else X_val.to_dask_array(lengths=True).astype(np.float64).rechunk({1: -1}))
            check_dask_X(X_val)
        else:
            try:
                X_val = as_rows(predict_table(self, X_val, FIT_DTYPES))
            except ValueError as exc:
                raise ValueError(f"eval_set: {exc}") from None
        if X_val.shape[1] != n_columns:
            raise ValueError(f"eval_set: X has {X_val.shape[1]} columns once encoded, the training rows "
                             f"{n_columns}; give it the training data's columns.")
        return X_val

    def _set_fitted(self, tree, result):
        self.tree_ = self._to_external(tree)
        self.history_ = np.asarray(result.objective)
        self.n_iter_ = result.n_iter
        monitor = getattr(result, "monitor", None)
        if monitor is not None:
            self.validation_score_ = np.asarray(monitor.scores)
            self.best_iteration_ = monitor.best_iteration if self._validation[2] else result.n_iter
        self._validation = None  # the validation rows are not kept on the fitted estimator
        if not result.converged and not result.stopped and self.max_iter > 0:
            warnings.warn(
                f"TAO stopped at max_iter={self.max_iter} before the relative decrease of the "
                f"objective fell below tol={self.tol}; increase max_iter to continue.",
                ConvergenceWarning,
            )
        return self

    def _run_tao(self, tree, blocks, rng, executor, max_care_points):
        """TAO on row ``blocks`` through ``executor``, then pruning: the (internal-units) tree and TAO's result.

        With validation rows, every iterate is scored; with early stopping the
        best iterate is the one pruned and kept (the chunks' margins are
        recomputed for it first, since they route with the last iterate).
        """
        monitor = None
        if self._validation is not None:
            X_val, y_val, stop = self._validation
            monitor = ValidationMonitor(tree, X_val, y_val, "classification" if tree.task == "classification"
                                        else "regression", self._feature_scale,
                                        self.n_iter_no_change if stop else None)
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
            callback=monitor,
            missing_indicators=self._axis_missing_indicators(),
        )
        result.monitor = monitor
        if monitor is not None and self._validation[2] and monitor.best_iteration != result.n_iter:
            tree = monitor.best_tree
            decision = np.flatnonzero(tree.children_left >= 0)
            result.chunks = executor.update_chunks(chunk_update, result.chunks, Routing.of(tree), decision)
        if self.prune:
            counts = executor.map_chunks(chunk_visits, result.chunks, Routing.of(tree))
            visits = sum(c[0] for c in counts)
            reach = sum(c[1] for c in counts)
            tree = prune_with_counts(tree, visits, reach)
        result.chunks = []  # a restart kept for comparison must not hold its data chunks (on Dask: workers' memory)
        return tree, result

    def _axis_missing_indicators(self):
        """Per fitted column, its missingness indicator's column, for axis nodes' default directions (or None).

        From the encoder, or from the forest whose encoder made the columns
        this tree is fitted on (``_forest_missing_indicators``).
        """
        if self.node_type != "axis":
            return None
        encoder = getattr(self, "encoder_", None)
        own = None if encoder is None else encoder.missing_indicators()
        return own if own is not None else getattr(self, "_forest_missing_indicators", None)

    def _feature_scaling(self, X, task):
        """Per-feature scale, so the l1 penalty does not depend on units.

        A regression tree with linear leaves divides the columns by their spread
        (:func:`~taodist.estimators.execution.spread_scale`: Lasso leaves on
        standardised columns, as a Lasso is usually fitted); every other tree
        by ``max |x|``, which validated better for classification (on MNIST the
        spread makes rarely-inked pixels cheap to use: a denser, less accurate
        tree; docs/defaults.md). Axis-aligned trees with constant leaves are
        scale-invariant and have no penalty, so they are not rescaled.
        """
        has_coef = LEAF_MODELS[self.leaf_type].has_coef
        if self.node_type == "axis" and not has_coef:
            return np.ones(X.shape[1])
        scale = spread_scale(X) if task == "regression" and has_coef else max_abs_scale(X)
        # a column divided by its factor needs a weight that many times larger: an adaptive l1 penalty
        return scale if self.penalty_factors_ is None else scale * self.penalty_factors_

    def _resolved_init(self, X, task):
        """``init``, with ``"auto"`` resolved: CART's tree for regression on data in memory, else a random tree."""
        if isinstance(self.init, str) and self.init == "auto":
            return "cart" if task == "regression" and not is_dask_collection(X) else "random"
        return self.init

    def _stuck(self, tree, task, X, codes, sample_weight):
        """Whether a default (``init="auto"``) random start with constant leaves ended where TAO cannot leave,
        with CART's start at hand: its leaves predict one class only, or (with ``max_depth="auto"``, on a single
        tree) never a class of at least half its fair share of the training weight (``1 / 2K``) though the tree
        has leaves to spare for it.

        Smaller classes left out are often the better fit (docs/defaults.md, eighth pass)."""
        if not (task == "classification" and isinstance(self.init, str) and self.init == "auto"
                and self._init == "random" and tree.n_outputs > 1 and tree.leaf_type == "constant"
                and not is_dask_collection(X)):
            return False  # (a linear leaf is a classifier of its own, even as the only leaf)
        predicted = np.unique(tree.value[tree.is_leaf].argmax(axis=1))
        if predicted.size == 1:
            return True
        if self.max_depth != "auto":
            # chosen with the defaults' depth; a set depth (a forest's trees too) fits as on a cluster, where
            # there is no CART start
            return False
        share = np.bincount(codes, weights=sample_weight, minlength=tree.n_outputs) / np.sum(sample_weight)
        left_out = np.setdiff1d(np.arange(tree.n_outputs), predicted)
        return bool(np.any(share[left_out] >= 0.5 / tree.n_outputs)) and predicted.size < 2 ** self.max_depth_

    def _initial_tree(self, X, y, sample_weight, n_outputs, task, rng):
        """The starting tree, in internal (scaled-feature) units."""
        kw = dict(task=task, leaf_type=self.leaf_type)
        scale = self._feature_scale
        if isinstance(self._init, str) and self._init == "random":
            return random_tree(
                lambda idx: take_scaled_rows(X, idx, scale), X.shape[0], X.shape[1],
                self.max_depth_, n_outputs, self.node_type, rng=rng, **kw
            )
        if isinstance(self._init, str) and self._init == "cart":
            if is_dask_collection(X):
                raise ValueError("init='cart' needs the data in memory; use init='random' or a warm-start tree with Dask input.")
            return cart_tree(
                divide_columns(X, scale), y, sample_weight, self.max_depth_, n_outputs, self.node_type,
                random_state=self.random_state, **kw
            )
        if isinstance(self._init, str) and self._init == "cluster":
            if task != "classification":
                raise ValueError("init='cluster' places classes on leaves (softmax trees, thesis section 2.3.2): it "
                                 "needs a classifier. Use init='random' or init='cart' for regression.")
            if is_dask_collection(X):
                raise ValueError("init='cluster' needs the data in memory; use init='random' or a warm-start tree "
                                 "with Dask input.")
            Xs = X.multiply(1.0 / scale).tocsr() if sp.issparse(X) else X / scale
            return cluster_tree(Xs, y, sample_weight, self.max_depth_, n_outputs, self.node_type,
                                leaf_type=self.leaf_type, alpha=1.0 / self.C, rng=rng,
                                leaf_classes=self.leaf_classes if self.leaf_type == "linear" else None)
        init = self._init
        if isinstance(init, BaseEstimator):
            check_is_fitted(init, "tree_")
            init = init.tree_
        return self._to_internal(check_warm_start(init, X.shape[1], n_outputs, task, self.leaf_type))

    def _to_internal(self, tree):
        """A tree of raw inputs ``x`` re-expressed for the fit's inputs ``(x - offset) / scale``."""
        if np.any(self._feature_offset):
            tree.shift_features(-self._feature_offset)
        tree.scale_features(self._feature_scale)
        return tree

    def _to_external(self, tree):
        """A tree of the fit's inputs ``(x - offset) / scale`` re-expressed for raw inputs ``x``."""
        tree.scale_features(1.0 / self._feature_scale)
        if np.any(self._feature_offset):
            tree.shift_features(self._feature_offset)
        return tree

    # ----------------------------------------------------------- inspection
    def _validate_X_predict(self, X, canonical=True):
        check_is_fitted(self, "tree_")
        # float32 stays float32 (no copy); routing sums in float64 either way
        X = clip_columns(predict_table(self, X, (np.float64, np.float32)), getattr(self, "clip_bounds_", None))
        if not canonical and sp.issparse(X):
            return X  # CSR as it comes: Tree.best_classes takes it so (sorting a copy was 0.2 µs a row)
        return as_rows(X, X.dtype)

    @lazy_over_row_blocks
    def apply(self, X):
        """Index of the leaf (in ``tree_``) that each sample reaches.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features), or a Dask array or DataFrame
            Rows as ``fit`` took them (same columns; a DataFrame's names and
            dtypes are checked). Dask input gives a lazy result, block by block.

        Returns
        -------
        leaves : ndarray of shape (n_samples,)
            Node indices of ``tree_`` (leaves only).
        """
        X = self._validate_X_predict(X)
        return self.tree_.apply(X)

    def decision_path(self, X):
        """The nodes each sample visits, root to leaf.

        Parameters
        ----------
        X : {array-like, sparse matrix, DataFrame} of shape (n_samples, n_features)
            Rows as ``fit`` took them.

        Returns
        -------
        indicator : sparse matrix of shape (n_samples, n_nodes)
            ``indicator[i, j]`` is 1 where sample i passes through node j of ``tree_``.
        """
        X = self._validate_X_predict(X)
        return self.tree_.decision_path(X)

    def get_n_leaves(self):
        """Number of leaves of the fitted tree.

        Returns
        -------
        n_leaves : int
            Leaves of ``tree_`` (after pruning).
        """
        check_is_fitted(self, "tree_")
        return self.tree_.n_leaves()

    def get_depth(self):
        """Depth of the fitted tree.

        Returns
        -------
        depth : int
            The longest root-to-leaf path of ``tree_`` (after pruning; at most ``max_depth_``).
        """
        check_is_fitted(self, "tree_")
        return self.tree_.max_depth


def node_counts(tree, X):
    """Rows of ``X`` (NumPy, CSR or a Dask array, counted where its blocks live) reaching each node of ``tree``."""
    if not is_dask_collection(X):
        return np.asarray(tree.decision_path(X).sum(axis=0)).ravel()
    n = tree.n_nodes
    per_block = X.map_blocks(lambda b: np.asarray(tree.decision_path(b).sum(axis=0)).reshape(1, n),
                             chunks=((1,) * X.numblocks[0], (n,)), dtype=np.int64, meta=np.empty((0, 0), np.int64))
    return per_block.sum(axis=0).compute()


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
