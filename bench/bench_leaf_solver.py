"""Softmax-leaf solvers: the compiled FISTA (``fit_softmax(solver="fista")``) against scikit-learn's SAGA.

Three measurements::

    PYTHONPATH=. python bench/bench_leaf_solver.py sparse            # one leaf, 16-class CSR bag of words
    PYTHONPATH=. python bench/bench_leaf_solver.py letter --iters 10 20 30 50
    PYTHONPATH=. python bench/bench_leaf_solver.py saga              # compiled SAGA vs scikit-learn's, MNIST leaves

``saga``: the softmax leaves' SAGA (``taodist.solvers.saga``, scikit-learn's steps
compiled) against scikit-learn's ``LogisticRegression(solver="saga")`` on
MNIST leaves of several sizes (the first rows of the training split; 10
classes, and 2 for the binary model), 5 epochs warm-started from a 2-epoch
fit, l1 strength 1/30 (the leaves' default C): best of 3 seconds each, and
the largest coefficient difference (the two take the same steps).

``sparse``: one leaf's fit on ~1,100 rows of 16 classes from the 500-class
bag-of-words generator (50,000 columns, ~63 non-zeros per row), cold and
warm-started (from a first fit), per solver, with the surrogate objective
reached. ``letter``: TAO trees of depth 6 with linear leaves (C=30), fitted on
the first 90% of letter's training split and validated on its last 10%
(the test split is not used), for seeds 0-2: validation error and fit time
per leaf solver setting.
"""

import argparse
import functools
import sys
import time
import warnings

import numpy as np
from scipy.special import logsumexp
from sklearn.exceptions import ConvergenceWarning

import taodist.model.leaf_fit as leaves
from taodist import TAOClassifier

DATA = "/work/shared/data/letter.npz"


def surrogate(X, y, s, alpha, value, coef, present):
    Z = np.asarray(X @ coef[present].T) + value[present]
    lab = np.searchsorted(present, y)
    return s @ (logsumexp(Z, axis=1) - Z[np.arange(y.size), lab]) + alpha * np.abs(coef).sum()


def sparse(args):
    sys.path.insert(0, "bench")
    from _bow import BowGenerator, BowSpec

    X, y = BowGenerator(BowSpec()).block(0, 20000)
    counts = np.bincount(y)
    classes = np.argsort(-counts, kind="stable")[args.skip:args.skip + 16]
    rows = np.flatnonzero(np.isin(y, classes))[:1100]
    X, y = X[rows].astype(np.float64), y[rows]
    s = np.ones(y.size)
    K = int(y.max()) + 1
    present = np.unique(y)
    print(f"# {X.shape[0]} x {X.shape[1]} CSR, {X.nnz / X.shape[0]:.1f} nnz/row, {present.size} classes, "
          f"alpha={args.alpha}")
    print("| solver | start | seconds | surrogate | nnz(W) |")
    print("|---|---|---|---|---|")
    settings = [("saga", dict(solver="saga"))] + [(f"fista {m}", dict(max_iter=m)) for m in args.iters]
    for name, kw in settings:
        fit = functools.partial(leaves.fit_softmax, X, y, s, n_outputs=K, alpha=args.alpha, **kw)
        fit()  # compile
        value = np.log(np.maximum(np.bincount(y, minlength=K) / y.size, 1e-12))
        for start in ("cold", "warm"):
            t0 = time.perf_counter()
            if start == "cold":
                v, c = fit(value=value, coef=np.zeros((K, X.shape[1])))
            else:
                v, c = fit(value=v, coef=c)
            dt = time.perf_counter() - t0
            print(f"| {name} | {start} | {dt:.3f} | {surrogate(X, y, s, args.alpha, v, c, present):.2f} | "
                  f"{np.count_nonzero(c)} |", flush=True)


def letter(args):
    d = np.load(DATA)
    X, y = d["X_train"].astype(np.float64), d["y_train"]
    n_fit = int(0.9 * X.shape[0])
    (Xf, yf), (Xv, yv) = (X[:n_fit], y[:n_fit]), (X[n_fit:], y[n_fit:])
    original = leaves.fit_softmax
    settings = [("saga 5 epochs", dict(solver="saga"))] + [(f"fista {m}", dict(max_iter=m)) for m in args.iters]
    print(f"# letter, depth {args.depth}, C={args.C}, fit {n_fit} rows, validate {X.shape[0] - n_fit}")
    print("| leaf solver | seed | val % | train % | leaf nnz | TAO iters | fit s |")
    print("|---|---|---|---|---|---|---|")
    try:
        for name, kw in settings:
            leaves.fit_softmax = functools.partial(original, **kw)
            for seed in args.seeds:
                clf = TAOClassifier(max_depth=args.depth, leaf_type="linear", C=args.C, random_state=seed, n_jobs=1)
                t0 = time.perf_counter()
                clf.fit(Xf, yf)
                dt = time.perf_counter() - t0
                val = 100 * (1 - clf.score(Xv, yv))
                tr = 100 * (1 - clf.score(Xf, yf))
                print(f"| {name} | {seed} | {val:.2f} | {tr:.2f} | {clf.tree_.leaf_coef.nnz} | {clf.n_iter_} | "
                      f"{dt:.1f} |", flush=True)
    finally:
        leaves.fit_softmax = original


def saga(args):
    from sklearn.linear_model import LogisticRegression

    from taodist.datasets import load_dataset
    from taodist.solvers.saga import saga_logistic_l1

    X_all, y_all, _, _ = load_dataset("mnist")
    alpha = 1.0 / args.C
    print(f"# MNIST leaves, 5 SAGA epochs warm-started, alpha=1/{args.C:g}, one thread")
    print("| rows | classes | scikit-learn s | compiled s | speed-up | max |coef difference| |")
    print("|---|---|---|---|---|---|")
    for rows, classes in ((200, 10), (850, 10), (3000, 10), (850, 2)):
        keep = np.flatnonzero(y_all < classes)[:rows]
        X, y = np.ascontiguousarray(X_all[keep], dtype=np.float64), y_all[keep]
        s = np.ones(y.size)

        def sklearn_fit(epochs, start=None):
            model = LogisticRegression(C=1.0 / alpha, l1_ratio=1.0, solver="saga", warm_start=True,
                                       max_iter=epochs, tol=1e-4, random_state=0)
            if start is not None:
                model.coef_, model.intercept_ = start[0].copy(), start[1].copy()
            model.fit(X, y, sample_weight=s)
            return model.coef_, model.intercept_

        start = sklearn_fit(2)
        ours_start = (start[0][0], start[1][0]) if classes == 2 else start
        times = {}
        for name, fit in (("sklearn", lambda: sklearn_fit(5, start)),
                          ("compiled", lambda: saga_logistic_l1(X, y, s, alpha, *ours_start, n_classes=classes,
                                                                epochs=5))):
            fit()  # compile / warm up
            best = np.inf
            for _ in range(3):
                t0 = time.perf_counter()
                out = fit()
                best = min(best, time.perf_counter() - t0)
            times[name] = (best, out)
        ref, ours = times["sklearn"][1][0], times["compiled"][1][0]
        diff = np.abs(np.asarray(ours).reshape(ref.shape) - ref).max()
        print(f"| {rows} | {classes} | {times['sklearn'][0]:.4f} | {times['compiled'][0]:.4f} | "
              f"{times['sklearn'][0] / times['compiled'][0]:.1f}x | {diff:.1e} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", choices=["sparse", "letter", "saga"])
    parser.add_argument("--iters", type=int, nargs="+", default=[10, 20, 50])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--depth", type=int, default=6)
    parser.add_argument("--C", type=float, default=30.0)
    parser.add_argument("--alpha", type=float, default=1.0)
    parser.add_argument("--skip", type=int, default=0, help="skip the most populous classes")
    args = parser.parse_args()
    warnings.simplefilter("ignore", ConvergenceWarning)
    warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")
    {"sparse": sparse, "letter": letter, "saga": saga}[args.what](args)


if __name__ == "__main__":
    main()
