"""Defaults on data sets they were not chosen on: ``TAOClassifier()`` against scikit-learn's CART.

The defaults (solver, C, depth) were picked on validation splits of MNIST and
letter (``bench/bench_quality.py``). This runs the plain calls a new user
would make, ``TAOClassifier(random_state=s).fit(X, y)`` and
``DecisionTreeClassifier(random_state=s).fit(X, y)``, on pendigits and
Fashion-MNIST, next to the previous defaults (SAGA, C=10), and reports test
error, parameters and fit seconds (mean over seeds).

Run from the repository root, with ../shared/data present::

    python bench/bench_defaults.py [--datasets pendigits fashion_mnist] [--seeds 0 1 2]
    python bench/bench_defaults.py --split validation --models "TAOClassifier() (defaults)" \
        "TAOClassifier(init='cluster')"     # choosing between two defaults
    python bench/bench_defaults.py --datasets pendigits --models "TAOForestClassifier() (defaults)" \
        "TAOForestClassifier(leaf_type='linear', max_depth=6)" "RandomForestClassifier()"   # forests
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from sklearn.ensemble import RandomForestClassifier
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.tree import DecisionTreeClassifier

from taodist import TAOClassifier, TAOForestClassifier
from taodist.datasets import load_dataset

warnings.simplefilter("ignore", ConvergenceWarning)

MODELS = {
    "TAOClassifier() (defaults)": lambda s: TAOClassifier(random_state=s),
    "TAOClassifier(early_stopping=False)": lambda s: TAOClassifier(early_stopping=False, random_state=s),
    "TAOClassifier(init='cluster')": lambda s: TAOClassifier(init="cluster", random_state=s),
    "TAOClassifier(max_depth=8) (depth before 'auto')": lambda s: TAOClassifier(max_depth=8, random_state=s),
    "TAOClassifier(solver='saga', C=10) (previous defaults)": lambda s: TAOClassifier(solver="saga", C=10.0,
                                                                                      random_state=s),
    "DecisionTreeClassifier() (unlimited)": lambda s: DecisionTreeClassifier(random_state=s),
    "DecisionTreeClassifier(max_depth=8)": lambda s: DecisionTreeClassifier(max_depth=8, random_state=s),
    # forests: not in the default rows (minutes each on MNIST-sized sets); name them with --models
    "TAOForestClassifier() (defaults)": lambda s: TAOForestClassifier(random_state=s),
    "TAOForestClassifier(leaf_type='linear', max_depth=6)": lambda s: TAOForestClassifier(
        leaf_type="linear", max_depth=6, random_state=s),
    "TAOForestClassifier(leaf_type='constant', max_depth=10)": lambda s: TAOForestClassifier(
        leaf_type="constant", max_depth=10, random_state=s),
    "RandomForestClassifier()": lambda s: RandomForestClassifier(random_state=s, n_jobs=-1),
}
DEFAULT_ROWS = [label for label in MODELS if "Forest" not in label]


def n_params(model):
    if hasattr(model, "n_parameters"):  # TAO forests
        return model.n_parameters()
    if hasattr(model, "estimators_"):  # RandomForest: the sum of its trees
        return sum(n_params(e) for e in model.estimators_)
    if hasattr(model, "tree_") and hasattr(model.tree_, "n_parameters"):
        return model.tree_.n_parameters()
    t = model.tree_
    K = t.value.shape[-1]
    return int(np.where(t.children_left < 0, 1 if K == 2 else K, 2).sum())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=["pendigits", "fashion_mnist"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--split", choices=["test", "validation"], default="test",
                        help="validation: fit on 90%% of the training set and score the other 10%% "
                             "(for choosing between defaults; the test set is not read)")
    parser.add_argument("--models", nargs="+", default=DEFAULT_ROWS, metavar="LABEL",
                        help="rows to run, by label (default: the single trees)")
    args = parser.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_tree import machine

    print(f"Machine: {machine()}\n")
    print(f"| data set | model | {args.split} error % | parameters | fit s |")
    print("|---|---|---|---|---|")
    for name in args.datasets:
        Xtr, ytr, Xte, yte = load_dataset(name)
        if args.split == "validation":
            Xtr, Xte, ytr, yte = train_test_split(Xtr, ytr, test_size=0.1, random_state=0, stratify=ytr)
        for label in args.models:
            make = MODELS[label]
            errs, params, secs = [], [], []
            for s in args.seeds:
                model = make(s)
                start = time.perf_counter()
                model.fit(Xtr, ytr)
                secs.append(time.perf_counter() - start)
                errs.append(100 * np.mean(model.predict(Xte) != yte))
                params.append(n_params(model))
            print(f"| {name} | {label} | {np.mean(errs):.2f} ± {np.std(errs):.2f} | {np.mean(params):.0f} | "
                  f"{np.mean(secs):.1f} |", flush=True)


if __name__ == "__main__":
    main()
