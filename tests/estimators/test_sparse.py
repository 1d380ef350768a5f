"""scipy.sparse input end to end: the same model as dense input, and X never densified."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning

from taodist import LapTAOClassifier, TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor
from taodist.solvers.l1_logistic import solve_l1_logistic_level
from taodist.tao.node_solvers import axis_split_losses, solve_axis_exact
from taodist.testing import make_oblique_classification

FORMATS = {"csr": sp.csr_matrix, "csc": sp.csc_matrix, "csr_array": sp.csr_array}


def sparse_data(n_samples=300, n_features=12, density=0.5, random_state=0):
    """Oblique two-class data with about ``1 - density`` of the entries zero."""
    X, y = make_oblique_classification(n_samples, n_features, random_state=random_state)
    rng = np.random.default_rng(random_state)
    return X * (rng.uniform(size=X.shape) < density), y


def fit_quietly(est, X, y, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return est.fit(X, y, **kw)


def assert_same_tree(a, b, atol=1e-9):
    """Same structure, same routing parameters and leaves up to rounding."""
    for name in ("children_left", "children_right", "kind", "feature"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_allclose(a.weights.toarray(), b.weights.toarray(), atol=atol, rtol=0)
    np.testing.assert_allclose(a.bias, b.bias, atol=atol, rtol=0)
    np.testing.assert_allclose(a.threshold, b.threshold, atol=atol, rtol=0)
    np.testing.assert_allclose(a.value, b.value, atol=atol, rtol=0)
    if a.leaf_coef is not None:
        np.testing.assert_allclose(a.leaf_coef.toarray(), b.leaf_coef.toarray(), atol=atol, rtol=0)


# The node solvers and leaves whose sparse fit is the dense fit. SAGA (the "saga" node solver,
# softmax leaves) is not among them: scikit-learn's SAGA takes other steps on sparse input.
CLASSIFIERS = [
    dict(solver="fista"),
    dict(solver="liblinear"),
    dict(node_type="axis"),
    dict(solver="fista", init="cart"),
]
REGRESSORS = [
    dict(solver="liblinear"),
    dict(solver="fista", leaf_type="linear"),
    dict(node_type="axis"),
    dict(node_type="axis", leaf_type="linear"),
]


@pytest.mark.parametrize("fmt", ["csr", "csc"])
@pytest.mark.parametrize("params", CLASSIFIERS, ids=str)
def test_classifier_on_sparse_input_is_the_dense_model(params, fmt):
    X, y = sparse_data()
    kw = dict(max_depth=3, max_iter=4, random_state=0, n_jobs=1, **params)
    dense = fit_quietly(TAOClassifier(**kw), X, y)
    sparse = fit_quietly(TAOClassifier(**kw), FORMATS[fmt](X), y)
    # FISTA reads float32 care points: margins summed over the stored entries round differently
    # (~1e-7). Like any change of summation order in float32, that can, rarely, flip a later accept
    # test and lead to another local optimum (1 of 6 seeds tried, at the 3rd TAO iteration): these
    # data do not. liblinear and the axis solver read float64 and agree to the last bits.
    atol = 1e-5 if kw.get("solver") == "fista" and kw.get("node_type") != "axis" else 1e-9
    assert_same_tree(dense.tree_, sparse.tree_, atol=atol)
    np.testing.assert_allclose(sparse.history_, dense.history_, rtol=1e-6)
    np.testing.assert_array_equal(sparse.predict(FORMATS[fmt](X)), dense.predict(X))


@pytest.mark.parametrize("params", REGRESSORS, ids=str)
def test_regressor_on_sparse_input_is_the_dense_model(params):
    X, y = sparse_data(random_state=1)
    target = X[:, 0] - 2 * X[:, 1] + y
    kw = dict(max_depth=3, max_iter=4, random_state=0, n_jobs=1, **params)
    dense = fit_quietly(TAORegressor(**kw), X, target)
    sparse = fit_quietly(TAORegressor(**kw), sp.csr_matrix(X), target)
    # FISTA's float32 care points, as for the classifier: its hyperplanes agree to rounding of that order (the
    # columns' penalty factors scale some weights up by up to 8)
    atol = 1e-4 if kw.get("solver") == "fista" and kw.get("node_type") != "axis" else 1e-7
    assert_same_tree(dense.tree_, sparse.tree_, atol=atol)
    np.testing.assert_allclose(sparse.predict(sp.csr_matrix(X)), dense.predict(X), atol=1e-9)


@pytest.mark.parametrize("params", [dict(solver="saga"), dict(leaf_type="linear")], ids=str)
def test_saga_fits_on_sparse_input_are_format_independent_and_as_good(params):
    # scikit-learn's SAGA damps the intercept and updates lazily on sparse rows, so these
    # fits are not the dense ones; they must not depend on the sparse format, nor be worse
    X, y = sparse_data(random_state=2)
    kw = dict(max_depth=3, max_iter=4, random_state=0, n_jobs=1, **params)
    csr = fit_quietly(TAOClassifier(**kw), sp.csr_matrix(X), y)
    csc = fit_quietly(TAOClassifier(**kw), sp.csc_matrix(X), y)
    assert_same_tree(csr.tree_, csc.tree_, atol=0)
    dense = fit_quietly(TAOClassifier(**kw), X, y)
    assert np.all(np.diff(csr.history_) <= 1e-12)
    assert csr.score(X, y) >= dense.score(X, y) - 0.05


def test_predict_apply_and_decision_path_on_sparse_rows_equal_dense():
    X, y = sparse_data(n_features=40, density=0.2)
    for est in (fit_quietly(TAOClassifier(max_depth=4, random_state=0, n_jobs=1, leaf_type="linear"), X, y),
                fit_quietly(TAOClassifier(max_depth=3, node_type="axis", random_state=0, n_jobs=1), X, y)):
        for fmt in FORMATS.values():
            Xs = fmt(X)
            np.testing.assert_array_equal(est.apply(Xs), est.apply(X))
            np.testing.assert_allclose(est.predict_proba(Xs), est.predict_proba(X), atol=1e-12)
            np.testing.assert_array_equal(est.predict(Xs), est.predict(X))
            assert (est.decision_path(Xs) != est.decision_path(X)).nnz == 0
        np.testing.assert_array_equal(est.apply(sp.csr_matrix(X, dtype=np.float32)), est.apply(X.astype(np.float32)))


def with_bad_index(A, bad):
    """``A`` (CSR) with its second stored column index replaced by ``bad``: scipy builds it without complaint."""
    indices = A.indices.copy()
    indices[1] = bad
    return sp.csr_matrix((A.data, indices, A.indptr), shape=A.shape)


@pytest.mark.parametrize("bad", [10**6, 20, -5], ids=["far-too-large", "one-past-the-end", "negative"])
def test_malformed_sparse_rows_are_refused_with_a_clear_error_not_a_crash(bad):
    # the compiled kernels index per-thread buffers with the column indices unchecked: apply() on
    # an index of 10**6 crashed the interpreter before the indices were checked at the boundary
    X, y = sparse_data(n_features=20, density=0.3)
    Xbad = with_bad_index(sp.csr_matrix(X), bad)
    softmax = fit_quietly(TAOClassifier(max_depth=2, leaf_type="linear", max_iter=2, random_state=0, n_jobs=1), X, y)
    axis = fit_quietly(TAOClassifier(max_depth=2, node_type="axis", max_iter=2, random_state=0, n_jobs=1), X, y)
    message = f"column index {bad}, outside 0..19"
    for call in (softmax.predict, softmax.apply, softmax.predict_proba, softmax.decision_path, axis.predict,
                 lambda X: softmax.predict_top(X, 2)):
        with pytest.raises(ValueError, match=message):
            call(Xbad)
    with pytest.raises(ValueError, match=message):
        TAOClassifier(max_depth=2, max_iter=1, n_jobs=1).fit(Xbad, y)
    # CSC: a bad row index, refused before scipy's conversion to CSR (which trusted it)
    Xcsc = sp.csc_matrix(X)
    bad_row = X.shape[0] + 7
    Xcsc = sp.csc_matrix((Xcsc.data, np.where(np.arange(Xcsc.nnz) == 1, bad_row, Xcsc.indices), Xcsc.indptr),
                         shape=Xcsc.shape)
    for call in (softmax.predict, softmax.apply, axis.predict, lambda X: TAOClassifier(max_iter=1).fit(X, y)):
        with pytest.raises(ValueError, match=f"row index {bad_row}, outside 0..{X.shape[0] - 1}"):
            call(Xcsc)


def reversed_rows(A):
    """The same CSR matrix with each row's entries stored in reverse (unsorted) order."""
    rev = np.concatenate([np.arange(a, b)[::-1] for a, b in zip(A.indptr[:-1], A.indptr[1:])])
    out = sp.csr_matrix((A.data[rev], A.indices[rev], A.indptr), shape=A.shape)
    out.has_sorted_indices = False
    return out


def test_route_of_unsorted_csr_indices_equals_dense():
    # the CSR walk merges sorted index lists: unsorted rows of X or of the tree's weights
    # (a scipy product may leave them so) must be sorted first, not misrouted
    X, y = sparse_data(n_features=20, density=0.3)
    est = fit_quietly(TAOClassifier(max_depth=3, C=0.3, random_state=0, n_jobs=1), X, y)
    assert np.diff(est.tree_.weights.indptr).max() > 1  # nodes with several weights to merge
    expected = est.tree_.apply_matrix(X)
    np.testing.assert_array_equal(est.apply(reversed_rows(sp.csr_matrix(X))), expected)
    est.tree_.weights = reversed_rows(est.tree_.weights)
    np.testing.assert_array_equal(est.apply(sp.csr_matrix(X)), expected)


@pytest.mark.parametrize("dense_bytes", [0, 1 << 30])
def test_csr_walk_gives_the_reference_leaves_with_and_without_dense_weight_rows(monkeypatch, dense_bytes):
    # the CSR walk reads a node through a dense copy of its weights or through the row's scatter
    # buffer, by a cost rule: both must route as the matrix form does
    import taodist.model.route as routing

    X, y = sparse_data(n_samples=700, n_features=60, density=0.1, random_state=8)
    est = fit_quietly(TAOClassifier(max_depth=4, C=10.0, random_state=0, n_jobs=1), X, y)
    nnz = np.diff(est.tree_.weights.indptr)
    assert nnz.max() > 2 * sp.csr_matrix(X).getnnz(axis=1).mean()  # some nodes qualify for a dense row
    monkeypatch.setattr(routing, "_CSR_DENSE_BYTES", dense_bytes)
    np.testing.assert_array_equal(routing.route(est.tree_, sp.csr_matrix(X)), est.tree_.apply_matrix(X))


def test_route_of_csr_rows_with_duplicate_entries_adds_them_up_across_row_blocks():
    # a non-canonical CSR row may store one column twice: the entries add up (scipy's meaning),
    # in every block of rows the compiled walk hands a thread
    from taodist.model.route import CSR_BLOCK_ROWS, route

    X, y = sparse_data(n_samples=2 * CSR_BLOCK_ROWS + 37, n_features=20, density=0.3)
    est = fit_quietly(TAOClassifier(max_depth=3, C=0.3, random_state=0, n_jobs=1), X, y)
    A = sp.csr_matrix(X)
    indptr = 2 * A.indptr
    data = np.repeat(A.data / 2, 2)
    indices = np.repeat(A.indices, 2)
    doubled = sp.csr_matrix((data, indices, indptr), shape=A.shape)
    assert not doubled.has_canonical_format  # every entry stored as two halves
    np.testing.assert_array_equal(route(est.tree_, doubled), est.tree_.apply_matrix(X))


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("row_parallel", [False, True])
def test_fista_csr_kernels_match_the_dense_kernels(dtype, row_parallel):
    X, y = sparse_data(n_samples=1500, n_features=30, density=0.3, random_state=3)
    rng = np.random.default_rng(0)
    bounds = [0, 100, 700, len(y)]
    args = (bounds, y.astype(bool), rng.uniform(0.5, 2, len(y)), [0.1, 0.05, 0.02], rng.normal(size=(3, 30)) * 0.1,
            [0.1, 0.0, -0.2])
    kw = dict(max_iter=60, n_threads=2, row_parallel=row_parallel)
    W, b, info = solve_l1_logistic_level(X.astype(dtype), *args, **kw)
    Ws, bs, info_s = solve_l1_logistic_level(sp.csr_matrix(X, dtype=dtype), *args, **kw)
    # the same iterations; float32 margins summed over stored entries only round differently
    tol = 1e-9 if dtype == np.float64 else 1e-5
    np.testing.assert_allclose(Ws, W, atol=tol, rtol=tol)
    np.testing.assert_allclose(bs, b, atol=tol, rtol=tol)
    np.testing.assert_array_equal(info_s["n_iter"], info["n_iter"])
    np.testing.assert_allclose(info_s["objective"], info["objective"], rtol=tol)
    assert np.all(info_s["objective"] <= info_s["objective0"])


def test_sparse_axis_split_is_the_dense_split():
    # The dense enumeration adds a column's zeros one by one, the sparse one as a single entry,
    # so two splits of equal loss (a tie) may be ordered differently by rounding: then the sparse
    # split must still be optimal. Every other problem must give the very same split.
    rng = np.random.default_rng(0)
    ties = 0
    for trial in range(200):
        n, D = rng.integers(2, 40), rng.integers(1, 6)
        X = rng.uniform(-1, 1, (n, D)) * (rng.uniform(size=(n, D)) < 0.5)
        if trial % 3 == 0:
            X = np.round(X, 1)  # runs of equal values
        target, weight = rng.uniform(size=n) < 0.5, rng.uniform(0.1, 2, n)
        dense = solve_axis_exact(X, target, weight)
        sparse = solve_axis_exact(sp.csr_matrix(X), target, weight)
        if dense != sparse:
            ties += 1
            losses, thresholds = axis_split_losses(X, target, weight)
            f, t = sparse
            sparse_loss = losses[np.flatnonzero(thresholds[:, f] == t)[0], f]
            np.testing.assert_allclose(sparse_loss, losses.min(), rtol=1e-12, err_msg=str(trial))
    assert ties <= 6  # 3 of these 200 problems hold such ties


@pytest.fixture
def no_densifying(monkeypatch):
    """Make ``toarray``/``todense`` raise on anything as wide as X with more rows than an init sample."""
    state = {"n_features": None}

    def guard(original):
        def wrapped(self, *args, **kwargs):
            if state["n_features"] is not None and self.shape[1] == state["n_features"] and self.shape[0] > 64:
                raise AssertionError(f"a {self.shape} sparse matrix was densified")
            return original(self, *args, **kwargs)
        return wrapped

    for cls in (sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array, sp.csc_array, sp.coo_array):
        monkeypatch.setattr(cls, "toarray", guard(cls.toarray))
        monkeypatch.setattr(cls, "todense", guard(cls.todense))
    return state


def test_the_guard_catches_densifying(no_densifying):
    no_densifying["n_features"] = 30
    with pytest.raises(AssertionError, match="densified"):
        sp.csr_matrix(np.ones((100, 30))).toarray()


@pytest.mark.parametrize("Est,params", [
    (TAOClassifier, dict()),
    (TAOClassifier, dict(solver="saga", leaf_type="linear")),
    (TAOClassifier, dict(node_type="axis", init="cart")),
    (TAORegressor, dict(leaf_type="linear")),
    (TAORegressor, dict(node_type="axis", leaf_type="linear")),
], ids=str)
def test_fit_and_predict_never_densify_X(no_densifying, Est, params):
    X, y = sparse_data(n_samples=400, n_features=30, density=0.2)
    Xs = sp.csr_matrix(X)
    no_densifying["n_features"] = X.shape[1]
    est = fit_quietly(Est(max_depth=3, max_iter=3, random_state=0, n_jobs=2, **params), Xs, y)
    est.predict(Xs)
    est.apply(sp.csc_matrix(X))
    if hasattr(est, "predict_proba"):
        est.predict_proba(Xs)


def test_forests_on_sparse_input_are_the_dense_forests():
    X, y = sparse_data(random_state=4)
    kw = dict(n_estimators=2, max_depth=2, max_iter=3, random_state=0, n_jobs=1)
    dense = fit_quietly(TAOForestClassifier(leaf_type="constant", **kw), X, y)
    sparse = fit_quietly(TAOForestClassifier(leaf_type="constant", **kw), sp.csr_matrix(X), y)
    for a, b in zip(dense.estimators_, sparse.estimators_):
        assert_same_tree(a.tree_, b.tree_, atol=1e-5)  # FISTA: float32 margins (see above)
    np.testing.assert_array_equal(sparse.predict_proba(sp.csr_matrix(X)), dense.predict_proba(X))
    target = X[:, 0] + y
    dense = fit_quietly(TAOForestRegressor(**kw), X, target)
    sparse = fit_quietly(TAOForestRegressor(**kw), sp.csr_matrix(X), target)
    np.testing.assert_allclose(sparse.predict(sp.csr_matrix(X)), dense.predict(X), atol=1e-9)


def test_laptao_on_sparse_input_is_the_dense_model():
    X, y = sparse_data(n_samples=200, n_features=8, random_state=5)
    ys = np.full_like(y, -1)
    ys[:20] = y[:20]
    kw = dict(max_depth=2, n_outer=3, random_state=0)
    dense = LapTAOClassifier(**kw).fit(X, ys)
    sparse = LapTAOClassifier(**kw).fit(sp.csr_matrix(X), ys)
    assert_same_tree(dense.tree_, sparse.tree_, atol=1e-7)
    np.testing.assert_array_equal(sparse.predict(sp.csr_matrix(X)), dense.predict(X))


def test_dask_array_of_sparse_chunks_gives_the_in_process_model(two_worker_client):
    import dask.array as da

    X, y = sparse_data(n_samples=600, random_state=6)
    dX = da.from_array(sp.csr_matrix(X), chunks=(200, -1), asarray=False)
    kw = dict(max_depth=3, max_iter=4, random_state=0)
    local = fit_quietly(TAOClassifier(n_jobs=1, **kw), sp.csr_matrix(X), y)
    distributed = fit_quietly(TAOClassifier(**kw), dX, y, client=two_worker_client)
    assert_same_tree(local.tree_, distributed.tree_, atol=0)  # TAO does not depend on the chunking
    with two_worker_client.as_current():
        pred = distributed.predict(dX)
        assert isinstance(pred, da.Array)  # still lazy
        np.testing.assert_array_equal(pred.compute(), local.predict(X))


def test_a_malformed_sparse_chunk_on_a_cluster_is_refused_with_the_same_error(two_worker_client):
    import dask
    import dask.array as da

    X, y = sparse_data(n_samples=600, n_features=12, random_state=6)
    blocks = [sp.csr_matrix(X[i:i + 200]) for i in range(0, 600, 200)]
    blocks[1] = with_bad_index(blocks[1], 10**6)  # slicing would drop the entry: the chunk is made malformed
    dX = da.concatenate([da.from_delayed(dask.delayed(lambda b: b)(b), shape=b.shape, dtype=b.dtype,
                                         meta=sp.csr_matrix((0, 12))) for b in blocks])
    with pytest.raises(ValueError, match="column index 1000000, outside 0..11"):
        TAOClassifier(max_depth=2, max_iter=1, random_state=0).fit(dX, y, client=two_worker_client)
    est = fit_quietly(TAOClassifier(max_depth=2, leaf_type="linear", max_iter=1, random_state=0, n_jobs=1), X, y)
    with two_worker_client.as_current(), pytest.raises(ValueError, match="column index 1000000, outside 0..11"):
        est.predict(dX).compute()


# ------------------------------------------------------------ sparse Zarr stores
@pytest.mark.parametrize("kind", ["csr", "csc", "csr_array", "dask"])
def test_sparse_zarr_round_trip_keeps_every_entry_and_never_densifies(tmp_path, no_densifying, kind):
    import dask.array as da

    from taodist.io import open_zarr, to_zarr

    X = sp.random(1000, 400, density=0.03, format="csr", random_state=1, dtype=np.float64)
    X.data -= 0.5
    no_densifying["n_features"] = X.shape[1]
    source = (da.from_array(X, chunks=(170, -1), asarray=False) if kind == "dask"
              else FORMATS.get(kind, sp.csr_matrix)(X))
    y = np.arange(1000) % 3
    path = to_zarr({"X": source, "y": y}, tmp_path / "data.zarr", rows_per_chunk=300)
    Xz = open_zarr(path, component="X")
    assert Xz.shape == X.shape and Xz.dtype == np.float32 and Xz.chunks[0] == (300, 300, 300, 100)
    assert all(sp.issparse(b.compute()) for b in Xz.to_delayed().ravel())  # every chunk read as CSR
    back = Xz.compute()
    assert sp.issparse(back) and (back != X.astype(np.float32)).nnz == 0
    np.testing.assert_array_equal(open_zarr(path, component="y").compute(), y)


def test_sparse_zarr_default_chunks_hold_about_64_mib_of_entries(tmp_path, monkeypatch):
    import taodist.io.sparse_store as store
    from taodist.io import open_zarr, to_zarr

    monkeypatch.setattr(store, "_CHUNK_BYTES", 8 * 500)  # 500 float32 entries + int32 indices per chunk
    X = sp.random(400, 50, density=0.1, format="csr", random_state=2)
    Xz = open_zarr(to_zarr(X, tmp_path / "x.zarr"))
    nnz = [b.compute().nnz for b in Xz.to_delayed().ravel()]
    assert sum(nnz) == X.nnz and max(nnz) <= 500 + X.getnnz(axis=1).max()
    assert sum(Xz.chunks[0]) == 400


def test_sparse_zarr_refuses_nan_entries_and_leaves_nothing(tmp_path):
    from taodist.io import to_zarr

    X = sp.random(300, 20, density=0.2, format="csr", random_state=3)
    X.data[X.indptr[7]] = np.nan  # the first entry of row 7
    with pytest.raises(ValueError, match=r"NaN or infinity in rows \[7\]"):
        to_zarr({"X": X}, tmp_path / "x.zarr")
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_sparse_store_fails_with_the_path_not_a_crash(tmp_path):
    import zarr

    from taodist.io import open_zarr, to_zarr

    path = to_zarr(sp.random(100, 10, density=0.3, format="csr", random_state=4), tmp_path / "x.zarr")
    indices = zarr.open_group(str(path), mode="r+")["indices"]
    indices[3] = 10**6  # a column past the matrix
    with pytest.raises(ValueError, match="damaged sparse matrix"):
        open_zarr(path).compute()


@pytest.mark.parametrize("out_of_core", [False, True])
def test_fit_from_a_sparse_zarr_store_on_a_cluster_is_the_in_process_model(tmp_path, two_worker_client, out_of_core):
    import dask

    from taodist.io import open_zarr, to_zarr

    X, y = sparse_data(n_samples=600, random_state=7)
    Xs = sp.csr_matrix(X.astype(np.float32))
    path = to_zarr({"X": Xs, "y": y}, tmp_path / "train.zarr", rows_per_chunk=250)
    kw = dict(max_depth=3, max_iter=4, random_state=0)
    local = fit_quietly(TAOClassifier(n_jobs=1, **kw), Xs, y)
    with dask.config.set({"taodist.out-of-core": out_of_core}):
        dist = fit_quietly(TAOClassifier(**kw), open_zarr(path, component="X"), open_zarr(path, component="y"),
                           client=two_worker_client)
    assert_same_tree(local.tree_, dist.tree_, atol=0)
    np.testing.assert_array_equal(dist.predict(Xs), local.predict(Xs))


def test_convert_writes_a_scipy_sparse_npz_as_a_sparse_store(tmp_path):
    from click.testing import CliRunner

    from taodist.cli import main
    from taodist.io import open_zarr

    X = sp.random(200, 5000, density=0.002, format="csr", random_state=5, dtype=np.float32)
    sp.save_npz(tmp_path / "x.npz", X)
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "x.npz"), str(tmp_path / "x.zarr")])
    assert result.exit_code == 0, result.output
    back = open_zarr(tmp_path / "x.zarr", component="X").compute()
    assert sp.issparse(back) and (back != X).nnz == 0
