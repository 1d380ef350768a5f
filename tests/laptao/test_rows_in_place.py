"""A cluster fit of a Dask array never gathers X: tree steps, predictions and post-processing on X's blocks.

Compared with the fit that gathers X into this process and scatters it back
(what a cluster fit of a Dask array did before, still reachable by
declining :meth:`_BaseLapTAO._rows_in_place`): the graph, the label steps
and the tree steps' chunk operations are the same, so the model must be
the same bit for bit.
"""

import tracemalloc

import dask
import dask.array as da
import numpy as np
import pytest
import zarr

import taodist.estimators.execution as execution
import taodist.laptao._estimators as estimators
from taodist import LapTAOClassifier, LapTAORegressor


def _problem(n=600, d=4, seed=8):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X[:, 0] + X[:, 1] > 0).astype(int)
    y_semi = np.where(rng.uniform(size=n) < 0.1, y, -1)
    return X, y, y_semi


def _gathered_fit(monkeypatch, estimator, X, y, client):
    """The fit with X gathered here and scattered back to the workers for the tree steps."""
    with monkeypatch.context() as m:
        m.setattr(estimators._BaseLapTAO, "_rows_in_place", lambda self, *args: None)
        return estimator.fit(X, y, client=client)


def _assert_same_tree(a, b):
    for name in ("children_left", "children_right", "value"):
        np.testing.assert_array_equal(getattr(a.tree_, name), getattr(b.tree_, name))
    assert (a.tree_.weights != b.tree_.weights).nnz == 0
    np.testing.assert_array_equal(a.tree_.bias, b.tree_.bias)


@pytest.mark.parametrize("init, exact_leaves", [("random", True), ("graph_labels", True), ("random", False)])
def test_in_place_classifier_equals_the_gathering_fit(two_worker_client, monkeypatch, init, exact_leaves):
    X, _, y_semi = _problem()
    Xd = da.from_array(X, chunks=((150, 250, 200), 4))
    kw = dict(max_depth=2, n_outer=3, random_state=0, init=init, exact_leaves=exact_leaves)
    in_place = LapTAOClassifier(**kw).fit(Xd, y_semi, client=two_worker_client)
    gathered = _gathered_fit(monkeypatch, LapTAOClassifier(**kw), Xd, y_semi, two_worker_client)
    _assert_same_tree(in_place, gathered)
    np.testing.assert_array_equal(in_place._raw_predict(X), gathered._raw_predict(X))
    assert in_place.n_features_in_ == 4
    assert [h["z_minus_t"] for h in in_place.history_] == [h["z_minus_t"] for h in gathered.history_]


@pytest.mark.parametrize("init", ["random", "graph_labels"])
def test_in_place_regressor_from_zarr_streamed_equals_the_gathering_fit(two_worker_client, monkeypatch, tmp_path,
                                                                       init):
    # float32 rows in a Zarr store, read on the workers; the tree steps forced out of core (rows re-read
    # in every task): the same chunks' bits (float32 -> float64, then scaled) as the gathered float64 rows
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 5)).astype(np.float32)
    y = np.where(rng.uniform(size=500) < 0.15, X[:, 0] - 2 * X[:, 2], np.nan)
    da.from_array(X, chunks=(120, 5)).to_zarr(str(tmp_path / "X.zarr"))
    Xz = da.from_zarr(str(tmp_path / "X.zarr"))
    kw = dict(max_depth=2, n_outer=3, random_state=1, init=init)
    with dask.config.set({"taodist.out-of-core": True}):
        in_place = LapTAORegressor(**kw).fit(Xz, y, client=two_worker_client)
    gathered = _gathered_fit(monkeypatch, LapTAORegressor(**kw), Xz, y, two_worker_client)
    _assert_same_tree(in_place, gathered)
    np.testing.assert_array_equal(in_place.predict(X), gathered.predict(X))


def test_the_driver_holds_nothing_per_row(two_worker_client, monkeypatch, tmp_path):
    # X only in a Zarr store (float64, 30,000 x 100: 24 MB), K = 4 classes. The driver's traced allocations
    # during the fit stay below X / 4: every per-row quantity (Y, Z, T, multipliers, the CG's vectors and
    # halo rows, the leaves) lives in the label step's row blocks on the workers; the driver holds the
    # labelled mask, the labelled rows' targets, K-vectors and the Dask graphs. Measured 4.7 MB (0.19 X);
    # before, with the CG's vectors and the outer loop's K values per row here, 40 MB (1.7 X)
    rng = np.random.default_rng(5)
    n, d, K, rows_per_chunk = 30_000, 100, 4, 10_000
    path = str(tmp_path / "X.zarr")
    z = zarr.open_array(path, mode="w", shape=(n, d), chunks=(rows_per_chunk, d), dtype="f8")
    y = rng.integers(0, K, size=n)
    for lo in range(0, n, rows_per_chunk):  # written chunk by chunk, as a store too large for memory would be
        block = rng.normal(size=(rows_per_chunk, d))
        block[np.arange(rows_per_chunk), y[lo:lo + rows_per_chunk]] += 4.0
        z[lo:lo + rows_per_chunk] = block
    y_semi = np.where(rng.uniform(size=n) < 0.05, y, -1)
    Xz = da.from_zarr(path)
    x_bytes = n * d * 8

    def refused(*args, **kwargs):
        raise AssertionError("X scattered from the driver")

    monkeypatch.setattr(execution, "distribute_rows", refused)
    tracemalloc.start()
    try:
        model = LapTAOClassifier(max_depth=2, n_outer=2, tao_iter=1, random_state=0).fit(
            Xz, y_semi, client=two_worker_client)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert model.classes_.size == K and model.tree_.n_nodes >= 1
    assert all(h["label_method"] == "distributed-cg" for h in model.history_)
    assert peak < x_bytes / 4, (peak, x_bytes)
