"""Single TAO trees against scikit-learn CART on MNIST, letter and cpu_act.

For each data set and depth, C is chosen on a validation split (10% of the
training set, stratified for classification, seed 0) from a small grid; the
tree is then refitted with that C on the whole training set and evaluated
once on the test set. CART is fitted at the same depth and with unlimited
depth. A separate row times a depth-8 MNIST fit forced to run exactly 15 TAO
iterations, and the prediction throughput of the depth-8 TAO tree is compared
with scikit-learn's RandomForest of 100 trees.

Run from the repository root, with ../shared/data present::

    python bench/bench_tree.py                  # full run (tens of minutes)
    python bench/bench_tree.py --quick          # smoke run on subsets

Writes a markdown table to stdout and to ``--out`` (default
``bench/results/tree.md``, not committed).
"""

import argparse
import os
import platform
import time
import warnings

import numpy as np
import sklearn
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import taodist
from taodist import TAOClassifier, TAORegressor
from taodist.datasets import load_dataset

from _report import write_report

warnings.simplefilter("ignore", ConvergenceWarning)

DEPTHS = {"mnist": [6, 8, 10, 12], "letter": [6, 8, 10, 12], "cpu_act": [6, 8, 10, 12]}
C_GRID = {"mnist": [1.0, 10.0], "letter": [10.0, 100.0, 1000.0], "cpu_act": [10.0, 100.0, 1000.0]}


def machine():
    cpu = "unknown CPU"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, numpy {np.__version__}, "
        f"scikit-learn {sklearn.__version__}, taodist {taodist.__version__}"
    )


def error(model, X, y, regression):
    pred = model.predict(X)
    if regression:
        return float(np.sqrt(np.mean((pred - y) ** 2)))
    return float(100 * np.mean(pred != y))


def throughput(model, X, repeats=3):
    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        model.predict(X)
        best = min(best, time.perf_counter() - start)
    return X.shape[0] / best


def cart_counts(cart, X, K):
    """Leaves, non-zero weights, parameters and mean path FLOPs of a CART tree."""
    t = cart.tree_
    leaf = t.children_left < 0
    per_leaf = 1 if K == 2 else K
    params = np.where(leaf, per_leaf, 2)
    flops = float(np.asarray(cart.decision_path(X) @ params).mean())
    return int(leaf.sum()), int((~leaf).sum()), int(params.sum()), flops


def tao_counts(est, X):
    t = est.tree_
    return t.n_leaves(), t.n_nonzero_weights(), t.n_parameters(), t.inference_flops(np.asarray(X, np.float64))


def fit_timed(est, X, y):
    start = time.perf_counter()
    est.fit(X, y)
    return est, time.perf_counter() - start


def row(data, method, depth, err, seconds, counts, rows_per_s, note=""):
    leaves, nnz, params, flops = counts
    return (
        f"| {data} | {method} | {depth} | {err:.2f} | {seconds:.1f} | {leaves} | {nnz} | {params} | "
        f"{flops:.0f} | {rows_per_s:,.0f} | {note} |"
    )


def bench_dataset(name, quick, rows, depths=None, Cs=None):
    Xtr, ytr, Xte, yte = load_dataset(name)
    regression = name == "cpu_act"
    if quick:
        Xtr, ytr, Xte, yte = Xtr[:3000], ytr[:3000], Xte[:1000], yte[:1000]
    K = 1 if regression else len(np.unique(ytr))
    Xfit, Xval, yfit, yval = train_test_split(
        Xtr, ytr, test_size=0.1, random_state=0, stratify=None if regression else ytr
    )
    Est = TAORegressor if regression else TAOClassifier
    Cart = DecisionTreeRegressor if regression else DecisionTreeClassifier
    depths = depths or (DEPTHS[name][:2] if quick else DEPTHS[name])
    fitted = {}
    for depth in depths:
        val = {}
        for C in Cs or C_GRID[name]:
            est = Est(max_depth=depth, C=C, random_state=0, early_stopping=False).fit(Xfit, yfit)
            val[C] = error(est, Xval, yval, regression)
        best_C = min(val, key=val.get)
        est, secs = fit_timed(Est(max_depth=depth, C=best_C, random_state=0, early_stopping=False), Xtr, ytr)
        fitted[depth] = est
        note = f"C={best_C:g} (val {'RMSE' if regression else 'err%'}: " + ", ".join(
            f"{c:g}:{v:.2f}" for c, v in val.items()
        ) + f"); {est.n_iter_} iters"
        rows.append(row(name, "TAO oblique", depth, error(est, Xte, yte, regression), secs,
                        tao_counts(est, Xte), throughput(est, Xte), note))
        cart, secs = fit_timed(Cart(max_depth=depth, random_state=0), Xtr, ytr)
        rows.append(row(name, "CART", depth, error(cart, Xte, yte, regression), secs,
                        cart_counts(cart, Xte, K), throughput(cart, Xte)))
    cart, secs = fit_timed(Cart(random_state=0), Xtr, ytr)
    rows.append(row(name, "CART", cart.get_depth(), error(cart, Xte, yte, regression), secs,
                    cart_counts(cart, Xte, K), throughput(cart, Xte), "unlimited depth"))
    return fitted, (Xtr, ytr, Xte, yte)


def bench_mnist_extras(fitted, data, quick, lines):
    Xtr, ytr, Xte, yte = data
    depth = 8 if 8 in fitted else min(fitted)
    C = fitted[depth].C
    est, secs = fit_timed(TAOClassifier(max_depth=depth, C=C, max_iter=15, tol=0.0, random_state=0,
                                                early_stopping=False), Xtr, ytr)
    lines.append(
        f"- MNIST depth-{depth} fit, exactly {est.n_iter_} TAO iterations (tol=0, C={C:g}): **{secs:.1f} s**, "
        f"test error {error(est, Xte, yte, False):.2f}%; {secs / max(est.n_iter_, 1):.1f} s per iteration."
    )
    rf, rf_secs = fit_timed(RandomForestClassifier(n_estimators=100, n_jobs=-1, random_state=0), Xtr, ytr)
    tao_tp, rf_tp = throughput(fitted[depth], Xte), throughput(rf, Xte)
    lines.append(
        f"- Prediction throughput on the MNIST test set: TAO depth {depth} {tao_tp:,.0f} rows/s, "
        f"RandomForest(100 trees, n_jobs=-1) {rf_tp:,.0f} rows/s: **{tao_tp / rf_tp:.1f}x** "
        f"(RF test error {error(rf, Xte, yte, False):.2f}%, fit {rf_secs:.1f} s)."
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="subsets and two depths: a smoke run")
    parser.add_argument("--datasets", nargs="+", default=["mnist", "letter", "cpu_act"])
    parser.add_argument("--depths", nargs="+", type=int, help="override the depths of every data set")
    parser.add_argument("--Cs", nargs="+", type=float, help="override the C grid of every data set")
    parser.add_argument("--out", default="bench/results/tree.md")
    args = parser.parse_args()
    rows = [
        "| data | method | depth | test error (% / RMSE) | train s | leaves | non-zero weights | parameters "
        "| inference FLOPs | predict rows/s | notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    extras = []
    for name in args.datasets:
        fitted, data = bench_dataset(name, args.quick, rows, args.depths, args.Cs)
        if name == "mnist":
            bench_mnist_extras(fitted, data, args.quick, extras)
        print("\n".join(rows[-(2 * len(fitted) + 1):]), flush=True)
    text = "\n".join([f"Machine: {machine()}", "", *rows, "", *extras, ""])
    write_report(text, args.out)


if __name__ == "__main__":
    main()
