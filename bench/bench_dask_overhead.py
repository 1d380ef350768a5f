"""What the Dask path costs per TAO level: one tree in-process against the same tree on a LocalCluster.

MNIST (the first ``--rows`` training rows), oblique FISTA nodes, constant
leaves, a fixed number of TAO iterations (``tol=0``), the same
``random_state``. Each configuration fits in-process and on a
``--workers``-worker LocalCluster (``--threads-per-worker`` threads each, default
one), interleaved ``--repeats`` times, so both see the same machine load.
Like for like: the in-process fit gets as many executor threads as the
cluster has worker threads and one BLAS thread each (Dask's nanny sets ``OMP_NUM_THREADS=1`` etc. in its
workers).

Reported per configuration (medians over repeats): the TAO iterations'
seconds (the fit's ``result.seconds``: levels plus the objective, not the
initial tree or scattering), the Dask/in-process ratio (and each
repeat's), the ratio of CPU seconds over all processes (driver, scheduler,
workers; whole fits: on a shared 2-core machine the least noisy measure of
what Dask adds), seconds per level
and the overhead per level ((Dask - in-process) / levels), and the Dask
executor's round trips (calls that wait on the cluster), tasks per
level and, for the actor executor, the calls its hosts make to each other
per level (results they read of each other, the node groups' claims). The two models must be identical (asserted). ``--copy-rows`` times
the Dask fit once per ``taodist.copy-rows`` setting (a copy of the solver
rows on every worker, made when the chunks are, so node groups stop
receiving care points; the copy's cost is in the whole-fit columns).
``--no-malloc-trim`` starts the workers without the ``MALLOC_TRIM_THRESHOLD_``
Dask's nanny sets (which also stops glibc from raising its mmap threshold, so
every large temporary array is mapped and faulted in anew). ``--hops`` first
times levels of trivial chained tasks on the same cluster: the floor a TAO
level's waits and dependent steps put under the Dask fit.

Run from the repository root, with ../shared/data present::

    python bench/bench_dask_overhead.py                         # 20k and 60k rows, depth 8
    python bench/bench_dask_overhead.py --rows 60000 --depths 6 8 --iters 3 --repeats 3
    python bench/bench_dask_overhead.py --rows 60000 --iters 3 --repeats 3 --copy-rows false true
    python bench/bench_dask_overhead.py --rows 60000 --iters 3 --repeats 3 --copy-rows true --no-malloc-trim
    python bench/bench_dask_overhead.py --rows 60000 --iters 3 --repeats 3 --copy-rows true --no-malloc-trim --hops
    python bench/bench_dask_overhead.py --rows 60000 --iters 3 --repeats 5 --copy-rows true --executors actors \
        --no-malloc-trim --workers 1 --threads-per-worker 2

Writes a markdown table to stdout and to ``--out`` (default
``bench/results/dask_overhead.md``, not committed).
"""

import argparse
import time
import warnings
from pathlib import Path
from statistics import median

import dask
import numpy as np
import psutil
from sklearn.exceptions import ConvergenceWarning
from threadpoolctl import threadpool_limits

import taodist.dask._execution as dask_execution
from taodist import TAOClassifier
from taodist.dask import ActorExecutor, DaskExecutor
from taodist.datasets import load_dataset
from taodist.testing import assert_tree_equal
from taodist.utils.progress import reporting

warnings.simplefilter("ignore", ConvergenceWarning)


class _Counted:
    """Executors that remember every instance, so the bench can read their ``stats``."""

    made = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _Counted.made.append(self)


class _CountedTasks(_Counted, DaskExecutor):
    pass


class _CountedActors(_Counted, ActorExecutor):
    pass


class _Clock:
    """A progress reporter keeping the TAO iterations' seconds and the executor's counters after each."""

    def __init__(self):
        self.seconds, self.stats = [], []

    def __call__(self, event, info):
        if event == "tao_iteration":
            self.seconds.append(info["seconds"])
            self.stats.append(dict(_Counted.made[-1].stats) if _Counted.made else None)


def cpu_seconds():
    """CPU seconds used so far by this process and its children (the LocalCluster's workers)."""
    total = 0.0
    me = psutil.Process()
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += t.user + t.system
    return total


def fit_once(X, y, depth, iters, client, n_threads, copy_rows="auto", executor="auto"):
    """One fit: (model, seconds of the TAO iterations, CPU seconds of the fit, Dask counters per iteration,
    wall seconds of the whole fit).

    Counters per iteration are the differences between consecutive
    iterations' snapshots (the first iteration's start is not observed).
    CPU seconds cover the whole fit (set-up included) in every process.
    """
    clock = _Clock()
    cpu, wall = cpu_seconds(), time.perf_counter()
    est = TAOClassifier(max_depth=depth, max_iter=iters, tol=0.0, random_state=0, n_jobs=n_threads,
                        early_stopping=False)
    _Counted.made.clear()
    with reporting(clock):
        if client is None:
            with threadpool_limits(1):
                est.fit(X, y)
        else:
            with dask.config.set({"taodist.copy-rows": copy_rows, "taodist.executor": executor}):
                est.fit(X, y, client=client)
    cpu, wall = cpu_seconds() - cpu, time.perf_counter() - wall
    per_iter = None
    if client is not None and len(clock.stats) > 1:
        a, b = clock.stats[0], clock.stats[-1]
        per_iter = {k: (b[k] - a[k]) / (len(clock.stats) - 1) for k in a}
    return est, sum(clock.seconds), cpu, per_iter, wall


def peer_calls(row):
    """Calls the actor hosts made to each other per level (``-`` for the task executor, whose hosts make none)."""
    calls = row["stats"].get("peer_calls")
    return "-" if calls is None else f"{calls / (row['depth'] + 1):.1f}"


def _identity(x, *rest):
    return x


def hop_latency(client, levels=50):
    """Milliseconds a TAO-like level spends in Dask alone: trivial tasks, one per worker, chained.

    For 1-2 waits for results and 1-2 dependent steps per wait (each step
    a task per worker that takes the previous step's result), the time per
    "level" with nothing computed: what every dependent step or wait costs
    before any work is done.
    """
    from taodist.dask._client import cluster_workers

    workers = sorted(cluster_workers(client))  # asked of the scheduler (the client's cached view can be empty)
    client.gather([client.submit(_identity, i, workers=[w], pure=False) for i, w in enumerate(workers)])  # warm-up
    out = {}
    for waits, steps in ((1, 1), (1, 2), (2, 1), (2, 2)):
        start = time.perf_counter()
        for _ in range(levels):
            for _ in range(waits):
                futures = [client.submit(_identity, i, workers=[w], pure=False) for i, w in enumerate(workers)]
                for _ in range(steps - 1):
                    futures = [client.submit(_identity, f, workers=[w], pure=False) for f, w in zip(futures, workers)]
                client.gather(futures)
        out[(waits, steps)] = (time.perf_counter() - start) / levels * 1000
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[20000, 60000])
    ap.add_argument("--depths", type=int, nargs="+", default=[8])
    ap.add_argument("--iters", type=int, default=3, help="TAO iterations (at least 2: counters per level are taken between iterations)")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threads-per-worker", type=int, default=1)
    ap.add_argument("--copy-rows", nargs="+", default=["auto"], choices=("auto", "true", "false"),
                    help="the Dask fits' taodist.copy-rows settings, each timed (copies of the solver rows on "
                         "every worker: node groups read their care points there instead of receiving them)")
    ap.add_argument("--executors", nargs="+", default=["auto"], choices=("auto", "actors", "tasks"),
                    help="the Dask fits' taodist.executor settings, each timed (actors: one actor per worker holds "
                         "its chunks and the driver calls it directly; tasks: every step a Dask task)")
    ap.add_argument("--no-malloc-trim", action="store_true",
                    help="start the workers without Dask's MALLOC_TRIM_THRESHOLD_ (glibc then reuses freed memory "
                         "for large arrays instead of returning it to the OS and faulting it in again)")
    ap.add_argument("--hops", action="store_true",
                    help="also time levels of trivial chained tasks (what each wait and dependent step costs)")
    ap.add_argument("--out", default="bench/results/dask_overhead.md")
    args = ap.parse_args()

    from distributed import Client, LocalCluster

    dask_execution.DaskExecutor, dask_execution.ActorExecutor = _CountedTasks, _CountedActors
    Xall, yall, _, _ = load_dataset("mnist")
    rows = []
    from taodist.dask._client import embedded_local_cluster

    start_cluster = embedded_local_cluster if args.no_malloc_trim else LocalCluster
    threads = args.workers * args.threads_per_worker  # the in-process fit's executor threads
    with start_cluster(n_workers=args.workers, threads_per_worker=args.threads_per_worker, processes=True,
                       dashboard_address=":0") as cl, \
            Client(cl, set_as_default=False) as client:
        if args.hops:
            for (waits, steps), ms in hop_latency(client).items():
                print(f"  trivial tasks: {waits} wait(s) per level, {steps} dependent step(s) per wait: "
                      f"{ms:.1f} ms per level", flush=True)
        # warm up: numba loads its compiled kernels once per process (in the workers too)
        fit_once(Xall[:3000].astype(np.float64), yall[:3000], 3, 2, None, threads)
        fit_once(Xall[:3000].astype(np.float64), yall[:3000], 3, 2, client, threads)
        for n in args.rows:
            X, y = np.ascontiguousarray(Xall[:n], dtype=np.float64), yall[:n]
            for depth in args.depths:
                times = {"local": []}
                settings = [(c, e) for e in args.executors for c in args.copy_rows]
                for setting in settings:
                    times.update({("dask", setting): [], ("cpu", setting): [], ("wall", setting): []})
                times["cpu_local"], times["wall_local"] = [], []
                stats = {}
                for rep in range(args.repeats):
                    local, t_local, c_local, _, w_local = fit_once(X, y, depth, args.iters, None, threads)
                    times["local"].append(t_local)
                    times["wall_local"].append(w_local)
                    times["cpu_local"].append(c_local)
                    line = (f"  rows={n} depth={depth} repeat {rep}: in-process {t_local:.2f}s ({c_local:.1f} CPU s, "
                            f"whole fit {w_local:.1f}s)")
                    for setting in settings:
                        copy = {"auto": "auto", "true": True, "false": False}[setting[0]]
                        dist, t_dask, c_dask, stats[setting], w_dask = fit_once(X, y, depth, args.iters, client,
                                                                                threads, copy, setting[1])
                        assert_tree_equal(dist.tree_, local.tree_)
                        assert local.n_iter_ == dist.n_iter_
                        times[("dask", setting)].append(t_dask)
                        times[("cpu", setting)].append(c_dask)
                        times[("wall", setting)].append(w_dask)
                        line += f", dask (copy-rows {setting[0]}, executor {setting[1]}) {t_dask:.2f}s ({c_dask:.1f} CPU s, whole fit {w_dask:.1f}s)"
                    print(line, flush=True)
                n_iter = local.n_iter_
                levels = n_iter * (depth + 1)
                tl, cl = median(times["local"]), median(times["cpu_local"])
                for setting in settings:
                    td, cd = median(times[("dask", setting)]), median(times[("cpu", setting)])
                    rows.append(dict(rows=n, depth=depth, copy=setting[0], executor=setting[1], n_iter=n_iter, local=tl, dask=td,
                                     ratio=td / tl, cpu_ratio=cd / cl,
                                     whole=median(times[("wall", setting)]) / median(times["wall_local"]),
                                     ratios=[d / loc for d, loc in zip(times[("dask", setting)], times["local"])],
                                     level_local=tl / levels, level_dask=td / levels, overhead=(td - tl) / levels,
                                     stats=stats[setting], levels=levels))
    header = ("| rows | depth | copy-rows | executor | iters | in-process s | Dask s | Dask / in-process (each repeat) | CPU s Dask / in-process "
              "| whole fits Dask / in-process | s per level (in-process) | s per level (Dask) | overhead per level s | round trips per level "
              "| tasks per level | host-to-host calls per level |")
    lines = [header, "|" + "---|" * 16]
    for r in rows:
        lines.append(
            f"| {r['rows']} | {r['depth']} | {r['copy']} | {r['executor']} | {r['n_iter']} | {r['local']:.2f} | {r['dask']:.2f} | {r['ratio']:.2f} "
            f"({', '.join(f'{x:.2f}' for x in r['ratios'])}) | {r['cpu_ratio']:.2f} | {r['whole']:.2f} "
            f"| {r['level_local']:.3f} | {r['level_dask']:.3f} | {r['overhead']:.3f} "
            f"| {r['stats']['round_trips'] / (r['depth'] + 1):.1f} | {r['stats']['tasks'] / (r['depth'] + 1):.1f} "
            f"| {peer_calls(r):s} |"
        )
    text = "\n".join(lines)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")


if __name__ == "__main__":
    main()
