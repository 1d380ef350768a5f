"""The executor contract (taodist.tao.executor.Executor), checked on every executor."""

import os
import threading
from dataclasses import dataclass

import numpy as np
import pytest

from taodist.tao.executor import Executor, LocalExecutor, job_size, pack_keys
from taodist.tao.initial_trees import random_tree
from taodist.tao.optimizer import tao_optimize
from taodist.tao.routing import Routing
from taodist.testing import assert_tree_equal, make_oblique_classification


@dataclass(frozen=True)
class _Job:
    """A keyed job for the executors: any object; ``n_care`` sizes it (see ``taodist.tao.executor.job_size``)."""

    n_care: int


def _problem():
    X, y = make_oblique_classification(n_samples=500, n_features=5, random_state=4)
    return X, y + 2 * (X[:, 1] > 0.3), np.linspace(0.5, 1.5, len(y))  # 4 classes, uneven weights


@pytest.mark.parametrize("node_type, solver, leaf_type, max_care_points", [
    ("oblique", "fista", "constant", None),
    ("oblique", "fista", "linear", 40),
    ("oblique", "saga", "constant", None),
    ("oblique", "liblinear", "linear", None),
    ("oblique", "saga", "constant", 40),
    ("axis", "axis", "constant", None),
    ("axis", "axis", "linear", None),
])
def test_every_executor_fits_the_same_tree_as_one_thread_on_one_block(executor_case, node_type, solver, leaf_type,
                                                                        max_care_points):
    X, y, sw = _problem()

    def fit(run):
        tree = random_tree(lambda i: X[i], *X.shape, 3, 4, node_type, task="classification", leaf_type=leaf_type,
                           rng=np.random.RandomState(0))
        result = run(tree, X, y, sw, alpha=0.05, max_iter=3, tol=0.0, node_solver=solver,
                     max_care_points=max_care_points, seed=5)
        return tree, result.objective

    ref_tree, ref_objective = fit(lambda t, *a, **k: tao_optimize(t, *a, n_threads=1, **k))
    tree, objective = fit(executor_case.tao_optimize)
    assert_tree_equal(tree, ref_tree)
    np.testing.assert_allclose(objective, ref_objective, rtol=1e-12)


def _concat(a, b, sep):
    return a + sep + b


def _chunk_id(chunk):
    return str(chunk.offset)


def test_chunk_results_come_back_in_chunk_order(executor_case):
    X, y, sw = _problem()
    tree = random_tree(lambda i: X[i], *X.shape, 2, 4, "oblique", task="classification", leaf_type="constant",
                       rng=np.random.RandomState(0))
    blocks = executor_case._make_blocks(X, y, sw)
    ex = executor_case.executor()
    try:
        assert isinstance(ex, Executor)
        chunks = ex.make_chunks(blocks, Routing.of(tree), np.ones(X.shape[1]), False)
        offsets = [int(o) for o in ex.map_chunks(_chunk_id, chunks)]
        assert offsets == sorted(offsets) and offsets[0] == 0 and len(offsets) == len(blocks)
        # a non-commutative combine sees neighbours in order
        assert ex.reduce_chunks(_chunk_id, _concat, chunks, sep="|") == "|".join(map(str, offsets))
    finally:
        ex.close()


def _group_task(group, *, tag):
    return {key: (tag, job.n_care, sum(len(p) for p in pieces), len(group)) for key, (pieces, job) in group.items()}


def _parts_of(chunk_index):
    def parts(_chunk=None):
        return {k: list(range(chunk_index + 1)) for k in range(chunk_index, 6)}
    return parts


def test_keyed_groups_cover_every_key_once_whatever_the_grouping():
    parts = [_parts_of(i)() for i in range(3)]
    keys = [list(p) for p in parts]
    jobs = {k: _Job(10 * k + 1) for k in range(6)}
    for n_threads in (1, 2, 5):
        ex = LocalExecutor(n_threads)
        try:
            out = ex.run_key_groups(_group_task, parts, keys, jobs, tag="t")
        finally:
            ex.close()
        assert sorted(out) == list(range(6))
        for k, (tag, n_care, n_pieces, _) in out.items():
            # every chunk holding key k sent its part: chunks 0..min(k, 2), part sizes 1, 2, 3
            assert (tag, n_care, n_pieces) == ("t", 10 * k + 1, sum(i + 1 for i in range(min(k, 2) + 1)))
        if n_threads == 1:  # one thread: the whole level is one group (what a level-wide solver wants)
            assert {g for *_, g in out.values()} == {6}


def _threads_seen(group, threads=None):
    return {key: threads for key in group}


def test_a_local_executor_lends_idle_threads_to_fewer_groups_than_threads():
    """Through ``threads_arg`` only, and only when the groups are fewer than its threads (a root level)."""
    parts = [{k: [k] for k in range(6)}]
    one, two = {0: _Job(5)}, {0: _Job(5), 1: _Job(5)}
    every = {k: _Job(5) for k in range(6)}
    for n_threads, jobs, threads_arg, expected in [
        (4, one, "threads", 4),      # one group: all four threads
        (4, two, "threads", 2),      # two groups: two threads each
        (2, every, "threads", None),  # four groups on two threads: none idle, nothing passed
        (4, one, None, None),        # not asked for
        (1, one, "threads", None),   # one thread: nothing to lend
    ]:
        ex = LocalExecutor(n_threads)
        try:
            out = ex.run_key_groups(_threads_seen, parts, [list(parts[0])], jobs, threads_arg=threads_arg)
        finally:
            ex.close()
        assert set(out.values()) == {expected}, (n_threads, len(jobs), threads_arg)


def test_pack_keys_balances_by_care_points():
    jobs = {0: _Job(100), 1: _Job(60), 2: _Job(50), 3: _Job(10), 4: object()}  # a job without n_care: size 1
    groups = pack_keys(jobs, 2)
    assert sorted(k for g in groups for k in g) == [0, 1, 2, 3, 4]
    loads = sorted(sum(job_size(jobs[k]) for k in g) for g in groups)
    assert loads == [110, 111]
    assert pack_keys({}, 4) == []


@pytest.mark.parametrize("max_care_points, waits_per_decision_level", [(None, 1), (40, 2)])
def test_a_tao_level_waits_on_the_cluster_a_bounded_number_of_times(two_worker_client, max_care_points,
                                                                    waits_per_decision_level):
    """Per TAO iteration of a complete depth-D tree: 1 round trip for the leaves, 1 per decision
    level (2 with a care-point cap: its priority pass), 1 for the objective; tasks per level grow with
    chunks, not nodes."""
    import dask.array as da

    from taodist.dask import DaskExecutor, to_row_blocks

    X, y, sw = _problem()
    depth, n_chunks = 3, 4
    tree = random_tree(lambda i: X[i], *X.shape, depth, 4, "oblique", task="classification", leaf_type="constant",
                       rng=np.random.RandomState(0))
    ex = DaskExecutor(two_worker_client)
    seen = []
    tao_optimize(tree, to_row_blocks(da.from_array(X, chunks=(125, X.shape[1])), y, sw), None, None, executor=ex,
                 alpha=0.05, max_iter=4, tol=0.0, node_solver="fista", max_care_points=max_care_points, seed=5,
                 callback=lambda it, obj: seen.append(dict(ex.stats)))
    assert len(seen) == 4
    n_workers = 2
    for before, after in zip(seen, seen[1:]):  # whole iterations (the first one's start is not observed)
        assert after["round_trips"] - before["round_trips"] <= 1 + waits_per_decision_level * depth + 1
        # a level: per chunk a handful of tasks (split, summary, evaluate, update, a part per other worker's
        # group, the priority pass), per worker a group and the tree; never one per node
        per_level = 6 * n_chunks + n_chunks * (n_workers - 1) + 2 * n_workers
        assert after["tasks"] - before["tasks"] <= (depth + 1) * per_level


@pytest.mark.parametrize("max_care_points, rounds_per_decision_level", [(None, 1), (40, 2)])
def test_a_tao_level_calls_the_actors_a_bounded_number_of_times(two_worker_client, max_care_points,
                                                                rounds_per_decision_level):
    """Per TAO iteration of a complete depth-D tree on the actor executor: 1 round for the leaves, 1 per
    decision level (the hosts read each other's care points and candidates directly; one more with a
    care-point cap: its priority pass), 1 for the objective; and the tree is the in-process one."""
    import dask.array as da

    from taodist.dask import ActorExecutor, to_row_blocks

    X, y, sw = _problem()
    depth = 3

    def tree():
        return random_tree(lambda i: X[i], *X.shape, depth, 4, "oblique", task="classification",
                           leaf_type="constant", rng=np.random.RandomState(0))

    kwargs = dict(alpha=0.05, max_iter=4, tol=0.0, node_solver="fista", max_care_points=max_care_points, seed=5)
    ex = ActorExecutor(two_worker_client, copy_rows=True)
    seen = []
    on_cluster = tree()
    tao_optimize(on_cluster, to_row_blocks(da.from_array(X, chunks=(125, X.shape[1])), y, sw), None, None,
                 executor=ex, callback=lambda it, obj: seen.append(dict(ex.stats)), **kwargs)
    in_process = tree()
    tao_optimize(in_process, X, y, sw, n_threads=1, **kwargs)
    assert_tree_equal(on_cluster, in_process)
    assert len(seen) == 4
    for before, after in zip(seen, seen[1:]):
        assert after["round_trips"] - before["round_trips"] <= 1 + rounds_per_decision_level * depth + 1
    assert seen[-1]["recoveries"] == 0


def _row_count(chunk):
    return chunk.X.shape[0]


def _fails_at(chunk, offsets):
    if chunk.offset in offsets:
        raise ValueError("this chunk fails on purpose")
    return chunk.offset


def _total_rows(chunk, counts):
    return sum(counts)


def _actor_chunks(client, copy_rows=False):
    """An ActorExecutor on ``client`` and the chunks of :func:`_problem`'s rows, on both of its hosts."""
    import dask.array as da

    from taodist.dask import ActorExecutor, to_row_blocks

    X, y, sw = _problem()
    tree = random_tree(lambda i: X[i], *X.shape, 2, 4, "oblique", task="classification", leaf_type="constant",
                       rng=np.random.RandomState(0))
    ex = ActorExecutor(client, copy_rows=copy_rows)
    chunks = ex.make_chunks(to_row_blocks(da.from_array(X, chunks=(125, X.shape[1])), y, sw),
                            Routing.of(tree), np.ones(X.shape[1]), False)
    return ex, chunks


def _every_key(chunk, n_keys):
    return {k: chunk.offset for k in range(n_keys)}


def _pieces_of_each_key(group):
    return {key: [int(p) for p in pieces] for key, (pieces, _) in group.items()}


def test_actor_hosts_claim_a_node_group_and_read_the_dealer_s_pieces_of_it_in_one_call(two_worker_client):
    """Host 0 deals the groups; another host's claim brings host 0's pieces of the group with it, so each
    group costs one host-to-host call (two before: the claim, then the pieces), plus at most one claim
    that finds none left. The groups still see every chunk's piece of every key, in chunk order."""
    ex, chunks = _actor_chunks(two_worker_client)
    try:
        n_keys = 8
        offsets = ex.map_chunks(lambda chunk: chunk.offset, chunks)
        before = dict(ex.stats)
        parts, keys, _ = ex.split_chunks_by_key(_every_key, chunks, n_keys)
        jobs = {k: _Job(1) for k in range(n_keys)}
        out = ex.run_key_groups(_pieces_of_each_key, parts, keys, jobs)
        assert ex.stats["round_trips"] - before["round_trips"] == 1
        n_groups = len(pack_keys(jobs, 2 * 2))
        assert n_groups == 4
        assert ex.stats["peer_calls"] - before["peer_calls"] in (n_groups, n_groups + 1)
        assert out == {k: [int(o) for o in offsets] for k in range(n_keys)}  # every chunk's piece, in chunk order
    finally:
        ex.close()


def _pieces_and_pid(group):
    import os

    return {key: ([int(p) for p in pieces], os.getpid()) for key, (pieces, _) in group.items()}


def test_with_row_copies_each_actor_host_reads_the_others_parts_once_and_takes_its_first_group_unclaimed(
        two_worker_client):
    """Where the parts only name their rows, a host reads the other host's parts of every group in one call
    before it starts, and each host's first group is dealt to it: the calls are those two, plus host 1's
    claims after its first group (one per further group it takes, and at most one that finds none left),
    not one per group (8 or 9 here before)."""
    ex, chunks = _actor_chunks(two_worker_client, copy_rows=True)
    try:
        n_keys = 8
        offsets = ex.map_chunks(lambda chunk: chunk.offset, chunks)
        parts, keys, _ = ex.split_chunks_by_key(_every_key, chunks, n_keys)
        before = dict(ex.stats)
        out = ex.run_key_groups(_pieces_and_pid, parts, keys, {k: _Job(1) for k in range(n_keys)},
                                n_groups=n_keys)
        assert {k: pieces for k, (pieces, _) in out.items()} == {k: [int(o) for o in offsets] for k in range(n_keys)}
        host_1 = two_worker_client.run(os.getpid)[ex._host_address[1]]
        on_host_1 = sum(pid == host_1 for _, pid in out.values())
        assert on_host_1 >= 1  # its first group, dealt
        assert 2 + on_host_1 - 1 <= ex.stats["peer_calls"] - before["peer_calls"] <= 2 + on_host_1
    finally:
        ex.close()


def test_an_actor_host_taking_a_lone_group_gets_its_machine_s_threads(two_worker_client):
    """One group (a root level) would leave the other host idle: the host taking it passes ``fn`` the
    threads of the fit's workers on its machine (both workers here: 2), through ``threads_arg`` only.
    Several groups, or no ``threads_arg``: nothing passed (each host runs its groups on its thread)."""
    ex, chunks = _actor_chunks(two_worker_client)
    try:
        for jobs, threads_arg, expected in [
            ({0: _Job(1)}, "threads", 2),
            ({k: _Job(1) for k in range(8)}, "threads", None),  # four groups for two hosts
            ({0: _Job(1)}, None, None),
        ]:
            parts, keys, _ = ex.split_chunks_by_key(_every_key, chunks, 8)  # parts serve one run_key_groups
            out = ex.run_key_groups(_threads_seen, parts, keys, jobs, threads_arg=threads_arg)
            assert set(out) == set(jobs) and set(out.values()) == {expected}, (len(jobs), threads_arg)
    finally:
        ex.close()


def _group_times(group):
    import os
    import time

    start = time.perf_counter()
    time.sleep(0.3)
    span = (os.getpid(), start, time.perf_counter())
    return {key: span for key in group}


def test_an_actor_host_of_several_threads_takes_node_groups_on_each_of_them(threaded_workers_client):
    """A worker of two threads solves two node groups at once (as the local executor does on its threads),
    and the groups are two per worker thread."""
    ex, chunks = _actor_chunks(threaded_workers_client)
    try:
        jobs = {k: _Job(1) for k in range(16)}
        parts, keys, _ = ex.split_chunks_by_key(_every_key, chunks, 16)
        out = ex.run_key_groups(_group_times, parts, keys, jobs)
        assert set(out) == set(jobs)
        groups = set(out.values())
        assert len(groups) == 2 * 2 * 2  # two per thread of two workers of two threads
        for pid in {pid for pid, _, _ in groups}:
            mine = sorted((start, end) for p, start, end in groups if p == pid)
            assert any(b[0] < a[1] for a, b in zip(mine, mine[1:])), "a worker ran its groups one at a time"
    finally:
        ex.close()


def _fails_for_key_3(group):
    import time

    if 3 in group:
        raise ValueError("group with key 3 fails on purpose")
    time.sleep(0.2)
    return {key: key for key in group}


class _Unsendable(Exception):
    def __init__(self):
        super().__init__("a group failed with an error holding a lock")
        self.lock = threading.Lock()


def _fails_unsendably(group):
    raise _Unsendable()


@pytest.mark.parametrize("client_fixture, fails, error, match", [
    # on one of a worker's threads: the call fails with the group's own error
    ("threaded_workers_client", _fails_for_key_3, ValueError, "key 3 fails on purpose"),
    # with an error that cannot be pickled: a RuntimeError naming it, rather than a driver waiting for ever
    ("two_worker_client", _fails_unsendably, RuntimeError, "cannot be sent back(.|\n)*holding a lock"),
])
def test_a_failing_node_group_fails_the_call_with_its_error(request, client_fixture, fails, error, match):
    ex, chunks = _actor_chunks(request.getfixturevalue(client_fixture))
    try:
        parts, keys, _ = ex.split_chunks_by_key(_every_key, chunks, 16)
        with pytest.raises(error, match=match):
            ex.run_key_groups(fails, parts, keys, {k: _Job(1) for k in range(16)})
    finally:
        ex.close()


def test_machine_threads_counts_each_worker_once_on_its_own_machine():
    from taodist.dask._actor_executor import machine_threads

    workers = ["tcp://10.0.0.1:1", "tcp://10.0.0.2:1", "tcp://10.0.0.1:2", "tcp://10.0.0.1:1"]  # two hosts on one
    assert machine_threads(workers, [2, 4, 1, 2]) == [3, 4, 3, 3]


def test_actor_hosts_read_each_other_s_results_in_one_round_and_a_failure_ends_the_round(two_worker_client):
    """An op on one host may take results another host makes in the same round (fetched from it, not
    through the driver): one round, the values in chunk order. When the host making them fails, the
    host waiting for them gives up and the driver raises the failing op's own error, not a hang."""
    X, y, _ = _problem()
    ex, chunks = _actor_chunks(two_worker_client)
    try:
        assert len(set(ex._host_of)) == 2  # the chunks are on both hosts
        before = ex.stats["round_trips"]
        counts = ex.map_chunks(_row_count, chunks, gather=False)
        totals = ex.map_chunks(_total_rows, chunks, counts)
        assert totals == [len(y)] * len(chunks)
        assert ex.stats["round_trips"] - before == 1

        offsets = ex.map_chunks(lambda chunk: chunk.offset, chunks)
        second = {offsets[i] for i in chunks if ex._host_of[i] == 1}
        failing = ex.map_chunks(_fails_at, chunks, second, gather=False)  # on the second host only
        with pytest.raises(ValueError, match="fails on purpose"):  # the first host waits on the second's
            ex.map_chunks(_total_rows, chunks, failing)
    finally:
        ex.close()


def test_an_actor_host_waiting_for_a_host_whose_round_never_came_stops_once_that_host_is_released(
        two_worker_client):
    """A round whose call to one host was never delivered (the driver stopped part way through sending
    it) leaves another host waiting for that host's results; once the fit lets the host go, the
    waiting host gives up instead of holding a worker thread for ever."""
    import gc
    import threading

    from taodist.dask._messages import PeerFailed, Ref

    ex, chunks = _actor_chunks(two_worker_client)
    try:
        first = [i for i in chunks if ex._host_of[i] == 0]
        never_made = Ref(1, -1)  # a result of the second host that no op of this round makes
        outcome = {}

        def round_on_the_first_host_only():
            try:
                ex.map_chunks(_total_rows, first, [never_made])
            except Exception as exc:
                outcome["error"] = exc

        waiting = threading.Thread(target=round_on_the_first_host_only, daemon=True)
        waiting.start()
        waiting.join(2.0)
        assert waiting.is_alive()  # the first host waits for the second one's result
        ex._hosts[1] = ex._actor_futures[1] = None  # the fit lets the second host go
        gc.collect()
        waiting.join(60.0)
        assert not waiting.is_alive()
        assert isinstance(outcome.get("error"), PeerFailed) and "released" in str(outcome["error"])
    finally:
        ex.close()


def test_the_executor_setting_is_checked():
    import dask

    from taodist.dask._execution import plan_executor

    assert plan_executor(stream=False) == "actors"
    assert plan_executor(stream=True) == "tasks"
    with dask.config.set({"taodist.executor": "tasks"}):
        assert plan_executor(stream=False) == "tasks"
    with dask.config.set({"taodist.executor": "actor"}):
        with pytest.raises(ValueError, match="'auto', 'actors' or 'tasks', got 'actor'"):
            plan_executor(stream=False)
    with dask.config.set({"taodist.executor": "actors"}):
        with pytest.raises(ValueError, match="out-of-core"):
            plan_executor(stream=True)


def test_a_threaded_local_executor_runs_blas_on_one_thread_and_restores_it():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]

    np.ones((4, 4)) @ np.ones((4, 4))  # BLAS loaded
    with threadpool_limits(limits=2, user_api="blas"):  # a known starting point, even on one core
        executor = LocalExecutor(n_threads=2)
        assert set(blas_threads()) == {1}  # n_threads BLAS calls at once would oversubscribe the cores
        executor.close()
        assert set(blas_threads()) == {2}
        LocalExecutor(n_threads=1).close()  # one thread: BLAS keeps its own threads
        assert set(blas_threads()) == {2}
