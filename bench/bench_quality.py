"""Ablation of single-tree quality: what makes a TAO tree accurate (issue: tree quality).

Every variant is fitted on the same 90% of each training set (the other 10%
is the validation split that decides what stays), over several seeds, and
reported as mean ± std of: training, validation and test error (% for
classification, RMSE for regression), the final objective (``history_[-1]``,
the fit's own units), parameters (thesis Appendix A), leaves, TAO iterations and
fit seconds. Scikit-learn CART (same depth and unlimited) runs in the same
script as the reference. Variants are estimator parameters plus, for node
solvers that are experiments rather than features, a registration in
``taodist.tao.node_solvers.NODE_SOLVERS`` made here (the registry is the plug-in point).

Run from the repository root, with ../shared/data present::

    python bench/bench_quality.py                                  # every data set, every variant, 3 seeds
    python bench/bench_quality.py --datasets letter --variants saga,level --seeds 0 1 2
    python bench/bench_quality.py --quick                          # smoke run on small subsets
    python bench/bench_quality.py --datasets letter-linear --no-cart \
        --variant "leaf_type='linear' leaf_C=3" --variant "leaf_type='linear' softmax_epochs=10"

Writes a markdown table to stdout and to ``--out`` (default
``bench/results/quality.md``, not committed).
"""

import argparse
import contextlib
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

import taodist.model.leaf_fit
import taodist.model.leaves
import taodist.tao.leaf_losses
import taodist.tao.node_solvers
from taodist import TAOClassifier, TAORegressor
from taodist.datasets import load_dataset
from taodist.estimators.execution import max_abs_scale
from taodist.model.tree import complete_tree
from taodist.tao.node_solvers import NODE_SOLVERS, NodeSolver, axis_split_losses

from _variants import parse_key_values

warnings.simplefilter("ignore", ConvergenceWarning)

#: data set -> (loader name, rows of the training set used (None: all), depth, C)
DATASETS = {
    "letter": ("letter", None, 10, 100.0),
    "mnist20k": ("mnist", 20000, 8, 10.0),
    "cpu_act": ("cpu_act", None, 6, 100.0),
    "letter-linear": ("letter", None, 6, 30.0),
    "mnist": ("mnist", None, 8, 30.0),
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
def parse_variant(spec):
    """Estimator parameters of a named variant, or of an ad-hoc ``"key=value key=value"`` spec.

    Besides estimator parameters (and ``C_factor``), a variant may set
    :data:`SETTINGS` for the fit (see :func:`module_settings`), and
    ``init_anchor='global'`` (initial tree from :func:`global_anchor_tree`).
    """
    if spec in VARIANTS:
        return dict(VARIANTS[spec])
    return parse_key_values(spec, f"name one of {sorted(VARIANTS)} or write 'key=value ...'.")


_PAPER_LOSS = taodist.model.leaves.pointwise_loss


def cross_entropy_loss(task, outputs, y):
    """Cross-entropy of logit ``outputs`` (linear classification leaves); squared error for regression."""
    if task != "classification":
        return _PAPER_LOSS(task, outputs, y)
    z = outputs - outputs.max(axis=1, keepdims=True)
    return np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]


def global_anchor_tree(X, depth, n_outputs, leaf_type, seed):
    """A random complete oblique tree whose hyperplanes pass through midpoints of rows drawn from all of X.

    The thesis' random initialisation (unit-norm Gaussian weights) without
    :func:`taodist.tao.initial_trees.random_tree`'s rule that each split cuts the points
    reaching its node: deep nodes then get empty children, TAO prunes those
    dead branches, and the fitted tree is smaller and unbalanced.
    """
    rng = np.random.RandomState(seed)
    scale = max_abs_scale(X)
    task = "regression" if leaf_type.startswith("regression:") else "classification"
    tree = complete_tree(depth, X.shape[1], n_outputs, "oblique", task=task, leaf_type=leaf_type.split(":")[-1])
    internal = np.flatnonzero(~tree.is_leaf)
    W = rng.standard_normal((internal.size, X.shape[1]))
    W /= np.linalg.norm(W, axis=1, keepdims=True)
    pairs = rng.randint(0, X.shape[0], size=(internal.size, 2))
    anchors = (X[pairs[:, 0]] + X[pairs[:, 1]]) / (2 * scale)
    tree.set_decision(internal, W, -np.einsum("ij,ij->i", W, anchors))
    tree.scale_features(1.0 / scale)  # to the units of X, as a warm-start tree is given
    return tree


#: settings a variant may change besides estimator parameters (module globals patched for the fit)
SETTINGS = ("fista_max_iter", "softmax_epochs", "cross_entropy")


@contextlib.contextmanager
def module_settings(fista_max_iter=None, softmax_epochs=None, cross_entropy=False):
    """Temporarily change the FISTA step count, the softmax leaves' SAGA epochs, and the loss.

    ``cross_entropy``: the tree's loss is the cross-entropy of linear
    classification leaves instead of the 0/1 loss (in the objective, the
    leaves' accept test and the decision nodes' pseudolabel weights; thesis
    section 2.3.1, option 2). Only meaningful with ``leaf_type='linear'``.
    """
    fit_softmax = taodist.model.leaf_fit.fit_softmax
    old_fista, old_kwdefaults = taodist.tao.node_solvers.FISTA_MAX_ITER, dict(fit_softmax.__kwdefaults__)
    old_loss = taodist.model.leaves.pointwise_loss
    try:
        if fista_max_iter is not None:
            taodist.tao.node_solvers.FISTA_MAX_ITER = fista_max_iter
        if softmax_epochs is not None:
            fit_softmax.__kwdefaults__ = {**old_kwdefaults, "epochs": softmax_epochs}
        if cross_entropy:
            taodist.model.leaves.pointwise_loss = taodist.tao.leaf_losses.pointwise_loss = cross_entropy_loss
        yield
    finally:
        taodist.tao.node_solvers.FISTA_MAX_ITER = old_fista
        fit_softmax.__kwdefaults__ = old_kwdefaults
        taodist.model.leaves.pointwise_loss = taodist.tao.leaf_losses.pointwise_loss = old_loss


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
    return dict(fit=(Xfit, yfit), val=(Xval, yval), test=(Xte, yte), all=(Xtr, ytr), regression=regression,
                depth=depth, C=C)


def run_variant(data, params, seed, refit=False):
    """One fit of a variant on the fitting rows; with ``refit``, also its test error when fitted on all the
    training rows (fitting and validation), as a final model is once the validation split has chosen it."""
    Est = TAORegressor if data["regression"] else TAOClassifier
    params = dict(params)
    settings = {k: params.pop(k) for k in SETTINGS if k in params}
    global_init = params.pop("init_anchor", None) == "global"
    kw = dict(max_depth=data["depth"], C=data["C"] * params.pop("C_factor", 1.0), random_state=seed,
              early_stopping=False)  # the fixed settings use every fitting row, as when they were chosen
    kw.update(params)
    if global_init:  # see global_anchor_tree
        X, y = data["fit"]
        K = 1 if data["regression"] else len(np.unique(y))
        leaf = ("regression:" if data["regression"] else "") + kw.get("leaf_type", "constant")
        kw["init"] = global_anchor_tree(np.asarray(X, dtype=np.float64), kw["max_depth"], K, leaf, seed)
    if params == {} and not settings:  # "defaults": what TAOClassifier() / TAORegressor() would do
        kw = dict(random_state=seed)
    model = Est(**kw)
    start = time.perf_counter()
    with module_settings(**settings):
        model.fit(*data["fit"])
    seconds = time.perf_counter() - start
    r = data["regression"]
    out = dict(train=error(model, *data["fit"], r), val=error(model, *data["val"], r),
               test=error(model, *data["test"], r), objective=float(model.history_[-1]),
               params=model.tree_.n_parameters(), leaves=model.get_n_leaves(), iters=model.n_iter_,
               seconds=seconds)
    if refit:
        start = time.perf_counter()
        with module_settings(**settings):
            final = Est(**kw).fit(*data["all"])
        out["refit_seconds"] = time.perf_counter() - start
        out["refit"] = error(final, *data["test"], r)
    return out


def run_cart(data, depth, seed, refit=False):
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
    out = dict(train=error(model, *data["fit"], r), val=error(model, *data["val"], r),
               test=error(model, *data["test"], r), objective=float("nan"), params=params,
               leaves=int(leaf.sum()), iters=0, seconds=seconds)
    if refit:
        start = time.perf_counter()
        final = Est(max_depth=depth, random_state=seed).fit(*data["all"])
        out["refit_seconds"] = time.perf_counter() - start
        out["refit"] = error(final, *data["test"], r)
    return out


def summarise(rows):
    def ms(key, fmt):
        v = np.array([r[key] for r in rows], dtype=float)
        return f"{v.mean():{fmt}} ± {v.std():{fmt}}" if len(v) > 1 else f"{v.mean():{fmt}}"

    cells = (ms("train", ".2f"), ms("val", ".2f"), ms("test", ".2f"), ms("objective", ".1f"),
             ms("params", ".0f"), ms("leaves", ".0f"), ms("iters", ".1f"), ms("seconds", ".1f"))
    return cells + ((ms("refit", ".2f"), ms("refit_seconds", ".1f")) if "refit" in rows[0] else ())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="letter,mnist20k,cpu_act")
    parser.add_argument("--variants", default=None, help="named variants, comma-separated (default: all of "
                                                          "them unless --variant is given)")
    parser.add_argument("--variant", action="append", default=[], metavar="SPEC",
                        help="an ad-hoc variant 'key=value ...' (estimator parameters, C_factor, fista_max_iter, "
                             "softmax_epochs, cross_entropy); repeatable, runs after --variants")
    parser.add_argument("--no-cart", action="store_true", help="skip the CART reference rows")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--refit", action="store_true", help="also fit every variant on all the training rows "
                        "and report that model's test error (a last column)")
    parser.add_argument("--out", default="bench/results/quality.md")
    args = parser.parse_args()
    register_experimental_solvers()
    named = args.variants if args.variants is not None else "" if args.variant else ",".join(VARIANTS)
    variants = [v.strip() for v in named.split(",") if v.strip()] + args.variant
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
        refit_cell = " test, refit on all training rows | refit seconds |" if args.refit else ""
        emit("| variant | train | validation | test | objective | parameters | leaves | iterations | seconds |"
             + refit_cell)
        emit("|---|---|---|---|---|---|---|---|---|" + ("---|---|" if args.refit else ""))
        for depth in () if args.no_cart else (data["depth"], None):
            rows = [run_cart(data, depth, s, args.refit) for s in args.seeds]
            emit(f"| CART depth {depth or 'unlimited'} | " + " | ".join(summarise(rows)) + " |")
        for v in variants:
            params = parse_variant(v)
            if params.get("solver") and params["solver"] not in NODE_SOLVERS:
                emit(f"| {v} | (solver {params['solver']!r} not registered in this build) ||||||||")
                continue
            rows = [run_variant(data, params, s, args.refit) for s in args.seeds]
            emit(f"| {v} | " + " | ".join(summarise(rows)) + " |")
        emit("")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    main()
