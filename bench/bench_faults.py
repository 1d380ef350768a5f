"""Fault injection: workers killed or stopped at random moments of cluster fits, many times, seeded.

Each run fits one case (a tree on either executor, a forest, a LapTAO
classifier, a forest job submitted to the scheduler) on a 2-worker ``LocalCluster`` (worker processes under
nannies, as in production) and, at a random moment of the fit, either kills a
random worker (``SIGKILL``: its nanny starts a new one) or stops it for a few
seconds (``SIGSTOP``, then ``SIGCONT``). The moment is drawn uniformly over
the case's fit time without a fault, measured first on the same cluster, so
faults land in every phase: row chunks being built, the actor hosts starting,
a round of calls in flight, chunks being rebuilt after an earlier loss.

Each run ends in one of:

* ``same model``: the fit returned the model of the fit without a fault;
* ``clean error``: the fit raised one exception, or the job ended ``failed``
  with a reason (its type and message are printed; whether it is clear
  enough is for the reader);
* ``DEFECT``: a different model, or no answer within ``--timeout`` seconds
  (every thread's stack is then written to ``--stacks``);
* ``fault missed``: the fit had ended before the fault (not counted as a run).

``--burn N`` keeps N extra processes spinning on the CPU for the whole run, so
the kills happen on a machine as loaded as a busy CI runner.

Run from the repository root::

    python bench/bench_faults.py --runs 20 --burn 2                       # every case, 20 faults each
    python bench/bench_faults.py --cases tree-actors --faults kill --runs 20 --burn 2
"""

import argparse
import faulthandler
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import threading
import time

import dask
import dask.array as da
import numpy as np
from distributed import Client, LocalCluster

from taodist import LapTAOClassifier, TAOClassifier, TAOForestClassifier, load
from taodist.service import load_job
from taodist.service.cluster import FINAL_STATES, job_status, submit
from taodist.testing import make_oblique_classification


def _data(seed=7):
    X, y = make_oblique_classification(n_samples=4000, n_features=10, random_state=seed)
    return X, y + 2 * (X[:, 2] > 0.2)  # 4 classes


def _tree(executor):
    def fit(client):
        X, y = _data()
        with dask.config.set({"taodist.executor": executor}):
            model = TAOClassifier(max_depth=4, random_state=0, max_iter=6, tol=0.0).fit(
                da.from_array(X, chunks=(500, X.shape[1])), y, client=client)
        return model.tree_
    return fit


def _forest(client):
    X, y = _data()
    model = TAOForestClassifier(n_estimators=8, max_depth=4, random_state=0, max_iter=4).fit(
        da.from_array(X, chunks=(500, X.shape[1])), y, client=client)
    return model.estimators_


def _laptao(client):
    X, y = _data()
    labelled = np.random.default_rng(0).random(len(y)) < 0.1
    model = LapTAOClassifier(max_depth=3, random_state=0, n_outer=10).fit(
        da.from_array(X, chunks=(500, X.shape[1])), np.where(labelled, y, -1), client=client)
    return model.tree_, model.predict(X)


class JobFailed(Exception):
    """A submitted job that ended ``failed`` (or ``cancelled``): its record's reason."""


def _job(client):
    """A forest job submitted to the cluster's scheduler (its driver a task on a worker), waited for."""
    X, y = _data()
    folder = tempfile.mkdtemp(prefix="taodist-fault-job-")
    np.savez(os.path.join(folder, "train.npz"), X=X, y=y)
    with open(os.path.join(folder, "job.yaml"), "w") as f:
        f.write("estimator: TAOForestClassifier\nparams: {n_estimators: 6, max_depth: 4, random_state: 0, "
                "max_iter: 4}\ntrain: train.npz\noutput: model.npz\n")
    job_id = submit(client, load_job(os.path.join(folder, "job.yaml")))
    while (record := job_status(client, job_id))["state"] not in FINAL_STATES:
        time.sleep(0.2)
    if record["state"] != "finished":
        raise JobFailed(f"{record['state']}: {record.get('error')}")
    return [e.tree_ for e in load(os.path.join(folder, "model.npz")).estimators_]


CASES = {"tree-actors": _tree("actors"), "tree-tasks": _tree("tasks"), "forest": _forest, "laptao": _laptao,
         "job": _job}


def _same(a, b):
    """Whether two fits' results are equal (trees compared array by array, exactly)."""
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if hasattr(a, "tree_"):  # a forest's member estimator
        return _same(a.tree_, b.tree_)
    names = ("children_left", "children_right", "kind", "feature", "threshold", "bias", "value")
    return (all(np.array_equal(getattr(a, n), getattr(b, n)) for n in names)
            and np.array_equal(a.weights.toarray(), b.weights.toarray())
            and (a.leaf_coef is None) == (b.leaf_coef is None)
            and (a.leaf_coef is None or np.array_equal(a.leaf_coef, b.leaf_coef)))


def _spin():
    while True:
        pass


def _thread_stacks():
    with tempfile.TemporaryFile("w+") as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        return out.read()


class Cluster:
    """A 2-worker LocalCluster of worker processes, started again if a killed worker is not replaced."""

    def __init__(self):
        self.cluster = self.client = None
        self.restart()

    def restart(self):
        self.close()
        self.cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                                    silence_logs=logging.CRITICAL)  # a killed worker's peers log every lost comm
        self.client = Client(self.cluster, set_as_default=False)

    def ready(self, timeout=60):
        """``{address: pid}`` of two running workers (a killed one replaced by its nanny), else of a new cluster.

        The scheduler may still list a worker killed a moment ago: only workers
        that answer count.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pids = self.client.run(os.getpid, on_error="ignore")
            if len(pids) == 2:
                return pids
            time.sleep(0.5)
        print("  (a killed worker was not replaced: new cluster)", flush=True)
        self.restart()
        self.client.wait_for_workers(2, timeout=timeout)
        return self.client.run(os.getpid)

    def close(self):
        if self.client is not None:
            self.client.close()
            self.cluster.close()


def _one_run(case, fit, fault, cluster, rng, duration, reference, timeout, stacks):
    """One fit with one fault; returns (outcome, detail)."""
    pids = cluster.ready()
    client = cluster.client
    delay = rng.uniform(0.0, duration)
    victim = pids[sorted(pids)[rng.integers(len(pids))]]
    result, finished = {}, threading.Event()

    def run():
        try:
            result["value"] = fit(client)
        except Exception as exc:  # noqa: BLE001 -- classified below
            result["error"] = exc
        finished.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    if finished.wait(delay):
        thread.join()
        return "fault missed", f"ended before {delay:.2f} s"
    if fault == "kill":
        os.kill(victim, signal.SIGKILL)
    else:
        os.kill(victim, signal.SIGSTOP)
        time.sleep(rng.uniform(1.0, 5.0))
        os.kill(victim, signal.SIGCONT)
    thread.join(timeout)
    if thread.is_alive():
        with open(stacks, "a") as out:
            out.write(f"\n==== {case} {fault} at {delay:.2f} s: no answer after {timeout} s\n{_thread_stacks()}")
        cluster.restart()  # the hung fit's thread is left behind (a daemon)
        return "DEFECT", f"hung ({fault} at {delay:.2f} s; stacks in {stacks})"
    if "error" in result:
        exc = result["error"]
        return "clean error", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    if not _same(result["value"], reference):
        return "DEFECT", f"a different model ({fault} at {delay:.2f} s)"
    return "same model", f"{fault} at {delay:.2f} s"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--faults", nargs="+", default=["kill", "stop"], choices=["kill", "stop"])
    parser.add_argument("--runs", type=int, default=10, help="faults that land mid-fit, per case and fault")
    parser.add_argument("--burn", type=int, default=0, help="processes spinning on the CPU meanwhile")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds after the fault before a hang is declared")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--stacks", default="bench_faults_stacks.txt", help="where hung fits' thread stacks go")
    args = parser.parse_args(argv)

    burners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.burn)]
    for b in burners:
        b.start()
    rng = np.random.default_rng(args.seed)
    cluster = Cluster()
    rows = []
    try:
        for case in args.cases:
            fit = CASES[case]
            cluster.ready()
            start = time.perf_counter()
            reference = fit(cluster.client)  # the model without a fault, and how long it takes
            duration = time.perf_counter() - start
            print(f"{case}: {duration:.1f} s without a fault", flush=True)
            for fault in args.faults:
                counts, errors, missed = {"same model": 0, "clean error": 0, "DEFECT": 0}, [], 0
                while sum(counts.values()) < args.runs:
                    outcome, detail = _one_run(case, fit, fault, cluster, rng, duration, reference, args.timeout,
                                               args.stacks)
                    print(f"  {case} {fault}: {outcome} ({detail})", flush=True)
                    if outcome == "fault missed":
                        missed += 1
                        continue
                    counts[outcome] += 1
                    if outcome != "same model":
                        errors.append(detail)
                rows.append((case, fault, counts, missed, errors))
                print(f"  => {case} {fault}: {counts} ({missed} faults after the fit's end)", flush=True)
    finally:
        cluster.close()
        for b in burners:
            b.terminate()

    print(f"\nFaults at random moments, 2 worker processes, {args.burn} CPU burners, seed {args.seed}\n")
    print("| case | fault | runs | same model | clean error | defect | faults after the fit's end |")
    print("|---|---|---|---|---|---|---|")
    for case, fault, counts, missed, _ in rows:
        print(f"| {case} | {fault} | {sum(counts.values())} | {counts['same model']} | {counts['clean error']} "
              f"| {counts['DEFECT']} | {missed} |")
    for case, fault, _, _, errors in rows:
        for e in errors:
            print(f"- {case} {fault}: {e}")
    return 1 if any(counts["DEFECT"] for _, _, counts, _, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
