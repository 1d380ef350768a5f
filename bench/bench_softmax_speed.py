"""Prediction speed of a softmax tree against the multinomial softmax, in one run (issue 16's 10x target).

Fits ``LogisticRegression`` (multinomial, saga; its (K, D) coefficients are
dense whatever the epochs, so a few suffice to time it) and a softmax tree
(``leaf_type="linear"``, ``leaf_classes=k``, ``init="cluster"``) on the
generated bag-of-words store, then times ``predict`` on the test documents on
one core, best of 3, alternating the two models ``--repeats`` times. Accuracy
is ``bench_softmax.py``'s job; this reports µs per document, the ratio, and
the tree's classes scored and FLOPs per prediction.

Run from the repository root::

    python bench/bench_softmax_speed.py --n-train 20000 --store /tmp/bow20k.zarr
    python bench/bench_softmax_speed.py                 # the full 200k-document store
"""

import argparse
import warnings
from pathlib import Path

from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression

from taodist import TAOClassifier

from bench_softmax import load, predict_us

warnings.simplefilter("ignore", ConvergenceWarning)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-train", type=int, default=None, help="training documents of the generated set")
    p.add_argument("--store", default="bench/results/bow.zarr")
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--k", type=int, default=32)
    p.add_argument("--max-iter", type=int, default=2, help="TAO iterations (speed barely depends on them)")
    p.add_argument("--epochs", type=int, default=3, help="saga epochs of the multinomial model")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()
    Xtr, ytr, _, _, Xte, _ = load("bow", Path(args.store), args.n_train)
    tree = TAOClassifier(max_depth=args.depth, leaf_type="linear", leaf_classes=args.k, init="cluster", C=30.0,
                         max_iter=args.max_iter, random_state=0).fit(Xtr, ytr)
    linear = LogisticRegression(solver="saga", C=10.0, max_iter=args.epochs, random_state=0).fit(Xtr, ytr)
    print(f"{Xtr.shape[0]} fit documents, {Xte.shape[0]} test documents, {Xte.nnz / Xte.shape[0]:.1f} "
          f"non-zeros each; tree depth {args.depth}, k={args.k}: {tree.tree_.mean_classes_scored(Xte):.1f} "
          f"classes scored, {tree.tree_.inference_flops(Xte):,.0f} FLOPs per prediction")
    for _ in range(args.repeats):
        t, m = predict_us(tree, Xte), predict_us(linear, Xte)
        print(f"predict µs/document on one core: softmax tree {t:.2f}, multinomial {m:.2f}, ratio {m / t:.1f}x",
              flush=True)


if __name__ == "__main__":
    main()
