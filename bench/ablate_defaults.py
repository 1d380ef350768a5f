"""Choosing taodist's defaults: candidate settings compared on the suite's dev group, by validation splits.

Each candidate is a TAO tree or forest whose depth may follow a rule of the
training rows and classes (``depth = clip(floor(log2(n / rows_per_leaf)),
floor, cap)``, at least ``ceil(log2(n_classes)) + 1``), so a rule can be
tried before it becomes an estimator default. The test splits and the
report group are never read: every set is split as ``bench_suite.py
--split validation`` splits it.

Prints, per candidate: the mean rank of its validation error among the
candidates and CART (unlimited and CV depth), its wins and losses against
CART with CV depth, the mean training and validation error (classification,
%) or RMSE ratio to CV-CART (regression), the median parameters and the
median fit seconds.

Run from the repository root::

    python bench/ablate_defaults.py --candidates depth8 "rule L=8" "rule L=8 init=cart" --splits 3
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
from _report import write_report
from _variants import parse_key_values
from bench_suite import MODELS, run_set
from sklearn.base import BaseEstimator
from suite_data import suite

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor


def rule_depth(n_samples, n_classes, rows_per_leaf, floor=2, cap=10):
    """``clip(floor(log2(n / rows_per_leaf)), floor, cap)``, and deep enough for ``2 n_classes`` leaves."""
    depth = int(math.floor(math.log2(max(n_samples / rows_per_leaf, 1.0))))
    if n_classes > 2:
        depth = max(depth, math.ceil(math.log2(n_classes)) + 1)
    return int(np.clip(depth, floor, cap))


class Candidate(BaseEstimator):
    """A TAO tree or forest with ``params``; with ``rows_per_leaf`` its depth follows :func:`rule_depth`."""

    def __init__(self, task, seed, forest=False, rows_per_leaf=None, cap=10, params=None):
        self.task, self.seed, self.forest = task, seed, forest
        self.rows_per_leaf, self.cap, self.params = rows_per_leaf, cap, params

    def fit(self, X, y):
        params = dict(self.params or {})
        if self.rows_per_leaf is not None:
            n_classes = len(np.unique(y)) if self.task == "classification" else 1
            params["max_depth"] = rule_depth(len(y), n_classes, self.rows_per_leaf, cap=self.cap)
        classification = self.task == "classification"
        if self.forest:
            cls = TAOForestClassifier if classification else TAOForestRegressor
        else:
            cls = TAOClassifier if classification else TAORegressor
        self.model_ = cls(random_state=self.seed, **params).fit(X, y)
        self.depth_ = params.get("max_depth")
        if hasattr(self.model_, "tree_"):
            self.tree_, self.history_ = self.model_.tree_, self.model_.history_
        return self

    def predict(self, X):
        return self.model_.predict(X)

    def n_parameters(self):
        return self.model_.n_parameters() if self.forest else self.model_.tree_.n_parameters()


def candidate(spec):
    """``"LABEL: [forest] [L=rows_per_leaf] [cap=..] key=value ..."`` -> (label, model factory)."""
    label, _, rest = spec.partition(":")
    words = rest.split()
    forest = "forest" in words
    params = parse_key_values(" ".join(w for w in words if w != "forest"), "'LABEL: [forest] [L=..] key=value ...'")
    rows_per_leaf = params.pop("L", None)
    cap = params.pop("cap", 10)
    return label.strip(), lambda task, seed: Candidate(task, seed, forest, rows_per_leaf, cap, params)


def table(results, reference):
    """The ablation table: each candidate's rank, wins and losses against ``reference``, errors, size and time."""
    df = pd.DataFrame(results)
    err = df.groupby(["set", "model"])["error"].mean().unstack()
    ranks = err.rank(axis=1, method="average").mean()
    task = df.groupby("set")["task"].first()
    lines = [f"| candidate | mean rank | vs {reference} (better/worse) | classification val error % (train) | "
             f"regression RMSE / {reference} | parameters (median) | fit s (median) |", "|---|---|---|---|---|---|---|"]
    for m in ranks.sort_values().index:
        d = df[df.model == m]
        cls, reg = d[d.task == "classification"], d[d.task == "regression"]
        ratio = (err.loc[task[task == "regression"].index, m] / err.loc[task[task == "regression"].index, reference])
        better = int((err[m] < err[reference]).sum())  # (per set, mean over splits)
        worse = int((err[m] > err[reference]).sum())
        lines.append(f"| {m} | {ranks[m]:.2f} | {better}/{worse} | {cls.error.mean():.2f} ({cls.train_error.mean():.2f}) "
                     f"| {ratio.mean():.3f} | {d.parameters.median():.0f} | {d.seconds.median():.2f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--candidates", nargs="+", required=True, metavar="'LABEL: [forest] [L=..] key=value ...'")
    parser.add_argument("--peers", nargs="+", default=["CART", "CART (CV depth)"],
                        help="peers from bench_suite's models; the last is the reference of the table")
    parser.add_argument("--sets", nargs="+", help="a subset of the dev group")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--out", default="bench/results/ablate_defaults.md")
    args = parser.parse_args()
    models = {m: MODELS[m] for m in args.peers}
    models.update(candidate(spec) for spec in args.candidates)
    sets = suite("dev", args.sets)
    if any(s.group != "dev" for s in sets):
        parser.error("defaults are chosen on the dev group only")
    args.split, args.max_train_rows = "validation", None
    results = []
    for entry in sets:
        print(f"{entry.name} ({entry.task})", flush=True)
        results += run_set(entry, models, args)
        Path(args.out).with_suffix(".json").parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results))
    per_set = pd.DataFrame(results).groupby(["set", "model"])["error"].mean().unstack()[list(models)]
    lines = [f"# Ablation on the dev group: validation splits ({args.splits} per set)", "",
             "Candidates: " + "; ".join(args.candidates), "", *table(results, args.peers[-1]), "",
             "Validation error % or RMSE per set (mean over splits):", "",
             "| set | " + " | ".join(per_set.columns) + " |", "|---|" + "---|" * len(per_set.columns)]
    lines += [f"| {s} | " + " | ".join(f"{v:.4g}" for v in row) + " |" for s, row in per_set.iterrows()]
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
