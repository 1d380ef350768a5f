"""Missing values and categorical columns handled inside taodist, against imputing and one-hot encoding first.

On every set of the real-data suite (:mod:`suite_data`) that has missing
values or categorical columns, each model is fitted two ways on the same
80/20 splits:

* **native** -- the DataFrame as published: taodist takes it as it is
  (:mod:`taodist.estimators.tabular`); HistGradientBoosting and LightGBM get
  the one step they need, string columns as pandas ``category``, and route
  missing values and split categories themselves;
* **impute + one-hot** -- what scikit-learn's trees need: missing values
  imputed by the training part's median or most frequent value, categorical
  columns one-hot encoded (``bench_suite.prepare``); its time includes that step.

Prints test error (% or RMSE, mean over splits) and fit seconds per set, and
how often native handling is at least as accurate as impute + one-hot, and
faster. The encoding's one setting (``MAX_ONEHOT``: one-hot up to 16
categories, target encoding above) was not chosen on these sets.

Run from the repository root (``pip install '.[bench]'``)::

    python bench/bench_tabular.py                    # every set with missing values or categoricals
    python bench/bench_tabular.py --sets titanic pbc --splits 1
"""

import argparse
import time
import warnings

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import LabelEncoder

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor

from bench_suite import LARGE_ROWS, prepare, score
from suite_data import suite

warnings.simplefilter("ignore", ConvergenceWarning)


def _categorical(X):
    return [c for c in X.columns if X[c].dtype == object or str(X[c].dtype) in ("category", "string")]


def _as_category(X_train, X_test):
    """String columns as pandas ``category`` with the training part's categories (what HGB and LightGBM need)."""
    A, B = X_train.copy(), X_test.copy()
    for c in _categorical(X_train):
        cats = pd.Categorical(A[c].astype(object)).categories
        A[c] = pd.Categorical(A[c].astype(object), categories=cats)
        B[c] = pd.Categorical(B[c].astype(object).where(B[c].astype(object).isin(cats)), categories=cats)
    return A, B


def _lightgbm(task, seed):
    import lightgbm

    cls = lightgbm.LGBMClassifier if task == "classification" else lightgbm.LGBMRegressor
    return cls(random_state=seed, verbose=-1, n_jobs=2)


def _axis_without_directions(task, seed):
    """The ablation of axis nodes' default directions: their missing values stay at the filled value (the
    indicator is still a column they may split on)."""
    est = (TAOClassifier if task == "classification" else TAORegressor)(node_type="axis", random_state=seed)
    est._axis_missing_indicators = lambda: None  # no indicators handed to the axis solver
    return est


MODELS = {
    "TAO": lambda task, seed: (TAOClassifier if task == "classification" else TAORegressor)(random_state=seed),
    "TAO axis": lambda task, seed: (TAOClassifier if task == "classification" else TAORegressor)(
        node_type="axis", random_state=seed),
    "TAO axis, no directions": _axis_without_directions,
    "TAO forest": lambda task, seed: (TAOForestClassifier if task == "classification" else TAOForestRegressor)(
        random_state=seed),
    "HGB": lambda task, seed: (HistGradientBoostingClassifier if task == "classification"
                               else HistGradientBoostingRegressor)(random_state=seed),
    "LightGBM": _lightgbm,
}
#: what each model's native input is made from the published DataFrame
NATIVE_INPUT = {"TAO": "frame", "TAO axis": "frame", "TAO axis, no directions": "frame", "TAO forest": "frame",
                "HGB": "category", "LightGBM": "category"}


def run_set(entry, args):
    X, y = entry.load()
    if entry.task == "classification":
        y = pd.Series(LabelEncoder().fit_transform(y.astype(str)), index=y.index)
    else:
        y = y.astype(np.float64)
    rows = []
    n_splits = 1 if len(y) > LARGE_ROWS else args.splits
    for seed in range(n_splits):
        strat = y if entry.task == "classification" else None
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=strat)
        if args.max_train_rows and len(y_tr) > args.max_train_rows:
            keep = np.random.RandomState(seed).choice(len(y_tr), args.max_train_rows, replace=False)
            X_tr, y_tr = X_tr.iloc[keep], y_tr.iloc[keep]
        start = time.perf_counter()
        A, B = prepare(X_tr.copy(), X_te.copy())
        prepare_seconds = time.perf_counter() - start
        C, D = _as_category(X_tr, X_te)
        for name in args.models:
            inputs = {"native": (X_tr, X_te) if NATIVE_INPUT[name] == "frame" else (C, D),
                      "impute + one-hot": (A, B)}
            for way, (train, test) in inputs.items():
                model = MODELS[name](entry.task, seed)
                start = time.perf_counter()
                model.fit(train, np.asarray(y_tr))
                seconds = time.perf_counter() - start + (prepare_seconds if way != "native" else 0.0)
                err = score(entry.task, np.asarray(y_te), model.predict(test))
                rows.append(dict(set=entry.name, task=entry.task, rows=len(y), seed=seed, model=name, way=way,
                                 error=err, seconds=seconds))
                print(f"  {entry.name:14s} split {seed} {name:10s} {way:17s} {err:10.4g} {seconds:8.2f} s", flush=True)
    return rows


def report(df, models):
    lines = []
    for task, unit in (("classification", "test error %"), ("regression", "test RMSE")):
        t = df[df.task == task]
        if t.empty:
            continue
        err = t.pivot_table(index="set", columns=["model", "way"], values="error", aggfunc="mean")
        secs = t.pivot_table(index="set", columns=["model", "way"], values="seconds", aggfunc="mean")
        header = [f"{m} {w}" for m in models for w in ("native", "impute + one-hot")]
        lines += [f"### {task.capitalize()}: {unit} (mean over splits), fit seconds", "",
                  "| set | " + " | ".join(header) + " |", "|---|" + "---|" * len(header)]
        for s in err.index:
            cells = [f"{err.loc[s, (m, w)]:.4g} ({secs.loc[s, (m, w)]:.2g}s)"
                     for m in models for w in ("native", "impute + one-hot")]
            lines.append(f"| {s} | " + " | ".join(cells) + " |")
        lines.append("")
    lines.append("### Native handling against impute + one-hot, per model")
    lines.append("")
    for m in models:
        e = df[df.model == m].pivot_table(index="set", columns="way", values="error", aggfunc="mean")
        s = df[df.model == m].pivot_table(index="set", columns="way", values="seconds", aggfunc="mean")
        tol = np.where(df[df.model == m].groupby("set").task.first().loc[e.index] == "classification", 1e-9,
                       1e-9 * e["impute + one-hot"].abs())
        as_good = int((e["native"] <= e["impute + one-hot"] + tol).sum())
        faster = int((s["native"] < s["impute + one-hot"]).sum())
        ratio = float(np.median(s["native"] / s["impute + one-hot"]))
        lines.append(f"- {m}: native at least as accurate on {as_good} of {len(e)} sets; faster on {faster} "
                     f"(median time ratio native / impute + one-hot {ratio:.2f})")
    lines.append("")
    lines.append("### taodist native against the peers' native handling (error ratio; below 1 is better)")
    lines.append("")
    native = df[df.way == "native"].pivot_table(index="set", columns="model", values="error", aggfunc="mean")
    for m in ("TAO", "TAO axis", "TAO forest"):
        for peer in ("HGB", "LightGBM"):
            if m in native and peer in native:
                r = native[m] / native[peer]
                lines.append(f"- {m} / {peer}: median {np.median(r):.3f}, better or equal on "
                             f"{int((r <= 1).sum())} of {len(r)} sets")
    return lines


def _warm_up(models):
    """One small fit of each model both ways first, so no timed fit pays for compiling or first imports."""
    rng = np.random.RandomState(0)
    frame = pd.DataFrame({"x": rng.randn(200), "c": pd.Series(rng.choice(["a", "b"], 200), dtype=object)})
    frame.loc[::9, "x"] = np.nan
    y = (rng.rand(200) < 0.5).astype(int)
    A, _ = prepare(frame.copy(), frame.copy())
    C, _ = _as_category(frame, frame)
    for name in models:
        for task, target in (("classification", y), ("regression", y + rng.rand(200))):
            MODELS[name](task, 0).fit(frame if NATIVE_INPUT[name] == "frame" else C, target)
            MODELS[name](task, 0).fit(A, target)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", nargs="*", help="only these sets (default: every set with NaN or categoricals)")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--models", nargs="*", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--max-train-rows", type=int, default=50_000)
    args = parser.parse_args()
    rows = []
    _warm_up(args.models)
    for entry in suite(names=args.sets):
        if args.sets is None:
            X, _ = entry.load()
            if not (_categorical(X) or X.isna().any().any()):
                continue
        print(f"{entry.name} ({entry.group}, {entry.task})", flush=True)
        rows += run_set(entry, args)
    print("\n".join(report(pd.DataFrame(rows), args.models)))


if __name__ == "__main__":
    main()
