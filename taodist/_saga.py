"""scikit-learn's SAGA for l1 logistic and softmax regression on dense rows, compiled and fused.

TAO's softmax leaves stop scikit-learn's SAGA after a few epochs on
purpose (early stopping regularises, see ``taodist._leaves.SOFTMAX_EPOCHS``),
so a faster leaf must run the *same* algorithm, not another optimiser.
This is scikit-learn's ``sag_solver`` with ``is_saga=True`` on dense input
(Defazio et al., 2014; ``sklearn/linear_model/_sag_fast.pyx.tp``) step for
step: the same sample draws (its xorshift
generator, seeded as ``LogisticRegression`` seeds it from
``random_state``), step size ``1 / (2 L)`` with ``L = (max ||x||^2 + 1) / 4``,
the average-gradient step and soft-threshold of every weight before each
sample's prediction, gradient memory starting at zero, and its stopping
rule (relative change of the weights per epoch). Only the grouping of a
few products differs (a lagged step is ``step / seen``, not a difference of
running sums), so the two agree to rounding: the tests ask 1e-12, and
``bench/bench_leaf_solver.py saga`` measures 1e-14 on MNIST leaves.

What differs is the memory traffic. On dense rows every SAGA step visits
all ``D x K`` weights three times (the lagged step, the prediction, the
correction); here one pass does a step's correction, the next step's
lagged step and the next prediction, weight by weight in scikit-learn's
order. A 5-epoch, 850-row, 10-class MNIST leaf: 98 ms in scikit-learn, 15 ms here.

No l2 term: TAO's leaves are l1 only, so scikit-learn's weight scale stays 1.
"""

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
def _prediction(w, intercept, x, out):
    for k in range(out.size):
        out[k] = intercept[k]
    for j in range(x.size):
        xj = x[j]
        for k in range(out.size):
            out[k] += xj * w[j, k]


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
def _saga_dense(X, y, sw, multinomial, w, idle, intercept, step, beta, max_iter, tol, seed):
    """SAGA epochs in place on ``w`` (``(D, K)``), ``idle`` and ``intercept``; returns the epochs run.

    ``multinomial``: ``y`` holds class indices and the loss is the softmax
    cross-entropy over ``K`` classes; else ``K == 1``, ``y`` is 0/1 and the
    loss is the logistic one. ``beta`` is scikit-learn's scaled l1 strength
    (``1 / (C n)``).

    ``idle`` (``(D_idle, K)``) holds the weights of features that are zero
    in every row (left out of ``X``): their summed gradient stays zero, so
    each step only soft-thresholds them, and an epoch's ``n`` steps shrink
    them by ``n`` thresholds at once. They are counted in the stopping rule
    as every weight is.
    """
    n, D = X.shape
    K = w.shape[1]
    threshold = step * beta
    sum_gradient = np.zeros((D, K))
    memory = np.zeros((n, K))
    seen = np.zeros(n, np.uint8)
    intercept_sum = np.zeros(K)
    previous = w.copy()
    raw = np.empty(K)
    gradient = np.empty(K)
    diff = np.empty(K)
    state = np.array([seed], dtype=np.uint32)
    num_seen = 0
    epochs = 0
    for epoch in range(max_iter):
        epochs = epoch + 1
        r = _next_index(state, n)
        if seen[r] == 0:
            num_seen += 1
            seen[r] = 1
        _prediction(w, intercept, X[r], raw)  # the first step of an epoch has no lagged step before it
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
            last = s == n - 1
            if not last:
                r = _next_index(state, n)
                if seen[r] == 0:
                    num_seen += 1
                    seen[r] = 1
                for k in range(K):
                    raw[k] = intercept[k]
            x_next = X[r]
            # one pass: this step's correction, the next step's lagged step and soft-threshold, its prediction
            for j in range(D):
                xj, xn = x[j], x_next[j]
                for k in range(K):
                    correction = xj * diff[k]
                    v = w[j, k] - correction * decay
                    g = sum_gradient[j, k] + correction
                    sum_gradient[j, k] = g
                    v = v - lag * g
                    if threshold > 0:
                        v = v - min(max(v, -threshold), threshold)  # soft-threshold: exact 0 inside, v -+ t outside
                    w[j, k] = v
                    if not last:
                        raw[k] += xn * v
        mc, mw = 0.0, 0.0
        for j in range(D):
            for k in range(K):
                mw = max(mw, abs(w[j, k]))
                mc = max(mc, abs(w[j, k] - previous[j, k]))
                previous[j, k] = w[j, k]
        shrink = n * threshold
        for j in range(idle.shape[0]):
            for k in range(K):
                v = idle[j, k]
                v_new = v - min(max(v, -shrink), shrink) if threshold > 0 else v
                idle[j, k] = v_new
                mw = max(mw, abs(v_new))
                mc = max(mc, abs(v_new - v))
        if (mw != 0 and mc / mw <= tol) or (mw == 0 and mc == 0):
            break
    return epochs


def saga_logistic_l1(X, labels, sample_weight, alpha, W0=None, b0=None, *, n_classes, epochs, tol=1e-4,
                     random_state=0):
    """Minimise ``sum_n s_n CE(y_n, softmax(W x_n + c)) + alpha ||W||_1`` by SAGA epochs, as scikit-learn does.

    The same fit as ``LogisticRegression(C=1/alpha, l1_ratio=1.0,
    solver="saga", max_iter=epochs, tol=tol, random_state=random_state,
    warm_start=True)`` with ``coef_, intercept_ = W0, b0`` on dense ``X``
    and ``labels`` (class indices ``0..n_classes-1``). Two classes: the
    binary logistic model of ``labels == 1``, ``W0``/``b0`` and the result
    ``(w, z)`` of shapes ``(D,)`` and scalar; otherwise ``(W, c)`` of shapes
    ``(n_classes, D)`` and ``(n_classes,)``. Returns ``(W, c, epochs run)``.
    """
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, D = X.shape
    binary = n_classes == 2
    K = 1 if binary else n_classes
    w = np.zeros((D, K))
    intercept = np.zeros(K)
    if W0 is not None:
        w[:] = np.asarray(W0, dtype=np.float64).reshape(K, D).T
        intercept[:] = np.asarray(b0, dtype=np.float64).reshape(K)
    sw = np.ascontiguousarray(sample_weight, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    step = 1.0 / (2.0 * 0.25 * (np.einsum("ij,ij->i", X, X).max(initial=0.0) + 1.0))  # get_auto_step_size, SAGA
    seed = np.random.RandomState(random_state).randint(1, np.iinfo(np.int32).max)  # as make_dataset seeds it
    # features that are zero in every row (a third of the pixels at a depth-6 MNIST leaf) are left
    # out of the per-step passes: their weights only shrink
    used = np.flatnonzero(np.any(X != 0.0, axis=0))
    idle = np.flatnonzero(np.all(X == 0.0, axis=0))
    w_used, w_idle = w[used], w[idle]
    ran = _saga_dense(np.ascontiguousarray(X[:, used]), y, sw, not binary, w_used, w_idle, intercept, step, alpha / n,
                      epochs, tol, np.uint32(seed))
    w[used], w[idle] = w_used, w_idle
    if binary:
        return w[:, 0].copy(), float(intercept[0]), ran
    return np.ascontiguousarray(w.T), intercept, ran
