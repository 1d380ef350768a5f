"""What the actor executor's driver and hosts send each other: packed values, and tree snapshots as the rows that changed."""

import pickle
import threading

import numpy as np
import pytest
import scipy.sparse as sp

from taodist.dask._actor_executor import PATCH_STEPS, ActorExecutor
from taodist.dask._messages import PACK_INBAND_BYTES, Packed
from taodist.dask._tree_patch import RoutingPatch
from taodist.tao.executor import LocalExecutor
from taodist.tao.initial_trees import random_tree
from taodist.tao.optimizer import tao_optimize
from taodist.tao.routing import Routing
from taodist.testing import assert_tree_equal, make_oblique_classification


class _Recording(LocalExecutor):
    """A local executor that keeps every tree snapshot its chunk passes are given."""

    def __init__(self):
        super().__init__(n_threads=1)
        self.routings = []

    def _keep(self, args):
        for a in args:
            if isinstance(a, Routing) and not any(a is r for r in self.routings):
                self.routings.append(a)

    def map_chunks(self, fn, chunks, *args, **kwargs):
        self._keep(args)
        return super().map_chunks(fn, chunks, *args, **kwargs)

    def update_chunks(self, fn, chunks, *args):
        self._keep(args)
        return super().update_chunks(fn, chunks, *args)


def _changed_rows(old, new):
    """Rows where two sparse matrices differ, by brute force (dense, bit for bit)."""
    a, b = old.toarray(), new.toarray()
    return set(np.flatnonzero((a.view(np.uint64) != b.view(np.uint64)).any(axis=1)).tolist())


def _rows_of(nodes, n_rows, n_nodes):
    k = n_rows // n_nodes
    return {int(n) * k + j for n in nodes for j in range(k)}


def _assert_same_snapshot(got, want):
    assert_tree_equal(got.tree, want.tree)
    for name in ("weights", "leaf_coef"):
        g, w = getattr(got.tree, name), getattr(want.tree, name)
        if w is None:
            assert g is None
            continue
        for part in ("data", "indices", "indptr"):  # bit for bit, dtypes included
            assert getattr(g, part).dtype == getattr(w, part).dtype
            np.testing.assert_array_equal(getattr(g, part), getattr(w, part))
    np.testing.assert_array_equal(got.internal, want.internal)
    np.testing.assert_array_equal(got.column_of, want.column_of)


@pytest.mark.parametrize("node_type, solver, leaf_type", [
    ("oblique", "fista", "constant"),
    ("oblique", "fista", "linear"),
    ("axis", "axis", "linear"),
])
def test_every_snapshot_of_a_fit_names_every_node_whose_rows_changed_and_its_patch_rebuilds_it(node_type, solver,
                                                                                               leaf_type):
    X, y = make_oblique_classification(n_samples=400, n_features=6, random_state=2)
    y = y + 2 * (X[:, 0] > 0.2)
    tree = random_tree(lambda i: X[i], *X.shape, 3, 4, node_type, task="classification", leaf_type=leaf_type,
                       rng=np.random.RandomState(0))
    ex = _Recording()
    tao_optimize(tree, X, y, np.ones(len(y)), alpha=0.05, max_iter=3, tol=0.0, node_solver=solver, executor=ex)
    linked = 0
    for routing in ex.routings:
        link = routing.since()
        if link is None:
            continue
        earlier, nodes = link
        linked += 1
        n_nodes = routing.tree.n_nodes
        for name in ("weights", "leaf_coef"):
            old, new = getattr(earlier.tree, name), getattr(routing.tree, name)
            if new is not None:
                assert _changed_rows(old, new) <= _rows_of(nodes, new.shape[0], n_nodes)
        # as a worker holding the earlier snapshot (a pickled copy) rebuilds it from the patch
        held = pickle.loads(pickle.dumps(earlier))
        patch = pickle.loads(pickle.dumps(RoutingPatch.between(7, earlier, routing, nodes)))
        _assert_same_snapshot(patch.apply(held), routing)
    # every snapshot but the driver's first is linked to the one before it
    assert linked == len(ex.routings) - 1 and linked >= 3


def _two_snapshots():
    X, y = make_oblique_classification(n_samples=200, n_features=5, random_state=0)
    tree = random_tree(lambda i: X[i], *X.shape, 2, 2, "oblique", task="classification", leaf_type="constant",
                       rng=np.random.RandomState(0))
    before = Routing.of(tree.copy())
    changed = tree.copy()
    changed.set_decision([1, 2], np.ones((2, 5)), [0.5, -0.5])
    return before, changed


def test_a_patch_that_leaves_out_a_changed_node_is_refused_by_the_worker():
    before, changed = _two_snapshots()
    after = Routing.of(changed, since=before, changed=[1])  # node 2 changed too
    patch = RoutingPatch.between(0, before, after, after.since()[1])
    with pytest.raises(RuntimeError, match="did not rebuild the tree's weights"):
        patch.apply(pickle.loads(pickle.dumps(before)))
    _assert_same_snapshot(RoutingPatch.between(0, before, after, [1, 2]).apply(before), after)


def test_a_patch_carries_only_the_changed_rows():
    before, changed = _two_snapshots()
    after = Routing.of(changed, since=before, changed=[1, 2])
    patch = RoutingPatch.between(0, before, after, [1, 2])
    rows, block, _, _ = patch.row_patches["weights"]
    np.testing.assert_array_equal(rows, [1, 2])
    assert sp.issparse(block) and block.shape == (2, 5)
    assert "weights" not in patch.tree_fields


def test_a_snapshot_travels_without_its_history():
    before, changed = _two_snapshots()
    after = Routing.of(changed, since=before, changed=[1, 2])
    assert after.since()[0] is before
    copy = pickle.loads(pickle.dumps(after))
    assert copy.since() is None and "_since" not in vars(copy)
    _assert_same_snapshot(copy, after)


def test_the_actor_executor_sends_a_host_a_patch_on_a_snapshot_it_holds_and_the_whole_snapshot_otherwise():
    before, changed = _two_snapshots()
    chain = [before]
    for step in range(PATCH_STEPS + 1):
        tree = chain[-1].tree.copy()
        tree.bias[0] += 1.0
        chain.append(Routing.of(tree, since=chain[-1], changed=[0]))
    sent = ActorExecutor._routing_for({3: before}, chain[1])
    assert isinstance(sent, RoutingPatch) and sent.base == 3
    sent = ActorExecutor._routing_for({3: before, 4: chain[2]}, chain[3])  # the nearest snapshot held
    assert isinstance(sent, RoutingPatch) and sent.base == 4
    assert ActorExecutor._routing_for({}, chain[1]) is chain[1]
    assert ActorExecutor._routing_for({3: before}, chain[-1]) is chain[-1]  # too many snapshots back
    assert ActorExecutor._routing_for({3: chain[1]}, before) is before  # an older snapshot is sent whole


def test_a_packed_value_keeps_small_arrays_in_its_pickle_and_sends_large_ones_as_frames():
    from distributed.protocol import dumps, loads, to_serialize

    small, large = np.arange(10.0), np.arange(PACK_INBAND_BYTES // 8 + 1, dtype=np.float64)
    value = {"jobs": [small] * 50, "rows": large, "fn": lambda x: x + 1}  # (a function defined in place)
    frames = dumps({"x": to_serialize(Packed(value))})
    assert any(memoryview(f).nbytes == large.nbytes for f in frames)
    assert len(frames) < 10  # not a frame per array
    got = loads(frames, deserialize=True)["x"].value
    np.testing.assert_array_equal(got["rows"], large)
    np.testing.assert_array_equal(got["jobs"][49], small)
    assert got["fn"](1) == 2


@pytest.mark.parametrize("protocol", [4, 5])
def test_a_packed_value_with_large_arrays_crosses_a_comm_that_pickles_with_protocol_4(protocol):
    # Dask's scheduler speaks pickle protocol 4: an actor call it proxies (the client not reaching the
    # workers directly) failed to serialise as soon as a round carried an array of 64 KiB or more
    from distributed.protocol import pickle as dask_pickle

    large = np.arange(PACK_INBAND_BYTES // 8 + 1, dtype=np.float64)
    buffers = []
    header = dask_pickle.dumps({"x": Packed({"rows": large, "n": 3})}, protocol=protocol,
                               buffer_callback=buffers.append)
    got = dask_pickle.loads(header, buffers=buffers)["x"].value
    np.testing.assert_array_equal(got["rows"], large)
    assert got["n"] == 3
    got["rows"][0] = -1.0  # writable, as the arrays of a round's results are used
    assert (len(buffers) == 1) == (protocol == 5)  # out of band only where the protocol can


def test_a_value_that_cannot_be_pickled_fails_when_packed_not_in_dask_s_comm():
    with pytest.raises(TypeError, match="lock"):
        Packed({"state": threading.Lock()})
