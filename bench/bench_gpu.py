"""The GPU node solver (``solver="fista-gpu"``) against the CPU level solver and CART, in one run.

Two parts, both on MNIST (float32, as the estimators keep it):

1. One level of node problems like a depth-7 level: the 60,000 rows
   shuffled and cut into 128 nodes at random points, a random subset of the
   digits as each node's "go right" targets, ``alpha = 0.1``, warm start 0;
   solved by the CPU kernel (all
   cores) and by the PyTorch solver on the GPU, with the same iterations.
   Reports seconds and the summed objective of each (they must agree).
2. A whole fit: ``TAOClassifier(max_depth=8, max_iter=15, tol=0)`` with the
   CPU solver and with the GPU solver, and scikit-learn's CART at depth 8,
   the issue's "MNIST fit" (target on a GPU: <= 10 s).

The first GPU call pays PyTorch's CUDA start-up; it is timed apart
(``warm-up``). Needs PyTorch with CUDA::

    python bench/bench_gpu.py --out bench/results/gpu.md
"""

import argparse
import os
import platform
import time

import numpy as np

from _report import write_report


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def level_bounds(X, n_nodes, rng):
    """Row offsets of ``n_nodes`` nodes of random sizes."""
    cuts = np.sort(rng.choice(np.arange(1, X.shape[0]), n_nodes - 1, replace=False))
    bounds = np.r_[0, cuts, X.shape[0]]
    return bounds


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--level-iters", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--n-jobs", type=int, default=-1)
    ap.add_argument("--profile", action="store_true", help="print torch.profiler tables of one level solve")
    ap.add_argument("--solvers", nargs="+", default=["fista", "fista-gpu"])
    ap.add_argument("--out", default="bench/results/gpu.md")
    args = ap.parse_args()

    import torch
    from sklearn.tree import DecisionTreeClassifier

    from taodist import TAOClassifier
    from taodist.datasets import load_dataset
    from taodist.solvers.l1_logistic import solve_l1_logistic_level
    from taodist.solvers.l1_logistic_torch import solve_l1_logistic_level_torch

    Xtr, ytr, Xte, yte = load_dataset("mnist")
    Xtr, Xte = Xtr.astype(np.float32), Xte.astype(np.float32)
    gpu = torch.cuda.get_device_name(0)
    lines = [f"Machine: {platform.machine()}, {os.cpu_count()} cores, {gpu}, torch {torch.__version__}.", ""]

    # 1. one level
    rng = np.random.default_rng(0)
    bounds = level_bounds(Xtr, 128, rng)
    order = rng.permutation(Xtr.shape[0])
    X, y = Xtr[order], ytr[order]
    subset = rng.random((128, 10)) < 0.5
    target = subset[np.repeat(np.arange(128), np.diff(bounds)), y]
    weight = np.ones(X.shape[0])
    W0, b0 = np.zeros((128, X.shape[1])), np.zeros(128)
    args_level = (X, bounds, target, weight, 0.1, W0, b0)
    solve_l1_logistic_level(*args_level, max_iter=1)  # compiled kernels loaded before timing
    _, warm = timed(lambda: solve_l1_logistic_level_torch(X[:1000], [0, 1000], target[:1000], weight[:1000], 0.1,
                                                          W0[:1], b0[:1], max_iter=2))
    lines += ["| level (128 nodes, 60,000 rows) | iterations | CPU kernel s | GPU s | CPU objective | GPU objective |",
              "|---|---|---|---|---|---|"]
    for it in args.level_iters:
        (_, _, ci), cs = timed(lambda: solve_l1_logistic_level(*args_level, max_iter=it, tol=1e-4))
        solve_l1_logistic_level_torch(*args_level, max_iter=it, tol=1e-4)
        torch.cuda.synchronize()
        (_, _, gi), gs = timed(lambda: solve_l1_logistic_level_torch(*args_level, max_iter=it, tol=1e-4))
        lines.append(f"| MNIST, random digit subsets, alpha 0.1 | {it} | {cs:.3f} | {gs:.3f} | "
                     f"{ci['objective'].sum():.2f} | {gi['objective'].sum():.2f} |")
        print(lines[-1], flush=True)
    lines += ["", f"GPU warm-up (CUDA context, first kernels): {warm:.1f} s.", ""]
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            solve_l1_logistic_level_torch(*args_level, max_iter=10, tol=1e-4)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=15), flush=True)
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=12), flush=True)

    # 2. whole fits
    cart, cart_s = timed(lambda: DecisionTreeClassifier(max_depth=args.depth, random_state=0).fit(Xtr, ytr))
    rows = [("CART (scikit-learn)", cart_s, np.mean(cart.predict(Xte) != yte), "")]
    for solver in args.solvers:
        model = TAOClassifier(max_depth=args.depth, max_iter=args.iters, tol=0.0, random_state=0, solver=solver,
                              early_stopping=False,
                              n_jobs=args.n_jobs)
        _, s = timed(lambda: model.fit(Xtr, ytr))
        rows.append((f"TAO, solver={solver!r}, n_jobs={args.n_jobs}", s, np.mean(model.predict(Xte) != yte),
                     f"{model.history_[-1]:.5f}"))
        print(rows[-1], flush=True)
    lines += [f"MNIST, depth {args.depth}, {args.iters} TAO iterations (tol=0), whole training set:", "",
              "| model | fit s | x CART | test error % | final objective |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {s:.1f} | {s / cart_s:.1f} | {100 * e:.2f} | {obj} |" for name, s, e, obj in rows]
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
