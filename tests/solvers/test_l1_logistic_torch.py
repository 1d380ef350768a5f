"""The PyTorch level solver ("fista-gpu") against the compiled CPU level solver.

PyTorch is optional: without it only the error-message tests run. With a CPU
build the solver runs on ``device="cpu"`` (same code path as on a GPU); the
``cuda`` cases run only where PyTorch sees a GPU.
"""

import dataclasses
import sys

import numpy as np
import pytest

from taodist import LapTAOClassifier, TAOClassifier
from taodist.solvers.l1_logistic import solve_l1_logistic_level
from taodist.tao.node_solvers import NODE_SOLVERS, OBLIQUE_SOLVERS

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="PyTorch is not installed (optional 'gpu' extra)")
DEVICES = ["cpu"] + (["cuda"] if torch is not None and torch.cuda.is_available() else [])


def level(seed, sizes=(0, 60, 250, 900, 7, 1), D=25, dtype=np.float32):
    """A level with an empty node, a one-row node, a constant column and unbalanced targets."""
    rng = np.random.RandomState(seed)
    N = sum(sizes)
    X = rng.randn(N, D).astype(dtype)
    X[:, 4] = 2.0  # constant everywhere: its weight must stay exactly 0
    bounds = np.r_[0, np.cumsum(sizes)]
    target = rng.rand(N) < 0.35
    weight = rng.rand(N) + 0.05
    W0 = rng.randn(len(sizes), D) * 0.1
    W0[:, 4] = 0.0
    b0 = rng.randn(len(sizes))
    return X, bounds, target, weight, W0, b0


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("max_iter", [1, 10, 200])
@pytest.mark.parametrize("seed", [0, 1])
def test_torch_level_solver_matches_the_cpu_kernel(seed, max_iter, device):
    from taodist.solvers.l1_logistic_torch import solve_l1_logistic_level_torch

    X, bounds, target, weight, W0, b0 = level(seed)
    alpha = np.array([0.5, 0.5, 2.0, 0.1, 1.0, 0.3])
    W1, b1, ref = solve_l1_logistic_level(X, bounds, target, weight, alpha, W0, b0, max_iter=max_iter)
    W2, b2, got = solve_l1_logistic_level_torch(X, bounds, target, weight, alpha, W0, b0, max_iter=max_iter,
                                                device=device)
    # the same iterations, to rounding: the CPU kernel forms margins in float32, this solver in float64
    np.testing.assert_allclose(got["objective0"], ref["objective0"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(got["objective"], ref["objective"], rtol=1e-5, atol=1e-9)
    np.testing.assert_array_equal(got["n_iter"], ref["n_iter"])
    np.testing.assert_allclose(W2, W1, atol=1e-4)
    np.testing.assert_allclose(b2, b1, atol=1e-4)
    assert np.all(got["objective"] <= got["objective0"])  # monotone: never above the warm start
    assert np.all(W2[:, 4] == 0.0)  # the constant column
    np.testing.assert_array_equal(W2[0], W0[0])  # the empty node keeps its warm start
    assert b2[0] == b0[0] and got["objective"][0] == 0.0 and got["converged"][0]


@needs_torch
@pytest.mark.parametrize("device", DEVICES)
def test_torch_level_solver_converges_to_the_cpu_optimum(device):
    from taodist.solvers.l1_logistic_torch import solve_l1_logistic_level_torch

    X, bounds, target, weight, W0, b0 = level(3, sizes=(300, 500), D=10, dtype=np.float64)
    _, _, ref = solve_l1_logistic_level(X, bounds, target, weight, 0.2, W0, b0, max_iter=3000, tol=1e-12)
    _, _, got = solve_l1_logistic_level_torch(X, bounds, target, weight, 0.2, W0, b0, max_iter=3000, tol=1e-12,
                                              device=device)
    np.testing.assert_allclose(got["objective"], ref["objective"], rtol=1e-9)


@needs_torch
@pytest.mark.parametrize("n_jobs", [1, 3])
def test_fista_gpu_estimator_fits_the_same_tree_as_fista(monkeypatch, n_jobs):
    monkeypatch.setenv("TAODIST_GPU_DEVICE", "cpu")
    calls = []
    solver = NODE_SOLVERS["fista-gpu"]
    spy = dataclasses.replace(solver, level=lambda problems: calls.append(len(problems)) or solver.level(problems))
    monkeypatch.setitem(NODE_SOLVERS, "fista-gpu", spy)
    rng = np.random.RandomState(0)
    X = rng.randn(600, 6)
    y = np.digitize(X @ rng.randn(6) + 0.5 * np.sin(3 * X[:, 0]), [-1.0, 0.0, 1.0])  # 4 classes, not separable
    kw = dict(max_depth=3, max_iter=6, tol=0.0, random_state=0, n_jobs=n_jobs)
    cpu = TAOClassifier(solver="fista", **kw).fit(X, y)
    gpu = TAOClassifier(solver="fista-gpu", **kw).fit(X, y)
    # a whole-level solver gets every node of a depth in one call, whatever the threads
    assert max(calls) > 1 and len(calls) <= 3 * 6
    np.testing.assert_allclose(gpu.history_, cpu.history_, rtol=1e-6)
    assert np.all(np.diff(gpu.history_) <= 1e-12)  # TAO's objective never increases
    np.testing.assert_array_equal(gpu.predict(X), cpu.predict(X))


def test_fista_gpu_is_a_registered_oblique_solver():
    assert "fista-gpu" in OBLIQUE_SOLVERS
    assert NODE_SOLVERS["fista-gpu"].float32 and NODE_SOLVERS["fista-gpu"].level is not None


def test_fista_gpu_without_pytorch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ImportError
    X = np.random.RandomState(0).randn(50, 3)
    with pytest.raises(ImportError, match=r"pip install 'taodist\[gpu\]'.*solver='fista'"):
        TAOClassifier(solver="fista-gpu", max_depth=2).fit(X, X[:, 0] > 0)


@needs_torch
def test_fista_gpu_without_a_gpu_says_so_before_fitting(monkeypatch):
    monkeypatch.delenv("TAODIST_GPU_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    X = np.random.RandomState(0).randn(50, 3)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU.*use solver='fista'"):
        TAOClassifier(solver="fista-gpu", max_depth=2).fit(X, X[:, 0] > 0)
    y = np.where(np.arange(50) % 5 == 0, (X[:, 0] > 0).astype(int), -1)
    with pytest.raises(RuntimeError, match="needs a CUDA GPU"):
        LapTAOClassifier(solver="fista-gpu", max_depth=2).fit(X, y)
