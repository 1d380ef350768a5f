"""LapTAO from a Zarr store on a 2-worker LocalCluster, X never gathered in the driver.

1. Writes MNIST-like rows to a Zarr store chunk by chunk: the 60,000 MNIST
   training images and deformed copies of them (rotation and shift, as
   ``bench_laptao_scale.py --dataset mnist1m`` builds them), each projected
   on a 50-d PCA fitted on the originals, float32; the first ``--n`` rows.
   Tested on the 10,000 MNIST test images in the same projection.
2. Fits :class:`taodist.LapTAOClassifier` on ``da.from_zarr`` of the store
   with ``client=``: kNN graph, affinities, Laplacian, label steps' CG, tree
   steps, predictions and post-processing all run on the workers from the
   store's chunks (``--out-of-core`` forces the tree steps to re-read the
   rows from the store in every pass instead of holding them).
3. Reports total time, time per stage (graph + affinities + L, label steps,
   tree steps, the rest: the first tree step, predictions, post-processing),
   the peak RSS of the driver and of each worker (psutil, sampled every
   0.1 s from a thread in the driver; the scheduler's too with
   ``--scheduler-process``), the driver's peak traced allocations during the
   fit (tracemalloc, with ``--tracemalloc``; ``--snapshots`` adds its largest
   allocation sites near the peak) against X's size, and the test error
   against TAO fitted on the labelled rows only.

    python bench/bench_laptao_zarr.py --n 60000 --n-outer 4       # smoke run
    python bench/bench_laptao_zarr.py --n 60000 --n-outer 4 --out-of-core --tracemalloc --snapshots
    python bench/bench_laptao_zarr.py --n 60000 --n-outer 4 --out-of-core --scheduler-process
"""

import argparse
import json
import os
import platform
import threading
import time
import tracemalloc
from pathlib import Path

import numpy as np
from _store import write_blocks
from bench_laptao_scale import deformed_mnist

RESULTS = Path(__file__).parent / "results"


def write_store(path, n, rows_per_chunk, seed):
    """The store {X float32 (n, 50), y int8}, written one chunk at a time; the PCA and the test rows."""
    from sklearn.decomposition import PCA

    from taodist.datasets import load_dataset

    base, base_y, Xte, yte = load_dataset("mnist")  # pixels in [0, 1]
    images = np.rint(base * 255).astype(np.uint8).reshape(-1, 28, 28)
    pca = PCA(50, svd_solver="randomized", random_state=seed).fit(images.reshape(len(images), -1) / 255.0)
    per_copy = len(images)
    cache = {}

    def block(b, rows):
        lo = b * rows_per_chunk
        copy = lo // per_copy
        if copy not in cache:  # one copy of the 60k images deformed at a time
            cache.clear()
            cache[copy] = pca.transform(deformed_mnist(images, copy, seed).reshape(per_copy, -1) / 255.0)
        start = lo - copy * per_copy
        return cache[copy][start:start + rows].astype(np.float32), base_y[start:start + rows].astype(np.int8)

    if per_copy % rows_per_chunk:
        raise ValueError(f"--rows-per-chunk must divide {per_copy}")
    meta = dict(n=n, rows_per_chunk=rows_per_chunk, seed=seed, kind="mnist-pca50-v1")
    write_blocks(Path(path), meta, n, 50, rows_per_chunk, block)
    return pca.transform(np.asarray(Xte, dtype=np.float64)).astype(np.float32), np.asarray(yte)


class RSSSampler(threading.Thread):
    """Peak RSS of some processes, polled every ``period`` seconds."""

    def __init__(self, pids, period=0.1):
        import psutil

        super().__init__(daemon=True)
        self.procs = {name: psutil.Process(pid) for name, pid in pids.items()}
        self.peak = {name: p.memory_info().rss for name, p in self.procs.items()}
        self.period, self._stop_event = period, threading.Event()

    def run(self):
        while not self._stop_event.is_set():
            for name, p in self.procs.items():
                try:
                    self.peak[name] = max(self.peak[name], p.memory_info().rss)
                except Exception:  # a worker restarted: its peak so far stays
                    pass
            time.sleep(self.period)

    def stop(self):
        self._stop_event.set()
        self.join()
        return self.peak


class TracePeakSnapshots(threading.Thread):
    """Where the driver's traced allocations stand at their peak: a tracemalloc snapshot each time the
    traced size passes the last snapshot's by ``step`` (a fraction), polled every ``period`` seconds.

    The last snapshot is taken within ``step`` of the traced peak; its largest allocation sites
    (grouped by the innermost taodist frame of each traceback) say what the driver held then.
    """

    def __init__(self, period=0.05, step=0.05):
        super().__init__(daemon=True)
        self.period, self.step, self._stop_event = period, step, threading.Event()
        self.best, self.snapshot = 0, None

    def run(self):
        while not self._stop_event.is_set():
            current = tracemalloc.get_traced_memory()[0]
            if current > self.best * (1 + self.step):
                self.best, self.snapshot = current, tracemalloc.take_snapshot()
            time.sleep(self.period)

    def stop(self, top=15):
        self._stop_event.set()
        self.join()
        if self.snapshot is None:
            return []
        sites = {}
        for stat in self.snapshot.statistics("traceback"):
            frames = [f for f in stat.traceback if "taodist" in f.filename] or list(stat.traceback)
            site = f"{frames[-1].filename.split('taodist/')[-1]}:{frames[-1].lineno}" if frames else "?"
            sites[site] = sites.get(site, 0) + stat.size
        ranked = sorted(sites.items(), key=lambda kv: -kv[1])[:top]
        return [{"site": k, "bytes": v} for k, v in ranked] + [{"site": "total at snapshot", "bytes": self.best}]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=120_000)
    ap.add_argument("--rows-per-chunk", type=int, default=20_000)
    ap.add_argument("--labelled", type=float, default=0.01, help="fraction of labelled rows")
    ap.add_argument("--max-depth", type=int, default=6)
    ap.add_argument("--n-outer", type=int, default=6)
    ap.add_argument("--max-care-points", type=int, default=20_000)
    ap.add_argument("--worker-memory", default="2GB", help="memory limit per worker")
    ap.add_argument("--out-of-core", action="store_true", help="tree steps re-read X from the store every pass")
    ap.add_argument("--tracemalloc", action="store_true", help="also trace the driver's allocations (slower)")
    ap.add_argument("--scheduler-process", action="store_true",
                    help="the scheduler in a process of its own (distributed's SubprocessCluster), as on a real "
                         "cluster; by default LocalCluster runs it in the driver's process, counted in its memory")
    ap.add_argument("--snapshots", action="store_true",
                    help="with --tracemalloc: the driver's largest allocation sites near its traced peak")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", default="/tmp/taodist_bench/laptao_zarr.zarr")
    ap.add_argument("--out", default=str(RESULTS / "laptao_zarr.json"))
    args = ap.parse_args()

    import dask
    import dask.array as da
    import psutil
    import zarr
    from distributed import Client, LocalCluster

    from taodist import LapTAOClassifier, TAOClassifier

    t0 = time.perf_counter()
    Xte, yte = write_store(args.store, args.n, args.rows_per_chunk, args.seed)
    store_s = time.perf_counter() - t0
    g = zarr.open_group(args.store, mode="r")
    y = np.asarray(g["y"][:], dtype=np.int64)
    rng = np.random.default_rng(args.seed)
    labelled = np.sort(rng.choice(args.n, max(10, int(args.labelled * args.n)), replace=False))
    y_semi = np.full(args.n, -1)
    y_semi[labelled] = y[labelled]
    Xz = da.from_zarr(args.store, component="X")
    x_bytes = Xz.nbytes
    params = dict(max_depth=args.max_depth, n_outer=args.n_outer, max_care_points=args.max_care_points,
                  random_state=args.seed)
    me = psutil.Process()
    if args.scheduler_process:
        from distributed.deploy.subprocess import SubprocessCluster

        cluster = SubprocessCluster(n_workers=2, threads_per_worker=1, dashboard_address=":0",
                                    worker_kwargs={"memory_limit": args.worker_memory})
    else:
        cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, memory_limit=args.worker_memory,
                               dashboard_address=":0")
    with cluster, Client(cluster, set_as_default=False) as client, \
            dask.config.set({"taodist.out-of-core": True if args.out_of_core else "auto"}):
        client.wait_for_workers(2)  # (a SubprocessCluster's workers may not have joined yet)
        pids = {"driver": os.getpid(), **{f"worker{i}": pid for i, pid in
                                          enumerate(client.run(os.getpid).values())}}
        if args.scheduler_process:
            pids["scheduler"] = client.run_on_scheduler(os.getpid)
        rss_before = {name: psutil.Process(pid).memory_info().rss for name, pid in pids.items()}
        sampler = RSSSampler(pids)
        sampler.start()
        snapshots = None
        if args.tracemalloc:
            tracemalloc.start(25 if args.snapshots else 1)
            if args.snapshots:
                snapshots = TracePeakSnapshots()
                snapshots.start()
        t = time.perf_counter()
        model = LapTAOClassifier(**params).fit(Xz, y_semi, client=client)
        fit_s = time.perf_counter() - t
        traced_peak = tracemalloc.get_traced_memory()[1] if args.tracemalloc else None
        peak_sites = snapshots.stop() if snapshots is not None else None
        tracemalloc.stop()
        peak = sampler.stop()
    lap_err = float(np.mean(model.predict(Xte) != yte))
    X_lab = np.asarray(g["X"].get_orthogonal_selection((labelled, slice(None))), dtype=np.float64)
    t = time.perf_counter()
    tao = TAOClassifier(max_depth=args.max_depth, random_state=args.seed).fit(X_lab, y[labelled])
    tao_s = time.perf_counter() - t
    tao_err = float(np.mean(tao.predict(Xte) != yte))
    label_s = sum(h["label_seconds"] for h in model.history_)
    tree_s = sum(h["tree_seconds"] for h in model.history_)
    out = {
        "n": args.n, "d": 50, "x_bytes": x_bytes, "rows_per_chunk": args.rows_per_chunk,
        "labelled": int(labelled.size), "params": params, "worker_memory": args.worker_memory,
        "scheduler_process": args.scheduler_process,
        "out_of_core": args.out_of_core, "store_seconds": store_s,
        "fit_seconds": fit_s, "graph_seconds": model.graph_seconds_, "label_seconds": label_s,
        "tree_seconds": tree_s, "other_seconds": fit_s - model.graph_seconds_ - label_s - tree_s,
        "cg_iterations": [h["cg_iterations"] for h in model.history_],
        "peak_rss": peak, "rss_before_fit": rss_before,
        "driver_rss_increase": peak["driver"] - rss_before["driver"],
        "driver_traced_peak": traced_peak, "driver_peak_sites": peak_sites,
        "test_error_laptao": lap_err, "test_error_tao_labelled_only": tao_err, "tao_seconds": tao_s,
        "load_average": os.getloadavg(), "cpus": os.cpu_count(), "machine": platform.platform(),
    }
    print(json.dumps(out, indent=1))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
