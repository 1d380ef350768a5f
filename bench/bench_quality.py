"""Ablation of single-tree quality: what makes a TAO tree accurate (issue: tree quality).

Every variant is fitted on the same 90% of each training set (the other 10%
is the validation split that decides what stays), over several seeds, and
reported as mean ± std of: training, validation and test error (% for
classification, RMSE for regression), the final objective (``history_[-1]``,
the fit's own units), parameters (thesis Appendix A), TAO iterations and
fit seconds. Scikit-learn CART (same depth and unlimited) runs in the same
script as the reference. Variants are estimator parameters plus, for node
solvers that are experiments rather than features, a registration in
``taodist._nodes.NODE_SOLVERS`` made here (the registry is the plug-in point).

Run from the repository root, with ../shared/data present::

    python bench/bench_quality.py                                  # every data set, every variant, 3 seeds
    python bench/bench_quality.py --datasets letter --variants saga,level --seeds 0 1 2
    python bench/bench_quality.py --quick                          # smoke run on small subsets

Writes a markdown table to stdout and to ``--out`` (default
``bench/results/quality.md``, not committed).
"""

import argparse
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from taodist import TAOClassifier, TAORegressor
from taodist._nodes import NODE_SOLVERS, NodeSolver, axis_split_losses
from taodist.datasets import load_dataset

warnings.simplefilter("ignore", ConvergenceWarning)

#: data set -> (loader name, rows of the training set used (None: all), depth, C)
DATASETS = {
    "letter": ("letter", None, 10, 100.0),
    "mnist20k": ("mnist", 20000, 8, 10.0),
    "cpu_act": ("cpu_act", None, 6, 100.0),
}


# ------------------------------------------------------------ node candidates
def _node_objective(X, target, weight, alpha, w, b):
    """Weighted 0/1 loss of the hyperplane on the care points + alpha * ||w||_1 (the node's true objective)."""
    right = X @ w + b >= 0
    return float(weight @ (right != target) + alpha * np.abs(w).sum())


def _exact_threshold(X, target, weight, w):
    """The bias minimising the weighted 0/1 loss along direction ``w`` (sort of the projections)."""
    proj = (X @ w)[:, None]
    losses, thresholds = axis_split_losses(proj, target, weight)
    k = int(np.argmin(losses[:, 0]))
    thr = thresholds[k, 0]
    if not np.isfinite(thr):
        return None
    return -thr


def candidate_level(base):
    """A level solver that keeps, per node, the candidate with the lowest true node objective.

    Candidates: the ``base`` surrogate's solution; its direction with the
    threshold re-optimised exactly; the best axis-aligned split (as a one-hot
    weight); the warm start (the node's last iterate). The optimiser's accept
    test still runs on every care point afterwards.
    """
    def level(problems):
        out = []
        for p, (w, b) in zip(problems, NODE_SOLVERS[base].solve_level(problems)):
            X = np.asarray(p.X, dtype=np.float64)
            cands = [(w, b)]
            b_exact = _exact_threshold(X, p.target, p.weight, w) if np.any(w) else None
            if b_exact is not None:
                cands.append((w, b_exact))
            f, thr = NODE_SOLVERS["axis"].solve(X, p.target, p.weight)
            if np.isfinite(thr):
                e = np.zeros(X.shape[1])
                e[f] = 1.0
                cands.append((e, -thr))
            if p.w0 is not None:
                cands.append((np.asarray(p.w0, dtype=np.float64), float(p.b0)))
            scores = [_node_objective(X, p.target, p.weight, p.alpha, cw, cb) for cw, cb in cands]
            out.append(cands[int(np.argmin(scores))])
        return out

    return level


def register_experimental_solvers():
    """Node solvers that are experiments of this benchmark, not package features."""
    for base in ("saga", "liblinear", "fista"):
        NODE_SOLVERS[f"{base}+candidates"] = NodeSolver(NODE_SOLVERS[base].solve, float32=NODE_SOLVERS[base].float32,
                                                        level=candidate_level(base))


#: variant -> estimator parameters (on top of the data set's depth and C)
VARIANTS = {
    "saga": dict(solver="saga"),
    "liblinear": dict(solver="liblinear"),
    "saga+candidates": dict(solver="saga+candidates"),
    "liblinear+candidates": dict(solver="liblinear+candidates"),
    "saga 40 iterations": dict(solver="saga", max_iter=40, tol=1e-3),
    "fista": dict(solver="fista"),
    "fista C x3": dict(solver="fista", C_factor=3.0),
    "fista C /3": dict(solver="fista", C_factor=1 / 3),
    "fista+candidates": dict(solver="fista+candidates"),
    "fista 40 iterations": dict(solver="fista", max_iter=40, tol=1e-3),
    "defaults": dict(),
}


# ------------------------------------------------------------------ running
def error(model, X, y, regression):
    pred = model.predict(X)
    if regression:
        return float(np.sqrt(np.mean((pred - y) ** 2)))
    return float(100 * np.mean(pred != y))


def load(name, quick):
    loader, rows, depth, C = DATASETS[name]
    Xtr, ytr, Xte, yte = load_dataset(loader)
    if rows is not None:
        Xtr, ytr = Xtr[:rows], ytr[:rows]
    if quick:
        Xtr, ytr, Xte, yte = Xtr[:3000], ytr[:3000], Xte[:2000], yte[:2000]
        depth = min(depth, 5)
    regression = loader == "cpu_act"
    Xfit, Xval, yfit, yval = train_test_split(Xtr, ytr, test_size=0.1, random_state=0,
                                              stratify=None if regression else ytr)
    return dict(fit=(Xfit, yfit), val=(Xval, yval), test=(Xte, yte), regression=regression, depth=depth, C=C)


def run_variant(data, params, seed):
    Est = TAORegressor if data["regression"] else TAOClassifier
    params = dict(params)
    kw = dict(max_depth=data["depth"], C=data["C"] * params.pop("C_factor", 1.0), random_state=seed)
    kw.update(params)
    if params == {}:  # "defaults": what TAOClassifier() / TAORegressor() would do
        kw = dict(random_state=seed)
    model = Est(**kw)
    start = time.perf_counter()
    model.fit(*data["fit"])
    seconds = time.perf_counter() - start
    r = data["regression"]
    return dict(train=error(model, *data["fit"], r), val=error(model, *data["val"], r),
                test=error(model, *data["test"], r), objective=float(model.history_[-1]),
                params=model.tree_.n_parameters(), iters=model.n_iter_, seconds=seconds)


def run_cart(data, depth, seed):
    Est = DecisionTreeRegressor if data["regression"] else DecisionTreeClassifier
    model = Est(max_depth=depth, random_state=seed)
    start = time.perf_counter()
    model.fit(*data["fit"])
    seconds = time.perf_counter() - start
    r = data["regression"]
    t = model.tree_
    K = 1 if r else len(np.unique(data["fit"][1]))
    leaf = t.children_left < 0
    params = int(np.where(leaf, 1 if K == 2 else K, 2).sum())
    return dict(train=error(model, *data["fit"], r), val=error(model, *data["val"], r),
                test=error(model, *data["test"], r), objective=float("nan"), params=params,
                iters=0, seconds=seconds)


def summarise(rows):
    def ms(key, fmt):
        v = np.array([r[key] for r in rows], dtype=float)
        return f"{v.mean():{fmt}} ± {v.std():{fmt}}" if len(v) > 1 else f"{v.mean():{fmt}}"

    return (ms("train", ".2f"), ms("val", ".2f"), ms("test", ".2f"), ms("objective", ".1f"),
            ms("params", ".0f"), ms("iters", ".1f"), ms("seconds", ".1f"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="bench/results/quality.md")
    args = parser.parse_args()
    register_experimental_solvers()
    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    lines = []

    def emit(line):
        print(line, flush=True)
        lines.append(line)

    from bench_tree import machine

    emit(f"Machine: {machine()}\n")
    emit(f"Seeds: {args.seeds}; errors in % (RMSE for cpu_act) as mean ± std over seeds; validation = "
         "10% of the training set held out (seed 0), fits on the other 90%.\n")
    for name in args.datasets.split(","):
        data = load(name, args.quick)
        emit(f"### {name} (depth {data['depth']}, C {data['C']:g}, {len(data['fit'][1])} fitting rows)\n")
        emit("| variant | train | validation | test | objective | parameters | iterations | seconds |")
        emit("|---|---|---|---|---|---|---|---|")
        for depth in (data["depth"], None):
            rows = [run_cart(data, depth, s) for s in args.seeds]
            emit(f"| CART depth {depth or 'unlimited'} | " + " | ".join(summarise(rows)) + " |")
        for v in variants:
            if v not in VARIANTS:
                raise SystemExit(f"Unknown variant {v!r}; choose from {sorted(VARIANTS)}.")
            if VARIANTS[v].get("solver") and VARIANTS[v]["solver"] not in NODE_SOLVERS:
                emit(f"| {v} | (solver {VARIANTS[v]['solver']!r} not registered in this build) |||||||")
                continue
            rows = [run_variant(data, VARIANTS[v], s) for s in args.seeds]
            emit(f"| {v} | " + " | ".join(summarise(rows)) + " |")
        emit("")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    main()
