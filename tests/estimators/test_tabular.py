"""Tables as users have them: missing values and categorical columns learned inside TAO, DataFrames in and out."""

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import TargetEncoder

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor, export_text, load, save
from taodist.estimators.tabular import TabularEncoder, _object_columns
from taodist.testing import assert_tree_equal


def _tree_arrays(est):
    t = est.tree_
    return [t.children_left, t.children_right, t.bias, t.threshold, t.value, t.weights.toarray()]


def _with_nan(X, fraction, seed):
    X = np.array(X, dtype=np.float64)
    X[np.random.RandomState(seed).rand(*X.shape) < fraction] = np.nan
    return X


# ------------------------------------------------------------ nothing to encode: the same model
def test_complete_numeric_input_is_passed_through_untouched():
    X, y = load_breast_cancer(return_X_y=True)
    enc = TabularEncoder()
    assert enc.fit_transform(X, y) is X
    assert enc.is_identity and enc.transform(X) is X


def test_a_dataframe_of_numbers_gives_the_numpy_model_to_the_bit():
    X, y = load_breast_cancer(return_X_y=True)
    a = TAOClassifier(max_depth=3, max_iter=3, random_state=0).fit(X, y)
    b = TAOClassifier(max_depth=3, max_iter=3, random_state=0).fit(pd.DataFrame(X, columns=[f"c{j}" for j in
                                                                                             range(X.shape[1])]), y)
    for u, v in zip(_tree_arrays(a), _tree_arrays(b)):
        np.testing.assert_array_equal(u, v)
    np.testing.assert_array_equal(a.history_, b.history_)
    assert list(b.feature_names_in_) == [f"c{j}" for j in range(X.shape[1])]
    assert not hasattr(a, "feature_names_in_")


# ------------------------------------------------------------------------ missing values
@pytest.mark.parametrize("node_type", ["oblique", "axis"])
@pytest.mark.parametrize("task", ["classification", "regression"])
def test_objective_never_increases_with_missing_values(node_type, task):
    loader = load_breast_cancer if task == "classification" else load_diabetes
    X, y = loader(return_X_y=True)
    Xn = _with_nan(X, 0.15, 0)
    cls = TAOClassifier if task == "classification" else TAORegressor
    est = cls(max_depth=4, node_type=node_type, max_iter=6, tol=0, random_state=0).fit(Xn, y)
    assert est.tree_.n_features == 2 * X.shape[1]  # every column had a missing value: value and indicator
    assert np.all(np.diff(est.history_) <= 1e-10 * max(1.0, abs(est.history_[0])))


def test_randomly_missing_values_cost_little_accuracy():
    X, y = load_breast_cancer(return_X_y=True)
    complete, missing = [], []
    for seed in range(3):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
        complete.append(TAOClassifier(random_state=seed).fit(Xtr, ytr).score(Xte, yte))
        est = TAOClassifier(random_state=seed).fit(_with_nan(Xtr, 0.1, seed), ytr)
        missing.append(est.score(_with_nan(Xte, 0.1, seed + 10), yte))
    assert np.mean(missing) >= np.mean(complete) - 0.04, (complete, missing)


def test_a_column_whose_missingness_carries_the_label_is_used():
    rng = np.random.RandomState(0)
    X = rng.randn(600, 4)
    y = rng.rand(600) < 0.5
    X[y, 2] = np.nan  # the label is whether x2 was recorded; its recorded values are noise
    est = TAOClassifier(max_depth=1, random_state=0).fit(X, y)
    assert est.score(X, y) == 1.0
    names = est.encoder_.feature_names_out_
    assert names == ["x0", "x1", "x2", "x3", "x2 is missing"]
    used = np.flatnonzero(np.asarray(abs(est.tree_.weights).sum(axis=0)).ravel())
    assert names.index("x2 is missing") in used
    # with imputation alone (no indicator) one hyperplane cannot cut the filled value out of the others
    filled = np.where(np.isnan(X), np.nanmean(X, axis=0), X)
    assert TAOClassifier(max_depth=1, random_state=0).fit(filled, y).score(filled, y) < 0.8


# ------------------------------------------------------- axis nodes: a learned direction for missing values
def _brute_force_missing_split(X, target, weight, indicator_of):
    """Lowest weighted 0/1 loss over plain splits and, for a feature with missing care points, splits of its
    observed values (both sides non-empty) with the missing rows sent left or right."""
    best = np.inf
    for f in range(X.shape[1]):
        miss = X[:, indicator_of[f]] != 0 if indicator_of[f] >= 0 else np.zeros(len(X), bool)
        if not miss.any():
            for t in list(np.unique(X[:, f])) + [np.inf]:
                best = min(best, float(weight @ ((X[:, f] >= t) != target)))
            continue
        observed = np.unique(X[~miss, f])
        for t in observed[1:]:
            for go_right in (False, True):
                right = np.where(miss, go_right, X[:, f] >= t)
                best = min(best, float(weight @ (right != target)))
    return best


@pytest.mark.parametrize("seed", range(6))
def test_an_axis_split_with_missing_values_is_the_brute_force_optimum(seed):
    from taodist.tao.node_solvers import solve_axis_missing

    rng = np.random.RandomState(seed)
    n, d = 40, 3
    values = rng.randint(0, 6, size=(n, d)).astype(np.float64)
    nan = rng.rand(n, d) < 0.25
    nan[:, 2] = False  # a column without missing values among these points
    indicators = nan[:, :2].astype(np.float64)
    X = np.hstack([np.where(nan, 2.5, values), indicators])  # filled value, then the indicators
    indicator_of = np.array([3, 4, -1, -1, -1])
    target, weight = rng.rand(n) < 0.5, rng.rand(n) + 0.1
    feature, threshold, column, go_right = solve_axis_missing(X, target, weight, indicator_of)
    miss = X[:, column] != 0 if column >= 0 else np.zeros(n, bool)
    right = np.where(miss, go_right, X[:, feature] >= threshold)
    assert weight @ (right != target) == pytest.approx(_brute_force_missing_split(X, target, weight, indicator_of))
    assert column == (indicator_of[feature] if indicator_of[feature] >= 0 else -1)


def test_an_axis_split_without_missing_care_points_is_the_plain_split():
    from taodist.tao.node_solvers import solve_axis_exact, solve_axis_missing

    rng = np.random.RandomState(0)
    X = np.hstack([rng.randn(50, 3), np.zeros((50, 1))])  # the indicator of column 0 is never set here
    target, weight = rng.rand(50) < 0.5, rng.rand(50)
    assert solve_axis_missing(X, target, weight, np.array([3, -1, -1, -1])) == \
        (*solve_axis_exact(X, target, weight), -1, False)


def _missing_on_one_side(n=800, seed=0):
    """x0 decides the label; a third of the positives lost their x0, and the filled mean lies on the negative side."""
    rng = np.random.RandomState(seed)
    X = rng.randn(n, 3)
    y = X[:, 0] > 0.8
    X[y & (rng.rand(n) < 0.33), 0] = np.nan
    return X, y


def test_an_axis_node_learns_which_way_missing_values_go():
    X, y = _missing_on_one_side()
    # from CART's split, which sends the missing values where their filled value lies (left): 61 errors
    est = TAOClassifier(node_type="axis", max_depth=1, init="cart", random_state=0).fit(X, y)
    assert est.history_[0] > 50 and est.history_[-1] == 0
    tree = est.tree_
    assert tree.feature[0] == 0 and tree.missing_column[0] == 3 and tree.missing_right[0]
    assert np.nanmean(X[:, 0]) < tree.threshold[0]  # the filled value alone would have gone left
    assert est.score(X, y) == 1.0
    Xt, yt = _missing_on_one_side(seed=1)
    assert est.score(Xt, yt) > 0.99
    assert "x0 >= " in export_text(est) and "(missing: yes)" in export_text(est)


def test_a_tree_with_default_directions_routes_alike_in_every_router():
    from taodist.testing._references import naive_apply

    X, y = load_breast_cancer(return_X_y=True)
    est = TAOClassifier(node_type="axis", max_depth=4, random_state=0).fit(_with_nan(X, 0.3, 0), y)
    tree = est.tree_
    assert tree.missing_column is not None and (tree.missing_column >= 0).sum() >= 2
    E = est.encoder_.transform(_with_nan(X, 0.3, 1))
    leaves = naive_apply(tree, E)
    np.testing.assert_array_equal(tree.apply(E), leaves)
    np.testing.assert_array_equal(tree.apply_matrix(E), leaves)
    np.testing.assert_array_equal(tree.apply(sp.csr_matrix(E)), leaves)
    path = tree.decision_path(E)
    np.testing.assert_array_equal(path[np.arange(len(E)), leaves].A.ravel(), 1)


def test_default_directions_survive_model_files_and_corrupt_ones_are_refused(tmp_path):
    X, y = _missing_on_one_side()
    est = TAOForestClassifier(node_type="axis", n_estimators=3, max_depth=2, random_state=0).fit(X, y)
    # the forest's trees learn them too (the forest's encoder made their columns)
    assert (est.estimators_[0].tree_.missing_column >= 0).any()
    save(est, tmp_path / "m.npz")
    loaded = load(tmp_path / "m.npz")
    for a, b in zip(est.estimators_, loaded.estimators_):
        assert_tree_equal(a.tree_, b.tree_)
    np.testing.assert_array_equal(loaded.predict_proba(X), est.predict_proba(X))
    data = dict(np.load(tmp_path / "m.npz"))
    data["tree0/missing_column"] = np.full_like(data["tree0/missing_column"], 99)
    np.savez(tmp_path / "bad.npz", **data)
    with pytest.raises(ValueError, match="missing_column 99; expected -1"):
        load(tmp_path / "bad.npz")
    del data["tree0/missing_column"]
    np.savez(tmp_path / "half.npz", **data)
    with pytest.raises(ValueError, match="only one of missing_column and missing_right"):
        load(tmp_path / "half.npz")


def test_complete_data_gives_axis_trees_without_default_directions():
    X, y = load_breast_cancer(return_X_y=True)
    tree = TAOClassifier(node_type="axis", max_depth=3, random_state=0).fit(X, y).tree_
    assert tree.missing_column is None and tree.missing_right is None


def test_missing_values_at_predict_time_in_a_column_complete_in_training_count_as_its_mean():
    X, y = load_breast_cancer(return_X_y=True)
    est = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    Xn = X[:20].copy()
    Xn[:, 0] = np.nan
    filled = Xn.copy()
    filled[:, 0] = X[:, 0].mean()
    np.testing.assert_array_equal(est.predict_proba(Xn), est.predict_proba(filled))


def test_sparse_input_with_missing_values_stays_sparse_and_matches_dense():
    X, y = load_breast_cancer(return_X_y=True)
    Xn = _with_nan(X, 0.1, 1)
    dense = TAOClassifier(max_depth=3, max_iter=3, random_state=0).fit(Xn, y)
    sparse = TAOClassifier(max_depth=3, max_iter=3, random_state=0).fit(sp.csr_matrix(Xn), y)
    assert sp.issparse(sparse.encoder_.transform(sp.csr_matrix(Xn)))
    np.testing.assert_array_equal(dense.encoder_.fill_values_, sparse.encoder_.fill_values_)
    np.testing.assert_allclose(dense.encoder_.transform(Xn), sparse.encoder_.transform(sp.csr_matrix(Xn)).toarray())
    assert np.mean(dense.predict(Xn) == sparse.predict(sp.csr_matrix(Xn))) > 0.97


# --------------------------------------------------------------------- categorical columns
def _table(n=600, seed=0):
    rng = np.random.RandomState(seed)
    df = pd.DataFrame({
        "x": rng.randn(n),
        "colour": pd.Categorical(rng.choice(["red", "green", "blue"], n)),
        "town": rng.choice([f"town{i}" for i in range(40)], n).astype(object),
        "flag": rng.rand(n) < 0.5,
    })
    df.loc[rng.rand(n) < 0.1, "x"] = np.nan
    df.loc[rng.rand(n) < 0.05, "town"] = None
    y = np.where((df["colour"] == "red").to_numpy() ^ (df["x"].fillna(0).to_numpy() > 0.5), "yes", "no")
    return df, y


def test_categorical_columns_are_encoded_without_a_user_side_one_hot():
    df, y = _table()
    est = TAOClassifier(random_state=0).fit(df, y)
    assert est.score(df, y) > 0.97
    assert est.encoder_.feature_names_out_ == ["x", "flag", "x is missing", "colour=blue", "colour=green",
                                               "colour=red", "town (target encoded)"]
    assert est.tree_.n_features == 7 and est.n_features_in_ == 4


def test_target_encoding_at_predict_time_is_scikit_learns_transform():
    df, y = _table()
    enc = TabularEncoder(task="classification", random_state=0)
    enc.fit_transform(df, (y == "yes").astype(int))
    reference = TargetEncoder(target_type="binary").fit(_object_columns(df, [2], True), (y == "yes").astype(int))
    new = df.iloc[:50].copy()
    new.loc[new.index[:5], "town"] = "a town never seen"
    got = enc.transform(new)[:, 6]
    np.testing.assert_allclose(got, reference.transform(_object_columns(new, [2], True))[:, 0])
    np.testing.assert_allclose(got[:5], reference.target_mean_)


def test_an_unseen_category_routes_as_no_category():
    df, y = _table()
    est = TAOClassifier(random_state=0).fit(df, y)
    new = df.iloc[:30].copy()
    new["colour"] = new["colour"].cat.add_categories(["purple"])
    new.loc[:, "colour"] = "purple"
    rows = est.encoder_.transform(new)
    assert np.all(rows[:, 3:6] == 0)
    np.testing.assert_array_equal(est.predict_proba(new), est.tree_.predict(rows))


def test_categorical_features_by_index_on_a_numpy_array():
    rng = np.random.RandomState(0)
    codes = rng.randint(0, 5, 500)
    X = np.column_stack([rng.randn(500), codes])
    y = np.isin(codes, [1, 3])  # not ordered: a threshold on the codes cannot separate it
    est = TAOClassifier(max_depth=2, random_state=0, categorical_features=[1]).fit(X, y)
    assert est.encoder_.feature_names_out_ == ["x0", "x1=0.0", "x1=1.0", "x1=2.0", "x1=3.0", "x1=4.0"]
    assert est.score(X, y) == 1.0
    assert TAOClassifier(max_depth=2, random_state=0).fit(X, y).score(X, y) < 0.9


def test_forests_encode_once_and_predict_from_tables():
    df, y = _table()
    forest = TAOForestClassifier(n_estimators=5, random_state=0).fit(df, y)
    assert forest.score(df, y) > 0.95
    assert all(e.tree_.n_features == forest.encoder_.n_columns_out for e in forest.estimators_)
    values = df["x"].fillna(0).to_numpy() * 2 + (df["colour"] == "red").to_numpy()
    reg = TAOForestRegressor(n_estimators=3, random_state=0).fit(df, values)
    assert reg.score(df, values) > 0.9


# ----------------------------------------------------------------------- model files
def test_model_files_keep_the_encoding(tmp_path):
    df, y = _table()
    for est in (TAOClassifier(random_state=0).fit(df, y),
                TAOForestRegressor(n_estimators=2, random_state=0).fit(df, df["x"].fillna(0))):
        path = tmp_path / "model.npz"
        save(est, path)
        back = load(path)
        np.testing.assert_array_equal(back.predict(df), est.predict(df))
        assert back.encoder_.feature_names_out_ == est.encoder_.feature_names_out_
        assert list(back.feature_names_in_) == ["x", "colour", "town", "flag"]


def test_a_model_file_with_an_edited_encoding_is_refused(tmp_path):
    import json
    import zipfile

    df, y = _table()
    path = tmp_path / "model.npz"
    save(TAOClassifier(max_depth=2, random_state=0).fit(df, y), path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    doc = json.loads(np.load(path)["model.json"].tobytes())
    doc["encoder"]["categorical_columns"].append(3)
    header = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
    edited = tmp_path / "edited.npz"
    arrays = {n[:-4]: np.load(path)[n[:-4]] for n in members}
    arrays["model.json"] = header
    np.savez(edited, **arrays)
    with pytest.raises(ValueError, match="column encoding is malformed"):
        load(edited)


# --------------------------------------------------------------------- checks at the boundary
def test_predicting_with_other_columns_or_dtypes_is_refused():
    df, y = _table()
    est = TAOClassifier(max_depth=2, random_state=0).fit(df, y)
    with pytest.raises(ValueError, match="feature names"):
        est.predict(df.rename(columns={"x": "X"}))
    changed = df.copy()
    changed["x"] = changed["x"].astype(str)
    with pytest.raises(ValueError, match="held numbers when the model was fitted"):
        est.predict(changed)


def test_bad_categorical_features_say_what_is_expected():
    df, y = _table()
    with pytest.raises(ValueError, match="'nope', which is not in X"):
        TAOClassifier(categorical_features=["nope"]).fit(df, y)
    with pytest.raises(ValueError, match="column indices in 0..3"):
        TAOClassifier(categorical_features=[7]).fit(df, y)
    X = np.random.RandomState(0).rand(20, 3)
    with pytest.raises(ValueError, match="needs dense input"):
        TAOClassifier(categorical_features=[0]).fit(sp.csr_matrix(X), np.arange(20) % 2)
    with pytest.raises(ValueError, match="infinity"):
        TAOClassifier().fit(pd.DataFrame({"a": [1.0, np.inf, 2.0, 3.0], "b": ["u", "v", "u", "v"]}), [0, 1, 0, 1])


# ------------------------------------------------------------------------ Dask DataFrames
def test_a_dask_dataframe_is_predicted_lazily_partition_by_partition_keeping_its_index():
    dd = pytest.importorskip("dask.dataframe")
    df, y = _table()
    est = TAOClassifier(max_depth=3, random_state=0).fit(df, y)
    df.index = np.arange(1000, 1000 + len(df))
    ddf = dd.from_pandas(df, npartitions=3)
    lazy = est.predict(ddf)
    assert isinstance(lazy, dd.Series)
    out = lazy.compute(scheduler="sync")
    np.testing.assert_array_equal(out.index, df.index)
    np.testing.assert_array_equal(out.to_numpy(), est.predict(df))
    proba = est.predict_proba(ddf).compute(scheduler="sync")
    assert list(proba.columns) == list(est.classes_)
    np.testing.assert_allclose(proba.to_numpy(), est.predict_proba(df))


def test_export_text_names_the_encoded_columns():
    from taodist import export_text

    df, y = _table()
    text = export_text(TAOClassifier(max_depth=2, random_state=0).fit(df, y))
    assert "colour=red" in text and "x0" not in text


def test_a_regressor_target_encodes_a_read_only_column_with_pandas_missing_values():
    rng = np.random.RandomState(0)
    towns = pd.array(rng.choice([f"t{i}" for i in range(30)], 300), dtype="string")
    towns[::10] = pd.NA
    df = pd.DataFrame({"town": towns, "x": rng.randn(300)})
    values = df["town"].fillna("t0").str[1:].astype(int).to_numpy() + df["x"].to_numpy()
    est = TAORegressor(random_state=0).fit(df, values)
    assert est.encoder_.feature_names_out_ == ["x", "town (target encoded)"]
    assert est.score(df, values) > 0.8


# ----------------------------------------------- target encoding of Dask DataFrames (no gathered rows)
def _many_categories(n=500, seed=0):
    """A 30-category column with missing values (its dtype declares a 31st category no row has) and a number."""
    rng = np.random.RandomState(seed)
    town = pd.Series(rng.choice([f"t{i}" for i in range(30)], n), dtype=object)
    town[rng.rand(n) < 0.08] = None
    return pd.DataFrame({"x": rng.randn(n), "town": pd.Categorical(town, categories=[f"t{i}" for i in range(31)])})


def _targets(df, seed=0):
    """A regression target (mean 1e7: sums of squares of the raw values would lose its variance to rounding), a
    binary and a four-class one."""
    rng = np.random.RandomState(seed)
    code = df["town"].cat.codes.to_numpy().astype(np.int64)
    return {"continuous": 1e7 + code + 3 * rng.randn(len(df)),
            "binary": np.where(rng.rand(len(df)) < 0.2 + code / 50, "yes", "no"),
            "multiclass": (code % 4 + (rng.rand(len(df)) < 0.3)) % 4}


def _dask_training_rows(df, y, target_type, npartitions, random_state=0):
    """``(rows, encoder)``: ``df`` as a Dask DataFrame encoded for a fit (the sync scheduler: no cluster)."""
    dd = pytest.importorskip("dask.dataframe")
    import dask

    from taodist.estimators.dask_frames import dask_frame_rows

    task = "regression" if target_type == "continuous" else "classification"
    est = (TAORegressor if task == "regression" else TAOClassifier)(random_state=random_state)
    with dask.config.set(scheduler="sync"):
        rows = dask_frame_rows(est, dd.from_pandas(df, npartitions=npartitions), y, task).compute()
    return rows, est.encoder_


@pytest.mark.parametrize("target_type", ["continuous", "binary", "multiclass"])
def test_dask_target_encoding_from_summed_statistics_is_scikit_learns(target_type):
    df = _many_categories()
    y = _targets(df)[target_type]
    _, enc = _dask_training_rows(df, y, target_type, npartitions=4)
    reference = TargetEncoder(smooth="auto", target_type=target_type).fit(_object_columns(df, [1], True), y)
    assert enc.target_columns_ == [1]
    per = 4 if target_type == "multiclass" else 1
    assert len(enc.target_mean_) == per
    expected = [None if c != c else c for c in reference.categories_[0]]  # NaN, TargetEncoder's missing category
    assert sorted(enc.target_categories_[0], key=str) == sorted(expected, key=str)  # "t30" has no rows: left out
    order = [enc.target_categories_[0].index(c) for c in expected]
    np.testing.assert_allclose(enc.target_encodings_[0][order], np.column_stack(reference.encodings_), rtol=1e-12)
    np.testing.assert_allclose(enc.target_mean_, np.atleast_1d(reference.target_mean_), rtol=1e-12)
    new = df.iloc[:40].copy()
    new["town"] = new["town"].cat.add_categories(["unseen"])
    new.loc[new.index[:3], "town"] = "unseen"
    np.testing.assert_allclose(enc.transform(new)[:, -per:], reference.transform(_object_columns(new, [1], True)),
                               rtol=1e-12)


@pytest.mark.parametrize("target_type", ["continuous", "binary", "multiclass"])
def test_dask_training_rows_take_target_encoder_fitted_on_the_other_folds(target_type):
    from taodist.estimators.dask_frames import fold_seed, row_folds

    df = _many_categories(n=200, seed=1)
    y = _targets(df, seed=1)[target_type]
    rows, enc = _dask_training_rows(df, y, target_type, npartitions=3, random_state=7)
    folds = row_folds(0, len(df), fold_seed(7))
    assert sorted(np.unique(folds)) == [0, 1, 2, 3, 4]
    columns = _object_columns(df, [1], True)
    per = len(enc.target_mean_)
    for f in range(5):
        reference = TargetEncoder(smooth="auto", target_type=target_type).fit(columns[folds != f], y[folds != f])
        np.testing.assert_allclose(rows[folds == f, -per:], reference.transform(columns[folds == f]), rtol=1e-12)
    full = TargetEncoder(smooth="auto", target_type=target_type).fit(columns, y).transform(columns)
    assert np.abs(rows[:, -per:] - full).max() > 1e-3  # out of fold: not the full-data lookup
    np.testing.assert_array_equal(rows[:, :-per], enc.transform(df)[:, :-per])  # the other columns as for new rows


@pytest.mark.parametrize("target_type", ["continuous", "multiclass"])
def test_dask_training_rows_do_not_depend_on_the_partitioning(target_type):
    df = _many_categories()
    y = _targets(df)[target_type]
    two, enc2 = _dask_training_rows(df, y, target_type, npartitions=2)
    five, enc5 = _dask_training_rows(df, y, target_type, npartitions=5)
    if target_type == "multiclass":  # class indicators sum exactly in any order
        np.testing.assert_array_equal(two, five)
        np.testing.assert_array_equal(enc2.target_encodings_[0], enc5.target_encodings_[0])
    else:  # real values summed in another order: equal to rounding
        np.testing.assert_allclose(two, five, rtol=1e-12)
        np.testing.assert_allclose(enc2.target_encodings_[0], enc5.target_encodings_[0], rtol=1e-12)
    other_seed, _ = _dask_training_rows(df, y, target_type, npartitions=2, random_state=1)
    assert np.abs(two - other_seed).max() > 1e-3  # the folds follow random_state


def test_row_folds_follow_the_row_position_and_the_seed_only():
    from taodist.estimators.dask_frames import row_folds

    np.testing.assert_array_equal(row_folds(0, 1000, 5)[300:420], row_folds(300, 120, 5))
    assert np.mean(row_folds(0, 1000, 5) == row_folds(0, 1000, 6)) < 0.3
    counts = np.bincount(row_folds(0, 100_000, 0), minlength=5)
    assert counts.min() > 19_500 and counts.max() < 20_500  # close to equal folds
    assert row_folds(2**40, 3, 0).shape == (3,)


def test_a_dask_fit_checks_that_y_has_a_value_per_row():
    dd = pytest.importorskip("dask.dataframe")
    from taodist.estimators.dask_frames import dask_frame_rows

    df = _many_categories(n=100)
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[100, 99\]"):
        dask_frame_rows(TAOClassifier(), dd.from_pandas(df, npartitions=2), np.arange(99) % 2, "classification")


def test_a_dask_fit_with_several_outputs_one_hot_encodes_a_column_of_many_categories():
    df = _many_categories(n=100)
    y = np.random.RandomState(0).randn(100, 2)
    rows, enc = _dask_training_rows(df, y, "continuous", npartitions=2)
    assert enc.target_columns_ == [] and len(enc.categories_[1]) == 31 and enc.categorical_missing_[1]
    assert rows.shape == (100, 1 + 31 + 1)
