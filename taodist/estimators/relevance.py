"""Penalty factors from each column's relevance to the target: an adaptive l1 penalty (Zou's adaptive lasso).

A column that says nothing of the target (an identifier, an unrelated measurement) is as cheap to use in an
oblique hyperplane as any other under a plain l1 penalty, and on a few hundred rows TAO's node steps use such
columns to fit the training rows' noise. A univariate F test tells most of them apart from columns that carry
signal, at the cost of one pass over a sample of the rows; dividing a column by its factor makes its weights
dearer by that factor in every node and Lasso leaf, while the fitted tree still reads raw X.
"""

import numpy as np
import scipy.sparse as sp
from scipy import stats

from ..model.leaves import LEAF_MODELS
from ..utils.rows import check_sparse_structure
from .execution import strided_rows

#: decades of a column's F-test p-value that make it fully relevant: ``p <= 10**-3`` costs the plain penalty
RELEVANCE_DECADES = 3.0
#: the largest penalty factor: a column of noise (``p`` uniform) costs up to this many times the plain penalty
MAX_PENALTY_FACTOR = 10.0
#: factors are rounded to multiples of this: rows whose tests differ in the last bits (the sums of sparse and of
#: dense rows) still get the same factors, and so the same model
FACTOR_STEP = 1.0 / 16


def f_test_pvalues(X, y, sample_weight=None, task="classification"):
    """Each column's p-value of the univariate F test of its relation to ``y`` (weighted rows).

    Classification: the one-way ANOVA of the column across the classes present, as scikit-learn's
    ``f_classif``; regression: the test of its correlation with ``y`` (each column of a 2-D ``y``, the least
    p-value kept), as ``f_regression``. Unit weights give scikit-learn's values; weights (a ``class_weight``,
    sample weights) enter as frequencies rescaled to sum to the number of rows. ``X`` may be scipy.sparse (the
    same values as its dense form). A constant column gets 1.
    """
    n = X.shape[0]
    w = np.ones(n) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    w = w * (n / w.sum()) if w.sum() > 0 else np.ones(n)
    if sp.issparse(X):  # sums of products, never a dense or centered copy
        X = sp.csr_matrix(X, dtype=np.float64)
        mean = X.T @ w / n
        spread = X.multiply(X).T @ w - n * mean**2  # sum_i w_i (x_i - mean)^2
    else:
        X = np.asarray(X, dtype=np.float64)
        mean = w @ X / n
        X = X - mean  # centered: no cancellation between large sums
        spread = w @ X**2
    spread = np.maximum(spread, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        if task == "classification":
            present, index = np.unique(np.asarray(y).ravel(), return_inverse=True)
            k = present.size
            if k < 2 or n <= k:
                return np.ones(X.shape[1])
            members = sp.csr_matrix((w, (np.arange(n), index)), shape=(n, k))
            counts = np.asarray(members.sum(axis=0)).ravel()
            sums = members.T @ X  # per class, sum_i w_i x_i (of centered rows when dense)
            # sum_k n_k (mean_k - mean)^2; sparse rows keep the class sums sparse (a text set of many classes
            # and a million columns), the mean's share taken off at the end
            if sp.issparse(X):
                between = sp.csr_matrix(sums).multiply(sums).T @ (1.0 / counts) - n * mean**2
            else:
                between = (sums**2 / counts[:, None]).sum(axis=0)
            within = np.maximum(spread - between, 0.0)
            F = (between / (k - 1)) / (within / (n - k))
            p = stats.f.sf(F, k - 1, n - k)
        else:
            if n <= 2:
                return np.ones(X.shape[1])
            Y = np.asarray(y, dtype=np.float64).reshape(n, -1)
            Yc = Y - w @ Y / n
            cov = _dense((w[:, None] * Yc).T @ X).T  # (columns, outputs); Yc sums to 0: X need not be centered
            r2 = np.clip(cov**2 / np.outer(spread, w @ Yc**2), 0.0, 1.0)
            F = r2 / (1.0 - r2) * (n - 2)
            p = stats.f.sf(F, 1, n - 2).min(axis=1)
    return np.where(np.isnan(p), 1.0, p)


def _dense(A):
    """A product's result as a NumPy array (sparse by sparse products stay sparse)."""
    return A.toarray() if sp.issparse(A) else np.asarray(A)


def relevance_penalty_factors(X, y, sample_weight, task, client=None):
    """Per-column penalty factors from 1 to ``MAX_PENALTY_FACTOR``, from the F tests of :func:`f_test_pvalues`
    (dense or sparse rows alike, so that both fit the same model).

    A column's relevance is ``-log10(p) / RELEVANCE_DECADES``, within ``[1 / MAX_PENALTY_FACTOR, 1]``, and its
    factor the inverse, rounded to a multiple of :data:`FACTOR_STEP`. The tests read at most
    :data:`~taodist.estimators.execution.FENCE_ROWS` rows at a fixed stride (the outlier fences' rows), the same
    in memory and on Dask, so both fit the same model; a fixed number of rows also keeps a weakly relevant
    column's factor from depending on the data set's size.
    """
    arrays = (y,) if sample_weight is None else (y, sample_weight)
    rows = strided_rows(X, client, *arrays)
    check_sparse_structure(rows[0])  # rows of a malformed chunk would crash scipy's products, not raise
    p = f_test_pvalues(rows[0], rows[1], rows[2] if len(rows) > 2 else None, task)
    relevance = np.clip(-np.log10(np.clip(p, 1e-300, 1.0)) / RELEVANCE_DECADES, 1.0 / MAX_PENALTY_FACTOR, 1.0)
    return np.round(1.0 / relevance / FACTOR_STEP) * FACTOR_STEP


def estimator_penalty_factors(estimator, X, y, sample_weight, task, client=None):
    """An estimator's ``penalty_factors_``: those its forest gave it (a forest tests the columns once, on all its
    rows), or :func:`relevance_penalty_factors` where ``penalty_factors="auto"`` and the estimator's trees put
    a penalty on the columns (oblique nodes or linear leaves; an axis-aligned tree of constant leaves has
    none); else None."""
    given = getattr(estimator, "_forest_penalty_factors", None)
    if given is not None:
        return given
    if estimator.penalty_factors is None or (estimator.node_type == "axis"
                                             and not LEAF_MODELS[estimator.leaf_type].has_coef):
        return None
    return relevance_penalty_factors(X, y, sample_weight, task, client)
