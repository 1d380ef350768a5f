"""Leaf models and the per-point loss, behind a registry.

A leaf fitter solves TAO's reduced problem over a leaf: fit the leaf's
predictor to the points of its reduced set. Every fitter has the signature::

    fit(X, y, sample_weight, *, task, n_outputs, alpha) -> (value, coef)

``value`` is the leaf's ``(n_outputs,)`` output (constant leaves) or intercept
(linear leaves); ``coef`` is ``None`` or a dense ``(n_outputs, n_features)``
array. Classification ``y`` holds integer codes, regression ``y`` is 2-D.

Losses are those of the papers: 0/1 for classification, squared error for
regression. Constant leaves are solved exactly (weighted majority / mean);
linear leaves use l1 surrogates (liblinear, coordinate-descent Lasso) and the
optimiser accepts them only if the leaf's true objective does not increase.
"""

import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import Lasso, LogisticRegression

from ._nodes import LIBLINEAR_LOCK

#: logit given to classes absent from a linear leaf's reduced set
_ABSENT_LOGIT = -30.0


def pointwise_loss(task, outputs, y):
    """Loss of raw leaf ``outputs`` (n, K) against targets ``y``, per point.

    Classification: 0/1 loss of the arg-max class. Regression: squared error
    summed over outputs.
    """
    if task == "classification":
        return (np.argmax(outputs, axis=1) != y).astype(np.float64)
    diff = outputs - y
    return np.einsum("ij,ij->i", diff, diff)


def _class_weights(y, sample_weight, n_outputs):
    return np.bincount(y, weights=sample_weight, minlength=n_outputs)


def fit_constant(X, y, sample_weight, *, task, n_outputs, alpha):
    """Exact constant leaf: weighted class distribution or weighted mean."""
    total = sample_weight.sum()
    if task == "classification":
        return _class_weights(y, sample_weight, n_outputs) / total, None
    return sample_weight @ y / total, None


def fit_linear(X, y, sample_weight, *, task, n_outputs, alpha):
    """l1 linear leaf: one-vs-rest l1 logistic regression, or a Lasso.

    Classification uses liblinear (``C = 1 / alpha``); with two classes the
    logit pair is ``(-z/2, z/2)`` so that the softmax equals the logistic
    model. Regression uses scikit-learn's Lasso with its penalty rescaled so
    that it minimises ``sum_n s_n ||y_n - W x_n - c||^2 + alpha ||W||_1``.
    """
    D = X.shape[1]
    X = np.asarray(X, dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        if task == "classification":
            return _fit_linear_classifier(X, y, sample_weight, n_outputs, alpha, D)
        lasso = Lasso(alpha=alpha / (2.0 * sample_weight.sum()), max_iter=2000, tol=1e-6)
        lasso.fit(X, y, sample_weight=sample_weight)
        coef = np.atleast_2d(lasso.coef_).reshape(n_outputs, D)
        return np.atleast_1d(lasso.intercept_).astype(np.float64), coef


def _fit_linear_classifier(X, y, sample_weight, K, alpha, D):
    counts = _class_weights(y, sample_weight, K)
    present = np.flatnonzero(counts > 0)
    coef = np.zeros((K, D))
    if present.size == 1:  # pure leaf: a constant model is exact
        intercept = np.full(K, _ABSENT_LOGIT)
        intercept[present] = 0.0
        return intercept, coef
    if K == 2:
        w, b = _l1_logistic(X, y == 1, sample_weight, 1.0 / alpha)
        coef[0], coef[1] = -w / 2, w / 2
        return np.array([-b / 2, b / 2]), coef
    intercept = np.full(K, _ABSENT_LOGIT)
    for k in present:
        coef[k], intercept[k] = _l1_logistic(X, y == k, sample_weight, 1.0 / alpha)
    return intercept, coef


def _l1_logistic(X, target, sample_weight, C):
    """Weighted l1 logistic regression through liblinear; returns ``(w, b)``."""
    model = LogisticRegression(
        C=C, l1_ratio=1.0, solver="liblinear", intercept_scaling=10.0, random_state=0, tol=1e-4, max_iter=200
    )
    with LIBLINEAR_LOCK:  # global rand() state: see taodist._nodes
        model.fit(X, target.astype(np.int8), sample_weight=sample_weight)
    return model.coef_[0].copy(), float(model.intercept_[0])


LEAF_MODELS = {"constant": fit_constant, "linear": fit_linear}
