"""The kNN graph built on the workers: recall against exact kNN, global row numbers, the same graph on any workers."""

import numpy as np
import pytest
from sklearn.neighbors import NearestNeighbors

from taodist.laptao import knn_graph
from taodist.laptao._block_knn import (
    EXACT_BLOCK_MAX,
    BlockIndex,
    candidate_distances,
    gather_candidates,
    merge_k_best,
    neighbour_lists,
    refined_lists,
    split_by_owner,
)

da = pytest.importorskip("dask.array")


def _blobs(n=3000, d=10, seed=0):
    """Rows around 20 centres: neighbourhoods with structure, as in real data (float32, no ties)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(20, d))
    return (centres[rng.integers(0, 20, n)] + rng.normal(size=(n, d))).astype(np.float32)


def _exact(X, k):
    dist, idx = NearestNeighbors(n_neighbors=k + 1, algorithm="brute").fit(X).kneighbors(X)
    return idx[:, 1:], dist[:, 1:]


def _graph(X, k, client, **kwargs):
    """The graph's two arrays, fetched through ``client`` (not the default client: its futures are that client's)."""
    return client.gather(client.compute(list(knn_graph(X, k, client=client, **kwargs))))


def _recall(idx, exact):
    return np.mean([len(set(a) & set(b)) / exact.shape[1] for a, b in zip(idx, exact)])


@pytest.fixture(scope="module")
def threaded_client():
    """One worker in this process: no worker processes to start, and numba compiles once for the module."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=":0") as cluster:
        with Client(cluster, set_as_default=False) as client:
            yield client


# ---------------------------------------------------------------- kernels, no cluster
def test_merge_keeps_the_k_nearest_without_self_or_repeats_whatever_the_order_of_the_lists():
    rows = np.array([10, 11])
    a = (np.array([[10, 3, 5], [7, 11, 2]]), np.array([[0.0, 1.0, 3.0], [2.0, 0.0, 5.0]]))
    b = (np.array([[5, 8, -1], [2, 4, 9]]), np.array([[3.0, 2.0, np.inf], [5.0, 1.0, 0.5]]))
    idx, dist = merge_k_best(rows, 3, a, b)
    np.testing.assert_array_equal(idx, [[3, 8, 5], [9, 4, 7]])
    np.testing.assert_array_equal(dist, [[1.0, 2.0, 3.0], [0.5, 1.0, 2.0]])
    idx2, dist2 = merge_k_best(rows, 3, b, a)
    np.testing.assert_array_equal(idx2, idx)
    np.testing.assert_array_equal(dist2, dist)


def test_a_small_block_is_searched_exactly_and_answers_in_global_row_numbers():
    X = _blobs(200, 4)
    index = BlockIndex(X[:100], 1000, 5, seed=0)  # 100 <= EXACT_BLOCK_MAX
    assert 100 <= EXACT_BLOCK_MAX and index.nnd is None
    idx, dist = index.query(X[100:])
    exact = NearestNeighbors(n_neighbors=5).fit(X[:100]).kneighbors(X[100:], return_distance=False) + 1000
    np.testing.assert_array_equal(idx, exact)
    np.testing.assert_allclose(dist, np.linalg.norm(X[100:, None] - X[idx - 1000], axis=2), rtol=1e-5, atol=1e-6)


def test_a_refinement_round_over_blocks_equals_the_direct_neighbour_of_neighbour_merge():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 3)).astype(np.float32)
    k, bounds = 4, [0, 7, 19, 30]
    graph = np.array([rng.choice(np.delete(np.arange(30), r), k, replace=False) for r in range(30)])
    graph_dist = np.linalg.norm(X[:, None] - X[graph], axis=2).astype(np.float64)
    blocks = list(zip(bounds[:-1], bounds[1:]))
    lo, hi = blocks[1]
    rows = np.arange(lo, hi)
    parts = [neighbour_lists(graph[lo:hi], graph[a:b], a) for a, b in blocks]
    candidates = gather_candidates(rows, graph[lo:hi], *parts)
    for r, row in enumerate(rows):  # each new candidate once: not the row, not a current neighbour
        found = candidates[r][candidates[r] >= 0]
        expected = set(graph[graph[row]].ravel()) - {row} - set(graph[row])
        assert sorted(found) == sorted(expected)
    split = split_by_owner(candidates, bounds[:-1])
    measured = [(pairs, candidate_distances(X[lo:hi], pairs, k * k, X[a:b], a)) for pairs, (a, b) in zip(split, blocks)]
    idx, dist = refined_lists(rows, k, (graph[lo:hi], graph_dist[lo:hi]), k * k, *measured)
    for r, row in enumerate(rows):
        pool = sorted(set(graph[row]) | set(graph[graph[row]].ravel()) - {row},
                      key=lambda m: (np.linalg.norm(X[row] - X[m]), m))
        np.testing.assert_array_equal(idx[r], pool[:k])
        np.testing.assert_allclose(dist[r], np.linalg.norm(X[row] - X[pool[:k]], axis=1), rtol=1e-5)


# ---------------------------------------------------------------- on a cluster
def test_recall_against_exact_knn_at_k_10(threaded_client):
    X = _blobs()
    idx, dist = knn_graph(da.from_array(X, chunks=(800, X.shape[1])), 10, random_state=0, client=threaded_client)
    assert isinstance(idx, da.Array) and idx.shape == (3000, 10) and idx.chunks[0] == (800, 800, 800, 600)
    assert idx.dtype == np.int64 and dist.dtype == np.float64
    assert len(idx.dask) == len(idx.chunks[0])  # one computed block (a future) per row chunk, nothing lazy left
    idx, dist = threaded_client.gather(threaded_client.compute([idx, dist]))
    exact, _ = _exact(X, 10)
    assert _recall(idx, exact) >= 0.95
    assert (idx != np.arange(3000)[:, None]).all() and (np.diff(dist, axis=1) >= 0).all()
    np.testing.assert_allclose(dist, np.linalg.norm(X[:, None] - X[idx], axis=2), rtol=1e-4, atol=1e-5)


def test_refinement_raises_recall(threaded_client):
    X = _blobs(2000, 20, seed=3)
    exact, _ = _exact(X, 10)
    Xd = da.from_array(X, chunks=(500, 20))
    recalls = [_recall(_graph(Xd, 10, threaded_client, n_refine=r, random_state=0)[0], exact) for r in (0, 1)]
    assert recalls[1] > recalls[0]


def test_uneven_small_chunks_give_the_exact_graph_in_global_row_numbers(threaded_client):
    # blocks of at most EXACT_BLOCK_MAX rows are searched by brute force: the graph is then exact,
    # so any slip in a block's offset shows as a wrong index
    X = _blobs(700, 6, seed=2)
    chunks = (250, 13, 200, 1, 236)
    idx, dist = knn_graph(da.from_array(X, chunks=(chunks, 6)), 7, client=threaded_client)
    assert idx.chunks[0] == chunks
    exact, exact_dist = _exact(X, 7)
    idx, dist = threaded_client.gather(threaded_client.compute([idx, dist]))
    np.testing.assert_array_equal(idx, exact)
    np.testing.assert_allclose(dist, exact_dist, rtol=1e-4, atol=1e-5)


def test_uneven_chunks_with_nn_descent_blocks_keep_global_row_numbers(threaded_client):
    X = _blobs(2500, 8, seed=4)
    idx, dist = _graph(da.from_array(X, chunks=((1100, 90, 700, 610), 8)), 10, threaded_client, random_state=1)
    np.testing.assert_allclose(dist, np.linalg.norm(X[:, None] - X[idx], axis=2), rtol=1e-4, atol=1e-5)
    assert _recall(idx, _exact(X, 10)[0]) >= 0.95


def test_a_zarr_backed_array_is_read_on_the_workers(threaded_client, tmp_path):
    zarr = pytest.importorskip("zarr")
    X = _blobs(1500, 5, seed=5)
    store = zarr.open_array(str(tmp_path / "X.zarr"), mode="w", shape=X.shape, chunks=(400, 5), dtype=X.dtype)
    store[:] = X
    idx, _ = _graph(da.from_zarr(str(tmp_path / "X.zarr")), 10, threaded_client, random_state=0)
    ref, _ = _graph(da.from_array(X, chunks=(400, 5)), 10, threaded_client, random_state=0)
    np.testing.assert_array_equal(idx, ref)


def test_the_same_random_state_gives_the_same_graph_on_one_or_two_workers(threaded_client, two_worker_client):
    X = da.from_array(_blobs(2400, 8, seed=6), chunks=(600, 8))
    one = _graph(X, 10, threaded_client, random_state=7)
    two = _graph(X, 10, two_worker_client, random_state=7)
    np.testing.assert_array_equal(one[0], two[0])
    np.testing.assert_array_equal(one[1], two[1])


@pytest.mark.parametrize("make, k, error, match", [
    (lambda: da.zeros((100, 3), chunks=(30, 3)), 100, ValueError, "less than the number of rows"),
    (lambda: da.zeros((100, 3), chunks=(30, 3)), 0, ValueError, "positive integer"),
    (lambda: da.zeros((100,), chunks=30), 5, ValueError, "2D"),
    (lambda: da.zeros((100, 3, 2), chunks=(30, 3, 2)), 5, ValueError, "2D"),
    (lambda: da.zeros((100, 4), chunks=(30, 2)), 5, ValueError, r"rechunk\(\{1: 4\}\)"),
    (lambda: np.zeros((100, 3)), 5, TypeError, "dask.array.from_array"),
    (lambda: da.zeros((100, 3), chunks=((50, 0, 50), 3)), 5, ValueError, "empty row chunks"),
])
def test_bad_input_is_refused_with_the_fix(make, k, error, match):
    with pytest.raises(error, match=match):
        knn_graph(make(), k)


# ---------------------------------------------------------------- the LapTAO fit's cluster path
def test_a_cluster_fit_of_a_dask_array_builds_its_graph_on_the_workers(threaded_client, monkeypatch):
    import taodist.laptao._estimators as estimators
    from taodist import LapTAOClassifier

    calls = []
    monkeypatch.setattr(estimators, "knn_graph", lambda *a, **kw: calls.append(kw) or knn_graph(*a, **kw))
    X = _blobs(600, 4, seed=8).astype(np.float64)
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    y_semi = np.where(np.random.default_rng(0).uniform(size=600) < 0.1, y, -1)
    kw = dict(max_depth=2, n_outer=3, random_state=0)
    # row blocks of at most EXACT_BLOCK_MAX rows: the workers' graph is exact, as the in-process one
    # is below 5,000 rows, so both fits see the same neighbours (distances differ by rounding only)
    workers = LapTAOClassifier(**kw).fit(da.from_array(X, chunks=(200, 4)), y_semi, client=threaded_client)
    assert len(calls) == 1 and calls[0]["random_state"] == 0
    local = LapTAOClassifier(**kw).fit(X, y_semi)
    assert np.mean(workers.predict(X) == local.predict(X)) >= 0.98
    LapTAOClassifier(**kw).fit(X, y_semi, client=threaded_client)  # NumPy rows: the graph is built here
    assert len(calls) == 1


def test_dask_weighs_an_index_by_its_arrays():
    from dask.sizeof import sizeof

    X = _blobs(1000, 8)
    assert sizeof(BlockIndex(X, 0, 10, seed=0)) >= X.nbytes + 12 * 1000 * 11
