"""A value far outside its column's range (a data entry error, a code such as 99999 for "unknown") is clipped to
the column's fence in the fit and in prediction, so that one such row does not decide a column's l1 penalty and
hyperplanes, as it does not decide a CART split."""

import numpy as np
import pytest
import scipy.sparse as sp

from taodist import TAOClassifier, TAOForestClassifier, TAORegressor, load, save
from taodist.estimators.execution import FENCE_MIN_DISTANCES, clip_columns, outlier_fences
from taodist.testing import assert_tree_equal


def _reference_fences(X, k):
    """Column by column, as the docstring says: median -+ k times the 99th percentile of the non-zero distances."""
    low, high = np.full(X.shape[1], -np.inf), np.full(X.shape[1], np.inf)
    for j in range(X.shape[1]):
        x = X[:, j][~np.isnan(X[:, j])]
        if x.size == 0:
            continue
        median = np.median(x)
        distance = np.abs(x - median)
        distance = distance[distance > 0]
        if distance.size >= FENCE_MIN_DISTANCES:
            q = np.quantile(distance, 0.99)
            low[j], high[j] = median - k * q, median + k * q
    return np.vstack([low, high])


def test_fences_equal_a_column_by_column_reference():
    rng = np.random.default_rng(0)
    X = np.column_stack([rng.normal(size=300), rng.exponential(size=300), rng.integers(0, 2, 300),
                         np.full(300, 4.0), np.r_[np.zeros(297), [3.0, 5.0, 9.0]], rng.normal(2000, 5, 300)])
    X[[3, 40], 0] = [1e6, np.nan]
    X[:, 3][::7] = np.nan  # a constant column with missing values
    np.testing.assert_allclose(outlier_fences(X, 3.0), _reference_fences(X, 3.0), rtol=1e-12)
    np.testing.assert_allclose(outlier_fences(X, 1.5), _reference_fences(X, 1.5), rtol=1e-12)
    bounds = outlier_fences(X, 3.0)
    assert bounds[1, 0] < 20  # the spike is outside its column's fence
    assert np.isinf(bounds[:, 3]).all()  # a constant column has none
    # two values, or one value with a few others: never clipped
    assert np.array_equal(clip_columns(X[:, 2:3], bounds[:, 2:3]), X[:, 2:3])
    assert np.array_equal(clip_columns(X[:, 4:5], bounds[:, 4:5]), X[:, 4:5])
    assert outlier_fences(X, None) is None
    assert outlier_fences(sp.csr_matrix(np.nan_to_num(X)), 3.0) is None  # sparse rows are never clipped


def test_fences_of_many_rows_are_taken_on_rows_at_a_fixed_stride(monkeypatch):
    from taodist.estimators import execution

    monkeypatch.setattr(execution, "FENCE_ROWS", 300)
    X = np.random.default_rng(1).standard_t(2, size=(1050, 3))
    np.testing.assert_allclose(outlier_fences(X, 3.0), _reference_fences(X[::4], 3.0), rtol=1e-12)
    assert np.isfinite(outlier_fences(X, 3.0)).all()


def test_a_column_of_a_few_scattered_values_has_no_fence():
    # a rarely inked pixel: its 99th percentile would be one of its few values, cutting the others
    x = np.zeros(5000)
    x[np.arange(0, 5000, 60)] = np.linspace(1.0, 200.0, 84)
    X = np.column_stack([x, np.random.default_rng(2).normal(size=5000)])
    bounds = outlier_fences(X, 3.0)
    assert np.isinf(bounds[:, 0]).all() and np.isfinite(bounds[:, 1]).all()


def test_clipping_keeps_dtype_and_copies_only_when_something_is_outside():
    X = np.array([[0.0, 1.0], [1.0, 2.0], [2.0, 3.0]], dtype=np.float32)
    bounds = np.array([[-1.0, 0.0], [5.0, 2.5]])
    clipped = clip_columns(X, bounds)
    assert clipped.dtype == np.float32
    np.testing.assert_array_equal(clipped, [[0, 1], [1, 2], [2, 2.5]])
    assert X[2, 1] == 3.0  # the caller's rows untouched
    inside = X[:2]
    assert clip_columns(inside, bounds) is inside
    np.testing.assert_array_equal(clip_columns(np.array([[np.nan, 9.0]]), bounds), [[np.nan, 2.5]])  # NaN stays
    assert clip_columns(X[:0], bounds).shape == (0, 2)
    # sparse rows: stored values clipped; made dense where a column's bounds leave out 0
    S = sp.csr_matrix(X)
    np.testing.assert_array_equal(clip_columns(S, bounds).toarray(), clipped)
    assert sp.issparse(clip_columns(S, bounds))
    assert not sp.issparse(clip_columns(S, np.array([[1.0, 0.0], [5.0, 2.5]])))


def _rows(seed=0, n=500):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 4))
    y = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] - X[:, 3] > 0.5)
    return X, y


def _spiked(X, seed=0, size=1e5):
    """One row per column given a value far outside the column's range."""
    X = X.copy()
    rows = np.random.default_rng(seed).choice(len(X), X.shape[1], replace=False)
    X[rows, np.arange(X.shape[1])] = size
    return X


@pytest.mark.parametrize("make", [
    lambda: TAOClassifier(random_state=0),
    lambda: TAOClassifier(max_depth=3, leaf_type="linear", random_state=0),
    lambda: TAORegressor(random_state=0),
])
def test_a_spiked_fit_is_the_fit_of_its_clipped_rows_and_predicts_clipped_rows(make):
    X, y = _rows()
    if isinstance(make(), TAORegressor):
        y = X[:, 0] * X[:, 1] + X[:, 2]
    Xs = _spiked(X)
    spiked = make().fit(Xs, y)
    Xc = clip_columns(Xs, spiked.clip_bounds_)
    assert np.all(Xc[Xs != X] < 20)  # the spikes were clipped, and nothing else
    np.testing.assert_array_equal(Xc[Xs == X], X[Xs == X])
    clipped = make().fit(Xc, y)
    assert_tree_equal(spiked.tree_, clipped.tree_)
    np.testing.assert_array_equal(spiked.predict(Xs), clipped.predict(Xc))


def test_data_without_outliers_fit_the_same_model_with_and_without_fences():
    X, y = _rows(1)
    fenced = TAOClassifier(random_state=0).fit(X, y)
    unfenced = TAOClassifier(random_state=0, outlier_fence=None).fit(X, y)
    assert unfenced.clip_bounds_ is None
    assert_tree_equal(fenced.tree_, unfenced.tree_)


def test_a_few_spikes_cost_the_fenced_tree_little_and_the_unfenced_tree_much():
    X, y = _rows(2, n=1500)
    X_test, y_test = _rows(3, n=2000)
    Xs = _spiked(X, size=1e4)

    def error(model, rows):
        return np.mean(model.fit(rows, y).predict(X_test) != y_test)

    clean = error(TAOClassifier(random_state=0), X)
    fenced = error(TAOClassifier(random_state=0), Xs)
    unfenced = error(TAOClassifier(random_state=0, outlier_fence=None), Xs)
    assert fenced <= clean + 0.02
    assert unfenced >= clean + 0.1


def test_a_forest_clips_once_for_every_tree():
    X, y = _rows(4)
    Xs = _spiked(X)
    forest = TAOForestClassifier(n_estimators=3, random_state=0).fit(Xs, y)
    np.testing.assert_array_equal(forest.clip_bounds_, outlier_fences(Xs, 3.0))
    assert all(tree.clip_bounds_ is None for tree in forest.estimators_)
    on_clipped = TAOForestClassifier(n_estimators=3, random_state=0).fit(clip_columns(Xs, forest.clip_bounds_), y)
    np.testing.assert_array_equal(forest.predict_proba(Xs), on_clipped.predict_proba(Xs))
    for a, b in zip(forest.estimators_, on_clipped.estimators_):
        assert_tree_equal(a.tree_, b.tree_)


@pytest.mark.parametrize("make", [lambda: TAOClassifier(random_state=0),
                                  lambda: TAOForestClassifier(n_estimators=2, random_state=0)])
def test_a_saved_model_keeps_its_fences(tmp_path, make):
    X, y = _rows(5)
    model = make().fit(_spiked(X), y)
    path = tmp_path / "model.npz"
    save(model, path)
    loaded = load(path)
    np.testing.assert_array_equal(loaded.clip_bounds_, model.clip_bounds_)
    far = X.copy()
    far[:, 0] = 1e9  # rows past the fence are predicted as their clipped selves
    np.testing.assert_array_equal(loaded.predict_proba(far), model.predict_proba(far))


def test_a_model_file_with_bad_fences_is_refused(tmp_path):
    X, y = _rows(6)
    path = tmp_path / "model.npz"
    save(TAOClassifier(max_depth=2, random_state=0).fit(X, y), path)
    with np.load(path) as data:
        arrays = dict(data)
    arrays["fitted/clip_bounds_"] = arrays["fitted/clip_bounds_"][::-1].copy()  # lower above upper
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match="clip_bounds_ must hold a lower and an upper bound"):
        load(bad)
    arrays["fitted/clip_bounds_"] = arrays["fitted/clip_bounds_"][:, :2].copy()  # fewer than the features
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match="for each of the 4 features"):
        load(bad)


@pytest.mark.parametrize("fence", [0, -1.0, "3"])
def test_outlier_fence_must_be_a_positive_number_or_none(fence):
    X, y = _rows(7, n=100)
    with pytest.raises(ValueError, match="outlier_fence"):
        TAOClassifier(outlier_fence=fence).fit(X, y)
