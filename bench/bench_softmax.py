"""Softmax trees against linear softmax classifiers on many classes (thesis section 2.3, Figure 2.2).

Two problems: a generated bag-of-words set (``bench/_bow.py``: 500 classes over
a 50,000-word vocabulary, Zipfian words and classes, 200,000 training and
20,000 test documents, sparse CSR written block by block to a Zarr store) and
letter (26 classes, real). For every model, in one run: top-1 and top-5 test
error, training seconds, prediction microseconds per sample on one core
(``predict`` over the test set, best of 3), parameters, classes scored per
prediction and FLOPs per prediction (thesis Appendix A counting). Peers:
scikit-learn's multinomial and one-vs-rest ``LogisticRegression`` (saga) and
``SGDClassifier`` (log loss). Softmax trees: ``TAOClassifier`` with linear
(softmax) leaves restricted to the ``k`` most populous classes of each leaf,
over a grid of depth and k, with the clustering initial tree; the validation
error (10% of train held out; the reported fits use the other 90%) is in the
table so a choice can be made without the test split.

Run from the repository root with ../shared/data present::

    python bench/bench_softmax.py                                     # both data sets, the default grid
    python bench/bench_softmax.py --datasets letter --depths 4 6 8 --ks 2 4 8 26 --peers
    python bench/bench_softmax.py --datasets bow --n-train 50000      # a smaller generated set
    python bench/bench_softmax.py --datasets bow --peers sgd          # only some of the linear peers

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


def load(name, store, n_train):
    if name == "letter":
        return load_dataset("letter")
    spec = BowSpec() if n_train is None else replace(BowSpec(), n_train=n_train)
    start = time.perf_counter()
    if write_bow_store(store, spec):
        print(f"wrote {store} in {time.perf_counter() - start:.0f} s", flush=True)
    return (*read_bow_split(store, "train"), *read_bow_split(store, "test"))


def topn_error(scores, y, classes, n):
    top = classes[np.argsort(-scores, axis=1, kind="stable")[:, :n]]
    return 100.0 * float(np.mean(~(top == y[:, None]).any(axis=1)))


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


def peers(K, seed):
    """The linear peers, by the short name ``--peers`` selects them with."""
    return {
        "multinomial": ("LogisticRegression multinomial (saga, 20 epochs)",
            LogisticRegression(solver="saga", C=10.0, max_iter=20, tol=1e-4, random_state=seed)),
        "ovr": ("LogisticRegression one-vs-rest (saga, 20 epochs)",
                OneVsRestClassifier(LogisticRegression(solver="saga", C=10.0, max_iter=20, tol=1e-4,
                                                       random_state=seed), n_jobs=-1)),
        "sgd": ("SGDClassifier (log loss, 10 epochs)",
                SGDClassifier(loss="log_loss", alpha=1e-6, max_iter=10, tol=None, random_state=seed, n_jobs=-1)),
    }


def row(name, label, model, secs, X_val, y_val, X_te, y_te, counts):
    classes = model.classes_
    val = 100.0 * float(np.mean(model.predict(X_val) != y_val))
    scores = model.predict_proba(X_te)
    top1, top5 = topn_error(scores, y_te, classes, 1), topn_error(scores, y_te, classes, 5)
    params, scored, flops = counts
    us = predict_us(model, X_te)
    return (f"| {name} | {label} | {val:.2f} | {top1:.2f} | {top5:.2f} | {secs:.0f} | {us:.1f} | {params:,} | "
            f"{scored:.1f} | {flops:,.0f} |")


def tree_counts(model, X):
    tree = model.tree_
    return tree.n_parameters(), tree.mean_classes_scored(X), tree.inference_flops(X)


def run(name, args, rows):
    Xtr_all, ytr_all, Xte, yte = load(name, Path(args.store), args.n_train)
    Xtr, Xval, ytr, yval = train_test_split(Xtr_all, ytr_all, test_size=0.1, random_state=0)
    K = len(np.unique(ytr_all))
    print(f"{name}: {Xtr.shape[0]} train / {Xval.shape[0]} validation / {Xte.shape[0]} test rows, "
          f"{Xtr.shape[1]} features, {K} classes", flush=True)
    if name == "letter":
        start = time.perf_counter()
        cart = DecisionTreeClassifier(random_state=0).fit(Xtr, ytr)
        secs = time.perf_counter() - start
        t = cart.tree_
        leaf = t.children_left < 0
        path_cost = np.asarray(cart.decision_path(Xte) @ np.where(leaf, 1.0, 2.0)).mean()
        counts = (int(np.where(leaf, K, 2).sum()), 1.0, float(path_cost))
        rows.append(row(name, "CART unlimited", cart, secs, Xval, yval, Xte, yte, counts))
        print(rows[-1], flush=True)
    for short, (label, model) in peers(K, args.seed).items():
        if short not in args.peers:
            continue
        start = time.perf_counter()
        model.fit(Xtr, ytr)
        secs = time.perf_counter() - start
        rows.append(row(name, label, model, secs, Xval, yval, Xte, yte, linear_counts(model, Xte, K)))
        print(rows[-1], flush=True)
    for depth in args.depths:
        for k in args.ks:
            if k > K:
                continue
            for init in args.inits:
                model = TAOClassifier(max_depth=depth, leaf_type="linear", leaf_classes=k, init=init, C=args.C,
                                      max_iter=args.max_iter, random_state=args.seed)
                start = time.perf_counter()
                model.fit(Xtr, ytr)
                secs = time.perf_counter() - start
                label = f"softmax tree depth {depth}, k={k}, init={init}"
                rows.append(row(name, label, model, secs, Xval, yval, Xte, yte, tree_counts(model, Xte)))
                print(rows[-1], flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--datasets", nargs="+", default=["letter", "bow"], choices=["letter", "bow"])
    p.add_argument("--depths", nargs="+", type=int, default=[4, 6, 8])
    p.add_argument("--ks", nargs="+", type=int, default=[4, 8, 16, 32])
    p.add_argument("--inits", nargs="+", default=["cluster"])
    p.add_argument("--C", type=float, default=30.0)
    p.add_argument("--max-iter", type=int, default=10)
    p.add_argument("--n-train", type=int, default=None, help="training documents of the generated set")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--peers", nargs="*", default=["multinomial", "ovr", "sgd"], choices=["multinomial", "ovr", "sgd"],
                   help="linear peers to fit (none: --peers with no names)")
    p.add_argument("--store", default="bench/results/bow.zarr")
    p.add_argument("--out", default="bench/results/softmax.md")
    args = p.parse_args()
    from bench_tree import machine

    rows = [f"Machine: {machine()}", "",
            "| data | model | validation error % | top-1 test error % | top-5 test error % | train s | "
            "predict µs/sample (1 core) | parameters | classes scored | FLOPs/prediction |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name in args.datasets:
        run(name, args, rows)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
