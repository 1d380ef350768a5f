"""Affinities and the Laplacian built on the workers: the in-process W and L from the same kNN lists, bit for bit."""

import numpy as np
import pytest
import scipy.sparse as sp

from taodist.laptao import knn_graph, workers_graph
from taodist.laptao._distributed_affinities import laplacian_rows, reverse_edges, symmetric_rows
from taodist.laptao._graph import graph_laplacian, knn_affinities, knn_weights

da = pytest.importorskip("dask.array")


def _random_lists(n, k, seed=0):
    """Neighbour lists with no self and no repeats, and distances, as a kNN graph has them."""
    rng = np.random.default_rng(seed)
    idx = np.array([rng.choice(np.delete(np.arange(n), r), k, replace=False) for r in range(n)])
    dist = np.sort(rng.uniform(0.5, 3.0, size=(n, k)), axis=1)
    return idx, dist


def _assert_same_csr(A, B):
    A, B = sp.csr_matrix(A), sp.csr_matrix(B)
    assert A.shape == B.shape
    np.testing.assert_array_equal(A.indptr, B.indptr)
    np.testing.assert_array_equal(A.indices, B.indices)
    np.testing.assert_array_equal(A.data, B.data)


# ---------------------------------------------------------------- kernels, no cluster
@pytest.mark.parametrize("kwargs", [{}, {"perplexity": 2.5}, {"bandwidth": 0.7}])
def test_row_blocks_of_w_and_l_from_reverse_edges_are_the_in_process_ones_bit_for_bit(kwargs):
    n, k, bounds = 60, 5, [0, 7, 31, 32, 60]  # uneven, one block of a single row
    idx, dist = _random_lists(n, k)
    W0 = knn_affinities(idx, dist, k, **kwargs)
    L0 = graph_laplacian(W0)
    blocks = list(zip(bounds[:-1], bounds[1:]))
    weights = [knn_weights(dist[a:b], k, **kwargs) for a, b in blocks]
    W_rows, L_rows = [], []
    for lo, hi in blocks:
        reverse = [reverse_edges(idx[a:b], w, a, lo, hi) for (a, b), w in zip(blocks, weights)]
        W_rows.append(symmetric_rows(idx[lo:hi], weights[bounds.index(lo)], lo, n, *reverse))
        L_rows.append(laplacian_rows(W_rows[-1], lo))
    _assert_same_csr(sp.vstack(W_rows), W0)
    _assert_same_csr(sp.vstack(L_rows), L0)


def test_a_reverse_edge_task_sends_only_the_edges_into_its_target():
    idx = np.array([[3, 9], [0, 4]])
    rows, cols, data = reverse_edges(idx, np.array([[0.1, 0.2], [0.3, 0.4]]), 10, 3, 5)
    np.testing.assert_array_equal(rows, [3, 4])
    np.testing.assert_array_equal(cols, [10, 11])
    np.testing.assert_array_equal(data, [0.1, 0.4])


# ---------------------------------------------------------------- on a cluster
@pytest.fixture(scope="module")
def threaded_client():
    """One worker in this process (as in test_distributed_graph.py)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


@pytest.mark.parametrize("kwargs", [{}, {"bandwidth": 0.5}])
def test_the_workers_w_and_l_equal_the_in_process_ones_from_the_same_knn_lists(threaded_client, kwargs):
    rng = np.random.default_rng(0)
    X = da.from_array(rng.normal(size=(700, 5)).astype(np.float32), chunks=((100, 250, 50, 300), 5))
    idx, dist = knn_graph(X, 10, random_state=0, client=threaded_client)
    i, d = threaded_client.gather(threaded_client.compute([idx, dist]))
    graph = workers_graph(idx, dist, 10, client=threaded_client, **kwargs)
    W0 = knn_affinities(i, d, 10, **kwargs)
    L0 = graph_laplacian(W0)
    _assert_same_csr(graph.gather_W(), W0)  # assembled here for the test only
    _assert_same_csr(graph.gather_L(), L0)
    np.testing.assert_array_equal(graph.diagonal(), L0.diagonal())
    V = rng.normal(size=(700, 3))
    np.testing.assert_array_equal(graph @ V, L0 @ V)


def test_lists_chunked_differently_are_refused(threaded_client):
    idx = da.zeros((10, 3), chunks=(5, 3), dtype=np.int64)
    with pytest.raises(ValueError, match="same row chunks"):
        workers_graph(idx, da.ones((10, 3), chunks=(4, 3)), 3, client=threaded_client)


def test_cg_over_the_workers_row_blocks_solves_the_in_process_system(threaded_client):
    from taodist.dask import DistributedLaplacianCG
    from taodist.laptao._label_step import LaplacianCG, system_diagonal

    n, k, gamma = 400, 6, 0.3
    idx, dist = _random_lists(n, k, seed=3)
    chunks = ((90, 10, 200, 100), (k,))
    graph = workers_graph(da.from_array(idx, chunks=chunks), da.from_array(dist, chunks=chunks), k,
                          client=threaded_client)
    cg = DistributedLaplacianCG.from_row_blocks(threaded_client, graph.scaled_laplacian_blocks(gamma), graph.bounds)
    np.testing.assert_array_equal(cg.bounds, [0, 90, 100, 300, 400])
    L0 = graph_laplacian(knn_affinities(idx, dist, k))
    rng = np.random.default_rng(0)
    labelled = rng.uniform(size=n) < 0.2
    diag = system_diagonal(labelled, L0, 0.01)
    B = rng.normal(size=(n, 3))
    Z, info = cg.solve(diag, B, tol=1e-10)
    assert info.method == "distributed-cg" and info.residual < 1e-10
    Z0, _ = LaplacianCG(L0, gamma).solve(diag, B, tol=1e-10)
    np.testing.assert_allclose(Z, Z0, rtol=0, atol=1e-8 * np.abs(Z0).max())


def test_a_cluster_fit_of_a_dask_array_never_builds_w_or_l_in_the_fitting_process(threaded_client, monkeypatch):
    import taodist.laptao._estimators as estimators
    from taodist import LapTAOClassifier

    def refused(*args, **kwargs):
        raise AssertionError("W or L built in the fitting process")

    rng = np.random.default_rng(8)
    X = rng.normal(size=(600, 4))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    y_semi = np.where(rng.uniform(size=600) < 0.1, y, -1)
    kw = dict(max_depth=2, n_outer=3, random_state=0)
    local = LapTAOClassifier(**kw).fit(X, y_semi)
    for name in ("affinity_graph", "graph_laplacian", "bandwidth_order"):
        monkeypatch.setattr(estimators, name, refused)
    # uneven row blocks of at most EXACT_BLOCK_MAX rows: the workers' kNN graph is exact, as the in-process
    # one is below 5,000 rows; the label steps differ by CG's tolerance (the in-process fit solves directly)
    workers = LapTAOClassifier(**kw).fit(da.from_array(X, chunks=((150, 250, 200), 4)), y_semi,
                                         client=threaded_client)
    assert all(h["label_method"] == "distributed-cg" for h in workers.history_)
    assert np.mean(workers.predict(X) == local.predict(X)) >= 0.98
    for a, b in zip(workers.history_, local.history_):
        assert a["laplacian"] == pytest.approx(b["laplacian"], rel=0.05, abs=1e-6)


def test_a_cluster_regression_fit_with_a_tight_cg_equals_the_in_process_fit(threaded_client):
    from taodist import LapTAORegressor

    rng = np.random.default_rng(8)
    X = rng.normal(size=(600, 4))
    y = np.where(rng.uniform(size=600) < 0.1, X[:, 0] - X[:, 1], np.nan)
    # exact kNN on both sides (blocks of at most EXACT_BLOCK_MAX rows, under 5,000 rows in process), so the
    # fits differ only by the label steps: solved directly here, by CG on the workers. At cg_tol=1e-5 a
    # split moved (one point's prediction by 1.4); at 1e-10 the predictions agree to ~5e-9
    kw = dict(max_depth=2, n_outer=3, random_state=0, cg_tol=1e-10)
    local = LapTAORegressor(**kw).fit(X, y)
    workers = LapTAORegressor(**kw).fit(da.from_array(X, chunks=((150, 250, 200), 4)), y, client=threaded_client)
    np.testing.assert_allclose(workers.predict(X), local.predict(X), rtol=0, atol=1e-6)
