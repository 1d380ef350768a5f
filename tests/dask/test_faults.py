"""Faults on a real multi-process cluster: workers killed or stopped mid-fit, the scheduler stopped or lost.

Each test pauses a fit at a progress checkpoint (a TAO level, a forest
tree, a LapTAO tree step), injects the fault while the workers hold the fit's
rows and results, and lets the fit go on. A fit must then give the model it
gives without the fault, or -- when it truly cannot, the scheduler having
gone with the cluster's state -- fail with one clear error, in bounded time.
``bench/bench_faults.py`` draws the moments at random, many times, under load.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import dask
import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from taodist import LapTAOClassifier, TAOClassifier, TAOForestClassifier
from taodist.dask import SchedulerLostError
from taodist.testing import assert_tree_equal, make_oblique_classification
from taodist.utils.progress import reporting

BINDIR = Path(sys.executable).parent


def _data(n=4000, d=10):
    X, y = make_oblique_classification(n_samples=n, n_features=d, random_state=7)
    return X, y + 2 * (X[:, 2] > 0.2)  # 4 classes


TREE = dict(max_depth=4, random_state=0, max_iter=6, tol=0.0)


def _thread_stacks():
    """Every thread's stack in this process, as text: what a hung fit waits on."""
    import faulthandler
    import tempfile

    with tempfile.TemporaryFile("w+") as out:
        faulthandler.dump_traceback(out, all_threads=True)
        out.seek(0)
        return out.read()


def at_level(iteration):
    """The checkpoint at the start of TAO iteration ``iteration``'s first level: workers hold chunks and results."""
    return lambda event, info: event == "tao_level" and info["iteration"] == iteration


def fit_with_a_fault(fit, at, fault, *, pids=None, stopped_seconds=5.0, timeout=300):
    """Run ``fit()`` in a thread; at the first progress event ``at(event, info)`` pause it, call ``fault()``, go on.

    ``fault`` runs while the fit waits at the checkpoint and returns a
    function to call once the fit goes on again (or None): a stopped process
    is continued ``stopped_seconds`` later, while the fit's calls wait on it.
    Returns ``{"model": ...}`` or ``{"error": ...}``; asserts the fit ended
    within ``timeout`` seconds (else shows where its threads wait).
    """
    result, paused, resume = {}, threading.Event(), threading.Event()

    def pause(event, info):
        if not paused.is_set() and at(event, info):
            paused.set()
            resume.wait(120)

    def run():
        try:
            with reporting(pause):
                result["model"] = fit()
        except Exception as exc:  # reported to the test
            result["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert paused.wait(240), result.get("error", "the fit never reached the checkpoint")
    after = fault()
    resume.set()
    if after is not None:
        time.sleep(stopped_seconds)
        after()
    thread.join(timeout)
    hung = _thread_stacks() if thread.is_alive() else None
    assert hung is None, f"the fit still runs {timeout} s after the fault; its threads:\n{hung}"
    return result


def kill(pid):
    os.kill(pid, signal.SIGKILL)


def stop(pid):
    """SIGSTOP ``pid``; returns the SIGCONT to send later."""
    os.kill(pid, signal.SIGSTOP)
    return lambda: os.kill(pid, signal.SIGCONT)


@pytest.fixture
def worker_processes():
    """A client of a fresh 2-worker LocalCluster of single-threaded worker processes under nannies."""
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        yield client


def a_worker(client):
    """The pid of one worker process (the first by address)."""
    pids = client.run(os.getpid)
    return pids[sorted(pids)[0]]


def assert_replaced(client, killed):
    """The nanny replaced the killed worker: a fit leaves nothing in Dask's config that its restart cannot
    pickle (a Client as the config's scheduler once kept it from ever starting)."""
    client.wait_for_workers(2, timeout=60)
    now = client.run(os.getpid)
    assert len(now) == 2 and killed not in now.values(), (killed, now)


# ------------------------------------------------------------------------------------------- workers


@pytest.mark.parametrize("executor", ["tasks", "actors"])
def test_a_worker_killed_mid_fit_does_not_fail_the_fit(executor, worker_processes, caplog):
    """Tasks: Dask recomputes the lost row chunks from their lineage. Actors: the executor rebuilds its
    hosts from those chunks at the current tree and replays the round. The model is unchanged."""
    X, y = _data()
    reference = TAOClassifier(**TREE).fit(X, y)
    client, victim = worker_processes, a_worker(worker_processes)
    with dask.config.set({"taodist.executor": executor}):
        result = fit_with_a_fault(
            lambda: TAOClassifier(**TREE).fit(da.from_array(X, chunks=(500, 10)), y, client=client),
            at_level(2), lambda: kill(victim))
    assert "error" not in result, result.get("error")
    assert_tree_equal(result["model"].tree_, reference.tree_)
    assert_replaced(client, victim)
    if executor == "actors":
        assert "A worker holding TAO row chunks was lost" in caplog.text


def test_a_worker_stopped_mid_fit_is_waited_for_and_the_model_is_unchanged(worker_processes):
    # SIGSTOP: the worker holds its actor host's chunks but answers nothing for a while (a long GC pause,
    # a swapping machine). Its heartbeats stop for less than the scheduler's time-to-live, so it is not
    # removed; the round's calls wait on it and go on
    X, y = _data()
    reference = TAOClassifier(**TREE).fit(X, y)
    client, victim = worker_processes, a_worker(worker_processes)
    result = fit_with_a_fault(
        lambda: TAOClassifier(**TREE).fit(da.from_array(X, chunks=(500, 10)), y, client=client),
        at_level(2), lambda: stop(victim))
    assert "error" not in result, result.get("error")
    assert_tree_equal(result["model"].tree_, reference.tree_)
    assert victim in client.run(os.getpid).values()  # the same worker, continued


def test_a_worker_killed_mid_forest_gives_the_same_forest(worker_processes):
    # the trees in flight on the lost worker run again elsewhere, from row chunks rebuilt from their lineage;
    # each tree's seed is its own, so the forest is the one fitted in this process
    X, y = _data()
    params = dict(n_estimators=6, max_depth=4, random_state=0, max_iter=4)
    reference = TAOForestClassifier(**params).fit(X, y)
    client, victim = worker_processes, a_worker(worker_processes)
    result = fit_with_a_fault(
        lambda: TAOForestClassifier(**params).fit(da.from_array(X, chunks=(500, 10)), y, client=client),
        lambda event, info: event == "forest_tree" and info["done"] == 2, lambda: kill(victim))
    assert "error" not in result, result.get("error")
    assert len(result["model"].estimators_) == len(reference.estimators_)
    for got, want in zip(result["model"].estimators_, reference.estimators_):
        assert_tree_equal(got.tree_, want.tree_)
    assert_replaced(client, victim)


def test_a_worker_killed_in_a_laptao_tree_step_gives_the_same_model(worker_processes):
    # killed during the second outer iteration's tree step, with the label step's Laplacian blocks in actors
    # and the tree step's chunks on both workers: both are rebuilt, and the model is the one without the fault
    X, y = _data(n=1500, d=6)
    partial = np.where(np.random.default_rng(0).random(len(y)) < 0.1, y, -1)
    params = dict(max_depth=3, random_state=0, n_outer=4)
    client = worker_processes

    def fit():
        return LapTAOClassifier(**params).fit(da.from_array(X, chunks=(300, 6)), partial, client=client)

    reference = fit()
    outer = []

    def second_tree_step(event, info):
        if event == "laptao_outer":
            outer.append(info["iteration"])
        return event == "tao_level" and len(outer) == 1 and info["iteration"] == 2

    victim = a_worker(client)
    result = fit_with_a_fault(fit, second_tree_step, lambda: kill(victim))
    assert "error" not in result, result.get("error")
    assert_tree_equal(result["model"].tree_, reference.tree_)
    np.testing.assert_array_equal(result["model"].predict(X), reference.predict(X))
    assert_replaced(client, victim)


@pytest.mark.parametrize("failed_round", [5, 9, 14])
def test_a_replayed_round_never_frees_a_result_before_another_host_has_read_it(monkeypatch, failed_round):
    """A recovery replays every op since the last chunk update in one round. Ops that freed results once
    their readers were done (a round later) then run in the same round as those readers: a host freeing
    a result another host is about to fetch left that fetch waiting for ever (the hang CI hit after a
    killed worker). Here one round fails as a lost worker would and every host-to-host read is slowed,
    so the producing host has always run its later ops, frees included, before the read arrives."""
    from taodist.dask import _actor_executor as actors
    from taodist.dask._actor_host import ChunkHost

    X, y = make_oblique_classification(n_samples=1200, n_features=6, random_state=5)
    y = y + 2 * (X[:, 2] > 0.2)
    params = dict(max_depth=3, random_state=0, max_iter=3, tol=0.0)
    reference = TAOClassifier(**params).fit(X, y)
    call, lost_hosts, call_peers = actors.ActorExecutor._call, actors.ActorExecutor._lost_hosts, ChunkHost._call_peers
    rounds, recoveries = [], []

    def call_failing_once(self, hosts, want):
        rounds.append(1)
        if len(rounds) == failed_round:
            raise OSError("Unable to contact the TAO chunk host on tcp://127.0.0.1:1: injected")
        return call(self, hosts, want)

    def lost_after_injection(self, failure=None):
        if "injected" in str(failure):
            recoveries.append(1)
            return [0]
        return lost_hosts(self, failure)

    def slow_peer_calls(self, calls):
        time.sleep(0.05)
        return call_peers(self, calls)

    monkeypatch.setattr(actors.ActorExecutor, "_call", call_failing_once)
    monkeypatch.setattr(actors.ActorExecutor, "_lost_hosts", lost_after_injection)
    monkeypatch.setattr(ChunkHost, "_call_peers", slow_peer_calls)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        result = {}

        def fit():
            try:
                result["model"] = TAOClassifier(**params).fit(da.from_array(X, chunks=(150, 6)), y, client=client)
            except Exception as exc:  # pragma: no cover - reported below
                result["error"] = exc

        with dask.config.set({"taodist.executor": "actors"}):
            thread = threading.Thread(target=fit, daemon=True)
            thread.start()
            thread.join(120)
        hung = _thread_stacks() if thread.is_alive() else None
    assert hung is None, f"the fit still runs 120 s after it started; its threads:\n{hung}"
    assert "error" not in result, result.get("error")
    assert recoveries == [1]
    assert_tree_equal(result["model"].tree_, reference.tree_)


# ----------------------------------------------------------------------------------------- scheduler


@pytest.fixture
def process_cluster(tmp_path):
    """A `dask scheduler` and two single-threaded `dask worker` processes (as deployed); yields
    ``(scheduler process, address)``."""
    sfile = tmp_path / "scheduler.json"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scheduler = subprocess.Popen([str(BINDIR / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--dashboard-address", ":0", "--scheduler-file", str(sfile)], **quiet)
    procs = [scheduler]
    try:
        deadline = time.time() + 60
        while not sfile.exists() and time.time() < deadline:
            time.sleep(0.2)
        address = json.loads(sfile.read_text())["address"]
        procs += [subprocess.Popen([str(BINDIR / "dask"), "worker", address, "--nthreads", "1", "--host",
                                    "127.0.0.1"], **quiet) for _ in range(2)]
        yield scheduler, address
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
        for p in procs:
            p.wait(timeout=30)


def test_a_scheduler_stopped_mid_fit_is_waited_for_and_the_model_is_unchanged(process_cluster):
    scheduler, address = process_cluster
    X, y = _data()
    reference = TAOClassifier(**TREE).fit(X, y)
    with Client(address, timeout=30) as client:
        client.wait_for_workers(2, timeout=60)
        for executor in ("actors", "tasks"):  # actor calls go worker to worker; tasks through the scheduler
            with dask.config.set({"taodist.executor": executor}):
                result = fit_with_a_fault(
                    lambda: TAOClassifier(**TREE).fit(da.from_array(X, chunks=(500, 10)), y, client=client),
                    at_level(2), lambda: stop(scheduler.pid))
            assert "error" not in result, (executor, result.get("error"))
            assert_tree_equal(result["model"].tree_, reference.tree_)


@pytest.mark.parametrize("estimator", ["tree-actors", "tree-tasks", "forest"])
def test_a_scheduler_killed_mid_fit_fails_the_fit_with_one_clear_error(process_cluster, estimator):
    # the rows, actors and tasks went with the scheduler: the fit cannot go on. Whichever call notices
    # first (an actor call, a cancelled future, the client's reconnection), the fit raises one error that
    # says so, within the client's reconnection timeout
    scheduler, address = process_cluster
    X, y = _data()
    killed_at = []

    def kill_the_scheduler():
        kill(scheduler.pid)
        killed_at.append(time.monotonic())

    with Client(address, timeout=5) as client:
        client.wait_for_workers(2, timeout=60)
        Xd = da.from_array(X, chunks=(500, 10))
        if estimator == "forest":
            forest = TAOForestClassifier(n_estimators=40, max_depth=4, random_state=0, max_iter=4)
            result = fit_with_a_fault(lambda: forest.fit(Xd, y, client=client),
                                      lambda event, info: event == "forest_tree", kill_the_scheduler, timeout=120)
        else:
            with dask.config.set({"taodist.executor": estimator.split("-")[1]}):
                result = fit_with_a_fault(lambda: TAOClassifier(**TREE).fit(Xd, y, client=client), at_level(2),
                                          kill_the_scheduler, timeout=120)
    assert isinstance(result.get("error"), SchedulerLostError), result
    message = str(result["error"])
    assert address in message and "was lost during the fit" in message, message
    assert time.monotonic() - killed_at[0] < 90


class _Client:
    """A client's status and scheduler address, as lost_scheduler_as_one_error reads them."""

    def __init__(self, status):
        self.status = status
        self.scheduler = type("Scheduler", (), {"address": "tcp://10.0.0.1:8786"})()


def test_a_connection_error_before_the_client_notices_the_lost_scheduler_is_one_clear_error():
    # a reset from the scheduler reaches the fit first; the client stops "running" a moment later
    from distributed.comm.core import CommClosedError

    from taodist.dask._client import lost_scheduler_as_one_error

    client = _Client("running")
    threading.Timer(0.3, lambda: setattr(client, "status", "connecting")).start()
    with pytest.raises(SchedulerLostError, match="tcp://10.0.0.1:8786 was lost during the fit") as info:
        with lost_scheduler_as_one_error(client):
            raise CommClosedError("in <TCP (closed) ConnectionPool.gather>: ConnectionResetError")
    assert isinstance(info.value.__cause__, CommClosedError)


def test_errors_with_the_scheduler_still_there_are_raised_as_they_are(monkeypatch):
    import taodist.dask._client as client_module

    monkeypatch.setattr(client_module, "COMM_ERROR_PATIENCE_S", 0.2)
    client = _Client("running")
    start = time.monotonic()
    with pytest.raises(ConnectionResetError):  # waited for the client, which stayed connected
        with client_module.lost_scheduler_as_one_error(client):
            raise ConnectionResetError("a worker went away")
    assert time.monotonic() - start >= 0.2
    start = time.monotonic()
    with pytest.raises(ValueError, match="bad input"):  # not a connection error: raised at once
        with client_module.lost_scheduler_as_one_error(client):
            raise ValueError("bad input")
    assert time.monotonic() - start < 0.2
