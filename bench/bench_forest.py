"""TAO forests against scikit-learn RandomForest / ExtraTrees, XGBoost and LightGBM,
and the scaling of TAO fits from 1 to 2 Dask workers.

Accuracy part: each method on MNIST, letter and cpu_act (``--datasets``), test
error (RMSE for cpu_act), train time, number of trees, parameters and
inference FLOPs (thesis Appendix A counting for TAO; for the peers the
thesis' upper bound: 2 per decision node plus K per leaf, FLOPs = mean
path length x 2 + K). TAO forests use the thesis' setting (linear leaves,
depth 6-7, 30 trees, each on a random 90% of the training set); peers use
their library defaults with 100 trees (boosting: 300 rounds). Nothing is
tuned on the test split.

Scaling part (``--scaling``): the same TAO forest and a single deep TAO tree
on 1 and 2 worker processes of a LocalCluster, and the time the scheduler
adds per TAO level compared with the in-process executor.

Run from the repository root with ../shared/data present and the bench
extras installed (``pip install '.[bench]'``)::

    python bench/bench_forest.py --datasets letter cpu_act --trees 30
    python bench/bench_forest.py --scaling

Choosing a forest setting (validation split: fit on 90% of the training set, score
the other 10%; the test set is not read)::

    python bench/bench_forest.py --datasets letter --trees 10 --split validation --no-peers \
        --variant "C=100" --variant "leaf_type='constant' max_depth=12 C=100" --variant "C=100 subspace=0.75"

Each variant sets TAOForest* parameters over the base setting (90% samples,
the data set's depth); ``subspace=f`` (an experiment of this script) also
gives each tree a random fraction f of the features. Every forest is also
read as its trees alone (mean error), its first half of the trees, and, for
classification, soft (mean probability) and hard (one vote per tree) voting.

Writes markdown to stdout and to ``--out`` (default bench/results/forest.md).
"""

import argparse
import time
import warnings

import numpy as np
from sklearn.ensemble import ExtraTreesClassifier, ExtraTreesRegressor, RandomForestClassifier, RandomForestRegressor
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor
from taodist.datasets import load_dataset

from _report import write_report
from _variants import parse_key_values

warnings.simplefilter("ignore", ConvergenceWarning)

#: the base setting's depth per data set (the thesis' linear-leaf forests: depth 6-7); Fashion-MNIST and
#: pendigits, which no setting was chosen on, take MNIST's
TAO_DEPTH = {"mnist": 6, "letter": 7, "cpu_act": 6, "fashion_mnist": 6, "pendigits": 6}


def machine():
    from bench_tree import machine as m  # same machine line as the tree benchmark

    return m()


def sk_counts(model, X, K):
    """Parameters and mean-path FLOPs of a fitted scikit-learn forest."""
    params, flops = 0, 0.0
    per_leaf = 1 if K == 2 else K
    for est in model.estimators_:
        t = est.tree_
        leaf = t.children_left < 0
        p = np.where(leaf, per_leaf, 2)
        params += int(p.sum())
        flops += float(np.asarray(est.decision_path(X) @ p).mean())
    return params, flops


def booster_counts(model, kind, K):
    """Upper-bound counts for boosted trees from their dumped structure."""
    if kind == "xgb":
        df = model.get_booster().trees_to_dataframe()
        leaves = int((df.Feature == "Leaf").sum())
        splits = len(df) - leaves
        n_trees = df.Tree.nunique()
    else:
        df = model.booster_.trees_to_dataframe()
        leaves = int(df.split_feature.isna().sum())
        splits = len(df) - leaves
        n_trees = df.tree_index.nunique()
    return n_trees, 2 * splits + leaves, None


def err(pred, y, regression):
    return float(np.sqrt(np.mean((pred - y) ** 2))) if regression else float(100 * np.mean(pred != y))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def parse_variant(spec):
    """Forest parameters of an ad-hoc variant ``"key=value key=value"`` (values as Python literals)."""
    return parse_key_values(spec, "write 'key=value ...' (TAOForest* parameters).")


def split_data(name, split):
    """``(X_fit, y_fit, X_eval, y_eval)``: the training set and the test set (``split='test'``), or 90% of
    the training set and the other 10% (``split='validation'``, stratified for classification, seed 0)."""
    Xtr, ytr, Xte, yte = load_dataset(name)
    if split == "test":
        return Xtr, ytr, Xte, yte
    Xfit, Xval, yfit, yval = train_test_split(Xtr, ytr, test_size=0.1, random_state=0,
                                              stratify=None if name == "cpu_act" else ytr)
    return Xfit, yfit, Xval, yval


def vote_errors(forest, X, y, regression):
    """Errors of one fitted forest read several ways, without refitting.

    ``trees``: the mean error of its trees alone; ``half``: the forest of its first half of the trees;
    for classification, ``soft``/``hard``: averaging the trees' class probabilities (leaf class
    distributions for constant leaves) against one vote per tree.
    """
    preds = [est.tree_.predict(X) for est in forest.estimators_]
    out = {"trees": float(np.mean([err(_decode(forest, p, regression), y, regression) for p in preds]))}
    half = max(1, len(preds) // 2)
    if regression:
        out["half"] = err(np.mean(preds[:half], axis=0).ravel(), y, regression)
        return out
    votes = [np.eye(p.shape[1])[np.argmax(p, axis=1)] for p in preds]
    out["soft"] = err(_decode(forest, np.mean(preds, axis=0), False), y, False)
    out["hard"] = err(_decode(forest, np.mean(votes, axis=0), False), y, False)
    combine = votes if getattr(forest, "voting", "soft") == "hard" else preds
    out["half"] = err(_decode(forest, np.mean(combine[:half], axis=0), False), y, False)
    return out


def _decode(forest, p, regression):
    return p.ravel() if regression else forest.classes_[np.argmax(p, axis=1)]


def tao_forest(regression, n_trees, depth, variant):
    """The TAO forest of a variant: the benchmark's base setting (90% samples, the data set's depth)
    overridden by the variant's parameters."""
    kw = dict(n_estimators=n_trees, max_depth=depth, bootstrap=False, max_samples=0.9, random_state=0)
    kw.update(variant)
    subspace = kw.pop("subspace", None)
    if subspace is not None:
        return subspace_forest(regression, subspace)(**kw)
    return (TAOForestRegressor if regression else TAOForestClassifier)(**kw)


class _SubspaceTree:
    """A tree fitted on a subset of the features, read on full rows (for :class:`SubspaceForest`)."""

    def __init__(self, tree, features):
        self.inner, self.features = tree, features
        self.tree_ = self

    def predict(self, X):
        return self.inner.tree_.predict(X[:, self.features])

    def n_parameters(self):
        return self.inner.tree_.n_parameters()

    def inference_flops(self, X):
        return self.inner.tree_.inference_flops(X[:, self.features])


def _fit_subspace_tree(forest, X, y, seed, n_tree, K):
    from taodist.tao.bagging import sample_counts

    counts = sample_counts(seed, X.shape[0], n_tree, forest.bootstrap)
    rows = np.flatnonzero(counts)
    D = X.shape[1]
    k = max(1, int(round(forest.subspace * D)))
    features = np.sort(np.random.RandomState(seed + 1).choice(D, size=k, replace=False))
    params = {key: getattr(forest, key) for key in forest._tree_params()}
    tree = forest._tree_class(**params, random_state=int(seed), n_jobs=1)
    Xs = np.ascontiguousarray(X[rows][:, features], dtype=np.float64)
    if K:
        tree._fit_rows(Xs, y[rows], counts[rows].astype(np.float64), classes=np.arange(K))
    else:
        tree._fit_rows(Xs, y[rows], counts[rows].astype(np.float64))
    return _SubspaceTree(tree, features)


def subspace_forest(regression, subspace):
    """An experiment, not a package feature: each tree sees a random ``subspace`` fraction of the features
    (Ho's random subspace method) besides its own sample of the rows. Same seeds, samples and per-tree
    settings as the package's forest; predictions combined the same way."""
    base = TAOForestRegressor if regression else TAOForestClassifier

    class SubspaceForest(base):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.subspace = subspace

        def fit(self, X, y):
            from joblib import Parallel, delayed
            from sklearn.utils.validation import check_random_state

            X = np.asarray(X, dtype=np.float64)
            self.n_features_in_ = X.shape[1]
            K = 0
            if not regression:
                self.classes_, y = np.unique(y, return_inverse=True)
                K = len(self.classes_)
            else:
                self._y_1d = True
            seeds = check_random_state(self.random_state).randint(np.iinfo(np.int32).max, size=self.n_estimators)
            n_tree = self._n_samples_tree(X.shape[0])
            self.estimators_ = Parallel(n_jobs=2)(delayed(_fit_subspace_tree)(self, X, y, int(s), n_tree, K)
                                                  for s in seeds)
            return self

        def _check_predict(self, X):
            return np.asarray(X, dtype=np.float64)

        def _tree_params(self):
            names = ("max_depth", "node_type", "solver", "leaf_type", "C", "leaf_C", "max_iter", "tol", "init",
                     "prune", "max_care_points")
            return {k: getattr(self, k) for k in names}

    return SubspaceForest


def describe(forest, base_depth):
    p = {k: getattr(forest, k, None) for k in ("bootstrap", "max_samples", "leaf_type", "max_depth", "C",
                                                "max_iter", "subspace")}
    sample = "bootstrap" if p["bootstrap"] else f"{p['max_samples']:g} samples"
    if p["bootstrap"] and p["max_samples"] is not None:
        sample = f"bootstrap of {p['max_samples']:g}"
    if p.get("subspace") is not None:
        sample += f", {p['subspace']:g} of the features per tree"
    return (f"TAO forest ({p['leaf_type']} leaves, depth {p['max_depth']}, C {p['C']:g}, "
            f"{p['max_iter']} iterations, {sample})")


PEERS = ("RandomForest", "ExtraTrees", "XGBoost", "LightGBM")


def accuracy_rows(name, n_trees, rows, notes, variants=(None,), split="test", peers=PEERS):
    """One row per TAO forest variant (and per peer), fitted and scored on ``split`` (see split_data)."""
    Xtr, ytr, Xte, yte = split_data(name, split)
    regression = name == "cpu_act"
    K = 1 if regression else len(np.unique(ytr))
    depth = TAO_DEPTH[name]
    for spec in variants:
        variant = {} if spec is None else parse_variant(spec)
        tao = tao_forest(regression, n_trees, depth, variant)
        _, secs = timed(lambda: tao.fit(Xtr, ytr))
        forest_err = err(tao.predict(Xte), yte, regression)
        v = vote_errors(tao, Xte, yte, regression)
        other = "" if regression else f"soft {v['soft']:.2f} / hard {v['hard']:.2f}"
        rows.append(f"| {name} | {describe(tao, depth)}{'' if spec is None else f' `{spec}`'} | {forest_err:.2f} | "
                    f"{v['trees']:.2f} | {v['half']:.2f} | {other} | {secs:.0f} | {n_trees} | "
                    f"{tao.n_parameters():,} | {tao.inference_flops(Xte):,.0f} |")
        print(rows[-1], flush=True)
    if not peers:
        return
    import lightgbm
    import xgboost

    if regression:
        models = {
            "RandomForest": RandomForestRegressor(n_estimators=100, n_jobs=-1, random_state=0),
            "ExtraTrees": ExtraTreesRegressor(n_estimators=100, n_jobs=-1, random_state=0),
            "XGBoost": xgboost.XGBRegressor(n_estimators=300, n_jobs=-1, random_state=0),
            "LightGBM": lightgbm.LGBMRegressor(n_estimators=300, n_jobs=-1, random_state=0, verbose=-1),
        }
    else:
        models = {
            "RandomForest": RandomForestClassifier(n_estimators=100, n_jobs=-1, random_state=0),
            "ExtraTrees": ExtraTreesClassifier(n_estimators=100, n_jobs=-1, random_state=0),
            "XGBoost": xgboost.XGBClassifier(n_estimators=300, n_jobs=-1, random_state=0),
            "LightGBM": lightgbm.LGBMClassifier(n_estimators=300, n_jobs=-1, random_state=0, verbose=-1),
        }
    for label, model in models.items():
        if label not in peers:
            continue
        _, secs = timed(lambda: model.fit(Xtr, ytr))
        e = err(model.predict(Xte), yte, regression)
        if label in ("RandomForest", "ExtraTrees"):
            params, flops = sk_counts(model, Xte, K)
            tree_e = np.mean([err(_sk_tree_predict(model, t, Xte, regression), yte, regression)
                              for t in model.estimators_])
            rows.append(f"| {name} | {label} | {e:.2f} | {tree_e:.2f} | | | {secs:.0f} | {len(model.estimators_)} | "
                        f"{params:,} | {flops:,.0f} |")
        else:
            n, params, _ = booster_counts(model, "xgb" if label == "XGBoost" else "lgb", K)
            rows.append(f"| {name} | {label} | {e:.2f} | | | | {secs:.0f} | {n} | ({params:,}) | n/a |")
        print(rows[-1], flush=True)


def _sk_tree_predict(forest, tree, X, regression):
    p = tree.predict(X)
    return p if regression else forest.classes_[np.asarray(p, dtype=int)]


def scaling_rows(rows, n_trees, dataset="letter", tree_depth=10, tree_iters=5, workers=(1, 2), tree_dataset=None,
                 threads=(1,)):
    from distributed import Client, LocalCluster

    Xtr, ytr, _, _ = load_dataset(dataset)
    Xt, yt = (Xtr, ytr) if tree_dataset in (None, dataset) else load_dataset(tree_dataset)[:2]
    for n_workers in workers:
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cl, \
                Client(cl) as client:
            forest = TAOForestClassifier(n_estimators=n_trees, max_depth=6, leaf_type="constant", random_state=0)
            _, f_secs = timed(lambda: forest.fit(Xtr, ytr, client=client))
            # NumPy input with a client: row blocks are scattered to the workers, then TAO runs on them
            tree = TAOClassifier(max_depth=tree_depth, random_state=0, max_iter=tree_iters, tol=0.0, early_stopping=False)
            _, t_secs = timed(lambda: tree.fit(Xt, yt, client=client))
        rows.append((n_workers, f_secs, t_secs))
        print(rows[-1], flush=True)
    local_secs = {}
    for n_jobs in threads:
        tree = TAOClassifier(max_depth=tree_depth, random_state=0, max_iter=tree_iters, tol=0.0, n_jobs=n_jobs,
                             early_stopping=False)
        _, local_secs[n_jobs] = timed(lambda: tree.fit(Xt, yt))
        print("in-process", n_jobs, local_secs[n_jobs], flush=True)
    return local_secs


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--datasets", nargs="*", default=["mnist", "letter", "cpu_act"])
    parser.add_argument("--trees", type=int, default=30)
    parser.add_argument("--variant", action="append", default=[], metavar="SPEC",
                        help="a TAO forest variant 'key=value ...' (TAOForest* parameters over the base setting: "
                             "90%% samples, the data set's depth); repeatable")
    parser.add_argument("--split", choices=("test", "validation"), default="test",
                        help="validation: fit on 90%% of the training set and score the other 10%% (for choosing "
                             "variants); test: fit on all of it and score the test set (final figures)")
    parser.add_argument("--no-peers", action="store_true", help="skip RandomForest, ExtraTrees, XGBoost, LightGBM")
    parser.add_argument("--peers", nargs="+", choices=PEERS, default=list(PEERS), help="the peers to run")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--scaling-dataset", default="letter")
    parser.add_argument("--scaling-trees", type=int, default=8)
    parser.add_argument("--scaling-workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--scaling-threads", type=int, nargs="*", default=[],
                        help="also fit the single tree in-process with these n_jobs (1 always)")
    parser.add_argument("--tree-dataset", default=None, help="data set of the single tree (default: --scaling-dataset)")
    parser.add_argument("--tree-depth", type=int, default=10)
    parser.add_argument("--tree-iters", type=int, default=5)
    parser.add_argument("--out", default=None, help="default bench/results/forest.md (scaling alone: scaling.md)")
    args = parser.parse_args()
    args.out = args.out or ("bench/results/forest.md" if args.datasets else "bench/results/scaling.md")
    lines = [f"Machine: {machine()}", ""]
    if args.datasets:
        col = "validation" if args.split == "validation" else "test"
        rows = [f"| data | method | {col} error (% / RMSE) | its trees alone, mean | first half of the trees | "
                "soft / hard vote | train s | trees | parameters | inference FLOPs |",
                "|---|---|---|---|---|---|---|---|---|---|"]
        notes = []
        variants = args.variant or [None]
        for name in args.datasets:
            accuracy_rows(name, args.trees, rows, notes, variants, args.split, () if args.no_peers else args.peers)
        lines += ([f"Fitted on {'90% of the training set, scored on the other 10% (stratified, seed 0)' if col == 'validation' else 'the whole training set, scored on the test set'}.", ""]
                  + rows + ["", "Boosted-tree parameter counts in parentheses are upper bounds from the tree dumps "
                                "(2 per split + 1 per leaf value).", ""] + [f"- {note}" for note in notes] + [""])
    if args.scaling:
        scale, local_secs = [], None
        local_secs = scaling_rows(scale, args.scaling_trees, args.scaling_dataset, args.tree_depth, args.tree_iters,
                                  args.scaling_workers, args.tree_dataset, sorted({1, *args.scaling_threads}))
        tree_data = args.tree_dataset or args.scaling_dataset
        lines += [f"| workers | TAO forest, {args.scaling_trees} trees ({args.scaling_dataset}, depth 6) s | speed-up "
                  f"| single tree ({tree_data}) depth {args.tree_depth}, {args.tree_iters} iterations s | speed-up |",
                  "|---|---|---|---|---|"]
        lines += [f"| {w} | {f:.1f} | {scale[0][1] / f:.2f} | {t:.1f} | {scale[0][2] / t:.2f} |" for w, f, t in scale]
        one = local_secs[1]
        lines += ["", "The same single tree in-process: "
                      + ", ".join(f"{n} thread{'s' if n > 1 else ''} {s:.1f} s" for n, s in local_secs.items())
                      + f"; on 1 worker the scheduler adds "
                      f"{(scale[0][2] - one) / (args.tree_iters * (args.tree_depth + 1)):.2f} s per "
                      f"TAO level ({100 * (scale[0][2] - one) / scale[0][2]:.0f}% of the fit; meaningful only when "
                      f"the first row is 1 worker).", ""]
    text = "\n".join(lines)
    write_report(text, args.out)


if __name__ == "__main__":
    main()
