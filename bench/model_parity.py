"""Fingerprints of a dozen fitted models, to check that a change leaves every model bit-identical.

Run it on two commits and compare the outputs::

    git checkout OLD && python bench/model_parity.py --out /tmp/old.json
    git checkout NEW && python bench/model_parity.py --out /tmp/new.json
    python bench/model_parity.py --compare /tmp/old.json /tmp/new.json

Each case fits one estimator through the public API only (so the script runs
unchanged on both sides of a refactoring) and records a SHA-256 of every
fitted array -- the tree's structure, weights, thresholds, leaf values and
coefficients, the objective history -- and of the predictions on held-out
rows. Two runs agree case by case only if the models are equal to the bit.
"""

import argparse
import hashlib
import json
import sys
import time

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits

_TREE_ARRAYS = ("children_left", "children_right", "kind", "bias", "feature", "threshold", "value", "leaf_range")


def _update(h, a):
    if a is None:
        h.update(b"None")
        return
    if sp.issparse(a):
        a = a.tocsr()
        for part in (a.data, a.indices, a.indptr, np.asarray(a.shape)):
            _update(h, part)
        return
    a = np.ascontiguousarray(a)
    h.update(str((a.dtype.str, a.shape)).encode())
    h.update(a.tobytes())


def _tree_digest(h, tree):
    for name in _TREE_ARRAYS:
        _update(h, getattr(tree, name, None))
    for name in ("weights", "leaf_coef"):
        _update(h, getattr(tree, name))
    h.update(repr((tree.task, tree.leaf_type, tree.leaf_classes)).encode())


def fingerprint(est, X_test):
    """SHA-256 over a fitted estimator's trees, history and predictions on ``X_test``."""
    h = hashlib.sha256()
    trees = [e.tree_ for e in est.estimators_] if hasattr(est, "estimators_") else [est.tree_]
    for tree in trees:
        _tree_digest(h, tree)
    for name in ("history_", "n_iter_", "classes_"):
        value = getattr(est, name, None)
        if isinstance(value, list) and value and isinstance(value[0], dict):  # LapTAO's records
            value = [{k: v for k, v in r.items() if "seconds" not in k} for r in value]  # times vary
            h.update(json.dumps(value, sort_keys=True, default=repr).encode())
        elif value is not None:
            _update(h, np.asarray(value))
    for method in ("predict", "predict_proba"):
        if hasattr(est, method):
            out = getattr(est, method)(X_test)
            _update(h, np.asarray(out.compute() if hasattr(out, "compute") else out))
    return h.hexdigest()


def _split(X, y, seed=0):
    rng = np.random.RandomState(seed)
    order = rng.permutation(len(y))
    cut = int(0.8 * len(y))
    return X[order[:cut]], y[order[:cut]], X[order[cut:]]


def cases(client):
    """(name, fit function) pairs; each fit function returns (estimator, X_test)."""
    from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor, tao_path
    from taodist.laptao import LapTAOClassifier

    digits = _split(*load_digits(return_X_y=True))
    cancer = _split(*load_breast_cancer(return_X_y=True))
    diabetes = _split(*load_diabetes(return_X_y=True))

    def fit(make, data, **fit_kw):
        X, y, X_test = data
        return make().fit(X, y, **fit_kw), X_test

    def sparse_fit():
        X, y, X_test = digits
        return TAOClassifier(max_depth=5, random_state=0).fit(sp.csr_matrix(X), y), sp.csr_matrix(X_test)

    def laptao_fit(**kw):
        X, y, X_test = digits
        y = y.copy()
        y[np.random.RandomState(0).rand(len(y)) > 0.1] = -1
        return LapTAOClassifier(max_depth=4, n_outer=3, random_state=0).fit(X, y, **kw), X_test

    def path_fit():
        X, y, X_test = cancer
        steps = tao_path(X, y, Cs=[30.0, 3.0, 0.3], estimator=TAOClassifier(max_depth=3, random_state=0))
        return steps[-1].estimator, X_test

    def dask_fit(make, data):
        import dask.array as da

        X, y, X_test = data
        return make().fit(da.from_array(X, chunks=(400, X.shape[1])), y, client=client), X_test

    return [
        ("classifier", lambda: fit(lambda: TAOClassifier(random_state=0), digits)),
        ("classifier-axis", lambda: fit(lambda: TAOClassifier(node_type="axis", random_state=0), cancer)),
        ("classifier-cart-init", lambda: fit(lambda: TAOClassifier(init="cart", max_depth=5, random_state=0),
                                             cancer)),
        ("classifier-cluster-init-n_init", lambda: fit(
            lambda: TAOClassifier(init="cluster", n_init=2, max_depth=4, random_state=0), digits)),
        ("classifier-saga", lambda: fit(lambda: TAOClassifier(solver="saga", max_depth=4, random_state=0), digits)),
        ("classifier-liblinear", lambda: fit(lambda: TAOClassifier(solver="liblinear", max_depth=3, max_iter=4,
                                                                   random_state=0), cancer)),
        ("classifier-softmax-leaves", lambda: fit(
            lambda: TAOClassifier(leaf_type="linear", max_depth=3, random_state=0), digits)),
        ("classifier-softmax-tree", lambda: fit(
            lambda: TAOClassifier(leaf_type="linear", leaf_classes=3, init="cluster", max_depth=3, random_state=0),
            digits)),
        ("classifier-sparse", sparse_fit),
        ("regressor", lambda: fit(lambda: TAORegressor(random_state=0), diabetes)),
        ("regressor-linear-leaves", lambda: fit(lambda: TAORegressor(leaf_type="linear", max_depth=4,
                                                                     random_state=0), diabetes)),
        ("forest-classifier", lambda: fit(lambda: TAOForestClassifier(n_estimators=4, max_depth=5, random_state=0,
                                                                      n_jobs=1), digits)),
        ("forest-regressor", lambda: fit(lambda: TAOForestRegressor(n_estimators=4, max_depth=4, random_state=0,
                                                                    n_jobs=1), diabetes)),
        ("laptao", laptao_fit),
        ("path", path_fit),
        ("dask-classifier", lambda: dask_fit(lambda: TAOClassifier(max_depth=5, random_state=0), digits)),
        ("dask-regressor-linear-leaves", lambda: dask_fit(
            lambda: TAORegressor(leaf_type="linear", max_depth=3, random_state=0), diabetes)),
        ("dask-forest", lambda: dask_fit(lambda: TAOForestClassifier(n_estimators=3, max_depth=4, random_state=0),
                                         digits)),
        ("dask-laptao", lambda: laptao_fit(client=client)),
    ]


def run(out):
    from distributed import Client, LocalCluster

    results = {}
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        for name, make in cases(client):
            start = time.perf_counter()
            est, X_test = make()
            results[name] = fingerprint(est, X_test)
            print(f"{name:32s} {results[name][:16]}  {time.perf_counter() - start:6.1f} s", flush=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)


def compare(a, b):
    """Print each case as identical or differing; returns the number that differ or are missing."""
    with open(a) as f:
        old = json.load(f)
    with open(b) as f:
        new = json.load(f)
    bad = 0
    for name in sorted(set(old) | set(new)):
        same = old.get(name) == new.get(name) and name in old
        bad += not same
        print(f"{name:32s} {'identical' if same else 'DIFFERENT'}")
    total = len(set(old) | set(new))
    print(f"{total - bad} of {total} cases identical")
    return bad


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the fingerprints to this JSON file")
    parser.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"), help="compare two fingerprint files")
    args = parser.parse_args()
    if args.compare:
        sys.exit(1 if compare(*args.compare) else 0)
    if not args.out:
        parser.error("give --out FILE or --compare OLD NEW")
    run(args.out)


if __name__ == "__main__":
    main()
