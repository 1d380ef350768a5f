import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from taodist.model.leaf_fit import fit_constant, fit_linear, fit_softmax
from taodist.model.leaves import pointwise_loss, softmax


@settings(deadline=None, max_examples=100, print_blob=True)
@given(
    st.integers(1, 30).flatmap(
        lambda n: st.tuples(
            arrays(np.int64, n, elements=st.integers(0, 3)),
            arrays(np.float64, n, elements=st.floats(0.1, 3.0)),
        )
    )
)
def test_constant_classification_leaf_is_the_weighted_0_1_optimum(data):
    y, w = data
    value, coef = fit_constant(None, y, w, task="classification", n_outputs=4, alpha=1.0)
    assert coef is None
    loss = w @ pointwise_loss("classification", np.tile(value, (len(y), 1)), y)
    best = min(w @ (y != k) for k in range(4))  # brute force over every label
    assert abs(loss - best) < 1e-9
    np.testing.assert_allclose(value.sum(), 1.0)


def test_constant_regression_leaf_minimises_squared_error():
    rng = np.random.default_rng(0)
    Y, w = rng.normal(size=(40, 2)), rng.uniform(0.1, 2, size=40)
    value, _ = fit_constant(None, Y, w, task="regression", n_outputs=2, alpha=1.0)
    def sse(c):
        return w @ pointwise_loss("regression", np.tile(c, (40, 1)), Y)
    for _ in range(20):  # any perturbation increases the loss
        assert sse(value) <= sse(value + rng.normal(scale=0.1, size=2))
    # first-order optimality: the weighted residual sums to zero
    np.testing.assert_allclose(w @ (Y - value), 0.0, atol=1e-10)


def test_linear_regression_leaf_matches_its_objective_optimum():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(200, 5))
    Y = X @ rng.normal(size=(5, 2)) + 0.1 * rng.normal(size=(200, 2))
    w = rng.uniform(0.5, 2, size=200)
    alpha = 5.0
    intercept, coef = fit_linear(X, Y, w, task="regression", n_outputs=2, alpha=alpha)

    def objective(c, b):
        r = Y - X @ c.T - b
        return w @ np.einsum("ij,ij->i", r, r) + alpha * np.abs(c).sum()

    base = objective(coef, intercept)
    for _ in range(30):
        assert base <= objective(coef + rng.normal(scale=1e-2, size=coef.shape), intercept) + 1e-9


def test_linear_classification_leaf_binary_logits_are_one_logistic_model():
    rng = np.random.default_rng(2)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    intercept, coef = fit_linear(X, y, np.ones(300), task="classification", n_outputs=2, alpha=0.1)
    np.testing.assert_allclose(coef[0], -coef[1])
    acc = np.mean(np.argmax(X @ coef.T + intercept, axis=1) == y)
    assert acc > 0.97


def test_linear_classification_pure_leaf_predicts_its_class():
    X = np.random.default_rng(3).normal(size=(10, 3))
    intercept, coef = fit_linear(X, np.full(10, 2), np.ones(10), task="classification", n_outputs=4, alpha=1)
    assert np.all(coef == 0) and np.argmax(intercept) == 2


def _softmax_objective(X, y, w, intercept, coef, alpha):
    P = softmax(X @ coef.T + intercept)
    return -w @ np.log(P[np.arange(len(y)), y]) + alpha * np.abs(coef).sum()


def test_softmax_leaf_reaches_the_multinomial_l1_optimum_and_warm_start_keeps_it():
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, size=(400, 4))
    y = np.argmax(X[:, :3] + 0.3 * rng.normal(size=(400, 3)), axis=1)  # classes 0-2 of K=5 (3, 4 absent)
    w = rng.uniform(0.5, 1.5, size=400)
    alpha = 2.0
    intercept, coef = fit_softmax(X, y, w, n_outputs=5, alpha=alpha, epochs=2000)
    assert np.all(coef[3:] == 0) and np.all(intercept[3:] < intercept[:3].min() - 20)  # absent classes
    present = slice(0, 3)
    base = _softmax_objective(X, y, w, intercept[present], coef[present], alpha)
    for _ in range(30):  # a local optimum of a convex objective: no perturbation improves it
        c = coef[present] + rng.normal(scale=1e-2, size=(3, 4))
        assert base <= _softmax_objective(X, y, w, intercept[present], c, alpha) + 1e-6
    # warm-started from its own optimum, a short run stays near it (SAGA restarts its gradient
    # memory at zero, so the first epoch moves a little)
    i2, c2 = fit_softmax(X, y, w, n_outputs=5, alpha=alpha, value=intercept, coef=coef, epochs=5)
    assert _softmax_objective(X, y, w, i2[present], c2[present], alpha) <= base + 1e-2 * abs(base)


@pytest.mark.parametrize("solver, budget, few", [("saga", "epochs", 2), ("fista", "max_iter", 2)])
def test_softmax_leaf_warm_start_beats_a_cold_start_with_the_same_epochs(solver, budget, few):
    rng = np.random.default_rng(5)
    X = rng.uniform(-1, 1, size=(600, 6))
    y = np.argmax(X[:, :4] @ rng.normal(size=(4, 4)), axis=1)
    w = np.ones(600)
    opt_i, opt_c = fit_softmax(X, y, w, n_outputs=4, alpha=0.5, solver=solver, **{budget: 3000})
    best = _softmax_objective(X, y, w, opt_i, opt_c, 0.5)
    near_c = opt_c + 0.05 * rng.normal(size=opt_c.shape)
    warm = fit_softmax(X, y, w, n_outputs=4, alpha=0.5, value=opt_i, coef=near_c, solver=solver, **{budget: few})
    cold = fit_softmax(X, y, w, n_outputs=4, alpha=0.5, solver=solver, **{budget: few})
    gap_warm = _softmax_objective(X, y, w, *warm, 0.5) - best
    gap_cold = _softmax_objective(X, y, w, *cold, 0.5) - best
    assert gap_warm < gap_cold
