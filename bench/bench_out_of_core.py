"""Out-of-core TAO: a fit on a float32 Zarr array larger than the workers' memory.

1. Writes a deterministic synthetic classification set chunk by chunk to a
   Zarr store (never whole in memory): X ~ N(0, 1) float32 with ``--features``
   columns, 4 classes from a hidden depth-2 sparse oblique tree, 5% of labels
   flipped at random (so the Bayes error is 3.75%).
2. Fits ``TAOClassifier`` on it from a ``LocalCluster`` whose workers are
   limited to ``--memory-limit`` each (processes, one thread each). The fit
   streams the Zarr blocks (taodist's out-of-core mode, chosen automatically
   from the workers' memory) and caps the care points a node solve gathers.
3. Samples every worker's RSS during the fit (peak reported) and checks that
   no worker was restarted (killed for memory).
4. ``--sampling-rows N``: on the first N rows, in memory, compares the fit
   with that care-point cap against the fit without a cap (objective and test
   error), to measure what the bounded sampling costs.

    python bench/bench_out_of_core.py                    # 4 GB store, 2 workers x 1.5 GB
    python bench/bench_out_of_core.py --gb 0.2 --memory-limit 200MB --max-iter 1   # smoke run
"""

import argparse
import json
import os
import platform
import resource
import threading
import time
from pathlib import Path

import numpy as np

from _store import write_blocks

RESULTS = Path(__file__).parent / "results"
N_CLASSES = 4


def hidden_tree(n_features, seed):
    """Three sparse hyperplanes (10 non-zeros each) of a depth-2 oblique tree."""
    rng = np.random.default_rng([seed, 2**31])
    W = np.zeros((3, n_features), dtype=np.float32)
    for row in W:
        idx = rng.choice(n_features, size=min(10, n_features), replace=False)
        row[idx] = rng.normal(size=idx.size)
    return W


def make_block(block_id, rows, n_features, W, seed):
    """Rows of block ``block_id``: the same for a given seed, whatever the chunking of the writer."""
    rng = np.random.default_rng([seed, block_id])
    X = rng.standard_normal((rows, n_features), dtype=np.float32)
    m = X @ W.T
    right = m[:, 0] >= 0
    y = 2 * right + np.where(right, m[:, 2] >= 0, m[:, 1] >= 0)
    flip = rng.random(rows) < 0.05
    y[flip] = rng.integers(0, N_CLASSES, size=int(flip.sum()))
    return X, y.astype(np.int8)


def write_store(path, n_rows, n_features, rows_per_chunk, seed):
    """The synthetic set as a Zarr group {X, y} (uncompressed: random floats do not compress)."""
    meta = dict(n_rows=n_rows, n_features=n_features, rows_per_chunk=rows_per_chunk, seed=seed)
    W = hidden_tree(n_features, seed)
    start = time.perf_counter()
    if write_blocks(path, meta, n_rows, n_features, rows_per_chunk,
                    lambda b, rows: make_block(b, rows, n_features, W, seed), compressors=None):
        print(f"wrote {path}: {n_rows} x {n_features} float32 in {time.perf_counter() - start:.0f}s")


def test_set(n_rows, n_features, seed):
    W = hidden_tree(n_features, seed)
    X, y = make_block(10**9, n_rows, n_features, W, seed)  # a block id no training block has
    return X, y


class MemorySampler(threading.Thread):
    """Polls every worker's RSS; keeps the maximum per worker address."""

    def __init__(self, client, every=0.25):
        super().__init__(daemon=True)
        self.client, self.every = client, every
        self.peak, self.stop = {}, threading.Event()

    def run(self):
        import psutil

        while not self.stop.is_set():
            try:
                for addr, rss in self.client.run(lambda: psutil.Process().memory_info().rss).items():
                    self.peak[addr] = max(self.peak.get(addr, 0), rss)
            except Exception:  # a worker going away mid-poll: recorded as a restart below
                pass
            self.stop.wait(self.every)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", type=float, default=4.0, help="size of X in GB (float32)")
    ap.add_argument("--features", type=int, default=100)
    ap.add_argument("--rows-per-chunk", type=int, default=160_000)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", default="1.5GB")
    ap.add_argument("--max-depth", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", default="/tmp/taodist-out-of-core.zarr")
    ap.add_argument("--sampling-rows", type=int, default=0, help="rows for the in-memory sampling comparison")
    args = ap.parse_args()

    import dask
    from dask.utils import parse_bytes
    from distributed import Client, LocalCluster

    from taodist import TAOClassifier
    from taodist.dask._data import plan_out_of_core
    from taodist.io import open_zarr

    n_rows = int(args.gb * 1e9 / (4 * args.features))
    store = Path(args.store)
    write_store(store, n_rows, args.features, args.rows_per_chunk, args.seed)
    Xte, yte = test_set(200_000, args.features, args.seed)
    X, y = open_zarr(store, component="X"), open_zarr(store, component="y")
    limit = parse_bytes(args.memory_limit)
    print(f"X: {X.shape} float32 = {X.nbytes / 1e9:.2f} GB on disk; workers: {args.workers} x {limit / 1e9:.2f} GB")

    rows = []
    with LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True, memory_limit=limit,
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        stream, cap = plan_out_of_core(client, X)
        workers_before = set(client.scheduler_info(n_workers=-1)["workers"])
        sampler = MemorySampler(client)
        sampler.start()
        clf = TAOClassifier(max_depth=args.max_depth, max_iter=args.max_iter, random_state=0)
        start = time.perf_counter()
        clf.fit(X, y, client=client)
        fit_s = time.perf_counter() - start
        with dask.config.set(scheduler=client):
            pred = clf.predict(X)
            train_err = float((pred != y.astype(np.int64)).mean().compute())
        sampler.stop.set()
        sampler.join()
        workers_after = set(client.scheduler_info(n_workers=-1)["workers"])
    test_err = float((clf.predict(Xte) != yte).mean())
    restarted = len(workers_before - workers_after)
    peak = max(sampler.peak.values())
    client_peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    rows.append(dict(
        what=f"out-of-core fit, {args.workers} workers x {args.memory_limit}", rows=n_rows, gb=X.nbytes / 1e9,
        streamed=stream, cap=cap, fit_s=fit_s, iters=clf.n_iter_, objective=f"{clf.history_[0]:.0f} -> {clf.history_[-1]:.0f}",
        train_err=100 * train_err, test_err=100 * test_err, peak_worker_gb=peak / 1e9, client_gb=client_peak / 1e9,
        restarted=restarted))
    print(json.dumps(rows[-1]))

    if args.sampling_rows:
        Xs = open_zarr(store, component="X")[:args.sampling_rows].compute()
        ys = open_zarr(store, component="y")[:args.sampling_rows].compute()
        for k in (None, cap):
            clf = TAOClassifier(max_depth=args.max_depth, max_iter=args.max_iter, random_state=0, max_care_points=k)
            start = time.perf_counter()
            clf.fit(Xs, ys)
            rows.append(dict(
                what=f"in memory, first {args.sampling_rows} rows, max_care_points={k}", rows=args.sampling_rows,
                gb=Xs.nbytes / 1e9, streamed=False, cap=k, fit_s=time.perf_counter() - start, iters=clf.n_iter_,
                objective=f"{clf.history_[0]:.0f} -> {clf.history_[-1]:.0f}",
                train_err=100 * float((clf.predict(Xs) != ys).mean()), test_err=100 * float((clf.predict(Xte) != yte).mean()),
                peak_worker_gb=float("nan"), client_gb=float("nan"), restarted=0))
            print(json.dumps(rows[-1]))

    head = ["run", "rows", "X GB", "streamed", "care cap", "fit s", "TAO iters", "objective", "train err %",
            "test err %", "peak worker RSS GB", "client RSS GB", "workers restarted"]
    lines = [f"Machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
             f"depth {args.max_depth}, max_iter {args.max_iter}. Bayes error 3.75%.", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([
            r["what"], str(r["rows"]), f"{r['gb']:.2f}", str(r["streamed"]), str(r["cap"]), f"{r['fit_s']:.0f}",
            str(r["iters"]), r["objective"], f"{r['train_err']:.2f}", f"{r['test_err']:.2f}",
            f"{r['peak_worker_gb']:.2f}", f"{r['client_gb']:.2f}", str(r["restarted"])]) + " |")
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "out_of_core.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
