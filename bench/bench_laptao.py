"""LapTAO against supervised TAO on the labelled points, LabelSpreading and
self-training CART, with a few labels.

For each data set and labelled fraction the labelled subset is drawn with a
fixed seed, stratified; everything else in the training set is unlabelled
(transductive training on the whole training set, evaluation on the test
set). Hyperparameters are the defaults or fixed below, not tuned on test.

Run from the repository root with ../shared/data present::

    python bench/bench_laptao.py --datasets mnist --fractions 0.01
    python bench/bench_laptao.py --datasets mnist fashion_mnist --solver saga
    python bench/bench_laptao.py --datasets cpu_act --fractions 0.01 0.1
    python bench/bench_laptao.py --split validation --laptao-only --param exact_leaves=False

Writes markdown to stdout and to ``--out`` (default bench/results/laptao.md).
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.semi_supervised import LabelSpreading, SelfTrainingClassifier
from sklearn.tree import DecisionTreeClassifier

from taodist import LapTAOClassifier, LapTAORegressor, TAOClassifier, TAORegressor
from taodist.datasets import load_dataset

from _report import write_report
from _variants import parse_key_values

warnings.simplefilter("ignore", ConvergenceWarning)

DEPTH = {"mnist": 6, "fashion_mnist": 6, "cpu_act": 4}


def labelled_subset(y, fraction, regression, seed=0):
    idx = np.arange(len(y))
    if regression:
        return np.sort(np.random.default_rng(seed).choice(idx, max(2, int(round(fraction * len(y)))), replace=False))
    keep, _ = train_test_split(idx, train_size=fraction, stratify=y, random_state=seed)
    return np.sort(keep)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


_GRAPHS = {}


def graph(name, X):
    """The kNN affinity graph of a data set's training points, built once for all its label fractions."""
    if name not in _GRAPHS:
        from taodist.laptao import affinity_graph

        scale = np.maximum(X.max(axis=0), -X.min(axis=0))  # LapTAO's own feature scaling
        W, secs = timed(lambda: affinity_graph(X / np.where(scale > 0, scale, 1.0), 10, random_state=0))
        _GRAPHS[name] = (W, secs)
        print(f"{name}: kNN graph + affinities {secs:.1f}s", flush=True)
    return _GRAPHS[name]


def run(name, fraction, rows, laptao_params, split="test", laptao_only=False):
    Xtr, ytr, Xte, yte = load_dataset(name)
    regression = name == "cpu_act"
    depth = DEPTH[name]
    if split == "validation":  # for choosing defaults: the test split is never looked at
        Xtr, Xte, ytr, yte = train_test_split(Xtr, ytr, test_size=0.1, random_state=0,
                                              stratify=None if regression else ytr)
        name = f"{name} (validation)"
    W, graph_s = graph(name, Xtr)
    lab = labelled_subset(ytr, fraction, regression)

    def score(model):
        pred = model.predict(Xte)
        if regression:
            return float(np.sqrt(np.mean((pred - yte) ** 2)))
        return float(100 * np.mean(pred != yte))

    if regression:
        ys = np.full(len(ytr), np.nan)
        ys[lab] = ytr[lab]
        methods = {
            "LapTAO": lambda: LapTAORegressor(max_depth=depth, n_jobs=-1, random_state=0, **laptao_params).fit(Xtr, ys, affinity=W),
            "TAO on labelled only": lambda: TAORegressor(max_depth=depth, random_state=0).fit(Xtr[lab], ytr[lab]),
        }
    else:
        ys = np.full(len(ytr), -1)
        ys[lab] = ytr[lab]
        methods = {
            "LapTAO": lambda: LapTAOClassifier(max_depth=depth, n_jobs=-1, random_state=0, **laptao_params).fit(Xtr, ys, affinity=W),
            "TAO on labelled only": lambda: TAOClassifier(max_depth=depth, random_state=0).fit(Xtr[lab], ytr[lab]),
            "LabelSpreading (kNN)": lambda: LabelSpreading(kernel="knn", n_neighbors=10).fit(Xtr, ys),
            "SelfTraining(CART)": lambda: SelfTrainingClassifier(DecisionTreeClassifier(random_state=0)).fit(Xtr, ys),
        }
    if laptao_only:
        methods = {"LapTAO": methods["LapTAO"]}
    for label, fit in methods.items():
        model, secs = timed(fit)
        extra = ""
        if label == "LapTAO":
            secs += graph_s  # the graph is built once per data set and shared by its fractions
            h = model.history_
            extra = (f"graph {graph_s:.1f}s; label steps {sum(x['label_seconds'] for x in h):.1f}s "
                     f"({h[-1]['label_method']}, max CG it {max(x['cg_iterations'] for x in h)}); "
                     f"tree steps {sum(x['tree_seconds'] for x in h):.1f}s")
        rows.append(f"| {name} | {100 * fraction:g}% ({len(lab)}) | {label} | {score(model):.2f} | {secs:.0f} | {extra} |")
        print(rows[-1], flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="+", default=["mnist", "fashion_mnist", "cpu_act"])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.01, 0.05, 0.1])
    parser.add_argument("--solver", choices=["fista", "saga", "liblinear"], default=None,
                        help="LapTAO's tree-step node solver (default: the estimator's)")
    parser.add_argument("--tao-iter", type=int, default=None, help="TAO iterations per tree step (default: the estimator's)")
    parser.add_argument("--split", choices=("test", "validation"), default="test",
                        help="validation: fit on 90%% of the training set, score the other 10%% (stratified, seed 0)")
    parser.add_argument("--param", nargs="+", default=[], metavar="KEY=VALUE",
                        help="more LapTAO parameters, e.g. exact_leaves=False init='graph_labels'")
    parser.add_argument("--laptao-only", action="store_true", help="no peers (for comparing LapTAO settings)")
    parser.add_argument("--out", default="bench/results/laptao.md")
    args = parser.parse_args()
    laptao_params = {k: v for k, v in (("solver", args.solver), ("tao_iter", args.tao_iter)) if v is not None}
    laptao_params.update(parse_key_values(" ".join(args.param), "KEY=VALUE"))
    rows = ["| data | labels | method | test error (% / RMSE) | train s | LapTAO timings |", "|---|---|---|---|---|---|"]
    for name in args.datasets:
        for fraction in args.fractions:
            run(name, fraction, rows, laptao_params, args.split, args.laptao_only)
    text = "\n".join(rows) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
