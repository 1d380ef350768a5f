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
