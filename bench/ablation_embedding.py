"""Ablation of ``TAOEmbedding``'s settings: what limits the tree's held-out quality, and what it costs (issue 45).

Each setting is a change to ``TAOEmbedding``'s keyword arguments (:data:`SETTINGS`). For each data set and seed,
on the SAME points, it reports per setting: the t-SNE KL of the tree's own output ``F(X)`` on the fitting points
(exact, against one ``P``), the trustworthiness (10 neighbours) and 5-NN accuracy in 2-D of the tree's map of the
evaluation points, leaves, non-zero parameters, the best outer step and the steps run, the fit time, and its ratio
to openTSNE's free embedding of the same points, timed in the same run (``bench_embedding.run_opentsne``: its kNN
and affinities included). The metrics are ``bench_embedding``'s (:class:`bench_embedding.Scorer`).

Two kinds of evaluation points (``--split``):

* ``validation`` (for choosing settings): ``--n-fit`` + ``--n-val`` random points of the data set's TRAINING
  split; the fit sees the first part, the figures are on the second. No test point is read.
* ``test`` (for reporting, once the settings are chosen): ``--n-fit`` random training points and ``--n-val``
  random test points, drawn as ``bench_embedding.load`` draws them (so MNIST at 5,000/2,000 is the benchmark's
  split).

Every row is appended to ``--jsonl`` as soon as it is measured (a rerun with ``--table-only`` rebuilds the
tables from it); the markdown tables (mean +- sd over seeds) go to stdout and ``--out``.

Run from the repository root with ../shared/data present::

    python bench/ablation_embedding.py --datasets pendigits letter fashion_mnist --split validation
    python bench/ablation_embedding.py --datasets mnist --split test --n-fit 5000 --n-val 2000 \\
        --settings "defaults before (thesis)" "leaf_C=0.1, cart, stop 3"
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np

from taodist import TAOEmbedding
from taodist.datasets import load_dataset
from taodist.embedding._affinities import joint_affinities, neighbours_for

from bench_embedding import Scorer, load, run_opentsne, timed

#: the defaults before this ablation (the thesis' setting): every setting below changes these
BEFORE = {"max_depth": 4, "C": 10.0, "leaf_C": None, "leaf_type": "linear", "init": "random", "n_iter_no_change": None,
          "penalty_decay": 0.0, "z_iter": 100}
#: setting name -> TAOEmbedding keyword arguments (on top of perplexity, n_jobs, random_state)
SETTINGS = {name: {**BEFORE, **change} for name, change in {
    "defaults before (thesis)": {},
    "leaf_C=1": {"leaf_C": 1.0},
    "leaf_C=0.1": {"leaf_C": 0.1},
    "constant leaves, depth 6": {"leaf_type": "constant", "max_depth": 6},
    "depth 6": {"max_depth": 6},
    "init=cart": {"init": "cart"},
    "n_iter_no_change=3": {"n_iter_no_change": 3},
    "depth 6, leaf_C=0.1": {"max_depth": 6, "leaf_C": 0.1},
    "leaf_C=0.1, cart, stop 3": {"leaf_C": 0.1, "init": "cart", "n_iter_no_change": 3},
    "depth 6, leaf_C=0.1, cart, stop 3": {"max_depth": 6, "leaf_C": 0.1, "init": "cart", "n_iter_no_change": 3},
    # the penalty that falls with mu (penalty_decay), on top of the defaults chosen above
    "leaf_C=0.1, cart, stop 3, decay 0.5": {"leaf_C": 0.1, "init": "cart", "n_iter_no_change": 3,
                                            "penalty_decay": 0.5},
    "leaf_C=0.1, cart, stop 3, decay 1": {"leaf_C": 0.1, "init": "cart", "n_iter_no_change": 3,
                                          "penalty_decay": 1.0},
    "leaf_C=0.1, cart, all steps": {"leaf_C": 0.1, "init": "cart"},
    "leaf_C=0.1, cart, all steps, decay 1": {"leaf_C": 0.1, "init": "cart", "penalty_decay": 1.0},
    "leaf_C=0.1, cart, all steps, decay 0.5": {"leaf_C": 0.1, "init": "cart", "penalty_decay": 0.5},
    "leaf_C=0.1, cart, stop 6, decay 1": {"leaf_C": 0.1, "init": "cart", "n_iter_no_change": 6,
                                          "penalty_decay": 1.0},
    # fewer embedding iterations per Z step (the Z steps took most of the time), on the defaults chosen above
    **{f"leaf_C=0.1, cart, all steps, decay 1, z {z}": {"leaf_C": 0.1, "init": "cart", "penalty_decay": 1.0,
                                                        "z_iter": z} for z in (50, 30, 20, 10, 5, 2, 1)},
    # deeper trees on those defaults (issue 45's 5-NN target allows up to 64 leaves)
    **{f"depth {d}, leaf_C=0.1, cart, all steps, decay 1, z 5": {"max_depth": d, "leaf_C": 0.1, "init": "cart",
                                                                  "penalty_decay": 1.0, "z_iter": 5} for d in (5, 6)},
    "direct fit (leaf_C=0.1, cart)": {"leaf_C": 0.1, "init": "cart", "n_outer": 0},
    # the elastic embedding (its own objective in "path"; the KL column scores its map as t-SNE would)
    "EE, leaf_C=0.1, cart, all steps, decay 1": {"method": "ee", "leaf_C": 0.1, "init": "cart",
                                                 "penalty_decay": 1.0},
    **{f"EE, leaf_C=0.1, cart, all steps, decay 1, z {z}": {"method": "ee", "leaf_C": 0.1, "init": "cart",
                                                            "penalty_decay": 1.0, "z_iter": z} for z in (20, 10)},
}.items()}
COLUMNS = [("kl", "KL of F(X), fit points", 3), ("trust_test", "trust held-out", 3),
           ("acc_test", "5-NN held-out %", 1), ("leaves", "leaves", 0), ("params", "params", 0),
           ("best", "best step", 0), ("steps", "steps run", 0), ("seconds", "fit s", 1), ("ratio", "× openTSNE", 2)]


def split(name, how, n_fit, n_val):
    """``(X_fit, y_fit, X_eval, y_eval)``: a validation split of the training points, or ``bench_embedding.load``'s."""
    if how == "test":
        return load(name, n_fit, n_val, 0, 0)
    Xtr, ytr, _, _ = load_dataset(name)
    rows = np.random.default_rng(0).choice(len(Xtr), n_fit + n_val, replace=False)
    fit, val = np.sort(rows[:n_fit]), np.sort(rows[n_fit:])
    return Xtr[fit].astype(np.float64), ytr[fit], Xtr[val].astype(np.float64), ytr[val]


def run(name, seed, args, emit):
    X, y, Xe, ye = split(name, args.split, args.n_fit, args.n_val)
    perplexity = 30.0
    k = neighbours_for(perplexity, None, X.shape[0])
    P = joint_affinities(X, perplexity, k, np.random.RandomState(seed))  # the estimator's own first draw
    score = Scorer(X, y, Xe, ye, P, args.n_jobs, seed)
    base = {"data": name, "seed": seed, "split": args.split, "n_fit": X.shape[0], "n_eval": Xe.shape[0]}
    emb, free_secs = run_opentsne(X, P, perplexity, k, args.n_jobs, seed)
    Y_eval = np.asarray(emb.transform(Xe), dtype=np.float64)
    emit({**base, "setting": "openTSNE free + transform", **score(np.asarray(emb, dtype=np.float64), Y_eval),
          "seconds": free_secs, "ratio": 1.0})
    for setting in args.settings:
        kwargs = {"perplexity": perplexity, "n_jobs": args.n_jobs, "random_state": seed, **SETTINGS[setting]}
        model, secs = timed(lambda: TAOEmbedding(**kwargs).fit(X))
        emit({**base, "setting": setting, **score(model.embedding_, model.transform(Xe)),
              "leaves": model.tree_.n_leaves(), "params": model.tree_.n_parameters(),
              "best": model.best_iteration_, "steps": len(model.history_) - 1, "seconds": secs,
              "ratio": secs / free_secs, "free_seconds": free_secs,
              "path": [round(h["objective"], 4) for h in model.history_],
              "z_seconds": sum(h["z_seconds"] for h in model.history_),
              "tree_seconds": sum(h["tree_seconds"] for h in model.history_)})


def cell(values, digits):
    values = [v for v in values if v is not None]
    if not values:
        return "–"
    mean = float(np.mean(values))
    if digits == 0:
        return f"{mean:.0f}" if len(values) == 1 or min(values) == max(values) else \
            f"{mean:.0f} ({min(values):.0f}–{max(values):.0f})"
    return f"{mean:.{digits}f}" + ("" if len(values) == 1 else f" ± {np.std(values):.{digits}f}")


def tables(rows):
    out = []
    for (name, how) in dict.fromkeys((r["data"], r["split"]) for r in rows):
        these = [r for r in rows if r["data"] == name and r["split"] == how]
        seeds = sorted({r["seed"] for r in these})
        out.append(f"### {name} ({these[0]['n_fit']} fitting points, {these[0]['n_eval']} "
                   f"{'validation points from the training split' if how == 'validation' else 'test points'}; "
                   f"seeds {', '.join(map(str, seeds))})\n")
        out.append("| setting | " + " | ".join(title for _, title, _ in COLUMNS) + " |")
        out.append("|---" * (len(COLUMNS) + 1) + "|")
        for setting in dict.fromkeys(r["setting"] for r in these):
            group = [r for r in these if r["setting"] == setting]
            out.append(f"| {setting} | " + " | ".join(cell([r.get(key) for r in group], d) for key, _, d in COLUMNS)
                       + " |")
        out.append("")
    return "\n".join(out)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["pendigits", "letter", "fashion_mnist"])
    parser.add_argument("--split", choices=["validation", "test"], default="validation")
    parser.add_argument("--n-fit", type=int, default=3000)
    parser.add_argument("--n-val", type=int, default=1000)
    parser.add_argument("--settings", nargs="+", default=list(SETTINGS), choices=list(SETTINGS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--n-jobs", type=int, default=1)
    parser.add_argument("--jsonl", default="bench/results/ablation_embedding.jsonl")
    parser.add_argument("--out", default="bench/results/ablation_embedding.md")
    parser.add_argument("--table-only", action="store_true", help="rebuild the tables from --jsonl")
    args = parser.parse_args()
    Path(args.jsonl).parent.mkdir(parents=True, exist_ok=True)

    def emit(row):
        with open(args.jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        shown = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in row.items() if k != "path"}
        print(f"  {shown}", flush=True)

    if not args.table_only:
        TAOEmbedding(max_depth=2, perplexity=5.0, n_outer=1, z_iter=5, free_iter=20, random_state=0).fit(
            np.random.default_rng(0).random((60, 5)))  # numba's compilation, outside the timed fits
        start = time.perf_counter()
        for name in args.datasets:
            for seed in args.seeds:
                print(f"{name}, seed {seed}", flush=True)
                run(name, seed, args, emit)
        print(f"wall time {(time.perf_counter() - start) / 60:.1f} min", flush=True)
    rows = {}  # the last row of each data set, split, seed and setting (a rerun replaces the earlier one)
    for line in open(args.jsonl):
        row = json.loads(line)
        rows[row["data"], row["split"], row["seed"], row["setting"]] = row
    rows = list(rows.values())
    text = tables([r for r in rows if r["data"] in args.datasets and r["split"] == args.split])
    print(text)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
