"""Fixtures shared by the test modules (a small Dask cluster, every TAO executor) and the ``dask`` marker.

``pytest -m "not dask"`` runs the core alone: every test that needs a Dask
cluster or the :mod:`taodist.dask` layer carries the marker, set here for
whole folders and for tests that use a cluster fixture, and by hand on the
few others.
"""

import pathlib

import numpy as np
import pytest

from taodist.tao.executor import LocalExecutor
from taodist.tao.optimizer import tao_optimize

#: test folders about the Dask layer and what runs on it (jobs, the command line's embedded cluster)
DASK_FOLDERS = ("dask", "service", "cli")
#: fixtures that start or hand out a cluster, here and in test modules
CLUSTER_FIXTURES = {"two_worker_client", "threaded_workers_client", "client", "clusters", "cluster",
                    "threaded_client", "threaded_cluster", "client_fixture"}


@pytest.hookimpl(tryfirst=True)  # before -m deselects by marker
def pytest_collection_modifyitems(config, items):
    tests = pathlib.Path(__file__).parent
    for item in items:
        folder = pathlib.Path(item.fspath).relative_to(tests).parts[0]
        executor = getattr(getattr(item, "callspec", None), "params", {}).get("executor_case", "")
        if folder in DASK_FOLDERS or CLUSTER_FIXTURES & set(item.fixturenames) or str(executor).startswith("dask"):
            item.add_marker(pytest.mark.dask)


@pytest.fixture(autouse=True)
def private_taodist_token(tmp_path_factory, monkeypatch):
    """Each test a user of its own: its token file in a fresh config folder, never the developer's
    ``~/.config/taodist/token`` (processes the test starts inherit the variable)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path_factory.mktemp("config")))
    monkeypatch.delenv("TAODIST_TOKEN", raising=False)
    monkeypatch.delenv("TAODIST_RESULTS_ROOT", raising=False)


@pytest.fixture(scope="session")
def two_worker_client():
    """A 2-worker LocalCluster (worker processes, like production), shared by the session."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


@pytest.fixture(scope="session")
def threaded_workers_client():
    """A 2-worker LocalCluster of two threads each: hosts that take node groups on several threads."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=2, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


class ExecutorCase:
    """Runs :func:`taodist.tao.optimizer.tao_optimize` on one executor, with the row blocks that executor takes."""

    def __init__(self, name, make_executor, make_blocks):
        self.name, self._make_executor, self._make_blocks = name, make_executor, make_blocks

    def executor(self):
        return self._make_executor()

    def tao_optimize(self, tree, X, y, sample_weight, **kwargs):
        executor = self._make_executor()
        try:
            return tao_optimize(tree, self._make_blocks(X, y, sample_weight), None, None, executor=executor,
                                **kwargs)
        finally:
            executor.close()

    def __repr__(self):
        return self.name


def _numpy_blocks(n_blocks):
    def make(X, y, sw):
        bounds = np.linspace(0, len(y), n_blocks + 1).astype(int)
        return [(X[a:b], y[a:b], sw[a:b], int(a)) for a, b in zip(bounds[:-1], bounds[1:])]

    return make


@pytest.fixture(params=["local-1-thread", "local-3-threads", "dask-2-workers", "dask-2-workers-row-copies",
                        "dask-actors", "dask-actors-row-copies", "dask-actors-threaded-workers"])
def executor_case(request):
    """Every executor TAO can run on; the parity tests run on each of them."""
    if request.param == "local-1-thread":
        return ExecutorCase(request.param, lambda: LocalExecutor(1), _numpy_blocks(1))
    if request.param == "local-3-threads":
        return ExecutorCase(request.param, lambda: LocalExecutor(3), _numpy_blocks(4))
    import dask.array as da

    from taodist.dask import DaskExecutor, to_row_blocks

    threaded = request.param.endswith("threaded-workers")
    client = request.getfixturevalue("threaded_workers_client" if threaded else "two_worker_client")

    def dask_blocks(X, y, sw):
        return to_row_blocks(da.from_array(X, chunks=(97, X.shape[1])), y, sw)  # uneven row chunks

    copy_rows = request.param.endswith("row-copies")  # node groups read care points from their worker's copy
    if request.param.startswith("dask-actors"):
        from taodist.dask import ActorExecutor

        return ExecutorCase(request.param, lambda: ActorExecutor(client, copy_rows=copy_rows), dask_blocks)
    return ExecutorCase(request.param, lambda: DaskExecutor(client, copy_rows=copy_rows), dask_blocks)
