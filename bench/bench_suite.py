"""taodist's defaults against the tree learners people use, on real tabular data as users have it.

Every model is called as a new user calls it, on its defaults, on the same
prepared matrix (categorical columns one-hot encoded, missing values imputed
by the training part's median or most frequent value: what scikit-learn's
trees need). Each data set of :mod:`suite_data` is split ``--splits`` times
(80% train / 20% test, stratified for classification; seeds 0, 1, ...).
With ``--split validation`` the test part is set aside unseen and the
training part is split again (75% / 25%): choose defaults that way, on the
``dev`` group only, never on the test splits or the ``report`` group.

Prints one table per task (test error in % or RMSE, mean over splits; fit
seconds; parameters), then taodist's wins and losses against CART and
RandomForest, every model's mean rank, and the fit-time ratios on the sets
under 10,000 rows. Raw results go to a JSON file beside the report.

Run from the repository root (``pip install '.[bench]'``)::

    python bench/bench_suite.py                                    # the report group, every model
    python bench/bench_suite.py --group dev --split validation \\
        --models CART TAO --tree-variant "depth6: max_depth=6"     # choosing a default
    python bench/bench_suite.py --sets iris wine --splits 1        # a quick look
"""

import argparse
import json
import os
import platform
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.compose import ColumnTransformer
from sklearn.ensemble import (
    ExtraTreesClassifier,
    ExtraTreesRegressor,
    HistGradientBoostingClassifier,
    HistGradientBoostingRegressor,
    RandomForestClassifier,
    RandomForestRegressor,
)
from sklearn.exceptions import ConvergenceWarning
from sklearn.impute import SimpleImputer
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import LabelEncoder, OneHotEncoder
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor

from _report import write_report
from _variants import parse_key_values
from suite_data import suite

warnings.simplefilter("ignore", ConvergenceWarning)

#: sets above this many rows are split once (their fits dominate the run)
LARGE_ROWS = 50_000
#: the fit-time targets are on sets under this many rows
SMALL_ROWS = 10_000
CV_DEPTHS = [1, 2, 3, 4, 5, 6, 8, 10, 12, 15, 20, None]


# ------------------------------------------------------------------ models
def _cart_cv(task, seed):
    base = DecisionTreeClassifier(random_state=seed) if task == "classification" else DecisionTreeRegressor(
        random_state=seed)
    return GridSearchCV(base, {"max_depth": CV_DEPTHS}, cv=5, n_jobs=-1)


def _lightgbm(task, seed):
    import lightgbm as lgb

    cls = lgb.LGBMClassifier if task == "classification" else lgb.LGBMRegressor
    return cls(random_state=seed, verbose=-1)


def _xgboost(task, seed):
    import xgboost as xgb

    cls = xgb.XGBClassifier if task == "classification" else xgb.XGBRegressor
    return cls(random_state=seed)


MODELS = {
    "TAO": lambda task, seed: (TAOClassifier if task == "classification" else TAORegressor)(random_state=seed),
    "TAO forest": lambda task, seed: (TAOForestClassifier if task == "classification" else TAOForestRegressor)(
        random_state=seed),
    "CART": lambda task, seed: (DecisionTreeClassifier if task == "classification" else DecisionTreeRegressor)(
        random_state=seed),
    "CART (CV depth)": _cart_cv,
    "RF": lambda task, seed: (RandomForestClassifier if task == "classification" else RandomForestRegressor)(
        n_estimators=100, n_jobs=-1, random_state=seed),
    "ExtraTrees": lambda task, seed: (ExtraTreesClassifier if task == "classification" else ExtraTreesRegressor)(
        n_estimators=100, n_jobs=-1, random_state=seed),
    "HGB": lambda task, seed: (HistGradientBoostingClassifier if task == "classification"
                               else HistGradientBoostingRegressor)(random_state=seed),
    "LightGBM": _lightgbm,
    "XGBoost": _xgboost,
}


def variant(kind, params):
    """A taodist tree (``kind="tree"``) or forest with ``params`` over its defaults."""
    def make(task, seed):
        if kind == "tree":
            cls = TAOClassifier if task == "classification" else TAORegressor
        else:
            cls = TAOForestClassifier if task == "classification" else TAOForestRegressor
        return cls(random_state=seed, **params)

    return make


# -------------------------------------------------------------- parameters
def _sklearn_tree_parameters(tree, binary):
    """2 per decision node, K per leaf (1 for binary classification and single-output regression)."""
    leaves = tree.children_left < 0
    k = 1 if binary else tree.value.shape[1] * (tree.value.shape[2] if tree.value.shape[1] == 1 else 1)
    return int(2 * (~leaves).sum() + k * leaves.sum())


def n_parameters(model, task, n_classes):
    """Parameters of a fitted model, counted as in the TAO thesis (Appendix A) for every kind of tree."""
    binary = task == "classification" and n_classes == 2
    model = getattr(model, "best_estimator_", model)
    if hasattr(model, "n_parameters"):
        return model.n_parameters() if callable(model.n_parameters) else model.n_parameters
    if hasattr(model, "tree_") and hasattr(model.tree_, "n_parameters"):
        return model.tree_.n_parameters()
    if hasattr(model, "tree_"):
        return _sklearn_tree_parameters(model.tree_, binary)
    if hasattr(model, "estimators_") and hasattr(model.estimators_[0], "tree_"):
        return sum(_sklearn_tree_parameters(e.tree_, binary) for e in model.estimators_)
    if hasattr(model, "_predictors"):  # HistGradientBoosting: each tree's splits (2) and leaves (1)
        return int(sum(2 * (~p.nodes["is_leaf"]).sum() + p.nodes["is_leaf"].sum()
                       for trees in model._predictors for p in trees))
    if hasattr(model, "booster_"):  # LightGBM
        info = model.booster_.dump_model()["tree_info"]
        return int(sum(3 * t["num_leaves"] - 2 for t in info))
    if hasattr(model, "get_booster"):  # XGBoost
        df = model.get_booster().trees_to_dataframe()
        leaves = (df["Feature"] == "Leaf").sum()
        return int(2 * (len(df) - leaves) + leaves)
    return None


# ------------------------------------------------------------------- data
def prepare(X_train, X_test):
    """One-hot categorical columns, impute missing values; fitted on the training part only."""
    categorical = [c for c in X_train.columns if X_train[c].dtype == object or str(X_train[c].dtype) in
                   ("category", "bool", "string")]
    numeric = [c for c in X_train.columns if c not in categorical]
    transform = ColumnTransformer([
        ("numeric", SimpleImputer(strategy="median"), numeric),
        ("categorical", make_pipeline(SimpleImputer(strategy="most_frequent"),
                                      OneHotEncoder(handle_unknown="ignore", sparse_output=False)), categorical),
    ])
    for frame in (X_train, X_test):
        for c in categorical:
            frame[c] = frame[c].astype(object).where(frame[c].notna(), np.nan)
    A = transform.fit_transform(X_train).astype(np.float64)
    B = transform.transform(X_test).astype(np.float64)
    return A, B


def splits(data, task, n_splits, split, max_train_rows):
    """``(seed, X_train, y_train, X_eval, y_eval)`` for each split; the evaluation part is test or validation."""
    X, y = data
    for seed in range(n_splits):
        strat = y if task == "classification" else None
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=seed, stratify=strat)
        if split == "validation":
            strat = y_tr if task == "classification" else None
            X_tr, X_te, y_tr, y_te = train_test_split(X_tr, y_tr, test_size=0.25, random_state=1000 + seed,
                                                      stratify=strat)
        if max_train_rows and len(y_tr) > max_train_rows:
            keep = np.random.RandomState(seed).choice(len(y_tr), max_train_rows, replace=False)
            X_tr, y_tr = X_tr.iloc[keep], y_tr.iloc[keep]
        A, B = prepare(X_tr.copy(), X_te.copy())
        yield seed, A, np.asarray(y_tr), B, np.asarray(y_te)


def score(task, y_true, y_pred):
    """Test error in % (classification) or RMSE (regression)."""
    if task == "classification":
        return 100.0 * float(np.mean(y_true != y_pred))
    return float(np.sqrt(np.mean((np.asarray(y_true, dtype=float) - y_pred) ** 2)))


# -------------------------------------------------------------------- run
def run_set(entry, models, args):
    """Results of every model on every split of one data set."""
    X, y = entry.load()
    if entry.task == "classification":
        y = pd.Series(LabelEncoder().fit_transform(y.astype(str)), index=y.index)
    else:
        y = y.astype(np.float64)
    n_splits = 1 if len(y) > LARGE_ROWS else args.splits
    n_classes = int(y.nunique()) if entry.task == "classification" else 0
    rows = []
    for seed, A, y_tr, B, y_te in splits((X, y), entry.task, n_splits, args.split, args.max_train_rows):
        for name, make in models.items():
            model = make(entry.task, seed)
            start = time.perf_counter()
            model.fit(A, y_tr)
            seconds = time.perf_counter() - start
            err = score(entry.task, y_te, model.predict(B))
            history = getattr(getattr(model, "best_estimator_", model), "history_", None)
            rows.append(dict(set=entry.name, group=entry.group, task=entry.task, rows=len(y), columns=A.shape[1],
                             seed=seed, model=name, error=err, train_error=score(entry.task, y_tr, model.predict(A)),
                             objective=float(history[-1]) if history is not None and len(history) else None,
                             seconds=seconds, parameters=n_parameters(model, entry.task, n_classes)))
            print(f"  {entry.name:14s} split {seed} {name:24s} {err:10.4g} {seconds:8.2f} s", flush=True)
    return rows


def summary(results, models):
    """The report: tables per task, wins/losses, mean ranks, time ratios."""
    df = pd.DataFrame(results)
    lines = []
    for task, unit in (("classification", "test error %"), ("regression", "test RMSE")):
        t = df[df.task == task]
        if t.empty:
            continue
        err = t.pivot_table(index="set", columns="model", values="error", aggfunc="mean")[list(models)]
        secs = t.pivot_table(index="set", columns="model", values="seconds", aggfunc="mean")[list(models)]
        size = t.groupby("set")[["rows", "columns"]].first()
        lines += [f"### {task.capitalize()}: {unit} (mean over splits), fit seconds", "",
                  "| set | rows x columns | " + " | ".join(models) + " |",
                  "|---|---|" + "---|" * len(models)]
        for s in err.index:
            cells = [f"{err.loc[s, m]:.4g} ({secs.loc[s, m]:.2g}s)" for m in models]
            lines.append(f"| {s} | {size.loc[s, 'rows']:,} x {size.loc[s, 'columns']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += comparisons(df, models)
    return lines


def comparisons(df, models):
    """taodist against its peers: per-set wins/losses, mean ranks, median time ratios, parameters."""
    mean = df.groupby(["set", "model"]).agg(error=("error", "mean"), seconds=("seconds", "mean"),
                                            parameters=("parameters", "mean"), rows=("rows", "first"),
                                            task=("task", "first")).reset_index()
    err = mean.pivot(index="set", columns="model", values="error")
    secs = mean.pivot(index="set", columns="model", values="seconds")
    params = mean.pivot(index="set", columns="model", values="parameters")
    task = mean.groupby("set")["task"].first()
    rows = mean.groupby("set")["rows"].first()
    lines = ["### taodist against its peers", ""]

    def tolerance(s):  # 1 point of error, or 5% of the reference's RMSE
        return 1.0 if task[s] == "classification" else 0.05

    def versus(a, b, label):
        if a not in err or b not in err:
            return
        better = sum(err.loc[s, a] < err.loc[s, b] for s in err.index)
        tied = sum(err.loc[s, a] == err.loc[s, b] for s in err.index)
        far = [s for s in err.index if (err.loc[s, a] - err.loc[s, b] > tolerance(s) if task[s] == "classification"
                                        else err.loc[s, a] > (1 + tolerance(s)) * err.loc[s, b])]
        lines.append(f"- {label}: better on {better}, equal on {tied}, worse on {len(err) - better - tied} of "
                     f"{len(err)} sets; worse by more than 1 point / 5% RMSE on {len(far)}"
                     + (f" ({', '.join(far)})" if far else ""))

    versus("TAO", "CART", "TAO tree vs unlimited CART")
    versus("TAO", "CART (CV depth)", "TAO tree vs CART with CV depth")
    versus("TAO forest", "RF", "TAO forest vs RandomForest(100)")
    for m in models:
        if m.startswith("TAO") and m not in ("TAO", "TAO forest"):
            versus(m, "CART", f"{m} vs unlimited CART")
            versus(m, "RF", f"{m} vs RandomForest(100)")
    lines += targets(err, task)
    ranks = err.rank(axis=1, method="average").mean().sort_values()
    lines += ["", "Mean rank over sets (1 = most accurate): " + ", ".join(f"{m} {r:.2f}" for m, r in ranks.items())]
    small = [s for s in err.index if rows[s] < SMALL_ROWS]
    for a, b in (("TAO", "CART"), ("TAO forest", "RF")):
        if a in secs and b in secs and small:
            ratio = (secs.loc[small, a] / secs.loc[small, b]).median()
            lines.append(f"- median fit time {a} / {b} on the {len(small)} sets under {SMALL_ROWS:,} rows: {ratio:.1f}x")
    for a, b in (("TAO forest", "RF"), ("TAO", "CART")):
        if a in params and b in params:
            fewer = int((params[a] < params[b]).sum())
            lines.append(f"- {a} has fewer parameters than {b} on {fewer} of {len(params)} sets "
                         f"(median ratio {(params[a] / params[b]).median():.2f})")
    return lines + [""]


def targets(err, task):
    """Issue 41's targets per set: the tree against both CARTs, the forest against RandomForest."""
    pairs = [(a, b) for a, b in (("TAO", "CART"), ("TAO", "CART (CV depth)"), ("TAO forest", "RF"))
             if a in err and b in err]
    if not pairs:
        return []
    lines = ["", "Per set, error ratio (taodist / peer; below 1 is better; * worse by more than 1 point or 5% RMSE):",
             "", "| set | " + " | ".join(f"{a} / {b}" for a, b in pairs) + " |", "|---|" + "---|" * len(pairs)]
    for s in err.index:
        cells = []
        for a, b in pairs:
            far = (err.loc[s, a] - err.loc[s, b] > 1.0 if task[s] == "classification"
                   else err.loc[s, a] > 1.05 * err.loc[s, b])
            ratio = err.loc[s, a] / err.loc[s, b] if err.loc[s, b] > 0 else (1.0 if err.loc[s, a] == 0 else np.inf)
            cells.append(f"{ratio:.3f}" + (" *" if far else ""))
        lines.append(f"| {s} | " + " | ".join(cells) + " |")
    n = len(err)
    lines.append("")
    for (a, b), goal in zip(pairs, ("better than", "not worse than", "at least as accurate as")):
        ok = int((err[a] < err[b]).sum() if goal == "better than" else (err[a] <= err[b]).sum())
        lines.append(f"- {a} {goal} {b} on {ok} of {n} sets ({100 * ok / n:.0f}%)")
    return lines


#: the plot's panels: the reference, and the models drawn against it
PLOT_PANELS = (("CART (CV depth)", "single trees", ("TAO", "CART")),
               ("RF", "ensembles", ("TAO forest", "ExtraTrees", "HGB", "LightGBM", "XGBoost")))


def plot_ratios(results, path):
    """A figure of each set's error relative to a reference: single trees to CART (CV depth), ensembles to RF.

    One row per set, a log axis, 1 marked: left of it is more accurate than
    the reference. Written to ``path`` (PNG) through a temporary file.
    """
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    df = pd.DataFrame(results)
    err = df.pivot_table(index="set", columns="model", values="error", aggfunc="mean")
    panels = [(ref, title, [m for m in models if m in err]) for ref, title, models in PLOT_PANELS if ref in err]
    if not panels:
        raise SystemExit(f"--plot needs {PLOT_PANELS[0][0]!r} or {PLOT_PANELS[1][0]!r} among the models")
    sets = sorted(err.index, key=lambda s: (df[df.set == s].task.iloc[0], s))
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 0.28 * len(sets) + 1.6), sharey=True,
                             squeeze=False)
    markers = "osD^v<>"
    for ax, (ref, title, models) in zip(axes[0], panels):
        ratio = err.loc[sets, models].div(err.loc[sets, ref].where(err.loc[sets, ref] > 0), axis=0)
        for k, m in enumerate(models):
            ax.plot(ratio[m], np.arange(len(sets)), markers[k % len(markers)], label=m, alpha=0.8)
        ax.axvline(1.0, color="0.4", lw=0.8)
        ax.set_xscale("log")
        ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4) if ratio.min().min() / 2 <= t <= ratio.max().max() * 2]
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_title(f"{title}: error / {ref}", fontsize=10)
        ax.legend(fontsize=7, loc="lower right")
        ax.grid(axis="x", alpha=0.3)
    axes[0][0].set_yticks(np.arange(len(sets)), sets, fontsize=8)
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    tmp = Path(path).with_name(Path(path).name + ".tmp.png")
    fig.savefig(tmp, dpi=100)
    os.replace(tmp, path)
    plt.close(fig)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--group", choices=("report", "dev", "all"), default="report")
    parser.add_argument("--sets", nargs="+", help="only these sets (any group)")
    parser.add_argument("--splits", type=int, default=3)
    parser.add_argument("--split", choices=("test", "validation"), default="test")
    parser.add_argument("--models", nargs="+", default=list(MODELS), help=f"from {list(MODELS)}")
    parser.add_argument("--tree-variant", action="append", default=[], metavar="'LABEL: key=value ...'",
                        help="a TAOClassifier/TAORegressor with these parameters over its defaults")
    parser.add_argument("--forest-variant", action="append", default=[], metavar="'LABEL: key=value ...'")
    parser.add_argument("--max-train-rows", type=int, default=None, help="subsample larger training parts")
    parser.add_argument("--out", default="bench/results/suite.md")
    parser.add_argument("--from-json", help="rewrite the report of an earlier run's JSON (no fits)")
    parser.add_argument("--plot", metavar="PNG", help="also draw each set's error ratios to CART (CV depth) and RF")
    args = parser.parse_args()
    if args.split == "validation" and args.group != "dev" and not args.sets:
        parser.error("--split validation is for choosing defaults: use it with --group dev")
    models = {m: MODELS[m] for m in args.models}
    for kind, specs in (("tree", args.tree_variant), ("forest", args.forest_variant)):
        for spec in specs:
            label, _, params = spec.partition(":")
            models[f"TAO {kind} {label.strip()}"] = variant(kind, parse_key_values(params, "'LABEL: key=value ...'"))
    group = None if args.group == "all" else args.group
    results = json.loads(Path(args.from_json).read_text()) if args.from_json else []
    for entry in [] if args.from_json else suite(None if args.sets else group, args.sets):
        print(f"{entry.name} ({entry.group}, {entry.task})", flush=True)
        results += run_set(entry, models, args)
        Path(args.out).with_suffix(".json").parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).with_suffix(".json").write_text(json.dumps(results))
    header = [f"# Suite: {args.group} group, {args.split} splits ({args.splits} per set, 1 above {LARGE_ROWS:,} rows)",
              "", f"Machine: {platform.machine()}, {os.cpu_count()} cores; command: bench/bench_suite.py "
              f"--group {args.group} --split {args.split} --splits {args.splits}"
              + (f" --max-train-rows {args.max_train_rows}" if args.max_train_rows else ""), ""]
    write_report("\n".join(header + summary(results, models)) + "\n", args.out)
    if args.plot:
        plot_ratios(results, args.plot)


if __name__ == "__main__":
    main()
