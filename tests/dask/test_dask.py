"""The Dask execution path: same models as in-process, data kept on workers."""

import os

import dask.array as da
import numpy as np
import pytest
from distributed import Client, LocalCluster

from taodist import TAOClassifier, TAORegressor
from taodist.testing import assert_tree_equal, make_oblique_classification


@pytest.fixture(scope="module")
def clusters():
    """A 1-worker and a 2-worker cluster (worker processes, like production)."""
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=":0") as one, \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as two:
        with Client(one, set_as_default=False) as c1, Client(two, set_as_default=False) as c2:
            yield {1: c1, 2: c2}


def _data():
    X, y = make_oblique_classification(n_samples=900, n_features=6, random_state=7)
    return X, y + 2 * (X[:, 2] > 0.2)  # 4 classes


@pytest.mark.parametrize("params", [
    dict(max_depth=3),
    dict(max_depth=3, max_care_points=60),
    dict(max_depth=2, node_type="axis", leaf_type="linear"),
    dict(max_depth=2, leaf_type="linear", leaf_classes=2),
    dict(max_depth=3, n_init=3),
])
def test_same_model_without_cluster_and_with_one_or_two_workers(clusters, params):
    X, y = _data()
    local = TAOClassifier(random_state=0, **params).fit(X, y)
    Xd = da.from_array(X, chunks=(137, X.shape[1]))  # uneven row chunks
    for n_workers, client in clusters.items():
        dist = TAOClassifier(random_state=0, **params).fit(Xd, y, client=client)
        assert_tree_equal(dist.tree_, local.tree_)
        np.testing.assert_allclose(dist.history_, local.history_, rtol=1e-12)
        np.testing.assert_array_equal(dist.predict(X), local.predict(X))


def test_columns_far_from_zero_give_the_same_model_without_and_with_a_cluster(clusters):
    X, y = _data()
    X = X + np.array([2000.0, 0.0, -500.0, 0.0, 1013.0, 0.0])  # a year, a longitude, a pressure
    local = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    dist = TAOClassifier(max_depth=3, random_state=0).fit(da.from_array(X, chunks=(137, 6)), y, client=clusters[2])
    assert_tree_equal(dist.tree_, local.tree_)
    np.testing.assert_array_equal(dist.predict(X), local.predict(X))


def test_values_past_their_fences_give_the_same_model_without_and_with_a_cluster(clusters, monkeypatch):
    from taodist.estimators import execution

    monkeypatch.setattr(execution, "FENCE_ROWS", 200)  # the fences' rows at a stride, read from the workers
    X, y = _data()
    X[[5, 300, 811], [0, 2, 4]] = [1e5, -1e6, 99999.0]
    local = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    dist = TAOClassifier(max_depth=3, random_state=0).fit(da.from_array(X, chunks=(137, 6)), y, client=clusters[2])
    np.testing.assert_array_equal(dist.clip_bounds_, local.clip_bounds_)
    assert local.clip_bounds_[1, 0] < 100 and local.clip_bounds_[0, 2] > -100
    assert_tree_equal(dist.tree_, local.tree_)
    np.testing.assert_array_equal(dist.predict(X), local.predict(X))


def test_penalty_factors_are_tested_on_the_same_rows_without_and_with_a_cluster(clusters, monkeypatch):
    from taodist.estimators import execution

    monkeypatch.setattr(execution, "FENCE_ROWS", 200)  # the tests' rows at a stride, read from the workers
    X, y = _data()
    X = np.hstack([X, np.random.default_rng(0).normal(size=(len(y), 4))])  # columns of noise: factors above 1
    local = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    dist = TAOClassifier(max_depth=3, random_state=0).fit(da.from_array(X, chunks=(137, 10)), y, client=clusters[2])
    assert local.penalty_factors_.max() > 1.0
    np.testing.assert_array_equal(dist.penalty_factors_, local.penalty_factors_)
    assert_tree_equal(dist.tree_, local.tree_)
    np.testing.assert_array_equal(dist.predict(X), local.predict(X))


def test_the_workers_are_asked_of_the_scheduler_not_read_from_the_clients_cache(clusters, monkeypatch):
    from taodist.dask._client import cluster_workers

    client = clusters[2]
    # the client's periodic refresh can leave a cached identity without per-worker entries
    monkeypatch.setattr(type(client), "scheduler_info", lambda self, *a, **k: {"workers": {}})
    assert sorted(cluster_workers(client)) == sorted(client.nthreads())
    assert len(cluster_workers(client)) == 2
    X, y = _data()
    local = TAOClassifier(max_depth=2, random_state=0).fit(X, y)
    dist = TAOClassifier(max_depth=2, random_state=0).fit(da.from_array(X, chunks=(300, 6)), y, client=client)
    assert_tree_equal(dist.tree_, local.tree_)


def test_numpy_input_with_an_explicit_client_runs_on_the_cluster(clusters):
    X, y = _data()
    client = clusters[2]
    local = TAOClassifier(max_depth=2, random_state=1).fit(X, y)
    dist = TAOClassifier(max_depth=2, random_state=1).fit(X, y, client=client)
    assert_tree_equal(dist.tree_, local.tree_)
    # the scheduler ran taodist's chunk and node tasks
    assert any("taodist-" in str(k) for k in client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.task_prefixes)))


def test_numpy_rows_are_scattered_one_block_per_worker_thread_onto_that_worker():
    from taodist.estimators.execution import distribute_rows

    X = np.arange(70 * 3, dtype=np.float64).reshape(70, 3)
    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        cluster.scale(0)
        from distributed import Worker

        async def start(nthreads):
            return await Worker(cluster.scheduler.address, nthreads=nthreads)

        one, three = client.sync(start, 1), client.sync(start, 3)
        try:
            Xd = distribute_rows(X, client)
            assert Xd.numblocks == (4, 1)
            np.testing.assert_array_equal(client.compute(Xd).result(), X)
            scattered = {w: sum(str(k).startswith("ndarray-") for k in keys) for w, keys in client.has_what().items()}
            assert scattered == {one.address: 1, three.address: 3}
        finally:
            client.sync(one.close)
            client.sync(three.close)


def test_regression_on_dask_matches_in_process_closely(clusters):
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(700, 4))
    y = np.where(X[:, 0] + X[:, 1] > 0, 2.0, -1.0) + 0.1 * X[:, 3]
    # init="random" on both: "auto" starts from CART's tree in memory, which a Dask fit cannot grow
    local = TAORegressor(max_depth=2, init="random", random_state=0).fit(X, y)
    dist = TAORegressor(max_depth=2, init="random", random_state=0).fit(da.from_array(X, chunks=(200, 4)), y,
                                                                       client=clusters[2])
    np.testing.assert_allclose(dist.predict(X), local.predict(X), rtol=1e-6, atol=1e-8)


def test_nan_in_a_dask_chunk_is_reported_with_its_row(clusters):
    X, y = _data()
    X = X.copy()
    X[500, 3] = np.nan
    with pytest.raises(ValueError, match="NaN or infinity.*row 500"):
        TAOClassifier(max_depth=2).fit(da.from_array(X, chunks=(200, 6)), y, client=clusters[1])


def _environ(names):
    return {name: os.environ.get(name) for name in names}


def test_embedded_clusters_start_workers_without_dask_s_malloc_trim(monkeypatch):
    """The fit-only clusters taodist starts skip MALLOC_TRIM_THRESHOLD_ (bench_dask_overhead --no-malloc-trim)."""
    import dask

    from taodist.dask._client import embedded_local_cluster

    names = ["MALLOC_TRIM_THRESHOLD_", "OMP_NUM_THREADS"]
    # any nanny started before in this process (the module's clusters) has written Dask's value into
    # os.environ, where the new workers would inherit it
    monkeypatch.setenv("MALLOC_TRIM_THRESHOLD_", "65536")
    with dask.config.set({"distributed.nanny.pre-spawn-environ": {"MALLOC_TRIM_THRESHOLD_": 65536,
                                                                  "OMP_NUM_THREADS": 1}}):
        with embedded_local_cluster(n_workers=1, threads_per_worker=1, processes=True,
                                    dashboard_address=":0") as cluster, Client(cluster, set_as_default=False) as c:
            seen = list(c.run(_environ, names).values())
        assert dask.config.get("distributed.nanny.pre-spawn-environ")["MALLOC_TRIM_THRESHOLD_"] == 65536  # restored
    assert seen == [{"MALLOC_TRIM_THRESHOLD_": None, "OMP_NUM_THREADS": "1"}]
    assert os.environ["MALLOC_TRIM_THRESHOLD_"] == "65536"  # restored


def _monitoring_settings():
    import dask

    return {key: dask.config.get(key) for key in ("distributed.worker.profile.interval",
                                                  "distributed.admin.system-monitor.interval",
                                                  "distributed.admin.tick.interval")}


def test_embedded_clusters_sample_themselves_less_often_unless_the_user_set_an_interval():
    """Quieter profiles, system monitors and ticks on taodist's own clusters; a user's value wins; config restored."""
    import dask

    from taodist.dask._client import QUIETER_MONITORING, embedded_local_cluster

    with dask.config.set({"distributed.admin.tick.interval": "50ms"}):
        before = _monitoring_settings()
        with embedded_local_cluster(n_workers=1, threads_per_worker=1, processes=True,
                                    dashboard_address=":0") as cluster, Client(cluster, set_as_default=False) as c:
            [on_worker] = c.run(_monitoring_settings).values()
            scheduler_tick = cluster.scheduler._tick_interval
        after = _monitoring_settings()
    quieter = {key: QUIETER_MONITORING[key] for key in ("distributed.worker.profile.interval",
                                                        "distributed.admin.system-monitor.interval")}
    assert on_worker == {**quieter, "distributed.admin.tick.interval": "50ms"}
    assert scheduler_tick == pytest.approx(0.05)  # the user's
    assert after == before


def test_column_chunked_dask_input_is_refused_with_the_fix():
    X, y = _data()
    with pytest.raises(ValueError, match=r"rechunk\(\{1: 6\}\)"):
        TAOClassifier().fit(da.from_array(X, chunks=(100, 3)), y)


def test_zarr_round_trip_and_fit_from_a_store(tmp_path, clusters):
    from taodist.io import open_zarr, to_zarr

    X, y = _data()
    path = to_zarr({"X": X, "y": y}, tmp_path / "train.zarr", rows_per_chunk=250)
    Xz = open_zarr(path, component="X")
    assert Xz.chunks[0] == (250, 250, 250, len(y) - 750) and Xz.dtype == np.float32
    np.testing.assert_array_equal(open_zarr(path, component="y").compute(), y)
    X32 = X.astype(np.float32)
    local = TAOClassifier(max_depth=2, random_state=0).fit(X32, y)
    dist = TAOClassifier(max_depth=2, random_state=0).fit(Xz, open_zarr(path, component="y"), client=clusters[2])
    assert_tree_equal(dist.tree_, local.tree_)


@pytest.mark.parametrize("params", [dict(max_depth=3, max_care_points=60), dict(max_depth=3),
                                    dict(max_depth=2, leaf_type="linear")])
def test_out_of_core_fit_streams_zarr_blocks_and_gives_the_same_model(tmp_path, clusters, params):
    import dask

    from taodist.io import open_zarr, to_zarr

    X, y = _data()
    path = to_zarr({"X": X}, tmp_path / "train.zarr", rows_per_chunk=200)
    local = TAOClassifier(random_state=0, **params).fit(X.astype(np.float32), y)
    with dask.config.set({"taodist.out-of-core": True}):
        streamed = TAOClassifier(random_state=0, **params).fit(open_zarr(path, component="X"), y,
                                                              client=clusters[2])
    assert_tree_equal(streamed.tree_, local.tree_)
    np.testing.assert_allclose(streamed.history_, local.history_, rtol=1e-12)


class FakeClient:
    """Just enough of a distributed Client for the memory plan: workers with these memory limits."""

    def __init__(self, limits):
        self.limits = limits
        self.scheduler = self  # the scheduler's rpc: identity()

    def identity(self, n_workers=-1):
        return {"workers": {str(i): {"memory_limit": m} for i, m in enumerate(self.limits)}}

    def sync(self, fn, *args, **kwargs):
        return fn(*args, **kwargs)


def test_out_of_core_plan_follows_worker_memory_and_config():
    import dask

    from taodist.dask._data import plan_out_of_core

    X = da.zeros((10_000_000, 100), chunks=(100_000, 100), dtype=np.float32)  # 4 GB, never computed
    stream, cap = plan_out_of_core(FakeClient([1.5e9, 1.5e9]), X)
    assert stream and cap == int(1.5e9 / 16 / (4 * 100 + 32))
    assert plan_out_of_core(FakeClient([64e9, 64e9]), X) == (False, None)
    assert plan_out_of_core(FakeClient([0, 0]), X) == (False, None)  # unlimited workers
    with dask.config.set({"taodist.out-of-core": False}):
        assert plan_out_of_core(FakeClient([1.5e9]), X) == (False, None)


def test_memory_plan_counts_sparse_rows_by_their_stored_entries():
    import dask
    import scipy.sparse as sp

    from taodist.dask._data import plan_out_of_core

    # 2,000 rows x 10 million columns, 5 entries a row: tiny as CSR, 80 GB as dense rows
    X = sp.csr_matrix((np.ones(10_000), np.arange(10_000) * 997, np.arange(0, 10_001, 5)), shape=(2000, 10**7))
    dX = da.from_array(X, chunks=(500, -1), asarray=False)
    assert plan_out_of_core(FakeClient([1e9, 1e9]), dX) == (False, None)
    with dask.config.set({"taodist.out-of-core": True}):
        stream, cap = plan_out_of_core(FakeClient([1e9]), dX)
    assert stream and cap == int(1e9 / 16 / (5 * 8 + 32))  # not the 1,000 floor a dense row would give


def test_row_copy_plan_follows_worker_memory_workers_and_config():
    import dask

    from taodist.dask._data import plan_row_copies

    X = da.zeros((1_000_000, 100), chunks=(100_000, 100), dtype=np.float32)  # a copy: 800 MB as float64 rows
    assert plan_row_copies(FakeClient([4e9, 4e9]), X)
    assert not plan_row_copies(FakeClient([4e9, 3e9]), X)  # more than a quarter of the smallest worker
    assert not plan_row_copies(FakeClient([8e9]), X)  # one worker holds every row already
    assert not plan_row_copies(FakeClient([0, 0]), X)  # unlimited workers: nothing to plan with
    with dask.config.set({"taodist.copy-rows": False}):
        assert not plan_row_copies(FakeClient([8e9, 8e9]), X)
    with dask.config.set({"taodist.copy-rows": True}):
        assert plan_row_copies(FakeClient([1e9, 1e9]), X)


@pytest.mark.parametrize("sparse", [False, True])
def test_parts_naming_their_rows_resolve_to_the_rows_a_chunk_would_ship(sparse):
    import scipy.sparse as sp

    from taodist.dask._executor import SolverRowCopy, _solver_block
    from taodist.tao.care_points import chunk_node_parts
    from taodist.tao.chunks import make_chunk
    from taodist.tao.part_rows import SolverRows, resolve_rows, take_rows
    from taodist.tao.routing import Routing

    X, y = _data()
    X = sp.csr_matrix(X) if sparse else X
    sw = np.ones(len(y))
    tree = TAOClassifier(max_depth=3, max_iter=1, prune=False, random_state=0).fit(X, y).tree_  # care points
    routing, bounds = Routing.of(tree), [0, 300, 301, 650, 900]
    one = np.ones(X.shape[1])
    carried, named = [], []
    for a, b in zip(bounds[:-1], bounds[1:]):
        carried.append(make_chunk(X[a:b], y[a:b], sw[a:b], a, routing, one, True))
        named.append(make_chunk(X[a:b], y[a:b], sw[a:b], a, routing, one, True, rows_by_reference=True))
    copy = SolverRowCopy(*[_solver_block(c) for c in reversed(named)])  # blocks in any order
    if not sparse:  # a block received at an odd address is aligned once (NumPy gathers from it faster)
        raw = np.zeros(named[0].X_solve.nbytes + 1, dtype=np.uint8)
        odd = raw[1:].view(named[0].X_solve.dtype).reshape(named[0].X_solve.shape)
        odd[:] = named[0].X_solve
        assert not odd.flags.aligned
        assert SolverRowCopy((0, odd)).blocks[0].flags.aligned
    n_named = 0
    for depth in range(3):
        for c, n in zip(carried, named):
            want = chunk_node_parts(c, routing, depth, None, 0, 1)
            got = chunk_node_parts(n, routing, depth, None, 0, 1)
            assert want.keys() == got.keys()
            for node in want:
                if got[node][1] is None:  # no care points here
                    assert want[node][1] is None
                    continue
                n_named += isinstance(got[node][1][2], SolverRows)
                stats, sample = resolve_rows(got[node], copy.take)
                np.testing.assert_array_equal(stats, want[node][0])
                for a, b in zip(sample, want[node][1]):
                    a, b = (v.toarray() if sp.issparse(v) else v for v in map(take_rows, (a, b)))
                    np.testing.assert_array_equal(a, b)
    assert n_named > 0
    with pytest.raises(ValueError, match="one chunk"):
        copy.take(np.array([299, 300]))


def test_to_zarr_refuses_nan_rows_and_leaves_nothing(tmp_path):
    from taodist.io import to_zarr

    X = np.ones((10, 3))
    X[[2, 7], 1] = np.nan
    with pytest.raises(ValueError, match=r"rows \[2, 7\]"):
        to_zarr(X, tmp_path / "x.zarr")
    assert list(tmp_path.iterdir()) == []


def test_predict_on_a_dask_array_is_lazy_and_equal():
    import dask

    from taodist import TAOForestClassifier

    X, y = _data()
    Xd = da.from_array(X, chunks=(300, 6))
    for est in (TAOClassifier(max_depth=2, random_state=0).fit(X, y),
                TAOForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(X, y)):
        for method in ("predict", "predict_proba"):
            lazy = getattr(est, method)(Xd)
            assert dask.is_dask_collection(lazy)
            np.testing.assert_array_equal(lazy.compute(), getattr(est, method)(X))


def test_a_call_to_a_worker_that_left_without_answering_fails_the_round_instead_of_waiting(monkeypatch):
    # A worker stuck as its nanny restarts it can hold a call open for ever (seen once in CI: the fit
    # hung after a killed worker): once the scheduler no longer lists the worker, the call counts as
    # an unreachable host, the hosts still running are told to abort, and the round's recovery takes over
    import asyncio
    from types import SimpleNamespace

    import taodist.dask._actor_executor as actors
    from taodist.dask._messages import PeerFailed

    monkeypatch.setattr(actors, "_LIVENESS_CHECK_SECONDS", 0.05)
    listed = {"workers": {"a": {}, "b": {}, "c": {}}}

    async def identity(n_workers=-1):
        return listed

    async def settle():
        loop = asyncio.get_running_loop()
        never, waiting = loop.create_future(), loop.create_future()  # b: no answer; c: waits for b's results
        told = []

        def tell(h, function, round_id):  # as ChunkHost.abort makes a waiting host's call fail
            told.append((h, function))
            if h == 2 and not waiting.done():
                waiting.set_exception(PeerFailed("the TAO chunk host on b failed this round"))

        executor = SimpleNamespace(client=SimpleNamespace(scheduler=SimpleNamespace(identity=identity)),
                                   _host_address=["a", "b", "c"], _tell=tell)
        executor._workers_now = lambda: actors.ActorExecutor._workers_now(executor)

        async def answers():
            return "a's values"

        task = asyncio.ensure_future(actors.ActorExecutor._settle(executor, 7, {0: answers(), 1: never, 2: waiting}))
        await asyncio.sleep(0.3)
        assert not task.done()  # b is still listed: its call is waited for
        listed["workers"] = {"a": {}, "c": {}}  # the scheduler drops b
        return await asyncio.wait_for(task, 5), told

    outcomes, told = asyncio.run(settle())
    assert outcomes[0] == "a's values"
    assert isinstance(outcomes[1], OSError) and "no longer lists its worker" in str(outcomes[1])
    assert isinstance(outcomes[2], PeerFailed)
    assert (2, "abort") in told


@pytest.mark.parametrize("failure, lost", [(OSError("Unable to contact Actor's worker"), [1]), (ValueError("a bug"), [])])
def test_an_unreachable_worker_is_waited_for_until_the_scheduler_drops_it(monkeypatch, failure, lost):
    # A call can find a killed worker unreachable before the scheduler has removed it (on a loaded CI
    # machine the fit then failed instead of recovering): after such an OSError the executor asks
    # the scheduler again; any other error is the fit's own and is raised at once
    import time
    from types import SimpleNamespace

    import taodist.dask._actor_executor as actors

    answers = [{"a": {}, "b": {}}] * 3 + [{"a": {}}]  # "b" listed three more times after it died
    monkeypatch.setattr(actors, "cluster_workers", lambda client: answers.pop(0) if len(answers) > 1 else answers[0])
    executor = SimpleNamespace(client=None, _host_address=["a", "b"])
    start = time.monotonic()
    assert actors.ActorExecutor._lost_hosts(executor, failure) == lost
    assert (len(answers) == 1) == bool(lost)  # waited through the stale answers only after the OSError
    assert time.monotonic() - start < 5


def test_the_same_rows_fitted_twice_on_one_client(two_worker_client):
    # Scattered blocks once took keys from their contents: the second fit's blocks had the first
    # fit's keys, which the scheduler freed as the first fit's futures were released ("lost
    # dependencies" in the second fit's first computation; seen when this test ran alone)
    import dask

    X, y = _data()
    with dask.config.set({"taodist.copy-rows": True}):
        fits = [TAOClassifier(max_depth=3, max_iter=2, random_state=0).fit(X, y, client=two_worker_client)
                for _ in range(3)]
    for fit in fits[1:]:
        assert_tree_equal(fit.tree_, fits[0].tree_)


def test_the_same_rows_in_a_forest_fitted_twice_on_one_client(two_worker_client):
    # the forest's broadcast rows: the same content-keyed blocks as above
    from taodist import TAOForestClassifier

    X, y = _data()
    fits = [TAOForestClassifier(n_estimators=2, max_depth=2, max_iter=2, random_state=0)
            .fit(X, y, client=two_worker_client) for _ in range(3)]
    for fit in fits[1:]:
        for a, b in zip(fit.estimators_, fits[0].estimators_):
            assert_tree_equal(a.tree_, b.tree_)


def test_a_fit_never_gives_the_scheduler_two_definitions_of_one_key(two_worker_client):
    # Rows scattered as blocks joined by da.concatenate were aliases that the feature scaling's
    # optimised graph and the row blocks' graph defined differently: the scheduler logged
    # "Detected different run_spec", which Dask says can cause failures and deadlocks
    import dask
    from distributed.utils_test import captured_logger

    X, y = _data()
    with captured_logger("distributed.scheduler") as log, dask.config.set({"taodist.copy-rows": True}):
        TAOClassifier(max_depth=3, max_iter=2, random_state=0).fit(X, y, client=two_worker_client)
    assert "run_spec" not in log.getvalue()


def test_an_error_inside_a_fit_on_the_default_client_reaches_the_caller_as_it_is():
    # resolve_client once swallowed it into "RuntimeError: generator didn't stop after throw()"
    from distributed import Client, LocalCluster

    from taodist.dask import resolve_client

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster, Client(cluster):
        with pytest.raises(ValueError, match="the caller's own error"):
            with resolve_client() as client:
                assert client is not None
                raise ValueError("the caller's own error")


def test_a_dask_dataframe_fits_the_model_of_its_pandas_rows_and_predicts_keeping_its_index(clusters):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    X, y = _data()
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])], index=np.arange(5000, 5000 + len(X)))
    local = TAOClassifier(max_depth=3, random_state=0).fit(frame, y)
    ddf = dd.from_pandas(frame, npartitions=4)
    dist = TAOClassifier(max_depth=3, random_state=0).fit(ddf, y, client=clusters[2])
    assert_tree_equal(dist.tree_, local.tree_)
    assert list(dist.feature_names_in_) == list(frame.columns)
    predicted = dist.predict(ddf).compute(scheduler="sync")
    np.testing.assert_array_equal(predicted.index, frame.index)
    np.testing.assert_array_equal(predicted.to_numpy(), local.predict(frame))
    with pytest.raises(ValueError, match=r"its categories are not known up front; call X = X.categorize"):
        TAOClassifier().fit(dd.from_pandas(frame.assign(s="a"), npartitions=2), y, client=clusters[2])


def test_a_dask_dataframe_with_categories_and_missing_values_is_encoded_partition_by_partition(clusters):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    X, y = _data()
    rng = np.random.RandomState(0)
    frame = pd.DataFrame(X, columns=[f"f{j}" for j in range(X.shape[1])])
    frame["colour"] = pd.Categorical(rng.choice(["red", "green", "blue"], len(frame)))
    y = np.where(frame["colour"] == "red", 4, y)  # a class only the category tells
    ddf = dd.from_pandas(frame, npartitions=4).categorize(columns=["colour"])
    local = TAOClassifier(max_depth=3, random_state=0).fit(frame, y)
    dist = TAOClassifier(max_depth=3, random_state=0).fit(ddf, y, client=clusters[2])
    assert dist.encoder_.feature_names_out_ == local.encoder_.feature_names_out_
    assert_tree_equal(dist.tree_, local.tree_)  # complete numeric columns: the fill values are never used
    holes = frame.copy()
    holes.loc[rng.rand(len(holes)) < 0.1, "f2"] = np.nan
    local = TAOClassifier(max_depth=3, random_state=0).fit(holes, y)
    dist = TAOClassifier(max_depth=3, random_state=0).fit(
        dd.from_pandas(holes, npartitions=4).categorize(columns=["colour"]), y, client=clusters[2])
    np.testing.assert_array_equal(dist.encoder_.missing_columns_, [2])
    np.testing.assert_allclose(dist.encoder_.fill_values_, local.encoder_.fill_values_, rtol=1e-12)
    assert np.mean(dist.predict(holes) == local.predict(holes)) > 0.97
    assert abs(dist.score(holes, y) - local.score(holes, y)) < 0.03


def _towns(n=800, seed=0):
    """Three noise columns and a 40-category column (some missing) that alone tells the label."""
    import pandas as pd

    rng = np.random.RandomState(seed)
    frame = pd.DataFrame(rng.randn(n, 3), columns=["f0", "f1", "f2"])
    town = pd.Series(rng.choice([f"town{i}" for i in range(40)], n), dtype=object)
    town[rng.rand(n) < 0.05] = None
    frame["town"] = pd.Categorical(town)
    y = np.where(town.isin([f"town{i}" for i in range(0, 40, 2)]), "yes", "no")  # missing: "no"
    return frame, y


def test_a_dask_dataframe_target_encodes_a_column_of_many_categories_and_the_model_round_trips(clusters, tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    from taodist import load, save

    frame, y = _towns()
    ddf = dd.from_pandas(frame, npartitions=4)
    est = TAOClassifier(max_depth=2, random_state=0).fit(ddf, y, client=clusters[2])
    assert est.encoder_.feature_names_out_ == ["f0", "f1", "f2", "town (target encoded)"]
    assert est.score(frame, y) > 0.97  # the noise columns alone score about 0.5
    assert est.feature_importances_[3] > 0.5
    np.testing.assert_array_equal(est.predict(ddf).compute(scheduler="sync").to_numpy(), est.predict(frame))
    path = tmp_path / "model.npz"
    save(est, path)
    back = load(path)
    assert back.encoder_.target_categories_ == est.encoder_.target_categories_
    np.testing.assert_array_equal(back.encoder_.target_encodings_[0], est.encoder_.target_encodings_[0])
    np.testing.assert_array_equal(back.predict_proba(frame), est.predict_proba(frame))
    np.testing.assert_array_equal(back.predict(ddf).compute(scheduler="sync").to_numpy(), est.predict(frame))


def test_a_dask_target_encoded_fit_does_not_depend_on_the_partitioning(clusters):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    frame, y = _towns(seed=1)
    fits = [TAOClassifier(max_depth=3, max_iter=4, random_state=0).fit(dd.from_pandas(frame, npartitions=k), labels,
                                                                       client=clusters[2])
            for k, labels in ((2, y), (5, dd.from_pandas(pd.Series(y), npartitions=3)))]  # y on the driver or not
    assert_tree_equal(fits[0].tree_, fits[1].tree_)
    np.testing.assert_array_equal(fits[0].encoder_.target_encodings_[0], fits[1].encoder_.target_encodings_[0])


def test_early_stopping_on_dask_input_with_an_eval_set_chunked_differently(clusters):
    X, y = _data()
    X_fit, y_fit, X_val, y_val = X[:600], y[:600], X[600:], y[600:]
    params = dict(max_depth=3, max_iter=8, tol=0, early_stopping=True, n_iter_no_change=2, random_state=0)
    local = TAOClassifier(**params).fit(X_fit, y_fit, eval_set=(X_val, y_val))
    dist = TAOClassifier(**params).fit(da.from_array(X_fit, chunks=(137, 6)), y_fit, client=clusters[2],
                                       eval_set=(da.from_array(X_val, chunks=(55, 6)), y_val))
    assert_tree_equal(dist.tree_, local.tree_)
    np.testing.assert_array_equal(dist.validation_score_, local.validation_score_)
    assert dist.best_iteration_ == local.best_iteration_
    with pytest.raises(ValueError, match="early_stopping on Dask input needs validation rows"):
        TAOClassifier(early_stopping=True).fit(da.from_array(X_fit, chunks=(137, 6)), y_fit, client=clusters[2])


def test_axis_nodes_learn_the_same_missing_value_directions_with_and_without_a_cluster(clusters):
    X, y = _data()
    X = X.copy()
    X[np.random.RandomState(0).rand(*X.shape) < 0.2] = np.nan
    params = dict(node_type="axis", max_depth=3, init="random", random_state=0)
    local = TAOClassifier(**params).fit(X, y)
    dist = TAOClassifier(**params).fit(X, y, client=clusters[2])
    assert local.tree_.missing_column is not None and (local.tree_.missing_column >= 0).any()
    assert_tree_equal(dist.tree_, local.tree_)


def test_a_worker_killed_as_the_actor_hosts_start_does_not_hang_the_fit(monkeypatch):
    """A host pinned to a worker that died before the scheduler placed it would wait forever: the hosts
    go where the scheduler can run them, and the fit gives the model it gives without the fault."""
    import os
    import signal
    import threading

    import dask

    from taodist.dask._actor_executor import ActorExecutor

    X, y = make_oblique_classification(n_samples=2000, n_features=8, random_state=3)
    params = dict(max_depth=3, random_state=0, max_iter=3, tol=0.0)
    reference = TAOClassifier(**params).fit(X, y)
    start_hosts = ActorExecutor._start_hosts
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as client:
        killed = []

        def kill_then_start(self, workers):
            if not killed:  # the first start: kill the first host's worker just before its actor is submitted
                pids = client.run(os.getpid)
                os.kill(pids[workers[0]], signal.SIGKILL)
                killed.append(workers[0])
            return start_hosts(self, workers)

        monkeypatch.setattr(ActorExecutor, "_start_hosts", kill_then_start)
        result = {}

        def fit():
            try:
                result["model"] = TAOClassifier(**params).fit(da.from_array(X, chunks=(250, 8)), y, client=client)
            except Exception as exc:  # pragma: no cover - reported below
                result["error"] = exc

        with dask.config.set({"taodist.executor": "actors"}):
            thread = threading.Thread(target=fit, daemon=True)
            thread.start()
            thread.join(240)
        assert killed and not thread.is_alive(), "the fit hung on a host pinned to the killed worker"
    assert "error" not in result, result.get("error")
    assert_tree_equal(result["model"].tree_, reference.tree_)


def test_a_round_that_fails_again_after_a_recovery_is_recovered_again_a_bounded_number_of_times():
    from taodist.dask import _actor_executor as actors

    ex = object.__new__(actors.ActorExecutor)
    ex._hosts, calls, recoveries = [0, 1], [], []
    ex._recover = lambda: recoveries.append(1)
    ex._lost_hosts = lambda failure=None: [0] if isinstance(failure, OSError) else []

    def call(hosts, want):  # the replayed round finds a second worker gone once, then succeeds
        calls.append(list(hosts))
        if len(calls) < 2:
            raise OSError("Unable to contact the TAO chunk host on tcp://dead:1")
        return {"ok": want}

    ex._call = call
    assert ex._recover_and_call(OSError("first loss"), {"w": 1}) == {"ok": {"w": 1}}
    assert len(recoveries) == 2 and calls == [[0, 1], [0, 1]]
    # a failure that is not a lost worker is the fit's own error, raised as it is
    with pytest.raises(ValueError, match="the fit's own"):
        ex._recover_and_call(ValueError("the fit's own"), {})
    # and a cluster that keeps losing workers ends the fit after a bounded number of recoveries

    def always_lost(hosts, want):
        raise OSError("Unable to contact the TAO chunk host on tcp://dead:1")

    ex._call, recoveries[:] = always_lost, []
    with pytest.raises(OSError, match="Unable to contact"):
        ex._recover_and_call(OSError("first loss"), {})
    assert len(recoveries) == actors._MAX_RECOVERIES
