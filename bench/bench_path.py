"""Sparsity paths: accuracy against size along decreasing C, each fit warm-started (NeurIPS 2018, section 4).

A TAO tree is fitted at the largest C, and each smaller C starts from the
previous tree (``taodist.tao_path``). Every step is reported as mean ± std
over seeds: training, validation and test error, parameters (thesis
Appendix A), leaves, and the whole path's seconds. The step to report
is chosen on the validation split (the largest validation accuracy among
the steps within ``--max-params``); the test column is only read for it.
scikit-learn CART at the same depth runs in the same script as the
reference.

Run from the repository root, with ../shared/data present::

    python bench/bench_path.py                                   # MNIST, depth 8, Cs 30 10 5 3 2, seeds 0-2
    python bench/bench_path.py --dataset letter --depth 10 --Cs 300 100 30 10 --init cluster

Writes a markdown table to stdout and to ``--out`` (default
``bench/results/path.md``, not committed).
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier

from taodist import TAOClassifier, tao_path
from taodist.datasets import load_dataset

from _report import write_report

warnings.simplefilter("ignore", ConvergenceWarning)


def error(model, X, y):
    return float(100 * np.mean(model.predict(X) != y))


def mean_std(values, fmt="{:.2f}"):
    return f"{fmt.format(np.mean(values))} ± {fmt.format(np.std(values))}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="mnist")
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--Cs", type=float, nargs="+", default=[30, 10, 5, 3, 2])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--init", default="random", choices=["random", "cart", "cluster"],
                        help="the first tree's initial tree")
    parser.add_argument("--max-params", type=int, default=30000,
                        help="the validation choice is made among the steps with at most this many parameters")
    parser.add_argument("--out", default="bench/results/path.md")
    args = parser.parse_args()

    Xtr, ytr, Xte, yte = load_dataset(args.dataset)
    Xfit, Xval, yfit, yval = train_test_split(Xtr, ytr, test_size=0.1, random_state=0, stratify=ytr)
    Cs = sorted(args.Cs, reverse=True)
    rows = {C: {"train": [], "val": [], "test": [], "params": [], "leaves": []} for C in Cs}
    path_seconds = []  # tao_path does not time its steps apart: the whole path, per seed
    for seed in args.seeds:
        start = time.perf_counter()
        steps = tao_path(Xfit, yfit, Cs=Cs,
                         estimator=TAOClassifier(max_depth=args.depth, init=args.init, random_state=seed,
                                                 early_stopping=False))
        total = time.perf_counter() - start
        for step in steps:
            r = rows[step.C]
            r["train"].append(error(step.estimator, Xfit, yfit))
            r["val"].append(error(step.estimator, Xval, yval))
            r["test"].append(error(step.estimator, Xte, yte))
            r["params"].append(step.n_parameters)
            r["leaves"].append(step.n_leaves)
        path_seconds.append(total)
        print(f"seed {seed}: path done in {total:.0f} s", flush=True)

    cart = [DecisionTreeClassifier(max_depth=args.depth, random_state=s).fit(Xfit, yfit) for s in args.seeds]
    within = [C for C in Cs if np.mean(rows[C]["params"]) <= args.max_params]
    chosen = min(within, key=lambda C: np.mean(rows[C]["val"])) if within else None

    lines = [
        f"### {args.dataset}, depth {args.depth}, sparsity path C = {', '.join(f'{C:g}' for C in Cs)} "
        f"(init {args.init}, seeds {args.seeds}; {len(yfit)} fitting rows, {len(yval)} validation rows)",
        "",
        f"Whole path: {np.mean(path_seconds):.0f} s per seed on average.",
        "",
        "| step | train % | validation % | test % | parameters | leaves |",
        "|---|---|---|---|---|---|",
    ]
    for C in Cs:
        r = rows[C]
        mark = " (validation choice)" if C == chosen else ""
        lines.append(f"| TAO C={C:g}{mark} | {mean_std(r['train'])} | {mean_std(r['val'])} | {mean_std(r['test'])} | "
                     f"{np.mean(r['params']):,.0f} | {np.mean(r['leaves']):.0f} |")
    lines.append(f"| CART depth {args.depth} | {mean_std([error(c, Xfit, yfit) for c in cart])} | "
                 f"{mean_std([error(c, Xval, yval) for c in cart])} | {mean_std([error(c, Xte, yte) for c in cart])} | "
                 f"{np.mean([c.tree_.node_count for c in cart]):,.0f} nodes | "
                 f"{np.mean([c.get_n_leaves() for c in cart]):.0f} |")
    if chosen is None:
        lines.append(f"\nNo step has at most {args.max_params:,} parameters on average.")
    text = "\n".join(lines)
    write_report(text + "\n", args.out)


if __name__ == "__main__":
    main()
