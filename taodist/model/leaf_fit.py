"""Fitting one leaf on its reduced set: constant leaves, Lasso leaves and softmax leaves.

Losses are those of the papers: 0/1 for classification, squared error for
regression. Constant leaves are solved exactly (:func:`fit_constant`:
weighted majority / mean). Linear leaves (:func:`fit_linear`) use l1
surrogates: a multinomial l1 logistic (softmax) model per leaf
(:func:`fit_softmax`, warm-started from the leaf's previous coefficients, by
SAGA on dense rows and FISTA on sparse ones) or scikit-learn's Lasso; the
optimiser accepts them only if the leaf's true objective does not increase.

A softmax leaf may be limited to its ``k`` most populous classes
(:func:`top_classes`, thesis section 2.3, "softmax trees"). The leaf models
that call these functions, and the registry that names them, are in
:mod:`taodist.model.leaves`.
"""

import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import Lasso, LogisticRegression

from ..solvers.saga import saga_logistic_l1
from ..solvers.softmax import LEAF_MAX_ITER, solve_softmax_l1
from ..utils.rows import as_rows
from ..utils.solver_warnings import sklearn_convergence_ignored
from .linear_outputs import dense_coef_rows, leaf_coef_array

#: logit given to classes absent from a linear leaf's reduced set
_ABSENT_LOGIT = -30.0


def _class_weights(y, sample_weight, n_outputs):
    return np.bincount(y, weights=sample_weight, minlength=n_outputs)


def fit_constant(X, y, sample_weight, *, task, n_outputs, alpha):
    """Exact constant leaf: weighted class distribution or weighted mean."""
    total = sample_weight.sum()
    if task == "classification":
        return _class_weights(y, sample_weight, n_outputs) / total, None
    return sample_weight @ y / total, None


def fit_linear(X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None, max_classes=None,
               max_iter=None, warm_start="coef"):
    """l1 linear leaf: a multinomial l1 softmax (:func:`fit_softmax`), or a Lasso.

    ``max_classes`` (classification only) limits the softmax to that many classes.
    ``max_iter``: the softmax's SAGA epochs on dense rows or FISTA iterations on
    sparse rows (None: :data:`SOFTMAX_EPOCHS`, :data:`~taodist.solvers.softmax.LEAF_MAX_ITER`),
    the Lasso's coordinate-descent epochs (None: 2,000). ``warm_start``: what a
    softmax leaf's SAGA starts from (see :data:`LEAF_WARM_STARTS`); the Lasso
    and FISTA have no gradient memory and ignore it.

    Regression uses scikit-learn's Lasso with its penalty rescaled so that it
    minimises ``sum_n s_n ||y_n - W x_n - c||^2 + alpha ||W||_1``.
    """
    D = X.shape[1]
    X = as_rows(X)  # sparse rows stay sparse (SAGA and Lasso take CSR)
    if task == "classification":
        iterations = {} if max_iter is None else dict(max_iter=max_iter, epochs=max_iter)
        return fit_softmax(X, y, sample_weight, n_outputs=n_outputs, alpha=alpha, value=value, coef=coef,
                           max_classes=max_classes, warm_start=warm_start, **iterations)
    with sklearn_convergence_ignored():
        lasso = Lasso(alpha=alpha / (2.0 * sample_weight.sum()), max_iter=2000 if max_iter is None else max_iter,
                      tol=1e-6)
        lasso.fit(X, y, sample_weight=sample_weight)
        coef = np.atleast_2d(lasso.coef_).reshape(n_outputs, D)
        return np.atleast_1d(lasso.intercept_).astype(np.float64), coef


#: SAGA epochs of a softmax leaf fit with ``solver="saga"``, warm-started from the leaf's previous
#: coefficients. Few on purpose, as for the node solvers: stopping early regularises (a few epochs
#: validated as well as more, with fewer parameters), and many epochs made the leaves most of a fit's time.
SOFTMAX_EPOCHS = 5

#: What a warm-started softmax leaf's SAGA starts from (``leaf_warm_start``). "coef": the leaf's
#: coefficients with an empty gradient memory, as scikit-learn's ``warm_start`` does (its first
#: epoch steps on a table of zeros, so a fit from a good start often ends worse and is refused).
#: "gradients": the coefficients and every row's gradient at them, filled in one pass
#: (:func:`taodist.solvers.saga.saga_logistic_l1` with ``warm_memory``), so SAGA's steps are
#: variance-reduced from the first one. Each takes its own default epochs (:data:`WARM_START_EPOCHS`).
LEAF_WARM_STARTS = ("coef", "gradients")

#: SAGA epochs of a softmax leaf fit per warm start when ``leaf_max_iter`` is None. "gradients": 2,
#: chosen on a validation split of a forest of linear-leaf trees, where it validated better than 1 or 5
#: epochs and than the "coef" start. On other data sets "gradients" validated worse than "coef" or not
#: reliably better, so "coef" stays every estimator's default.
WARM_START_EPOCHS = {"coef": SOFTMAX_EPOCHS, "gradients": 2}


def top_classes(y, sample_weight, n_outputs, k=None):
    """The classes a leaf keeps: the ``k`` of largest weighted count in ``y``, in class order.

    Only classes of positive weight count; all of them when there are at most
    ``k`` (or ``k`` is None). Ties go to the lower class index, so the choice
    does not depend on the order of the points.
    """
    counts = _class_weights(y, sample_weight, n_outputs)
    present = np.flatnonzero(counts > 0)
    if k is None or present.size <= k:
        return present
    by_count = np.argsort(-counts[present], kind="stable")  # stable: equal counts keep class order
    return np.sort(present[by_count[:k]])


def fit_softmax(X, y, sample_weight, *, n_outputs, alpha, value=None, coef=None, solver="auto",
                max_iter=LEAF_MAX_ITER, tol=1e-4, epochs=None, max_classes=None, warm_start="coef"):
    """One multinomial l1 logistic (softmax) model per leaf, warm-started (thesis section 2.2).

    Minimises ``sum_n s_n * cross-entropy(y_n, softmax(W x_n + c)) + alpha ||W||_1``
    over the classes present in the leaf's reduced set; absent classes get
    logit :data:`_ABSENT_LOGIT` and zero weights. ``value``/``coef`` (the
    leaf's current intercepts and ``(K, D)`` weights, dense or sparse)
    warm-start the solver. With two classes present the model is one
    logistic regression, stored as the logit pair ``(-z/2, z/2)``.

    ``solver="fista"`` runs at most ``max_iter`` iterations (stopping
    earlier at relative tolerance ``tol``) of the compiled solver
    :func:`taodist.solvers.softmax.solve_softmax_l1`; ``solver="saga"`` runs
    ``epochs`` epochs of scikit-learn's SAGA (None: :data:`WARM_START_EPOCHS`
    for ``warm_start``): on dense rows its compiled port
    :func:`taodist.solvers.saga.saga_logistic_l1` (the same steps to
    rounding, and faster), on sparse rows scikit-learn's own;
    ``solver="sklearn-saga"`` always scikit-learn's (the reference in the
    tests). ``warm_start="gradients"`` fills the compiled SAGA's gradient
    memory at the warm start (see :data:`LEAF_WARM_STARTS`; the scikit-learn
    reference and FISTA ignore it). ``"auto"`` (the default) takes
    FISTA for sparse rows and SAGA for dense ones: on dense rows FISTA
    trees fit faster but validate worse than SAGA's (early stopping
    regularises SAGA), while on wide sparse leaves SAGA's lagged l1 updates
    make it much slower than FISTA, cold and warm.

    With ``max_classes=k`` the leaf keeps the ``k`` most populous classes
    (:func:`top_classes`) and fits on their points only, as in the thesis'
    softmax trees (Algorithm 2); every other class gets logit ``-inf``
    (probability exactly 0). ``X`` may be a NumPy array or a scipy CSR matrix;
    it is only indexed by rows, never densified here.
    """
    if solver not in ("auto", "fista", "saga", "sklearn-saga"):
        raise ValueError(f"solver must be 'auto', 'fista', 'saga' or 'sklearn-saga'; got {solver!r}")
    if warm_start not in LEAF_WARM_STARTS:
        raise ValueError(f"warm_start must be one of {LEAF_WARM_STARTS}; got {warm_start!r}")
    if solver == "auto":
        solver = "fista" if sp.issparse(X) else "saga"
    if epochs is None:
        epochs = WARM_START_EPOCHS[warm_start]
    K, D = n_outputs, X.shape[1]
    absent_logit = _ABSENT_LOGIT
    if max_classes is None:
        counts = _class_weights(y, sample_weight, K)
        present = np.flatnonzero(counts > 0)
    else:
        present = top_classes(y, sample_weight, K, max_classes)
        absent_logit = -np.inf
        rows = np.flatnonzero(np.isin(y, present))
        if rows.size < y.size:  # the other classes' points cannot be predicted right here: leave them out
            X, y, sample_weight = X[rows], y[rows], sample_weight[rows]
    intercept = np.full(K, absent_logit)
    if present.size == 1:  # pure leaf: a constant model is exact
        intercept[present] = 0.0
        return intercept, leaf_coef_array({}, K, D)
    start = None
    if coef is not None and value is not None:
        # softmax logits are shift-invariant: centre them, and keep classes that were absent
        # (logit -30 or -inf) from starting far away, which the solver would take many steps to undo
        v = value[present]
        finite = np.isfinite(v)
        top = v[finite].max() if finite.any() else 0.0
        b = np.where(finite, np.maximum(v - top, -5.0), -5.0)
        start = (dense_coef_rows(coef, present), b)
    labels = np.searchsorted(present, y)
    if solver == "saga" and not sp.issparse(X):
        W0, b0 = (None, None) if start is None else _saga_start(*start)
        w, c, _ = saga_logistic_l1(X, labels, sample_weight, alpha, W0, b0, n_classes=present.size, epochs=epochs,
                                   tol=1e-4, random_state=0, warm_memory=warm_start == "gradients")
    elif solver in ("saga", "sklearn-saga"):
        w, c = _fit_softmax_saga(X, labels, sample_weight, alpha, start, epochs)
    else:
        if start is not None and present.size == 2:  # the stored pair is (-w/2, w/2): start symmetric
            W, b = start
            start = (np.array([-0.5, 0.5])[:, None] * (W[1] - W[0]), np.array([-0.5, 0.5]) * (b[1] - b[0]))
        W0, c0 = start if start is not None else (None, None)
        w, c, _ = solve_softmax_l1(X, labels, sample_weight, alpha, W0, c0, n_classes=present.size,
                                   max_iter=max_iter, tol=tol)
        if present.size == 2:  # two-class softmax == logistic regression on the differences
            w, c = w[1] - w[0], c[1] - c[0]
    if present.size == 2:
        rows = {present[0]: -w / 2, present[1]: w / 2}
        intercept[present] = (-c / 2, c / 2)
    else:
        rows = dict(zip(present, w))
        intercept[present] = c
    return intercept, leaf_coef_array(rows, K, D)


def _saga_start(W, b):
    """A warm start ``(W, b)`` as scikit-learn's SAGA takes it: with two classes, the difference of the pair."""
    if W.shape[0] == 2:
        return W[1] - W[0], b[1] - b[0]
    return W, b


def _fit_softmax_saga(X, labels, sample_weight, alpha, start, epochs):
    """The SAGA reference of :func:`fit_softmax`: ``(W, c)``, or ``(w, z)`` with two classes."""
    model = LogisticRegression(C=1.0 / alpha, l1_ratio=1.0, solver="saga", warm_start=True, max_iter=epochs,
                               tol=1e-4, random_state=0)
    if start is not None:
        W, b = start
        if W.shape[0] == 2:
            model.coef_ = (W[1] - W[0])[None, :]
            model.intercept_ = np.array([b[1] - b[0]])
        else:
            model.coef_ = W
            model.intercept_ = b
    with sklearn_convergence_ignored():
        model.fit(X, labels, sample_weight=sample_weight)
    if model.coef_.shape[0] == 1:
        return model.coef_[0], model.intercept_[0]
    return model.coef_, model.intercept_

