"""Leaf models, behind a registry.

A leaf model is everything TAO and the rest of taodist need to know about
one kind of leaf: how to fit it on its reduced set, what it outputs, how to
count and describe its parameters, when two leaves predict the same (for
pruning), and what a CART leaf becomes. :data:`LEAF_MODELS` maps the
``leaf_type`` name to an instance; adding a leaf type means one new
:class:`LeafModel` subclass registered there.

Losses are those of the papers: 0/1 for classification, squared error for
regression. Constant leaves are solved exactly (weighted majority / mean);
linear leaves use l1 surrogates (a multinomial softmax by compiled FISTA, warm-started
from the leaf's previous coefficients; a coordinate-descent Lasso) and the
optimiser accepts them only if the leaf's true objective does not increase.

Softmax leaves may be limited to ``k`` classes (thesis section 2.3, "softmax
trees"): a leaf keeps the ``k`` most populous classes of its reduced set and
fits its softmax on their points only; every other class gets logit ``-inf``,
so probability exactly 0, and a zero coefficient row, so predicting at that
leaf scores ``k`` classes, not ``K``. The tree records ``k`` as
``tree.leaf_classes``; :meth:`LeafModel.limited_to` gives the leaf model that
fits with it.

Parameters of a leaf live in the tree's flat arrays: ``value[i]`` (the
constant, or the intercept) and, for models with ``has_coef``, rows
``i*K .. i*K+K-1`` of the CSR matrix ``tree.leaf_coef``.
"""

from abc import ABC, abstractmethod

import numba
import numpy as np
import scipy.sparse as sp
from sklearn.linear_model import Lasso, LogisticRegression

from ..solvers.saga import saga_logistic_l1
from ..solvers.softmax import LEAF_MAX_ITER, solve_softmax_l1
from ..utils.rows import as_rows
from ..utils.solver_warnings import sklearn_convergence_ignored

#: logit given to classes absent from a linear leaf's reduced set
_ABSENT_LOGIT = -30.0

#: a leaf's ``(K, D)`` coefficients are handed around as a dense array up to this many entries (8 MB)
#: and as CSR beyond: a 500-class leaf over a 50,000-word vocabulary would be 200 MB dense
_DENSE_COEF_MAX = 1 << 20


def leaf_coef_array(rows, n_outputs, n_features):
    """A leaf's ``(K, D)`` coefficients from ``{class: weight row}``: dense when small, else CSR.

    Small leaves stay dense so BLAS computes their outputs (bit for bit as
    before); many-class, high-dimensional leaves are never dense.
    """
    if n_outputs * n_features <= _DENSE_COEF_MAX:
        out = np.zeros((n_outputs, n_features))
        for k, w in rows.items():
            out[k] = w
        return out
    classes = np.fromiter(rows, dtype=np.intp, count=len(rows))
    if classes.size == 0:
        return sp.csr_matrix((n_outputs, n_features))
    W = sp.csr_matrix(np.vstack([rows[k] for k in classes]))
    scatter = sp.csr_matrix((np.ones(classes.size), (classes, np.arange(classes.size))),
                            shape=(n_outputs, classes.size))
    return (scatter @ W).tocsr()


def _dense_rows(coef, rows):
    """Rows of a dense or CSR coefficient matrix as a dense array."""
    out = coef[rows]
    return out.toarray() if sp.issparse(out) else np.asarray(out, dtype=np.float64)


def linear_output(X, value, coef):
    """``value + X @ coef.T`` as a dense ``(n, K)`` array, for dense or CSR ``X`` and ``coef``."""
    prod = X @ coef.T
    return value + (prod.toarray() if sp.issparse(prod) else np.asarray(prod))


def rows_times_coef(X, coef):
    """``X @ coef.T`` as a dense ``(n, k)`` array for a leaf's CSR coefficient rows ``coef`` (k, D).

    The library path: used for sparse rows, and the reference of the compiled
    product that dense rows take in :meth:`LinearLeaf.outputs` (0.23 s against
    0.09 s for 54,000 MNIST rows at a depth-6 tree's leaves, equal bit for bit).
    Kept CSR even when small: l1 leaves are sparse, and on MNIST (depth-6
    linear leaves, about half their weights zero) the CSR product took a third
    of the time of a BLAS product with the densified rows (0.25 s against
    0.7 s for 60,000 rows).
    """
    if sp.issparse(X):
        return (X @ coef.T).toarray()
    return np.asarray(coef @ np.asarray(X, dtype=np.float64).T).T


#: sparse rows take the compiled product while a leaf's feature-major weights ``(D, K)`` have at most this
#: many entries (MNIST: 7,840); a 500-class leaf over a 50,000-word vocabulary takes scipy's product
_COMPILED_SPARSE_MAX = 1 << 16


@numba.njit(nogil=True, cache=True)
def _feature_major(indptr, indices, data, first, n_coef, n_features):
    """CSR coefficient rows ``first .. first + n_coef - 1`` as a dense ``(D, K)`` array."""
    weights = np.zeros((n_features, n_coef))
    for k in range(n_coef):
        for jj in range(indptr[first + k], indptr[first + k + 1]):
            weights[indices[jj], k] = data[jj]
    return weights


@numba.njit(nogil=True, cache=True)
def _add_sparse_rows_times_csr(x_indptr, x_indices, x_data, n_features, rows, out_rows, indptr, indices, data, first,
                               out):
    """:func:`_add_rows_times_csr` for canonical CSR rows ``(x_indptr, x_indices, x_data)``.

    Sums the same products in the same feature order, so it gives the dense
    kernel's and scipy's result bit for bit, without scanning the zeros.
    """
    n_coef = out.shape[1]
    weights = _feature_major(indptr, indices, data, first, n_coef, n_features)
    sums = np.empty(n_coef)
    for i in range(rows.size):
        r = rows[i]
        sums[:] = 0.0
        for at in range(x_indptr[r], x_indptr[r + 1]):
            j = x_indices[at]
            x = x_data[at]
            for k in range(n_coef):
                sums[k] += weights[j, k] * x
        for k in range(n_coef):
            out[out_rows[i], k] += sums[k]


@numba.njit(nogil=True, cache=True)
def _add_rows_times_csr(X, rows, out_rows, indptr, indices, data, first, out):
    """``out[out_rows[i], k] += coef[k] . X[rows[i]]`` for the CSR coefficient rows ``first + k``.

    Each sum runs over the products of the row's non-zero entries with the
    coefficients in increasing feature order from 0.0. The coefficient rows
    must have sorted indices without duplicates (canonical CSR), and a
    product left out (a zero entry of the row, or a coefficient not stored)
    would have added an exact zero, so the result is scipy's CSR product bit
    for bit (no fused multiply-add: numba contracts only under fastmath).
    The coefficients are laid out feature-major first, so a non-zero entry
    of the row updates all ``K`` sums from one contiguous row of weights:
    on MNIST rows (a fifth of the pixels non-zero) this reads a fifth of
    the products the coefficient-major order did.
    """
    n_coef = out.shape[1]
    n_features = X.shape[1]
    weights = _feature_major(indptr, indices, data, first, n_coef, n_features)
    sums = np.empty(n_coef)
    for i in range(rows.size):
        r = rows[i]
        sums[:] = 0.0
        for j in range(n_features):
            x = X[r, j]
            if x != 0.0:
                for k in range(n_coef):
                    sums[k] += weights[j, k] * x
        for k in range(n_coef):
            out[out_rows[i], k] += sums[k]


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


#: SAGA epochs of a softmax leaf fit with ``solver="saga"`` (the reference), warm-started from the leaf's previous coefficients. Few on
#: purpose, as for the node solvers: stopping early regularises. letter, depth 6, C=30, validation
#: error over seeds 0-2: 30 epochs 14.50 / 13.44 / 14.31%, 10 epochs 11.94 / 11.81 / 12.94%,
#: 5 epochs 11.38 / 12.12 / 13.06% with the fewest parameters; MNIST depth 6, 3 TAO iterations:
#: 5 epochs 6.95% in 29 s, where 30 epochs spent 126 of 151 s in the leaves.
SOFTMAX_EPOCHS = 5

#: What a warm-started softmax leaf's SAGA starts from (``leaf_warm_start``). "coef": the leaf's
#: coefficients with an empty gradient memory, as scikit-learn's ``warm_start`` does (its first
#: epoch steps on a table of zeros, so a fit from a good start often ends worse and is refused).
#: "gradients": the coefficients and every row's gradient at them, filled in one pass
#: (:func:`taodist.solvers.saga.saga_logistic_l1` with ``warm_memory``), so SAGA's steps are
#: variance-reduced from the first one. Each takes its own default epochs (:data:`WARM_START_EPOCHS`).
LEAF_WARM_STARTS = ("coef", "gradients")

#: SAGA epochs of a softmax leaf fit per warm start when ``leaf_max_iter`` is None. "gradients": 2,
#: chosen on MNIST's validation split (30-tree forest, linear leaves, depth 6, 5 TAO iterations,
#: ``python bench/bench_forest.py --datasets mnist --trees 30 --split validation --no-peers --variant
#: "leaf_type='linear' leaf_warm_start='gradients' leaf_max_iter=E max_iter=5"``): 1 epoch 3.18%,
#: 2 epochs 3.13%, 5 epochs 3.50% (the "coef" start, 5 epochs: 3.67%). On letter (depth 7, 15
#: iterations, seeds 0-2) "gradients" validated worse at 2 and at 5 epochs (5.98% and 5.36% mean
#: against 5.06%; pendigits 0.80 / 0.93% against 0.80 / 0.80%; Fashion-MNIST 10.60% against 10.82%, but
#: 11.77% with 4 TAO iterations), so "coef" stays every estimator's default (README, Defaults).
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
    for ``warm_start``): on dense rows its compiled
    port :func:`taodist.solvers.saga.saga_logistic_l1` (the same steps to rounding,
    6x faster on a 10-class MNIST leaf), on sparse rows scikit-learn's own;
    ``solver="sklearn-saga"`` always scikit-learn's (the reference in the
    tests). ``warm_start="gradients"`` fills the compiled SAGA's gradient
    memory at the warm start (see :data:`LEAF_WARM_STARTS`; the scikit-learn
    reference and FISTA ignore it). ``"auto"`` (the default) takes
    FISTA for sparse rows and SAGA for dense ones, by measurement: on letter
    (depth 6, C=30, fit on the first 90% of the training split, validated
    on the last 10%, seeds 0-2) FISTA trees fit 3-4x faster but validate
    about 1 point worse (13.0% against 12.0% mean; see ``LEAF_MAX_ITER``),
    while on a sparse 1,100 x 50,000 leaf of 16 classes SAGA's l1 updates
    take 0.67 s cold against FISTA's 0.22 s (0.155 s against 0.013 s warm).

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
        start = (_dense_rows(coef, present), b)
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


def softmax(Z):
    """Row-wise softmax of logits ``Z`` (n, K); ``Z`` is overwritten when it is a temporary.

    A logit of ``-inf`` (a class outside a limited leaf) gives probability
    exactly 0; each row needs one finite logit.
    """
    Z = Z - Z.max(axis=1, keepdims=True)
    np.exp(Z, out=Z)
    Z /= Z.sum(axis=1, keepdims=True)
    return Z


def leaf_coef_rows(tree, leaf):
    """``(K, D)`` coefficients of one leaf of a tree whose leaves have coefficients.

    Dense when small, CSR when large (see :func:`leaf_coef_array`).
    """
    K = tree.n_outputs
    rows = tree.leaf_coef[leaf * K:(leaf + 1) * K]
    return rows.toarray() if K * tree.n_features <= _DENSE_COEF_MAX else rows.tocsr()


def _l1(coef):
    return float(abs(coef).sum()) if sp.issparse(coef) else float(np.abs(coef).sum())


class LeafModel(ABC):
    """One kind of leaf. Subclass it, implement :meth:`fit`, and register an instance in :data:`LEAF_MODELS`.

    Class attributes
    ----------------
    name : str
        The ``leaf_type`` value that selects it.
    has_coef : bool
        Leaves store ``(K, D)`` coefficients in ``tree.leaf_coef``.
    exact : bool
        :meth:`fit` returns the leaf's exact optimum; otherwise TAO accepts a
        fit only if :meth:`objective` does not increase.
    """

    name = None
    has_coef = False
    exact = True

    @abstractmethod
    def fit(self, X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None):
        """Fit one leaf on its reduced set: returns ``(value, coef or None)``.

        ``value``/``coef`` are the leaf's current parameters (a warm start for
        iterative fits; None for a fresh leaf).
        """

    def limited_to(self, leaf_classes):
        """This leaf model fitting at most ``leaf_classes`` classes per leaf (None: no limit).

        Only softmax (linear classification) leaves can be limited; the base
        model refuses any limit.
        """
        if leaf_classes is None:
            return self
        raise ValueError(f"leaf_classes={leaf_classes} limits the classes of softmax leaves; leaf_type={self.name!r} "
                         "leaves have no such limit. Use leaf_type='linear' or leaf_classes=None.")

    def with_max_iter(self, max_iter):
        """This leaf model with its solver limited to ``max_iter`` iterations per fit (None: its default).

        Exact leaf models (a constant leaf's weighted majority or mean) have
        no iterations: they ignore it.
        """
        return self

    def with_warm_start(self, warm_start):
        """This leaf model with its iterative solver warm-started as ``warm_start`` says (see :data:`LEAF_WARM_STARTS`).

        Leaf models without an iterative solver ignore it.
        """
        return self

    def limit_leaves(self, tree):
        """Make every leaf of ``tree`` respect ``tree.leaf_classes`` (an initial or warm-start tree); in place.

        Nothing to do for leaf models without a class limit.
        """

    def fit_level(self, problems, *, task, n_outputs, alpha):
        """Fit many leaves at once; ``problems`` are ``(X, y, sample_weight, value, coef)``.

        The default fits them one by one; a batched solver overrides this.
        """
        return [self.fit(X, y, sw, task=task, n_outputs=n_outputs, alpha=alpha, value=value, coef=coef)
                for X, y, sw, value, coef in problems]

    def raw_output(self, X, value, coef, output_range=None):
        """Raw output ``(n, K)`` of one leaf's parameters at rows ``X``, clipped to ``output_range`` (2, K) if given."""
        if coef is None:
            return np.broadcast_to(value, (X.shape[0], value.shape[0]))
        out = linear_output(X, value, coef)
        return out if output_range is None else np.clip(out, output_range[0], output_range[1], out=out)

    def objective(self, X, y, sample_weight, value, coef, *, task, alpha, output_range=None):
        """The leaf's true objective: weighted loss + ``alpha`` times its l1 norm."""
        out = self.raw_output(X, value, coef, output_range)
        return sample_weight @ pointwise_loss(task, out, y) + (0.0 if coef is None else alpha * _l1(coef))

    def output_range(self, y, sample_weight, *, task):
        """The range ``(2, K)`` a leaf fitted on targets ``y`` clips its outputs to; None: no clipping.

        Only linear regression leaves extrapolate; the others need none.
        """
        return None

    def outputs(self, tree, X, leaves, rows):
        """Raw outputs ``(n, K)`` of leaf ``leaves[j]`` at row ``rows[j]`` of ``X``."""
        return tree.value[leaves].astype(np.float64, copy=True)

    def prediction(self, task, raw):
        """What ``predict`` returns from raw outputs (probabilities or values)."""
        return raw

    def best_classes(self, tree, X, leaves, rows, n):
        """The ``n`` most probable classes ``(len(leaves), n)`` of leaf ``leaves[j]`` at row ``rows[j]`` of ``X``.

        Most probable first; equal scores go to the lower class, as
        ``np.argsort(-proba, kind="stable")`` orders them. A constant leaf
        reads its stored distribution and never X.
        """
        unique, inverse = np.unique(leaves, return_inverse=True)
        return np.argsort(-tree.value[unique], axis=1, kind="stable")[:, :n][inverse]

    def penalty(self, tree):
        """l1 norm of the leaf parameters the objective penalises."""
        return 0.0

    def n_parameters(self, tree, leaves):
        """Parameters of each of ``leaves`` as counted in the thesis (Appendix A)."""
        binary = tree.task == "classification" and tree.n_outputs == 2
        return np.full(len(leaves), 1 if binary else tree.n_outputs, dtype=np.int64)

    def n_classes_scored(self, tree, leaves):
        """Classes that a prediction at each of ``leaves`` gives a non-zero probability.

        For a softmax leaf these are the classes whose scores it computes; a
        constant leaf computes nothing and stores its non-zero probabilities.
        A top-n prediction sorts only these. Regression: the outputs.
        """
        if tree.task != "classification":
            return np.full(len(leaves), tree.n_outputs, dtype=np.int64)
        return np.count_nonzero(tree.value[leaves] > 0, axis=1).astype(np.int64)

    def same_prediction(self, tree, a, b):
        """Whether leaves ``a`` and ``b`` predict the same for every input (pure-subtree pruning)."""
        if tree.task == "classification":
            return np.argmax(tree.value[a]) == np.argmax(tree.value[b])
        return np.array_equal(tree.value[a], tree.value[b])

    def merge(self, tree, into, a, b, reach_a, reach_b):
        """Make node ``into`` the leaf that replaces leaves ``a`` and ``b`` (same prediction)."""
        w = reach_a + reach_b
        tree.value[into] = (reach_a * tree.value[a] + reach_b * tree.value[b]) / w if w > 0 else tree.value[a]

    def from_cart(self, task, cart_values):
        """Leaf values from CART's per-node values (class distributions or means)."""
        return cart_values

    def label(self, tree, node, class_names):
        """A short label for plots; None: the class or value of ``tree.value[node]``."""
        return None

    def describe(self, tree, node, fmt, class_name):
        """One line of text export: the leaf's prediction."""
        if tree.task == "classification":
            k = int(np.argmax(tree.value[node]))
            return f"leaf {node}: class {class_name(k)} (p={fmt(tree.value[node, k])})"
        return f"leaf {node}: value [{', '.join(fmt(v) for v in tree.value[node])}]"


class ConstantLeaf(LeafModel):
    """Weighted class distribution (majority vote) or weighted mean: exact."""

    name = "constant"

    def fit(self, X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None):
        return fit_constant(X, y, sample_weight, task=task, n_outputs=n_outputs, alpha=alpha)


class LinearLeaf(LeafModel):
    """l1 linear leaf: a multinomial l1 softmax (warm-started compiled FISTA), or a Lasso.

    ``max_classes`` limits a softmax leaf to its most populous classes (see
    the module docstring); the registry holds the unlimited model and
    :meth:`limited_to` makes limited ones.
    """

    name = "linear"
    has_coef = True
    exact = False

    def __init__(self, max_classes=None, max_iter=None, warm_start="coef"):
        self.max_classes = max_classes
        self.max_iter = max_iter
        self.warm_start = warm_start

    def limited_to(self, leaf_classes):
        return self if leaf_classes == self.max_classes else LinearLeaf(leaf_classes, self.max_iter, self.warm_start)

    def with_max_iter(self, max_iter):
        """SAGA epochs (dense rows) or FISTA iterations (sparse rows) of a softmax leaf fit, coordinate-descent
        epochs of a Lasso leaf's; None: the defaults of :func:`fit_linear`."""
        return self if max_iter == self.max_iter else LinearLeaf(self.max_classes, max_iter, self.warm_start)

    def with_warm_start(self, warm_start):
        return self if warm_start == self.warm_start else LinearLeaf(self.max_classes, self.max_iter, warm_start)

    def fit(self, X, y, sample_weight, *, task, n_outputs, alpha, value=None, coef=None):
        return fit_linear(X, y, sample_weight, task=task, n_outputs=n_outputs, alpha=alpha, value=value, coef=coef,
                          max_classes=self.max_classes, max_iter=self.max_iter, warm_start=self.warm_start)

    def limit_leaves(self, tree):
        """Keep each leaf's ``k`` largest intercepts (ties: lower class) and give the other classes ``-inf``.

        TAO keeps a leaf's old parameters when its new fit would raise the
        0/1 objective, so the initial leaves must already be limited for
        every leaf to score at most ``k`` classes. Initial leaves (random,
        CART, clustering) have no weights, so their predicted class stays the
        same; a warm-start tree's limited leaves lose their weights for the
        dropped classes.
        """
        k = tree.leaf_classes
        if k is None or tree.task != "classification":
            return
        leaves = np.flatnonzero(tree.is_leaf)
        over = leaves[np.isfinite(tree.value[leaves]).sum(axis=1) > k]
        if over.size == 0:
            return
        for leaf in over:
            drop = np.argsort(-tree.value[leaf], kind="stable")[k:]  # stable: equal logits keep class order
            tree.value[leaf, drop] = -np.inf
        coefs = [sp.diags(np.isfinite(tree.value[leaf]).astype(np.float64)) @ leaf_coef_rows(tree, leaf)
                 for leaf in over]
        tree.set_leaf_coef(over, coefs)

    def outputs(self, tree, X, leaves, rows):
        out = tree.value[leaves].astype(np.float64, copy=True)
        K = tree.n_outputs
        order = np.argsort(leaves, kind="stable")
        bounds = np.flatnonzero(np.diff(leaves[order])) + 1
        coef = tree.leaf_coef
        # the compiled product sums in feature order, scipy's stored order, so it needs canonical
        # coefficients (trees keep them so); sparse rows take it while a leaf's dense weights are small
        sparse = sp.issparse(X)
        compiled = coef.has_canonical_format and (
            not sparse or (X.has_canonical_format and K * X.shape[1] <= _COMPILED_SPARSE_MAX))
        if compiled and not sparse:
            X = np.asarray(X)  # a memmap as a plain array view, for numba
        for group in np.split(order, bounds):
            if group.size == 0:
                continue
            leaf = leaves[group[0]]
            if coef.indptr[leaf * K] == coef.indptr[(leaf + 1) * K]:
                continue  # no stored coefficient
            if compiled and sparse:
                _add_sparse_rows_times_csr(X.indptr, X.indices, X.data, X.shape[1], rows[group], group, coef.indptr,
                                           coef.indices, coef.data, leaf * K, out)
            elif compiled:
                _add_rows_times_csr(X, rows[group], group, coef.indptr, coef.indices, coef.data, leaf * K, out)
            else:
                out[group] += rows_times_coef(X[rows[group]], coef[leaf * K:(leaf + 1) * K])
        if tree.task == "regression" and tree.leaf_range is not None:
            np.clip(out, tree.leaf_range[leaves, 0], tree.leaf_range[leaves, 1], out=out)
        return out

    def output_range(self, y, sample_weight, *, task):
        """Lowest and highest target ``(2, K)`` among the leaf's points of positive weight (regression).

        A Lasso leaf fitted on a few hundred points can be far off outside
        their spread: on cpu_act (depth 6, seed 2) one validation row missed
        by 289 at a leaf fitted on 304 rows, and the tree's validation RMSE
        was 13.5; clipping that tree's leaves afterwards gave 2.76. Clipping
        to the leaf's own targets never raises a fitted point's squared error
        (each target lies in the range), so it only removes such excursions;
        the leaf step's accept test and the objective see the clipped outputs.
        """
        if task != "regression":
            return None
        Y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)[np.asarray(sample_weight) > 0]
        return np.stack([Y.min(axis=0), Y.max(axis=0)])

    def prediction(self, task, raw):
        return softmax(raw) if task == "classification" else raw

    def best_classes(self, tree, X, leaves, rows, n):
        """Scores only the classes each leaf keeps (finite intercept): O(k) per row for a k-class leaf.

        Classes outside a limited leaf have probability 0 and fill the
        remaining places in class order when the leaf scores fewer than ``n``.
        """
        K = tree.n_outputs
        out = np.empty((len(leaves), n), dtype=np.intp)
        order = np.argsort(leaves, kind="stable")
        for group in np.split(order, np.flatnonzero(np.diff(leaves[order])) + 1):
            if group.size == 0:
                continue
            leaf = leaves[group[0]]
            scored = np.flatnonzero(np.isfinite(tree.value[leaf]))
            scores = np.repeat(tree.value[leaf, scored][None, :], group.size, axis=0)
            coef = tree.leaf_coef[leaf * K + scored]  # CSR rows of the scored classes only
            if coef.nnz:
                scores += rows_times_coef(X[rows[group]], coef)
            m = min(n, scored.size)
            # argmax and a stable sort both give equal scores to the lower class
            best = (np.argmax(scores, axis=1)[:, None] if m == 1
                    else np.argsort(-scores, axis=1, kind="stable")[:, :m])
            out[group, :m] = scored[best]
            if m < n:
                out[group, m:] = np.setdiff1d(np.arange(K), scored)[:n - m]
        return out

    def penalty(self, tree):
        return float(np.abs(tree.leaf_coef.data).sum())

    def n_parameters(self, tree, leaves):
        K = tree.n_outputs
        binary = tree.task == "classification" and K == 2
        coef_nnz = np.diff(tree.leaf_coef.indptr).reshape(tree.n_nodes, K).sum(axis=1)
        # a class outside a limited leaf (logit -inf) stores nothing: only finite intercepts count
        intercepts = np.isfinite(tree.value[leaves]).sum(axis=1)
        # a binary leaf stores one vector [-w/2, w/2]: count it once
        return coef_nnz[leaves] // (2 if binary else 1) + (1 if binary else intercepts)

    def n_classes_scored(self, tree, leaves):
        if tree.task != "classification":
            return super().n_classes_scored(tree, leaves)
        return np.isfinite(tree.value[leaves]).sum(axis=1).astype(np.int64)

    def same_prediction(self, tree, a, b):
        K = tree.n_outputs
        same_range = tree.leaf_range is None or np.array_equal(tree.leaf_range[a], tree.leaf_range[b])
        return same_range and np.array_equal(tree.value[a], tree.value[b]) and (
            tree.leaf_coef[a * K:(a + 1) * K] != tree.leaf_coef[b * K:(b + 1) * K]).nnz == 0

    def merge(self, tree, into, a, b, reach_a, reach_b):
        with np.errstate(invalid="ignore"):  # 0 * -inf when a leaf has no reach: restored below
            super().merge(tree, into, a, b, reach_a, reach_b)
        # the leaves predict the same: classes outside them (logit -inf) stay outside
        outside = np.isneginf(tree.value[a])
        tree.value[into, outside] = -np.inf
        tree.set_leaf_coef([into], [leaf_coef_rows(tree, a)])
        if tree.leaf_range is not None:
            tree.leaf_range[into] = tree.leaf_range[a]

    def from_cart(self, task, cart_values):
        # a linear classification leaf holds logits: log-probabilities give the same softmax
        return np.log(np.maximum(cart_values, 1e-12)) if task == "classification" else cart_values

    def label(self, tree, node, class_names):
        if tree.task == "classification" and tree.leaf_classes is not None:
            return f"linear\n(softmax, {int(np.isfinite(tree.value[node]).sum())} classes)"
        return "linear\n(softmax)" if tree.task == "classification" else "linear"

    def describe(self, tree, node, fmt, class_name):
        nnz = tree.leaf_coef[node * tree.n_outputs:(node + 1) * tree.n_outputs].nnz
        if tree.task == "classification":
            if tree.leaf_classes is not None:
                kept = np.flatnonzero(np.isfinite(tree.value[node]))
                names = ", ".join(class_name(int(k)) for k in kept)
                return f"leaf {node}: linear softmax over {kept.size} classes [{names}], {nnz} non-zero weights"
            return f"leaf {node}: linear softmax, {nnz} non-zero weights"
        vals = ", ".join(fmt(v) for v in tree.value[node])
        return f"leaf {node}: linear, intercept [{vals}], {nnz} non-zero weights"


#: leaf_type name -> leaf model
LEAF_MODELS = {model.name: model for model in (ConstantLeaf(), LinearLeaf())}
