"""scikit-learn's SAGA for l1 logistic and softmax regression on dense rows, compiled and fused.

TAO's softmax leaves stop scikit-learn's SAGA after a few epochs on
purpose (early stopping regularises, see ``taodist.model.leaf_fit.SOFTMAX_EPOCHS``),
so a faster leaf must run the *same* algorithm, not another optimiser.
This is scikit-learn's ``sag_solver`` with ``is_saga=True`` on dense input
(Defazio et al., 2014; ``sklearn/linear_model/_sag_fast.pyx.tp``) step for
step: the same sample draws (its xorshift
generator, seeded as ``LogisticRegression`` seeds it from
``random_state``), step size ``1 / (2 L)`` with ``L = (max ||x||^2 + 1) / 4``,
the average-gradient step and soft-threshold of every weight before each
sample's prediction, gradient memory starting at zero, and its stopping
rule (relative change of the weights per epoch); ``warm_memory`` is the one
option scikit-learn does not have. Only the grouping of a
few products differs (a lagged step is ``step / seen``, not a difference of
running sums), so the two agree to rounding (the tests ask 1e-12;
``bench/bench_leaf_solver.py saga`` compares them on real leaves).

What differs is the memory traffic. On dense rows every SAGA step visits
all ``D x K`` weights three times (the lagged step, the prediction, the
correction); here one pass per class does a step's correction and the
next step's lagged step and soft-threshold over the class's weights, laid
out class-major so that the pass is a plain vector loop, and the next
prediction reads only the weights of the row's non-zero features (a zero
feature adds an exact zero to scikit-learn's sums, whose feature order is
kept). Features that are zero in every row only shrink (see
:func:`saga_logistic_l1`). Class-major passes also beat a single fused
feature-major pass.

No l2 term: TAO's leaves are l1 only, so scikit-learn's weight scale stays 1.
"""

import functools
import numbers

import numba
import numpy as np

_RAND_R_MAX = 2147483647


@numba.njit(nogil=True, cache=True)
def _next_index(state, n):
    """scikit-learn's ``our_rand_r`` (xorshift32) modulo ``n``; ``state`` is a 1-element uint32 array."""
    s = state[0]
    if s == 0:
        s = np.uint32(1)
    s ^= np.uint32(s << np.uint32(13))
    s ^= np.uint32(s >> np.uint32(17))
    s ^= np.uint32(s << np.uint32(5))
    state[0] = s
    return int((s % np.uint32(_RAND_R_MAX + 1)) % np.uint32(n))


@numba.njit(nogil=True, cache=True)
def _gradient(raw, label, weight, multinomial, out):
    """``weight * d loss / d raw`` of the softmax (``multinomial``) or logistic loss, as scikit-learn's losses."""
    if multinomial:
        top = raw[0]
        for k in range(1, raw.size):
            top = max(top, raw[k])
        total = 0.0
        for k in range(raw.size):
            raw[k] = np.exp(raw[k] - top)
            total += raw[k]
        for k in range(raw.size):
            out[k] = weight * (raw[k] / total - (1.0 if k == label else 0.0))
    else:
        z = raw[0]
        p = 1.0 / (1.0 + np.exp(-z)) if z >= 0 else np.exp(z) / (1.0 + np.exp(z))
        out[0] = weight * (p - label)


@numba.njit(nogil=True, cache=True)
def _nonzeros(X):
    """The non-zero entries of dense rows ``X`` as CSR arrays ``(indptr, indices, values)``, by row in feature order.

    ``scipy.sparse.csr_matrix(X)`` gives the same arrays; building them here,
    in two passes over ``X``, makes a leaf fit faster than scipy's conversion.
    """
    n, D = X.shape
    indptr = np.zeros(n + 1, np.int64)
    for i in range(n):
        c = 0
        for j in range(D):
            if X[i, j] != 0.0:
                c += 1
        indptr[i + 1] = indptr[i] + c
    indices = np.empty(indptr[n], np.int64)
    values = np.empty(indptr[n])
    for i in range(n):
        at = indptr[i]
        for j in range(D):
            if X[i, j] != 0.0:
                indices[at] = j
                values[at] = X[i, j]
                at += 1
    return indptr, indices, values


@numba.njit(nogil=True, cache=True)
def _predict(w, intercept, indptr, indices, values, r, out):
    """``out = intercept + w @ x_r`` summed over the row's non-zero features in feature order."""
    for k in range(out.size):
        out[k] = intercept[k]
    for at in range(indptr[r], indptr[r + 1]):
        j = indices[at]
        xj = values[at]
        for k in range(out.size):
            out[k] += xj * w[k, j]


@numba.njit(nogil=True, cache=True)
def _step_class(w, sum_gradient, x, d, decay, lag, threshold):
    """One class's weights: the step's correction ``x * d``, then the lagged step and soft-threshold."""
    for j in range(w.size):
        correction = x[j] * d
        v = w[j] - correction * decay
        g = sum_gradient[j] + correction
        sum_gradient[j] = g
        v = v - lag * g
        w[j] = v - min(max(v, -threshold), threshold)  # soft-threshold: exact 0 inside, v -+ t outside (t=0: v)


@numba.njit(nogil=True, cache=True)
def _saga_dense(X, y, sw, multinomial, w, idle, intercept, step, beta, max_iter, tol, seed, warm_memory):
    """SAGA epochs in place on ``w`` (``(K, D)``), ``idle`` and ``intercept``; returns the epochs run.

    ``multinomial``: ``y`` holds class indices and the loss is the softmax
    cross-entropy over ``K`` classes; else ``K == 1``, ``y`` is 0/1 and the
    loss is the logistic one. ``beta`` is scikit-learn's scaled l1 strength
    (``1 / (C n)``).

    ``idle`` (``(K, D_idle)``) holds the weights of features that are zero
    in every row (left out of ``X``): their summed gradient stays zero, so
    each step only soft-thresholds them, and an epoch's ``n`` steps shrink
    them by ``n`` thresholds at once. They are counted in the stopping rule
    as every weight is.

    ``warm_memory``: before the first step, every row's gradient at the
    starting point fills the gradient memory (and every row counts as seen),
    instead of scikit-learn's empty memory. From the optimum every step is
    then a fixed point; from an empty memory the first epoch's averaged
    gradient is a partial sum, and a fit from a good start often ends worse.
    """
    n, D = X.shape
    K = w.shape[0]
    indptr, indices, values = _nonzeros(X)
    threshold = step * beta
    sum_gradient = np.zeros((K, D))
    memory = np.zeros((n, K))
    seen = np.zeros(n, np.uint8)
    intercept_sum = np.zeros(K)
    previous = w.copy()
    raw = np.empty(K)
    gradient = np.empty(K)
    diff = np.empty(K)
    state = np.array([seed], dtype=np.uint32)
    num_seen = 0
    if warm_memory:  # every row's gradient at the start, as if each had been seen there
        for r in range(n):
            _predict(w, intercept, indptr, indices, values, r, raw)
            _gradient(raw, y[r], sw[r], multinomial, gradient)
            for k in range(K):
                memory[r, k] = gradient[k]
                intercept_sum[k] += gradient[k]
                g = gradient[k]
                for at in range(indptr[r], indptr[r + 1]):
                    sum_gradient[k, indices[at]] += values[at] * g
            seen[r] = 1
        num_seen = n
    epochs = 0
    for epoch in range(max_iter):
        epochs = epoch + 1
        r = _next_index(state, n)
        if seen[r] == 0:
            num_seen += 1
            seen[r] = 1
        _predict(w, intercept, indptr, indices, values, r, raw)
        for s in range(n):
            _gradient(raw, y[r], sw[r], multinomial, gradient)
            for k in range(K):
                diff[k] = gradient[k] - memory[r, k]
            decay = step * (1.0 - 1.0 / num_seen)
            for k in range(K):
                intercept_sum[k] += diff[k]
                intercept[k] -= step * intercept_sum[k] / num_seen + diff[k] * decay
                memory[r, k] = gradient[k]
            lag = step / num_seen  # the average-gradient step every weight takes before the next prediction
            x = X[r]
            for k in range(K):
                _step_class(w[k], sum_gradient[k], x, diff[k], decay, lag, threshold)
            if s < n - 1:
                r = _next_index(state, n)
                if seen[r] == 0:
                    num_seen += 1
                    seen[r] = 1
                _predict(w, intercept, indptr, indices, values, r, raw)
        mc, mw = 0.0, 0.0
        for k in range(K):
            for j in range(D):
                mw = max(mw, abs(w[k, j]))
                mc = max(mc, abs(w[k, j] - previous[k, j]))
                previous[k, j] = w[k, j]
        shrink = n * threshold
        for k in range(K):
            for j in range(idle.shape[1]):
                v = idle[k, j]
                v_new = v - min(max(v, -shrink), shrink) if threshold > 0 else v
                idle[k, j] = v_new
                mw = max(mw, abs(v_new))
                mc = max(mc, abs(v_new - v))
        if (mw != 0 and mc / mw <= tol) or (mw == 0 and mc == 0):
            break
    return epochs


@numba.njit(nogil=True, cache=True)
def _used_columns(X):
    """Whether each column of ``X`` has a non-zero entry (one compiled pass, faster than ``np.count_nonzero``)."""
    n, D = X.shape
    used = np.zeros(D, np.bool_)
    for i in range(n):
        for j in range(D):
            if X[i, j] != 0.0:
                used[j] = True
    return used


@numba.njit(nogil=True, cache=True)
def _columns(X, cols):
    """``X[:, cols]`` as a new C-contiguous array (faster than NumPy's fancy indexing on a leaf's rows)."""
    out = np.empty((X.shape[0], cols.size))
    for i in range(X.shape[0]):
        for k in range(cols.size):
            out[i, k] = X[i, cols[k]]
    return out


def _sample_seed(random_state):
    """The seed scikit-learn's ``make_dataset`` draws from ``random_state`` (one draw of a new RandomState).

    An integer's is computed once (a new RandomState costs a noticeable part
    of a leaf fit); None draws afresh every time, as scikit-learn does.
    """
    if isinstance(random_state, numbers.Integral):
        return _seed_of(int(random_state))
    return np.random.RandomState(random_state).randint(1, np.iinfo(np.int32).max)


@functools.lru_cache(maxsize=8)
def _seed_of(random_state):
    return np.random.RandomState(random_state).randint(1, np.iinfo(np.int32).max)


def saga_logistic_l1(X, labels, sample_weight, alpha, W0=None, b0=None, *, n_classes, epochs, tol=1e-4,
                     random_state=0, warm_memory=False):
    """Minimise ``sum_n s_n CE(y_n, softmax(W x_n + c)) + alpha ||W||_1`` by SAGA epochs, as scikit-learn does.

    The same fit as ``LogisticRegression(C=1/alpha, l1_ratio=1.0,
    solver="saga", max_iter=epochs, tol=tol, random_state=random_state,
    warm_start=True)`` with ``coef_, intercept_ = W0, b0`` on dense ``X``
    and ``labels`` (class indices ``0..n_classes-1``). Two classes: the
    binary logistic model of ``labels == 1``, ``W0``/``b0`` and the result
    ``(w, z)`` of shapes ``(D,)`` and scalar; otherwise ``(W, c)`` of shapes
    ``(n_classes, D)`` and ``(n_classes,)``. Returns ``(W, c, epochs run)``.

    ``warm_memory=True`` (with a start ``W0``) departs from scikit-learn on
    purpose: SAGA's gradient memory is filled at the start in one pass over
    the rows (see :func:`_saga_dense`), a variance-reduced warm start. It is
    what ``leaf_warm_start="gradients"`` runs (``taodist.model.leaf_fit.LEAF_WARM_STARTS``).
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, D = X.shape
    binary = n_classes == 2
    K = 1 if binary else n_classes
    w = np.zeros((K, D))
    intercept = np.zeros(K)
    if W0 is not None:
        w[:] = np.asarray(W0, dtype=np.float64).reshape(K, D)
        intercept[:] = np.asarray(b0, dtype=np.float64).reshape(K)
    sw = np.ascontiguousarray(sample_weight, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    step = 1.0 / (2.0 * 0.25 * (np.einsum("ij,ij->i", X, X).max(initial=0.0) + 1.0))  # get_auto_step_size, SAGA
    seed = _sample_seed(random_state)  # as make_dataset seeds it
    # features that are zero in every row (many pixels at a deep leaf of an image data set) are left
    # out of the per-step passes: their weights only shrink
    in_use = _used_columns(X)
    used, idle = np.flatnonzero(in_use), np.flatnonzero(~in_use)
    w_used, w_idle = np.ascontiguousarray(w[:, used]), np.ascontiguousarray(w[:, idle])
    ran = _saga_dense(_columns(X, used), y, sw, not binary, w_used, w_idle, intercept, step, alpha / n,
                      epochs, tol, np.uint32(seed), bool(warm_memory and W0 is not None))
    w[:, used], w[:, idle] = w_used, w_idle
    if binary:
        return w[0].copy(), float(intercept[0]), ran
    return w, intercept, ran
