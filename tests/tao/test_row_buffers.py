import time

import numpy as np
import pytest

from taodist import TAOClassifier
from taodist.tao.initial_trees import random_tree
from taodist.tao.optimizer import tao_optimize
from taodist.tao.row_buffers import MIN_KEPT_BYTES, ROW_BUFFERS, RowBuffers
from taodist.testing import make_oblique_classification

BIG = MIN_KEPT_BYTES // 4 + 1  # float32 values in an array the pool keeps


def test_a_returned_array_is_lent_again_and_arrays_lent_at_once_never_overlap():
    pool = RowBuffers()
    with pool.rows(BIG, 1, np.float32) as a:
        a[:] = 1.0
        with pool.rows(BIG, 1, np.float32) as b:
            assert not np.shares_memory(a, b)
            b[:] = 2.0
        assert (a == 1.0).all()  # the other loan did not write here
    with pool.rows(BIG // 4, 2, np.float64) as c:  # any dtype and shape that fits the kept bytes
        assert c.shape == (BIG // 4, 2) and c.dtype == np.float64 and c.flags.c_contiguous
        assert np.shares_memory(c, a) or np.shares_memory(c, b)
    assert pool.kept_bytes() >= 2 * BIG * 4
    pool.clear()
    assert pool.kept_bytes() == 0


def test_small_arrays_are_not_kept_and_the_pool_keeps_its_largest_few():
    pool = RowBuffers(max_kept=2)
    with pool.rows(10, 3, np.float64) as small:
        assert small.shape == (10, 3)
    assert pool.kept_bytes() == 0
    sizes = [BIG, 2 * BIG, 3 * BIG]
    with pool.rows(sizes[0], 1, np.float32), pool.rows(sizes[1], 1, np.float32), pool.rows(sizes[2], 1, np.float32):
        pass
    assert pool.kept_bytes() == 4 * (sizes[1] + sizes[2])


def test_an_array_comes_back_when_the_block_raises():
    pool = RowBuffers()
    with pytest.raises(ValueError, match="on purpose"):
        with pool.rows(BIG, 1, np.float32):
            raise ValueError("on purpose")
    assert pool.kept_bytes() >= BIG * 4


def test_a_fit_keeps_care_point_arrays_between_levels_and_lets_them_go_at_its_end():
    """The node groups borrow their care-point arrays from the process's pool, which holds them
    from level to level (fresh memory each level costs its zeroing) and is empty after the fit."""
    X, y = make_oblique_classification(n_samples=6000, n_features=200, random_state=0)
    ROW_BUFFERS.clear()
    kept = []
    tree = random_tree(lambda i: X[i], *X.shape, 3, 2, "oblique", task="classification", leaf_type="constant",
                       rng=np.random.RandomState(0))
    tao_optimize(tree, X, y, np.ones(len(y)), alpha=0.01, max_iter=3, tol=0.0, node_solver="fista", n_threads=2,
                 callback=lambda it, obj: kept.append(ROW_BUFFERS.kept_bytes()))
    assert max(kept) > 0
    assert ROW_BUFFERS.kept_bytes() == 0
    TAOClassifier(max_depth=3, max_iter=2, random_state=0).fit(X, y)
    assert ROW_BUFFERS.kept_bytes() == 0


def _kept_bytes():
    return ROW_BUFFERS.kept_bytes()


def _borrow_one():
    with ROW_BUFFERS.rows(BIG, 1, np.float32):
        pass
    return ROW_BUFFERS.kept_bytes()


def test_a_cluster_fit_lets_the_workers_kept_arrays_go(two_worker_client):
    import dask

    X, y = make_oblique_classification(n_samples=6000, n_features=200, random_state=0)
    for executor in ("actors", "tasks"):
        assert all(two_worker_client.run(_borrow_one).values())  # every worker holds an array
        with dask.config.set({"taodist.executor": executor}):
            TAOClassifier(max_depth=3, max_iter=2, random_state=0).fit(X, y, client=two_worker_client)
        deadline = time.monotonic() + 10  # the release is sent, not waited for
        while any(two_worker_client.run(_kept_bytes).values()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(two_worker_client.run(_kept_bytes).values())
