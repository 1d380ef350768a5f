"""Softmax trees against linear softmax classifiers on many classes (thesis section 2.3, Figure 2.2).

Two problems: a generated bag-of-words set (``bench/_bow.py``: 500 classes over
a 50,000-word vocabulary, Zipfian words and classes, 200,000 training and
20,000 test documents, sparse CSR written block by block to a Zarr store) and
letter (26 classes, real). For every model, in one run: validation, top-1 and
top-5 test and training error, training seconds, prediction microseconds per
sample on one core (``predict`` over the test set, best of 3), parameters,
classes scored per prediction and FLOPs per prediction (thesis Appendix A
counting). Softmax trees: ``TAOClassifier`` with linear (softmax) leaves
restricted to the ``k`` most populous classes of each leaf, over a grid of
depth and k, with the clustering initial tree; their top-n come from
``predict_top`` (the k classes a leaf keeps), the peers' from
``predict_proba``. Peers: scikit-learn's multinomial and one-vs-rest
``LogisticRegression`` (saga) and ``SGDClassifier`` (log loss) on bow, and
unlimited CART (scikit-learn) on letter.

Splits: bow fits on 90% of the training documents and validates on the other
10%; letter fits on the first 13,000 rows of its standard training split
(its first 16,000 rows) and validates on the other 3,000 (unlimited CART on
all 16,000 has 12.25% test error). Every model is fitted once per seed of
``--seeds`` (the split stays fixed) and a cell is the mean +- standard
deviation over seeds. Choose settings on the validation column, never on the
test one. ``--refit`` also fits each model on the fit and validation rows
together (all 16,000 of letter's training rows, as the CART reference) and
reports that model's test error in a last column.

Run from the repository root with ../shared/data present::

    python bench/bench_softmax.py --datasets letter                   # letter, seeds 0 1 2, CART reference
    python bench/bench_softmax.py --datasets letter --depths 4 6 8 --ks 2 4 8 26 --seeds 0 1 2 3 4
    python bench/bench_softmax.py --datasets letter --depths 8 --ks 8 --refit   # + trained on all 16,000 rows
    python bench/bench_softmax.py --datasets bow --seeds 0            # the full generated set, every peer
    python bench/bench_softmax.py --datasets bow --seeds 0 --n-train 50000 --store bench/results/bow50k.zarr
    python bench/bench_softmax.py --datasets bow --seeds 0 --peers multinomial sgd   # only some peers

Writes markdown to stdout and to ``--out`` (default bench/results/softmax.md);
the generated store goes to ``--store`` (default bench/results/bow.zarr) and
is reused when it already holds the same specification.
"""

import argparse
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, SGDClassifier
from sklearn.model_selection import train_test_split
from sklearn.multiclass import OneVsRestClassifier
from sklearn.tree import DecisionTreeClassifier
from threadpoolctl import threadpool_limits

from taodist import TAOClassifier
from taodist.datasets import load_dataset

from _bow import BowSpec, read_bow_split, write_bow_store

warnings.simplefilter("ignore", ConvergenceWarning)
# SAGA on a tiny leaf with many classes warns that y might be a regression target: it is not
warnings.filterwarnings("ignore", message="The number of unique classes is greater than 50%")

LETTER_FIT = 13000  # of letter's 16,000 training rows; the remaining 3,000 validate


def load(name, store, n_train):
    """``(X_fit, y_fit, X_val, y_val, X_test, y_test)``."""
    if name == "letter":
        Xtr, ytr, Xte, yte = load_dataset("letter")
        Xtr, Xte = Xtr.astype(np.float64), Xte.astype(np.float64)
        return Xtr[:LETTER_FIT], ytr[:LETTER_FIT], Xtr[LETTER_FIT:], ytr[LETTER_FIT:], Xte, yte
    spec = BowSpec() if n_train is None else replace(BowSpec(), n_train=n_train)
    start = time.perf_counter()
    if write_bow_store(store, spec):
        print(f"wrote {store} in {time.perf_counter() - start:.0f} s", flush=True)
    X, y = read_bow_split(store, "train")
    Xtr, Xval, ytr, yval = train_test_split(X, y, test_size=0.1, random_state=0)
    return (Xtr, ytr, Xval, yval, *read_bow_split(store, "test"))


def topn_error(top, y, n):
    """Percent of rows whose label is not among the first ``n`` columns of ``top`` (classes, best first)."""
    return 100.0 * float(np.mean(~(top[:, :n] == y[:, None]).any(axis=1)))


def top_classes(model, X, n):
    """The ``n`` best classes per row: ``predict_top`` for TAO trees, a stable sort of ``predict_proba`` else."""
    if isinstance(model, TAOClassifier):
        return model.predict_top(X, n)
    return model.classes_[np.argsort(-model.predict_proba(X), axis=1, kind="stable")[:, :n]]


def predict_us(model, X):
    """Microseconds per sample of ``model.predict`` on one core (best of 3)."""
    import numba

    best = np.inf
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        with threadpool_limits(1):
            for _ in range(3):
                start = time.perf_counter()
                model.predict(X)
                best = min(best, time.perf_counter() - start)
    finally:
        numba.set_num_threads(threads)
    return 1e6 * best / X.shape[0]


def linear_counts(model, X, K):
    """Parameters, classes scored and FLOPs per prediction of a linear softmax model.

    FLOPs are counted as the thesis counts them for trees (Appendix A): the
    non-zero parameters a prediction uses, here all of them.
    """
    coefs = [e.coef_ for e in model.estimators_] if isinstance(model, OneVsRestClassifier) else [model.coef_]
    params = sum(int(np.count_nonzero(c)) for c in coefs) + K
    return params, K, params


def tree_counts(model, X):
    tree = model.tree_
    return tree.n_parameters(), tree.mean_classes_scored(X), tree.inference_flops(X)


def cart_counts(model, X, K):
    """CART with constant leaves: 2 parameters per split, K per leaf; FLOPs are 2 per split and 1 at the leaf."""
    t = model.tree_
    leaf = t.children_left < 0
    path_cost = np.asarray(model.decision_path(X) @ np.where(leaf, 1.0, 2.0)).mean()
    return int(np.where(leaf, K, 2).sum()), 1.0, float(path_cost)


def peers(name, K, seed):
    """The peers of a data set, by the short name ``--peers`` selects them with."""
    if name == "letter":
        return {"cart": ("CART unlimited", DecisionTreeClassifier(random_state=seed))}
    return {
        "multinomial": ("LogisticRegression multinomial (saga, 20 epochs)",
                        LogisticRegression(solver="saga", C=10.0, max_iter=20, tol=1e-4, random_state=seed)),
        "ovr": ("LogisticRegression one-vs-rest (saga, 20 epochs)",
                OneVsRestClassifier(LogisticRegression(solver="saga", C=10.0, max_iter=20, tol=1e-4,
                                                       random_state=seed), n_jobs=-1)),
        "sgd": ("SGDClassifier (log loss, 10 epochs)",
                SGDClassifier(loss="log_loss", alpha=1e-6, max_iter=10, tol=None, random_state=seed, n_jobs=-1)),
    }


def measure(model, data, counts, refit=False):
    """Fit ``model`` and return its numbers: val, top-1, top-5, train error %, seconds, µs, params, scored, FLOPs.

    With ``refit``, a copy is also fitted on the fit and validation rows together and its top-1 test error
    is appended (the setting chosen on validation, trained on the whole training split).
    """
    Xtr, ytr, Xval, yval, Xte, yte = data
    extra = []
    if refit:
        both = sp.vstack([Xtr, Xval]).tocsr() if sp.issparse(Xtr) else np.concatenate([Xtr, Xval])
        again = clone(model).fit(both, np.concatenate([ytr, yval]))
        extra = [100.0 * float(np.mean(again.predict(Xte) != yte))]
    start = time.perf_counter()
    model.fit(Xtr, ytr)
    secs = time.perf_counter() - start
    val = 100.0 * float(np.mean(model.predict(Xval) != yval))
    train = 100.0 * float(np.mean(model.predict(Xtr) != ytr))
    top = top_classes(model, Xte, 5)
    return [val, topn_error(top, yte, 1), topn_error(top, yte, 5), train, secs, predict_us(model, Xte),
            *counts(model, Xte), *extra]


def row(name, label, results):
    """One markdown row: the mean (+- std when there are several seeds) of each number over seeds."""
    r = np.asarray(results, dtype=np.float64)
    mean, std = r.mean(axis=0), r.std(axis=0)

    def cell(j, fmt):
        return f"{mean[j]:{fmt}}" + (f" ± {std[j]:{fmt}}" if len(r) > 1 and j in (0, 1, 2, 3, 9) else "")

    refit = f" {cell(9, '.2f')} |" if r.shape[1] > 9 else ""
    return (f"| {name} | {label} | {len(r)} | {cell(0, '.2f')} | {cell(1, '.2f')} | {cell(2, '.2f')} | "
            f"{cell(3, '.2f')} | {mean[4]:.0f} | {mean[5]:.1f} | {mean[6]:,.0f} | {mean[7]:.1f} | {mean[8]:,.0f} |"
            + refit)


def run(name, args, rows):
    data = load(name, Path(args.store), args.n_train)
    K = len(np.unique(data[1]))
    print(f"{name}: {data[0].shape[0]} fit / {data[2].shape[0]} validation / {data[4].shape[0]} test rows, "
          f"{data[0].shape[1]} features, {K} classes, seeds {args.seeds}", flush=True)
    for short in peers(name, K, 0):
        if name == "bow" and short not in args.peers:
            continue
        label = peers(name, K, 0)[short][0]
        counts = (lambda m, X: cart_counts(m, X, K)) if short == "cart" else (lambda m, X: linear_counts(m, X, K))
        results = [measure(peers(name, K, seed)[short][1], data, counts, args.refit) for seed in args.seeds]
        rows.append(row(name, label, results))
        print(rows[-1], flush=True)
    for depth in args.depths:
        for k in args.ks:
            if k > K:
                continue
            for leaf_C in args.leaf_Cs:
                results = []
                for seed in args.seeds:
                    model = TAOClassifier(max_depth=depth, leaf_type="linear", leaf_classes=k, init="cluster",
                                          C=args.C, leaf_C=leaf_C, max_iter=args.max_iter, random_state=seed,
                                          early_stopping=False)
                    results.append(measure(model, data, tree_counts, args.refit))
                label = f"softmax tree depth {depth}, k={k}" + ("" if leaf_C is None else f", leaf_C={leaf_C:g}")
                rows.append(row(name, label, results))
                print(rows[-1], flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["letter", "bow"], choices=["letter", "bow"])
    p.add_argument("--depths", nargs="*", type=int, default=[4, 6, 8], help="tree depths (none: peers only)")
    p.add_argument("--ks", nargs="+", type=int, default=[4, 8, 16, 32])
    p.add_argument("--C", type=float, default=30.0, help="TAOClassifier C (nodes and leaves)")
    p.add_argument("--leaf-Cs", nargs="+", type=float, default=[None],
                   help="TAOClassifier leaf_C values to grid over (default: C; smaller: sparser, cheaper leaves)")
    p.add_argument("--max-iter", type=int, default=10, help="TAO iterations")
    p.add_argument("--n-train", type=int, default=None, help="training documents of the generated set")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                   help="fit every model once per seed (random_state); cells are mean ± std")
    p.add_argument("--peers", nargs="*", default=["multinomial", "ovr", "sgd"], choices=["multinomial", "ovr", "sgd"],
                   help="linear peers to fit on bow (none: --peers with no names); letter always fits CART")
    p.add_argument("--refit", action="store_true",
                   help="also refit every model on fit + validation rows and report that model's test error")
    p.add_argument("--store", default="bench/results/bow.zarr")
    p.add_argument("--out", default="bench/results/softmax.md")
    args = p.parse_args()
    from bench_tree import machine

    rows = [f"Machine: {machine()}. TAO: C={args.C:g}, max_iter={args.max_iter}, init=cluster.", "",
            "| data | model | seeds | validation error % | top-1 test error % | top-5 test error % | "
            "train error % | train s | predict µs/sample (1 core) | parameters | classes scored | "
            "FLOPs/prediction |" + (" refit test error % |" if args.refit else ""),
            "|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if args.refit else "")]
    for name in args.datasets:
        run(name, args, rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
