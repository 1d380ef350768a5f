"""The kNN graph built on the workers (``taodist.laptao.knn_graph``, issue 46) against one-process pynndescent.

Data: ``--n`` rows of MNIST (the 60,000 training images, then deformed
copies of them as in ``bench_laptao_scale.py --dataset mnist1m``) projected to
50 dimensions by a PCA fitted on the 60k originals, written chunk by chunk to
a Zarr store (float32). The distributed graph reads the store on the workers
(``dask.array.from_zarr``, ``--rows-per-block`` rows a block: one NN-descent
index each); the driver never loads X for it.

Measured, at ``k = --n-neighbors``:

* **recall** on ``--queries`` random rows against their exact kNN over all
  rows (brute force, row block by row block, float64), for one-process
  pynndescent and for the distributed graph with 0 and ``--n-refine``
  refinement rounds;
* **time**: ``NNDescent(X)`` in this process (numba compiled beforehand on a
  small array, time reported apart), and ``knn_graph`` on a LocalCluster of
  each ``--workers`` count (one thread each; numba threads as Dask leaves
  them), after a warm-up graph that compiles numba on every worker (reported
  apart); the distributed time includes reading the store and leaves the
  graph on the workers (only the query rows' lists are fetched).

    python bench/bench_knn_graph.py                        # 200k rows, 1 and 2 workers
    python bench/bench_knn_graph.py --n 60000 --workers 2  # smoke run
"""

import argparse
import os
import platform
import time
from pathlib import Path

import numpy as np

from _report import write_report
from _store import write_blocks
from bench_laptao_scale import deformed_mnist

RESULTS = Path(__file__).parent / "results"
IMAGES = 60_000


def write_pca_store(path, n, seed):
    """``n`` rows of MNIST and its deformed copies, 50-d PCA, to a Zarr group {X, y} (skipped if already written)."""
    from sklearn.decomposition import PCA

    from taodist.datasets import load_dataset

    base, base_y, _, _ = load_dataset("mnist")  # pixels in [0, 1]
    images = np.rint(base * 255).astype(np.uint8).reshape(-1, 28, 28)
    pca = PCA(50, svd_solver="randomized", random_state=seed).fit(base)

    def block(copy, rows):  # chunk b is copy b of the 60k images (copy 0: the originals)
        pixels = deformed_mnist(images, copy, seed).reshape(-1, 784)[:rows] / 255.0
        return pca.transform(pixels).astype(np.float32), base_y[:rows].astype(np.int8)

    meta = dict(n=n, seed=seed, kind="mnist-pca50-v1")
    write_blocks(Path(path), meta, n, 50, IMAGES, block)


def exact_knn(X, queries, k, rows_per_pass=20_000):
    """Exact ``k`` nearest other rows of ``X[queries]`` over all of ``X`` (float64 brute force by row blocks)."""
    Q = X[queries].astype(np.float64)
    qq = (Q * Q).sum(1)[:, None]
    best_d = np.full((len(queries), 0), np.inf)
    best_i = np.zeros((len(queries), 0), dtype=np.int64)
    for lo in range(0, X.shape[0], rows_per_pass):
        B = X[lo:lo + rows_per_pass].astype(np.float64)
        d = qq + (B * B).sum(1)[None, :] - 2 * Q @ B.T
        i = np.broadcast_to(np.arange(lo, lo + B.shape[0]), d.shape)
        d = np.where(i == queries[:, None], np.inf, d)  # a row is not its own neighbour
        best_d, best_i = np.hstack([best_d, d]), np.hstack([best_i, i])
        keep = np.argsort(best_d, axis=1, kind="stable")[:, :k]
        best_d, best_i = np.take_along_axis(best_d, keep, 1), np.take_along_axis(best_i, keep, 1)
    return best_i


def recall(found, exact):
    return float(np.mean([len(set(a) & set(b)) / exact.shape[1] for a, b in zip(found, exact)]))


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def single_process(X, queries, exact, k, seed):
    from pynndescent import NNDescent

    _, compile_s = timed(lambda: NNDescent(X[:5000], n_neighbors=k + 1, random_state=seed).neighbor_graph)
    index, build_s = timed(lambda: NNDescent(X, n_neighbors=k + 1, random_state=seed))
    idx = index.neighbor_graph[0][queries]
    # NN-descent lists a row as its own first neighbour: drop it (else the last)
    found = np.array([row[row != q][:k] for row, q in zip(idx, queries)])
    return dict(compile_s=compile_s, seconds=build_s, recall=recall(found, exact))


def distributed(store, n_workers, rows_per_block, queries, exact, k, n_refine, seed):
    import dask.array as da
    from distributed import Client, LocalCluster

    from taodist.laptao import knn_graph

    rows = []
    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        # numba compiles NN-descent and its search in every worker process once: a small graph with
        # a block per worker (blocks above the brute-force size) pays for it before the timed runs
        warm = da.from_array(np.random.default_rng(seed).normal(size=(2000 * n_workers, 50)).astype(np.float32),
                             chunks=(2000, 50))
        _, compile_s = timed(lambda: knn_graph(warm, k, random_state=seed, client=client)[0].blocks[0].compute())
        X = da.from_zarr(store, component="X").rechunk({0: rows_per_block})
        for refine in sorted({0, n_refine}):
            def run():
                idx, _ = knn_graph(X, k, n_refine=refine, random_state=seed, client=client)
                return idx

            idx, seconds = timed(run)
            found = idx[queries].compute()  # only the query rows' lists leave the workers
            rows.append(dict(workers=n_workers, n_refine=refine, compile_s=compile_s, seconds=seconds,
                             recall=recall(found, exact)))
            print(rows[-1], flush=True)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--n-neighbors", type=int, default=10)
    ap.add_argument("--rows-per-block", type=int, default=50_000, help="rows of one block (one NN-descent index)")
    ap.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    ap.add_argument("--n-refine", type=int, default=1)
    ap.add_argument("--queries", type=int, default=2000, help="rows whose recall is measured")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", default=None, help="Zarr store (default /tmp/taodist-mnist-pca50-<n>.zarr)")
    ap.add_argument("--out", default=str(RESULTS / "knn_graph.md"))
    args = ap.parse_args()
    store = args.store or f"/tmp/taodist-mnist-pca50-{args.n}.zarr"
    k = args.n_neighbors

    import zarr

    _, write_s = timed(lambda: write_pca_store(store, args.n, args.seed))
    X = zarr.open_group(store, mode="r")["X"][:]  # here only for the exact kNN and the one-process baseline
    queries = np.sort(np.random.default_rng(args.seed).choice(args.n, args.queries, replace=False))
    exact, exact_s = timed(lambda: exact_knn(X, queries, k))
    print(f"store {write_s:.0f}s, exact kNN of {args.queries} rows {exact_s:.1f}s", flush=True)
    single = single_process(X, queries, exact, k, args.seed)
    print("one process", single, flush=True)
    del X
    rows = []
    for w in (int(s) for s in args.workers.split(",")):
        rows += distributed(store, w, args.rows_per_block, queries, exact, k, args.n_refine, args.seed)

    n_blocks = -(-args.n // args.rows_per_block)
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores. MNIST + deformed copies, "
             f"{args.n:,} rows x 50 (PCA), k = {k}; recall on {args.queries:,} random rows against exact kNN over "
             f"all rows. Distributed: {n_blocks} blocks of {args.rows_per_block:,} rows, LocalCluster worker "
             "processes of one thread each.", "",
             "| method | workers | refinement rounds | seconds | recall | numba warm-up s (apart) |",
             "|---|---|---|---|---|---|",
             f"| pynndescent NNDescent, one process | - | - | {single['seconds']:.1f} | {single['recall']:.4f} | "
             f"{single['compile_s']:.0f} |"]
    lines += [f"| knn_graph on the workers | {r['workers']} | {r['n_refine']} | {r['seconds']:.1f} | "
              f"{r['recall']:.4f} | {r['compile_s']:.0f} |" for r in rows]
    write_report("\n".join(lines) + "\n", args.out)


if __name__ == "__main__":
    main()
