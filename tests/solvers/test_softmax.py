"""The compiled l1 softmax leaf solver against independent optima (scipy L-BFGS-B on a smooth form, SAGA)."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from scipy.special import logsumexp
from sklearn.linear_model import LogisticRegression

from taodist.model.leaf_fit import fit_softmax
from taodist.solvers.softmax import solve_softmax_l1
from taodist.utils.solver_warnings import sklearn_convergence_ignored

CONVERGE = dict(max_iter=5000, tol=1e-14)


def objective(X, y, s, alpha, W, c):
    Z = np.asarray(X @ W.T) + c
    return s @ (logsumexp(Z, axis=1) - Z[np.arange(y.size), y]) + alpha * np.abs(W).sum()


def lbfgs_optimum(X, y, s, alpha, k):
    """The optimum by L-BFGS-B on the smooth bound-constrained form ``W = P - M``, ``P, M >= 0``."""
    X = X.toarray() if sp.issparse(X) else X
    D = X.shape[1]
    Y = np.eye(k)[y]

    def f(v):
        P, M, c = v[:k * D].reshape(k, D), v[k * D:2 * k * D].reshape(k, D), v[2 * k * D:]
        Z = X @ (P - M).T + c
        lse = logsumexp(Z, axis=1)
        R = s[:, None] * (np.exp(Z - lse[:, None]) - Y)
        G = R.T @ X
        value = s @ (lse - (Z * Y).sum(axis=1)) + alpha * (P.sum() + M.sum())
        return value, np.concatenate([(G + alpha).ravel(), (alpha - G).ravel(), R.sum(axis=0)])

    bounds = [(0, None)] * (2 * k * D) + [(None, None)] * k
    res = minimize(f, np.zeros(2 * k * D + k), jac=True, method="L-BFGS-B", bounds=bounds,
                   options=dict(maxiter=20000, maxfun=40000, ftol=1e-15, gtol=1e-11))
    return res.fun


def problem(seed=0, n=300, D=8, k=4, sparse=False):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, k, n)
    if sparse:
        X = sp.random(n, 5 * D, density=0.1, random_state=seed, format="csr") * 3.0
        X = X + sp.csr_matrix((np.ones(n), (np.arange(n), y)), shape=X.shape)  # some signal
        X = X.tocsr()
    else:
        X = rng.normal(size=(n, D)) + 1.5  # off-centre: the centring matters
        X[np.arange(n), y] += 1.0
    s = rng.uniform(0.5, 2.0, n)
    return X, y, s


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("k", [2, 4])
def test_converges_to_the_lbfgs_optimum(sparse, k):
    X, y, s = problem(k=k, sparse=sparse)
    alpha = 10.0  # large enough for exact zeros
    W, c, info = solve_softmax_l1(X, y, s, alpha, n_classes=k, **CONVERGE)
    F = objective(X, y, s, alpha, W, c)
    assert F == pytest.approx(info["objective"], rel=1e-12)
    assert F == pytest.approx(lbfgs_optimum(X, y, s, alpha, k), rel=1e-9)
    assert np.count_nonzero(W) < W.size  # the l1 penalty leaves exact zeros


def test_converges_to_the_saga_optimum():
    X, y, s = problem(seed=1, k=3)
    alpha = 0.7
    W, c, _ = solve_softmax_l1(X, y, s, alpha, n_classes=3, **CONVERGE)
    saga = LogisticRegression(C=1.0 / alpha, l1_ratio=1.0, solver="saga", tol=1e-10, max_iter=100000,
                              random_state=0).fit(X, y, sample_weight=s)
    F_saga = objective(X, y, s, alpha, saga.coef_, saga.intercept_)
    F = objective(X, y, s, alpha, W, c)
    assert F <= F_saga * (1 + 1e-9)
    assert F == pytest.approx(F_saga, rel=1e-7)


def test_dense_and_csr_rows_give_the_same_answer():
    X, y, s = problem(seed=2, sparse=True)
    Wd, cd, _ = solve_softmax_l1(X.toarray(), y, s, 0.5, n_classes=4, **CONVERGE)
    Ws, cs, _ = solve_softmax_l1(X, y, s, 0.5, n_classes=4, **CONVERGE)
    np.testing.assert_allclose(Ws, Wd, atol=1e-10)
    np.testing.assert_allclose(cs, cd, atol=1e-10)
    # also after a few iterations, where the iterates are far from the optimum
    Wd, cd, _ = solve_softmax_l1(X.toarray(), y, s, 0.5, n_classes=4, max_iter=7)
    Ws, cs, _ = solve_softmax_l1(X, y, s, 0.5, n_classes=4, max_iter=7)
    np.testing.assert_allclose(Ws, Wd, atol=1e-10)
    np.testing.assert_allclose(cs, cd, atol=1e-10)


@pytest.mark.parametrize("sparse", [False, True])
def test_warm_start_at_the_optimum_stays_there(sparse):
    X, y, s = problem(seed=3, sparse=sparse)
    W, c, _ = solve_softmax_l1(X, y, s, 1.0, n_classes=4, **CONVERGE)
    W2, c2, info = solve_softmax_l1(X, y, s, 1.0, W, c, max_iter=20)
    assert info["objective"] <= info["objective0"]
    assert info["objective"] == pytest.approx(info["objective0"], rel=1e-12)
    np.testing.assert_allclose(W2, W, atol=1e-7)
    np.testing.assert_allclose(c2, c, atol=1e-7)


def test_duplicated_rows_equal_weight_two():
    X, y, s = problem(seed=4, n=120)
    s = np.ones(y.size)
    twice = np.arange(0, y.size, 3)
    W1, c1, _ = solve_softmax_l1(np.vstack([X, X[twice]]), np.concatenate([y, y[twice]]),
                                 np.ones(y.size + twice.size), 0.8, n_classes=4, **CONVERGE)
    s[twice] = 2.0
    W2, c2, _ = solve_softmax_l1(X, y, s, 0.8, n_classes=4, **CONVERGE)
    np.testing.assert_allclose(W2, W1, atol=1e-8)
    np.testing.assert_allclose(c2, c1, atol=1e-8)


def test_the_objective_never_rises_above_the_warm_start():
    X, y, s = problem(seed=5)
    rng = np.random.default_rng(5)
    for it in (1, 2, 5, 10):
        W0, c0 = rng.normal(size=(4, X.shape[1])), rng.normal(size=4)
        _, _, info = solve_softmax_l1(X, y, s, 1.0, W0, c0, max_iter=it)
        assert info["objective"] <= info["objective0"]


@pytest.mark.parametrize("sparse", [False, True])
def test_fit_softmax_two_classes_is_the_symmetric_logistic_optimum(sparse):
    X, y, s = problem(seed=6, k=2, sparse=sparse)
    y = y + 1  # classes 1 and 2 of K=3: class 0 absent
    value, coef = fit_softmax(X, y, s, n_outputs=3, alpha=1.0, solver="fista", **CONVERGE)
    np.testing.assert_array_equal(coef[0], 0.0)
    np.testing.assert_allclose(coef[1], -coef[2])  # the stored pair (-w/2, w/2)
    assert value[1] == pytest.approx(-value[2])
    assert value[0] == -30.0
    # the same problem as a binary l1 logistic regression on w = coef[2] - coef[1] (penalty alpha ||w||)
    w, z = coef[2] - coef[1], value[2] - value[1]
    F = objective(X, y - 1, s, 1.0, np.array([np.zeros_like(w), w]), np.array([0.0, z]))
    assert F == pytest.approx(lbfgs_optimum(X, y - 1, s, 1.0, 2), rel=1e-9)


def test_fit_softmax_fista_and_saga_agree_at_convergence():
    X, y, s = problem(seed=7, k=3)
    v_f, c_f = fit_softmax(X, y, s, n_outputs=3, alpha=1.0, solver="fista", **CONVERGE)
    v_s, c_s = fit_softmax(X, y, s, n_outputs=3, alpha=1.0, solver="saga", epochs=100000)
    F_f = objective(X, y, s, 1.0, c_f, v_f)
    F_s = objective(X, y, s, 1.0, c_s, v_s)
    assert F_f == pytest.approx(F_s, rel=1e-4)  # SAGA with its default tol=1e-4 stops a little short
    assert F_f <= F_s * (1 + 1e-12)


def test_fit_softmax_warm_start_from_sparse_coefficients():
    X, y, s = problem(seed=8, k=4)
    value, coef = fit_softmax(X, y, s, n_outputs=4, alpha=1.0, solver="fista")
    v1, c1 = fit_softmax(X, y, s, n_outputs=4, alpha=1.0, value=value, coef=coef, solver="fista")
    v2, c2 = fit_softmax(X, y, s, n_outputs=4, alpha=1.0, value=value, coef=sp.csr_matrix(coef), solver="fista")
    np.testing.assert_array_equal(v1, v2)
    np.testing.assert_array_equal(c1, c2)


def test_fit_softmax_rejects_an_unknown_solver():
    X, y, s = problem(seed=9)
    with pytest.raises(ValueError, match="solver"):
        fit_softmax(X, y, s, n_outputs=4, alpha=1.0, solver="lbfgs")


def test_fit_softmax_auto_takes_fista_for_sparse_rows_and_saga_for_dense():
    X, y, s = problem(seed=10, k=3)
    for rows, solver in ((X, "saga"), (sp.csr_matrix(X), "fista")):
        auto = fit_softmax(rows, y, s, n_outputs=3, alpha=1.0)
        chosen = fit_softmax(rows, y, s, n_outputs=3, alpha=1.0, solver=solver)
        np.testing.assert_array_equal(auto[0], chosen[0])
        np.testing.assert_array_equal(auto[1], chosen[1])


def test_dense_or_csr_dispatchers_called_from_python_are_the_products():
    # the kernels' dense/CSR dispatchers (numba overloads in compiled code) also work from Python
    from taodist.solvers.row_kernels import CSRRows, mc_margins, mc_xt_dot, n_cols, n_rows, rows_margins

    rng = np.random.default_rng(0)
    A = sp.random(30, 12, density=0.3, format="csr", random_state=1)
    WT, cb, R = rng.normal(size=(12, 4)), rng.normal(size=4), rng.normal(size=(30, 4))
    w, b = rng.normal(size=12), 0.5
    for X in (A.toarray(), CSRRows(A.indptr, A.indices, A.data, 30, 12)):
        Z, G = np.empty((30, 4)), np.empty((12, 4))
        mc_margins(X, WT, cb, Z)
        mc_xt_dot(X, R, G)
        np.testing.assert_allclose(Z, A @ WT + cb, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(G, A.T @ R, rtol=1e-12, atol=1e-12)
        assert (n_rows(X), n_cols(X)) == (30, 12)
        out = np.empty(30)
        rows_margins(X, 0, 30, w, b, 0.0, out)
        np.testing.assert_allclose(out, A @ w + b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("n_classes", [2, 4])
@pytest.mark.parametrize("alpha, epochs", [(0.05, 5), (2.0, 40)])
def test_compiled_saga_takes_scikit_learns_steps(n_classes, alpha, epochs):
    from taodist.solvers.saga import saga_logistic_l1

    rng = np.random.default_rng(n_classes)
    X = rng.uniform(-1, 1, size=(300, 12))
    X[rng.random(X.shape) < 0.4] = 0.0
    X[:, [5, 9]] = 0.0  # features zero in every row: their (non-zero) start weights only shrink
    labels = np.argmax(X[:, :n_classes] + 0.3 * rng.standard_normal((300, n_classes)), axis=1)
    sw = rng.uniform(0.2, 2.0, size=300)
    k = 1 if n_classes == 2 else n_classes
    W0, b0 = 0.1 * rng.standard_normal((k, 12)), 0.1 * rng.standard_normal(k)
    ref = LogisticRegression(C=1.0 / alpha, l1_ratio=1.0, solver="saga", warm_start=True, max_iter=epochs, tol=1e-4,
                             random_state=0)
    ref.coef_, ref.intercept_ = W0.copy(), b0.copy()
    with sklearn_convergence_ignored():
        ref.fit(X, labels, sample_weight=sw)
    start = (W0[0], b0[0]) if n_classes == 2 else (W0, b0)
    W, c, ran = saga_logistic_l1(X, labels, sw, alpha, *start, n_classes=n_classes, epochs=epochs)
    np.testing.assert_allclose(W, ref.coef_[0] if n_classes == 2 else ref.coef_, rtol=0, atol=1e-12)
    np.testing.assert_allclose(c, ref.intercept_[0] if n_classes == 2 else ref.intercept_, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(W == 0, (ref.coef_[0] if n_classes == 2 else ref.coef_) == 0)  # same support
    assert ran == ref.n_iter_[0]


def test_softmax_leaf_with_compiled_saga_equals_the_scikit_learn_reference():
    rng = np.random.default_rng(7)
    X = rng.uniform(-1, 1, size=(250, 9))
    y = rng.integers(0, 5, size=250)
    s = rng.uniform(0.5, 1.5, size=250)
    warm = fit_softmax(X, y, s, n_outputs=6, alpha=0.3, solver="sklearn-saga", epochs=2)
    for start in ((None, None), warm):
        v_c, c_c = fit_softmax(X, y, s, n_outputs=6, alpha=0.3, value=start[0], coef=start[1], solver="saga")
        v_s, c_s = fit_softmax(X, y, s, n_outputs=6, alpha=0.3, value=start[0], coef=start[1], solver="sklearn-saga")
        np.testing.assert_allclose(v_c, v_s, rtol=0, atol=1e-12)
        np.testing.assert_allclose(_dense(c_c), _dense(c_s), rtol=0, atol=1e-12)


def _dense(coef):
    return coef.toarray() if sp.issparse(coef) else np.asarray(coef)


@pytest.mark.parametrize("n_classes", [2, 4])
def test_saga_with_warm_memory_stays_at_the_optimum(n_classes):
    """Gradient memory filled at the start: from the optimum every SAGA step is a fixed point (zero-mean
    corrections around the full proximal step), while scikit-learn's empty memory walks away from it."""
    from taodist.solvers.saga import saga_logistic_l1

    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(200, 6))
    labels = np.argmax(X[:, :n_classes] + 0.5 * rng.standard_normal((200, n_classes)), axis=1)
    sw = rng.uniform(0.5, 1.5, size=200)
    fit = dict(n_classes=n_classes, tol=0.0)
    W, c, _ = saga_logistic_l1(X, labels, sw, 0.5, n_classes=n_classes, epochs=20000, tol=1e-15)
    W, c, _ = saga_logistic_l1(X, labels, sw, 0.5, W, c, epochs=3000, warm_memory=True, **fit)  # polish
    W_warm, c_warm, _ = saga_logistic_l1(X, labels, sw, 0.5, W, c, epochs=3, warm_memory=True, **fit)
    W_cold, c_cold, _ = saga_logistic_l1(X, labels, sw, 0.5, W, c, epochs=3, warm_memory=False, **fit)
    assert np.abs(W_warm - W).max() < 1e-9 and np.abs(np.asarray(c_warm) - c).max() < 1e-9
    assert np.abs(W_cold - W).max() > 1e-4  # the reference's first epoch steps on a zero table
    np.testing.assert_array_equal(W_warm == 0, W == 0)


def test_saga_warm_memory_needs_a_warm_start():
    """Without a start there is nothing to fill the memory at: scikit-learn's steps, as before."""
    from taodist.solvers.saga import saga_logistic_l1

    X, y, s = problem(k=3)
    a = saga_logistic_l1(X, y, s, 0.3, n_classes=3, epochs=4)
    b = saga_logistic_l1(X, y, s, 0.3, n_classes=3, epochs=4, warm_memory=True)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
