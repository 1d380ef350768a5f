import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from taodist.tao.node_solvers import (
    NODE_SOLVERS,
    NodeProblem,
    NodeSolver,
    solve_axis_exact,
    solve_level_fista,
    solve_oblique_liblinear,
    solve_oblique_saga,
)
from taodist.testing import brute_force_axis_split


@st.composite
def weighted_problems(draw):
    n = draw(st.integers(1, 25))
    d = draw(st.integers(1, 4))
    # few distinct values so ties and equal runs are common
    X = draw(arrays(np.float64, (n, d), elements=st.integers(-3, 3).map(float)))
    target = draw(arrays(np.bool_, n))
    weight = draw(arrays(np.float64, n, elements=st.floats(0.01, 5.0)))
    return X, target, weight


@settings(deadline=None, max_examples=200, print_blob=True)
@given(weighted_problems())
def test_axis_solver_equals_brute_force(problem):
    X, target, weight = problem
    f, t = solve_axis_exact(X, target, weight)
    achieved = float(weight @ ((X[:, f] >= t) != target))
    assert abs(achieved - brute_force_axis_split(X, target, weight)) < 1e-9


def test_axis_threshold_is_a_midpoint_between_values():
    X = np.array([[0.0], [1.0], [2.0], [3.0]])
    f, t = solve_axis_exact(X, np.array([False, False, True, True]), np.ones(4))
    assert (f, t) == (0, 1.5)


@pytest.mark.parametrize("solver", [solve_oblique_liblinear, solve_oblique_saga])
def test_oblique_solver_separates_separable_data(solver):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(300, 4))
    target = X[:, 0] - 2 * X[:, 2] > 0.1
    w, b = solver(X, target, np.ones(300), alpha=1e-3, w0=np.zeros(4), b0=0.0)
    assert np.mean((X @ w + b >= 0) == target) > 0.98


def _surrogate(X, target, weight, alpha, w, b):
    s = np.where(target, 1.0, -1.0)
    return weight @ np.logaddexp(0, -s * (X @ w + b)) + alpha * np.abs(w).sum()


def test_saga_approaches_the_liblinear_optimum_of_the_same_objective():
    rng = np.random.default_rng(5)
    X = rng.uniform(0, 1, size=(2000, 10))
    target = X[:, :3].sum(axis=1) + 0.3 * rng.normal(size=2000) > 1.5
    weight = rng.uniform(0.5, 1.5, size=2000)
    ref = _surrogate(X, target, weight, 1.0, *solve_oblique_liblinear(X, target, weight, alpha=1.0))
    w, b = solve_oblique_saga(X, target, weight, alpha=1.0, w0=np.zeros(10), b0=0.0)
    assert 0 <= _surrogate(X, target, weight, 1.0, w, b) - ref < 1e-3 * ref
    # warm-started at the optimum, it stays there
    w0, b0 = solve_oblique_liblinear(X, target, weight, alpha=1.0)
    w, b = solve_oblique_saga(X, target, weight, alpha=1.0, w0=w0, b0=b0)
    assert _surrogate(X, target, weight, 1.0, w, b) - ref < 1e-3 * ref  # liblinear also lightly penalises b


def test_oblique_solver_gets_sparser_with_more_penalty():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(400, 20))
    target = X[:, :3].sum(axis=1) > 0
    nnz = [np.count_nonzero(solve_oblique_liblinear(X, target, np.ones(400), alpha=a)[0]) for a in (0.01, 1, 30)]
    assert nnz[0] >= nnz[1] >= nnz[2]
    assert nnz[2] < nnz[0]


def test_the_fista_level_solver_spreads_a_lone_node_over_lent_threads_with_the_same_bits():
    """A root level in process: ``threads`` > nodes solves each node's rows on that many threads, same answer."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 20)).astype(np.float32)
    target = X[:, 0] + 0.3 * rng.standard_normal(3000) > 0
    problem = NodeProblem(X, target, np.ones(3000), 0.5, np.zeros(20), 0.0)
    (w1, b1), = solve_level_fista([problem])
    (w2, b2), = solve_level_fista([problem], threads=2)
    np.testing.assert_array_equal(w1, w2)
    assert b1 == b2
    assert NODE_SOLVERS["fista"].threads  # the registry's FISTA takes the lent threads
    # a level solver that does not declare ``threads`` is never handed them
    solver = NodeSolver(None, level=lambda problems: [("no threads", len(problems))])
    assert solver.solve_level([problem], threads=2) == [("no threads", 1)]
