"""LapTAO at a million points with 1% labels: a SUSY-like set and MNIST-1M.

1. Writes the data set chunk by chunk to a Zarr store (deterministic).
   ``--dataset susy``: 18 features, 2 overlapping classes (like SUSY: 8
   "low-level" momenta-like features, 10 nonlinear "high-level" functions of
   them), ``--n`` training rows and a 100k-row test set from other seeds.
   ``--dataset mnist1m``: the 60,000 MNIST training images and 16 deformed
   copies of each (rotation uniform in +-12 degrees, shift uniform in +-2
   pixels, bilinear; one seeded draw per image and copy), 1,020,000 uint8
   rows, in the spirit of infiMNIST/MNIST8M; tested on the 10,000 MNIST test
   images. The kNN graph is built on a 50-dimensional PCA projection (fitted
   on the 60k originals); the tree is trained on the 784 pixels.
2. Times each stage separately: the kNN graph (pynndescent), the entropic
   affinities, every label step (CG, warm-started) and tree step (TAO,
   warm-started) of the augmented-Lagrangian loop, the total, and the
   process's peak memory.
3. Times the same label-step sequence (mu0 ... mu0 * 1.5^(k-1), warm starts,
   tree predictions fixed at 0) with CG in this process in the data's row
   order and in reverse Cuthill-McKee order (LapTAO's), and with the
   distributed CG on a ``--workers`` LocalCluster (Laplacian row blocks in actors; default 2).
4. Peers on the same split: TAO on the labelled points only, and
   scikit-learn's LabelSpreading (kNN kernel) unless --no-label-spreading.

    python bench/bench_laptao_scale.py                   # SUSY-like, 1M points, 1% labels
    python bench/bench_laptao_scale.py --n 100000 --n-outer 3   # smoke run
    python bench/bench_laptao_scale.py --dataset mnist1m --max-depth 6 --solver saga \
        --max-care-points 20000 --no-full-tao --no-label-spreading
"""

import argparse
import json
import os
import platform
import resource
import time
from pathlib import Path

import numpy as np

from _report import write_report
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


MNIST_COPIES = 16


def deformed_mnist(images, copy, seed):
    """``images`` (n, 28, 28) rotated and shifted, one random draw per image; copy 0 is the originals."""
    from scipy import ndimage

    if copy == 0:
        return images
    n = len(images)
    rng = np.random.default_rng([seed, copy])
    angle = np.deg2rad(rng.uniform(-12, 12, n))[:, None, None]
    shift = rng.uniform(-2, 2, (n, 2))
    yy, xx = np.mgrid[0:28, 0:28].astype(np.float32)
    c = 13.5  # rotate about the image centre: output pixel p samples the input at R^-1 (p - c - s) + c
    py, px = yy[None] - c - shift[:, 0, None, None], xx[None] - c - shift[:, 1, None, None]
    iy = np.cos(angle) * py + np.sin(angle) * px + c
    ix = -np.sin(angle) * py + np.cos(angle) * px + c
    which = np.broadcast_to(np.arange(n, dtype=np.float32)[:, None, None], iy.shape)
    out = ndimage.map_coordinates(images.astype(np.float32), [which, iy, ix], order=1, mode="constant", cval=0.0)
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def load_susy(args):
    """Training rows (float64), labels, test set, and the rows the graph is built on."""
    import zarr

    write_store(Path(args.store), args.n, 100_000, args.seed)
    g = zarr.open_group(args.store, mode="r")
    X, y = np.asarray(g["X"][:], dtype=np.float64), np.asarray(g["y"][:], dtype=np.int64)
    Xte, yte = susy_like(10**6, 100_000, args.seed)
    # the graph on the same scaling LapTAO applies (max |x| per feature)
    scale = np.maximum(X.max(axis=0), -X.min(axis=0))
    return X, y, Xte, yte, X / np.where(scale > 0, scale, 1.0), "SUSY-like"


def load_mnist1m(args):
    import zarr
    from sklearn.decomposition import PCA

    from taodist.datasets import load_dataset

    base, base_y, Xte, yte = load_dataset("mnist")  # pixels in [0, 1]
    images = np.rint(base * 255).astype(np.uint8).reshape(-1, 28, 28)
    n = len(images) * (1 + MNIST_COPIES)
    meta = dict(n=n, copies=MNIST_COPIES, seed=args.seed, kind="mnist-1m-v2")
    write_blocks(Path(args.store), meta, n, 784, len(images),
                 lambda b, rows: (deformed_mnist(images, b, args.seed).reshape(rows, 784), base_y.astype(np.int8)),
                 dtype="uint8")
    g = zarr.open_group(args.store, mode="r")
    # uint8 rows (0.8 GB): LapTAO's float64 validation copy is then its only copy (scaled in place)
    X, y = g["X"][:], np.asarray(g["y"][:], dtype=np.int64)
    pca = PCA(50, svd_solver="randomized", random_state=args.seed).fit(X[:len(images)] / 255.0)
    Xg = np.vstack([pca.transform(X[lo:lo + len(images)] / 255.0).astype(np.float32)
                    for lo in range(0, n, len(images))])
    return X, y, np.rint(np.asarray(Xte, dtype=np.float64) * 255), np.asarray(yte), Xg, "MNIST-1M"


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def peak_gb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", choices=["susy", "mnist1m"], default="susy")
    ap.add_argument("--n", type=int, default=1_000_000, help="rows of the SUSY-like set")
    ap.add_argument("--labelled", type=float, default=0.01)
    ap.add_argument("--max-depth", type=int, default=4)
    ap.add_argument("--n-outer", type=int, default=20)
    ap.add_argument("--tao-iter", type=int, default=2)
    ap.add_argument("--n-neighbors", type=int, default=10)
    ap.add_argument("--C", type=float, default=None, help="LapTAO's C (default: the estimator's)")
    ap.add_argument("--mu0", type=float, default=None, help="LapTAO's first mu (default: the estimator's)")
    ap.add_argument("--init", choices=["random", "graph_labels"], default=None,
                    help="LapTAO's initial tree (default: the estimator's)")
    ap.add_argument("--no-exact-leaves", action="store_true", help="LapTAO's exact_leaves=False")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--solver", choices=["fista", "liblinear", "saga"], default="fista",
                    help="tree-step node solver (default: LapTAOClassifier's)")
    ap.add_argument("--max-care-points", type=int, default=None, help="care-point cap of a tree-step node fit")
    ap.add_argument("--store", default=None, help="Zarr store (default /tmp/taodist-<dataset>.zarr)")
    ap.add_argument("--no-label-spreading", action="store_true")
    ap.add_argument("--cg-systems", type=int, default=20, help="label-step systems in the CG comparison")
    ap.add_argument("--no-full-tao", action="store_true", help="skip the supervised TAO on all labels")
    ap.add_argument("--self-training", type=int, default=0, metavar="ROUNDS",
                    help="also self-training TAO (scikit-learn's SelfTrainingClassifier around the labelled-only "
                         "tree, threshold 0.75, care points capped as LapTAO's) for this many rounds; 0 = skip")
    ap.add_argument("--label-steps-only", action="store_true",
                    help="only the label-step comparison (no LapTAO fit, no peers)")
    ap.add_argument("--workers", type=int, default=2,
                    help="threads of the threaded in-process CG and workers (actors) of the distributed CG")
    ap.add_argument("--out", default=None, help="default bench/results/laptao_scale_<dataset>.md")
    args = ap.parse_args()
    args.store = args.store or f"/tmp/taodist-{args.dataset}.zarr"
    args.out = args.out or str(RESULTS / f"laptao_scale_{args.dataset}.md")

    from distributed import Client, LocalCluster

    from taodist import LapTAOClassifier, TAOClassifier
    from taodist.dask import DistributedLaplacianCG
    from taodist.laptao._graph import bandwidth_order, entropic_bandwidths, graph_laplacian, knn
    from taodist.laptao._label_step import LaplacianCG, solve_label_step

    (X, y, Xte, yte, Xg, name), gen_s = timed(lambda: (load_susy if args.dataset == "susy" else load_mnist1m)(args))
    n, K = len(y), int(y.max()) + 1
    lab = np.sort(np.random.default_rng(args.seed).choice(n, int(round(args.labelled * n)), replace=False))
    y_semi = np.full(n, -1)
    y_semi[lab] = y[lab]
    print(f"data: {X.shape}, {lab.size} labelled, written/loaded in {gen_s:.0f}s", flush=True)

    start = time.perf_counter()
    idx, dist = knn(Xg, args.n_neighbors, args.seed)
    knn_s = time.perf_counter() - start
    del Xg
    print(f"kNN graph: {knn_s:.1f}s", flush=True)

    def affinities():
        import scipy.sparse as sp

        sq = dist**2
        beta = entropic_bandwidths(sq, max(2.0, args.n_neighbors / 3))
        w = np.exp(-beta[:, None] * (sq - sq.min(axis=1, keepdims=True)))
        w /= w.sum(axis=1, keepdims=True)
        P = sp.csr_matrix((w.ravel(), (np.repeat(np.arange(n), idx.shape[1]), idx.ravel())), shape=(n, n))
        return ((P + P.T) / 2).tocsr()

    W, aff_s = timed(affinities)
    print(f"affinities: {aff_s:.1f}s, nnz {W.nnz}", flush=True)

    clf = LapTAOClassifier(max_depth=args.max_depth, n_outer=args.n_outer, tao_iter=args.tao_iter, n_jobs=-1,
                           solver=args.solver, max_care_points=args.max_care_points, random_state=0)
    if args.C is not None:
        clf.set_params(C=args.C)
    if args.mu0 is not None:
        clf.set_params(mu0=args.mu0)
    if args.init is not None:
        clf.set_params(init=args.init)
    if args.no_exact_leaves:
        clf.set_params(exact_leaves=False)
    if not args.label_steps_only:
        _, fit_s = timed(lambda: clf.fit(X, y_semi, affinity=W))
        lap_err = 100 * float(np.mean(clf.predict(Xte) != yte))
        print(f"LapTAO fit {fit_s:.0f}s, test error {lap_err:.2f}%", flush=True)

    # label steps alone, the same sequence of systems: in-process CG in the data's row order and in
    # reverse Cuthill-McKee order (what LapTAO uses), and the distributed CG on the reordered blocks
    L = graph_laplacian(W)
    (order, _), rcm_s = timed(lambda: bandwidth_order(L))
    L_rcm = L[order][:, order].tocsr()
    Y = np.zeros((n, K))
    Y[lab, y[lab]] = 1.0
    labelled = y_semi != -1
    T = np.zeros_like(Y)
    n_systems = min(args.n_outer, args.cg_systems)
    cg_rows = []
    nw = args.workers
    with LocalCluster(n_workers=nw, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        dcg, ship_s = timed(lambda: DistributedLaplacianCG(client, L_rcm, 0.1))
        solvers = (("in-process CG, data order", L, slice(None), LaplacianCG(L, 0.1)),
                   ("in-process CG, RCM order", L_rcm, order, LaplacianCG(L_rcm, 0.1)),
                   (f"in-process CG, RCM order, {nw} threads", L_rcm, order, LaplacianCG(L_rcm, 0.1, nw)),
                   (f"distributed CG, {nw} workers, RCM order", L_rcm, order, dcg))
        for cg_name, LL, rows, cg in solvers:
            # as in LapTAO: the initial step (mu = 0) from zero, then each step warm-started from the last
            Z, times, its = None, [], []
            for k in range(n_systems + 1):
                mu = 0.0 if k == 0 else 1e-3 * 1.5 ** (k - 1)
                (Z, info), s = timed(lambda: solve_label_step(labelled[rows], Y[rows], LL, 0.1, mu, T, None, Z0=Z,
                                                              direct_max=0, tol=clf.cg_tol, cg=cg))
                times.append(s)
                its.append(info.iterations)
            cg_rows.append((cg_name, times, its))
            print(cg_name, json.dumps({"seconds": [round(t, 2) for t in times], "iterations": its}), flush=True)
    cg_lines = ["", f"Label steps alone (T = 0; the initial step, mu = 0, from zero, then the first {n_systems} "
                    f"steps warm-started; CG tolerance {clf.cg_tol:g}; reverse Cuthill-McKee order computed in "
                    f"{rcm_s:.1f}s; the distributed blocks were shipped once in {ship_s:.1f}s):", "",
                "| CG | initial step s (its) | warm steps total s | max s | iterations |", "|---|---|---|---|---|"]
    cg_lines += [f"| {cg} | {t[0]:.1f} ({its[0]}) | {sum(t[1:]):.1f} | {max(t[1:], default=0.0):.2f} | "
                 f"{', '.join(map(str, its[1:]))} |" for cg, t, its in cg_rows]
    if args.label_steps_only:
        text = (f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. {name}, {n:,} points, "
                f"{lab.size:,} labelled, {args.n_neighbors}-NN graph; kNN {knn_s:.1f}s, affinities {aff_s:.1f}s.\n"
                + "\n".join(cg_lines) + "\n")
        write_report(text, args.out)
        return

    tao_lbl, tao_s = timed(lambda: TAOClassifier(max_depth=args.max_depth, random_state=0,
                                                    early_stopping=False).fit(X[lab], y[lab]))
    tao_err = 100 * float(np.mean(tao_lbl.predict(Xte) != yte))
    peers = [(f"TAO on the labelled points only (depth {args.max_depth})", tao_err, tao_s)]
    # the labelled-only tree on its own defaults too (max_depth="auto" may pick a deeper tree for its rows)
    auto_lbl, auto_s = timed(lambda: TAOClassifier(random_state=0).fit(X[lab], y[lab]))
    peers.append((f"TAOClassifier() on the labelled points only (depth {auto_lbl.max_depth_})",
                  100 * float(np.mean(auto_lbl.predict(Xte) != yte)), auto_s))
    print("labelled-only peers:", peers, flush=True)
    if args.self_training:
        from sklearn.semi_supervised import SelfTrainingClassifier

        # the care-point cap of LapTAO's tree steps: an uncapped TAO fit of all MNIST-1M rows needs more than 23 GB
        base = TAOClassifier(max_depth=args.max_depth, max_care_points=args.max_care_points, random_state=0,
                             early_stopping=False)
        st, st_s = timed(lambda: SelfTrainingClassifier(base, max_iter=args.self_training).fit(X, y_semi))
        peers.append((f"self-training TAO (depth {args.max_depth}, {st.n_iter_} rounds, "
                      f"{int(np.sum(st.labeled_iter_ > 0)):,} pseudo-labels)",
                      100 * float(np.mean(st.predict(Xte) != yte)), st_s))
        print("self-training:", peers[-1], flush=True)
    if not args.no_full_tao:
        full, full_s = timed(lambda: TAOClassifier(max_depth=args.max_depth, random_state=0,
                                                    early_stopping=False).fit(X, y))
        peers.append(("TAO on all points, all labels (supervised reference)",
                      100 * float(np.mean(full.predict(Xte) != yte)), full_s))
    if not args.no_label_spreading:
        from sklearn.semi_supervised import LabelSpreading

        scale = np.maximum(X.max(axis=0), -X.min(axis=0))
        scale = np.where(scale > 0, scale, 1.0)
        ls, ls_s = timed(lambda: LabelSpreading(kernel="knn", n_neighbors=args.n_neighbors).fit(X / scale, y_semi))
        peers.append(("LabelSpreading (kNN)", 100 * float(np.mean(ls.predict(Xte / scale) != yte)), ls_s))

    h = clf.history_
    graph_on = "a 50-d PCA projection" if args.dataset == "mnist1m" else "the scaled features"
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. {name}, "
             f"{n:,} points x {X.shape[1]} features, {lab.size:,} labelled ({100 * args.labelled:g}%), depth "
             f"{args.max_depth}, {args.n_outer} outer iterations x {args.tao_iter} TAO iterations, tree-step solver "
             f"{args.solver}, care-point cap {args.max_care_points}, {args.n_neighbors}-NN graph on {graph_on}.", "",
             "| stage | seconds |", "|---|---|",
             f"| kNN graph (pynndescent) | {knn_s:.1f} |", f"| entropic affinities + symmetrise | {aff_s:.1f} |",
             f"| initial label step (mu = 0) + initial tree | {fit_s - sum(x['label_seconds'] + x['tree_seconds'] for x in h):.1f} |",
             f"| label steps, all {len(h)} (max {max((x['label_seconds'] for x in h), default=0.0):.2f}) | "
             f"{sum(x['label_seconds'] for x in h):.1f} |",
             f"| tree steps, all {len(h)} (max {max((x['tree_seconds'] for x in h), default=0.0):.1f}) | "
             f"{sum(x['tree_seconds'] for x in h):.1f} |",
             f"| LapTAO fit total (graph given) | {fit_s:.1f} |",
             f"| total with graph | {knn_s + aff_s + fit_s:.1f} |", "",
             f"Peak memory of the process: {peak_gb():.1f} GB. LapTAO test error {lap_err:.2f}%.", "",
             "| outer it | mu | label s | CG its | CG residual | tree s | ‖z − t‖ |", "|---|---|---|---|---|---|---|"]
    lines += [f"| {x['iteration']} | {x['mu']:.4g} | {x['label_seconds']:.2f} | {x['cg_iterations']} | "
              f"{x['cg_residual']:.1e} | {x['tree_seconds']:.1f} | {x['z_minus_t']:.3g} |" for x in h]
    lines += cg_lines
    lines += ["", "| method | test error % | train s |", "|---|---|---|", f"| LapTAO | {lap_err:.2f} | "
              f"{knn_s + aff_s + fit_s:.0f} |"]
    lines += [f"| {peer} | {e:.2f} | {s:.0f} |" for peer, e, s in peers]
    text = "\n".join(lines) + "\n"
    write_report(text, args.out)


if __name__ == "__main__":
    main()
