"""LapTAO at a million points: a SUSY-like synthetic set with 1% labels.

1. Writes the data set chunk by chunk to a Zarr store (deterministic): 18
   features, 2 overlapping classes (like SUSY: 8 "low-level" momenta-like
   features, 10 nonlinear "high-level" functions of them), ``--n`` training
   rows and a 100k-row test set from other seeds.
2. Times each stage separately: the kNN graph (pynndescent), the entropic
   affinities, every label step (CG, warm-started) and tree step (TAO,
   warm-started) of the augmented-Lagrangian loop, the total, and the
   process's peak memory.
3. Times the same label-step sequence (mu0 ... mu0 * 1.5^19, warm starts,
   tree predictions fixed at 0) with CG in this process and with the
   distributed CG on a 2-worker LocalCluster (Laplacian row blocks in actors).
4. Peers on the same split: TAO on the labelled points only, and
   scikit-learn's LabelSpreading (kNN kernel) unless --no-label-spreading.

    python bench/bench_laptao_scale.py                   # 1M points, 1% labels
    python bench/bench_laptao_scale.py --n 100000 --n-outer 3   # smoke run
"""

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np
from _store import write_blocks

RESULTS = Path(__file__).parent / "results"


def susy_like(block_id, rows, seed):
    """Rows of one block: (X float32 (rows, 18), y int8); classes overlap (gradient boosting: ~20% error, as on SUSY)."""
    rng = np.random.default_rng([seed, block_id])
    y = (rng.random(rows) < 0.46).astype(np.int8)  # SUSY is 46% signal
    # 8 low-level features: lepton momenta / angles / missing energy, class-dependent scales
    scale = np.where(y[:, None] == 1, [1.8, 1.6, 1.0, 1.0, 1.7, 1.0, 2.2, 1.0], 1.0)
    low = np.abs(rng.standard_normal((rows, 8))) * scale
    low[:, [2, 5]] = rng.uniform(-np.pi, np.pi, size=(rows, 2))  # angles carry no class information
    low[:, 7] += 0.3 * y * rng.random(rows)
    # 10 high-level features: nonlinear functions of the low-level ones, plus noise
    high = np.column_stack([
        low[:, 0] * low[:, 1], np.hypot(low[:, 0], low[:, 4]), low[:, 6] / (1 + low[:, 0]),
        np.cos(low[:, 2] - low[:, 5]), low[:, 0] + low[:, 4] + low[:, 6], np.sqrt(low[:, 1] * low[:, 6]),
        low[:, 3] ** 2 - low[:, 7], np.log1p(low[:, 6] + low[:, 7]), low[:, 4] * np.sin(low[:, 5]),
        np.maximum(low[:, 0], low[:, 4]),
    ]) + 0.1 * rng.standard_normal((rows, 10))
    return np.hstack([low, high]).astype(np.float32), y


def write_store(path, n, rows_per_chunk, seed):
    meta = dict(n=n, rows_per_chunk=rows_per_chunk, seed=seed, kind="susy-like-v2")
    write_blocks(path, meta, n, 18, rows_per_chunk, lambda b, rows: susy_like(b, rows, seed))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--labelled", type=float, default=0.01)
    ap.add_argument("--max-depth", type=int, default=4)
    ap.add_argument("--n-outer", type=int, default=20)
    ap.add_argument("--tao-iter", type=int, default=2)
    ap.add_argument("--n-neighbors", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", default="/tmp/taodist-susy-like.zarr")
    ap.add_argument("--no-label-spreading", action="store_true")
    ap.add_argument("--out", default=str(RESULTS / "laptao_scale.md"))
    args = ap.parse_args()

    import zarr
    from distributed import Client, LocalCluster

    from taodist import LapTAOClassifier, TAOClassifier
    from taodist.dask import DistributedLaplacianCG
    from taodist.laptao._graph import entropic_bandwidths, graph_laplacian, knn
    from taodist.laptao._label_step import solve_label_step

    store = Path(args.store)
    _, gen_s = timed(lambda: write_store(store, args.n, 100_000, args.seed))
    g = zarr.open_group(str(store), mode="r")
    X, y = np.asarray(g["X"][:], dtype=np.float64), np.asarray(g["y"][:], dtype=np.int64)
    Xte, yte = susy_like(10**6, 100_000, args.seed)
    lab = np.sort(np.random.default_rng(args.seed).choice(args.n, int(round(args.labelled * args.n)), replace=False))
    y_semi = np.full(args.n, -1)
    y_semi[lab] = y[lab]
    print(f"data: {X.shape}, {lab.size} labelled, written in {gen_s:.0f}s", flush=True)

    # the graph, stage by stage, on the same scaling LapTAO applies (max |x| per feature)
    scale = np.maximum(X.max(axis=0), -X.min(axis=0))
    Xs = X / np.where(scale > 0, scale, 1.0)
    (idx, dist), knn_s = timed(lambda: knn(Xs, args.n_neighbors, args.seed))
    print(f"kNN graph: {knn_s:.1f}s", flush=True)

    def affinities():
        import scipy.sparse as sp

        sq = dist**2
        beta = entropic_bandwidths(sq, max(2.0, args.n_neighbors / 3))
        w = np.exp(-beta[:, None] * (sq - sq.min(axis=1, keepdims=True)))
        w /= w.sum(axis=1, keepdims=True)
        P = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(args.n), idx.shape[1]), idx.ravel())),
                          shape=(args.n, args.n))
        return ((P + P.T) / 2).tocsr()

    W, aff_s = timed(affinities)
    print(f"affinities: {aff_s:.1f}s, nnz {W.nnz}", flush=True)

    clf = LapTAOClassifier(max_depth=args.max_depth, n_outer=args.n_outer, tao_iter=args.tao_iter, n_jobs=-1,
                           random_state=0)
    _, fit_s = timed(lambda: clf.fit(X, y_semi, affinity=W))
    lap_err = 100 * float(np.mean(clf.predict(Xte) != yte))
    print(f"LapTAO fit {fit_s:.0f}s, test error {lap_err:.2f}%", flush=True)

    # label steps alone: in-process CG against the distributed CG, same sequence of systems
    L = graph_laplacian(W)
    Y = np.zeros((args.n, 2))
    Y[lab, y[lab]] = 1.0
    labelled = y_semi != -1
    T = np.zeros_like(Y)
    cg_rows = []
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        dcg, ship_s = timed(lambda: DistributedLaplacianCG(client, L, 0.1))
        for name, cg in (("in-process CG", None), ("distributed CG, 2 workers", dcg)):
            Z, times, its = None, [], []
            for k in range(args.n_outer):
                mu = 1e-3 * 1.5**k
                (Z, info), s = timed(lambda: solve_label_step(labelled, Y, L, 0.1, mu, T, None, Z0=Z, direct_max=0,
                                                              cg=cg))
                times.append(s)
                its.append(info.iterations)
            cg_rows.append((name, times, its))
            print(name, json.dumps({"seconds": [round(t, 2) for t in times], "iterations": its}), flush=True)

    tao_lbl, tao_s = timed(lambda: TAOClassifier(max_depth=args.max_depth, random_state=0).fit(X[lab], y[lab]))
    tao_err = 100 * float(np.mean(tao_lbl.predict(Xte) != yte))
    full, full_s = timed(lambda: TAOClassifier(max_depth=args.max_depth, random_state=0).fit(X, y))
    full_err = 100 * float(np.mean(full.predict(Xte) != yte))
    peers = [("TAO on the labelled points only", tao_err, tao_s),
             ("TAO on all points, all labels (supervised reference)", full_err, full_s)]
    if not args.no_label_spreading:
        from sklearn.semi_supervised import LabelSpreading

        ls, ls_s = timed(lambda: LabelSpreading(kernel="knn", n_neighbors=args.n_neighbors).fit(Xs, y_semi))
        peers.append(("LabelSpreading (kNN)", 100 * float(np.mean(ls.predict(Xte / np.where(scale > 0, scale, 1.0))
                                                                   != yte)), ls_s))

    h = clf.history_
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. SUSY-like, "
             f"{args.n:,} points x 18 features, {lab.size:,} labelled ({100 * args.labelled:g}%), depth "
             f"{args.max_depth}, {args.n_outer} outer iterations x {args.tao_iter} TAO iterations, "
             f"{args.n_neighbors}-NN graph.", "",
             "| stage | seconds |", "|---|---|",
             f"| kNN graph (pynndescent) | {knn_s:.1f} |", f"| entropic affinities + symmetrise | {aff_s:.1f} |",
             f"| initial label step (mu = 0) + initial tree | {fit_s - sum(x['label_seconds'] + x['tree_seconds'] for x in h):.1f} |",
             f"| label steps, all {len(h)} (max {max(x['label_seconds'] for x in h):.2f}) | "
             f"{sum(x['label_seconds'] for x in h):.1f} |",
             f"| tree steps, all {len(h)} (max {max(x['tree_seconds'] for x in h):.1f}) | "
             f"{sum(x['tree_seconds'] for x in h):.1f} |",
             f"| LapTAO fit total (graph given) | {fit_s:.1f} |",
             f"| total with graph | {knn_s + aff_s + fit_s:.1f} |", "",
             f"Peak memory of the process: {peak_gb():.1f} GB. LapTAO test error {lap_err:.2f}%.", "",
             "| outer it | mu | label s | CG its | CG residual | tree s | ‖z − t‖ |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {x['iteration']} | {x['mu']:.4g} | {x['label_seconds']:.2f} | {x['cg_iterations']} | "
              f"{x['cg_residual']:.1e} | {x['tree_seconds']:.1f} | {x['z_minus_t']:.3g} |" for x in h]
    lines += ["", f"Label steps alone (the same {args.n_outer} systems, warm-started; the distributed blocks were "
                  f"shipped once in {ship_s:.1f}s):", "", "| CG | total s | max s | iterations |", "|---|---|---|---|"]
    lines += [f"| {name} | {sum(t):.1f} | {max(t):.2f} | {', '.join(map(str, its))} |" for name, t, its in cg_rows]
    lines += ["", "| method | test error % | train s |", "|---|---|---|", f"| LapTAO | {lap_err:.2f} | "
              f"{knn_s + aff_s + fit_s:.0f} |"]
    lines += [f"| {name} | {e:.2f} | {s:.0f} |" for name, e, s in peers]
    text = "\n".join(lines) + "\n"
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
