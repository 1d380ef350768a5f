import numpy as np
import pytest
from distributed import Client, LocalCluster
from sklearn.utils.estimator_checks import parametrize_with_checks

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor, load, save
from taodist.tao.bagging import sample_counts
from taodist.testing import assert_tree_equal, make_oblique_classification

EXPECTED_FAILED = {
    "check_sample_weight_equivalence_on_dense_data": "random initial trees depend on row indices",
    "check_sample_weight_equivalence_on_sparse_data": "random initial trees depend on row indices",
}


@parametrize_with_checks(
    [TAOForestClassifier(n_estimators=3, max_depth=2, random_state=0),
     TAOForestRegressor(n_estimators=3, max_depth=2, random_state=0)],
    expected_failed_checks=lambda est: EXPECTED_FAILED,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_bootstrap_counts_are_a_sample_of_the_right_size():
    c = sample_counts(3, 100, 100, bootstrap=True)
    assert c.sum() == 100 and 50 < np.count_nonzero(c) < 80
    c = sample_counts(3, 100, 60, bootstrap=False)
    assert c.sum() == 60 and c.max() == 1
    np.testing.assert_array_equal(sample_counts(3, 100, 60, False), c)


def test_each_tree_is_a_tao_tree_on_its_own_sample():
    X, y = make_oblique_classification(300, 4, random_state=1)
    forest = TAOForestClassifier(n_estimators=3, max_depth=2, leaf_type="constant", random_state=0).fit(X, y)
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=3)
    for tree, seed in zip(forest.estimators_, seeds):
        counts = sample_counts(seed, len(y), len(y), True)
        rows = np.flatnonzero(counts)
        alone = TAOClassifier(max_depth=2, leaf_type="constant", C=30.0, random_state=int(seed), n_jobs=1,
                              penalty_factors=None)  # (as the forest's trees)
        alone._fit_rows(X[rows], y[rows], counts[rows].astype(float), classes=np.arange(2))
        assert_tree_equal(tree.tree_, alone.tree_)


@pytest.mark.parametrize("refit_leaves, leaf_warm_start", [("new_rows", "gradients"), ("until_refused", "coef")])
def test_the_forests_refit_policy_reaches_every_tree(refit_leaves, leaf_warm_start):
    from sklearn.datasets import make_classification

    X, y = make_classification(400, 8, n_informative=5, n_classes=3, random_state=0)
    forest = TAOForestClassifier(n_estimators=2, max_depth=2, leaf_type="linear", bootstrap=False, max_samples=0.9,
                                 refit_leaves=refit_leaves, leaf_warm_start=leaf_warm_start, max_iter=4,
                                 random_state=0).fit(X, y)
    assert TAOForestClassifier().refit_leaves == "new_rows"
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=2)
    for tree, seed in zip(forest.estimators_, seeds):
        assert (tree.refit_leaves, tree.leaf_warm_start) == (refit_leaves, leaf_warm_start)
        rows = np.flatnonzero(sample_counts(seed, len(y), forest._n_samples_tree(len(y)), False))
        alone = TAOClassifier(max_depth=2, leaf_type="linear", refit_leaves=refit_leaves, penalty_factors=None,
                              leaf_warm_start=leaf_warm_start, max_iter=4, random_state=int(seed), n_jobs=1)
        alone._fit_rows(X[rows], y[rows], np.ones(rows.size), classes=np.arange(3))
        assert_tree_equal(tree.tree_, alone.tree_)


@pytest.mark.parametrize("init", ["cart", "cluster"])
def test_each_tree_starts_from_its_own_initial_tree_of_the_chosen_kind(init):
    X, _ = make_oblique_classification(300, 4, random_state=2)
    y = np.digitize(X[:, 0] + X[:, 1], [-0.5, 0.5])  # three classes
    forest = TAOForestClassifier(n_estimators=2, max_depth=2, leaf_type="linear", init=init, random_state=0).fit(X, y)
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=2)
    for tree, seed in zip(forest.estimators_, seeds):
        assert tree.init == init
        counts = sample_counts(seed, len(y), len(y), True)
        rows = np.flatnonzero(counts)
        alone = TAOClassifier(max_depth=2, leaf_type="linear", init=init, random_state=int(seed), n_jobs=1,
                              penalty_factors=None)
        alone._fit_rows(X[rows], y[rows], counts[rows].astype(float), classes=np.arange(3))
        assert_tree_equal(tree.tree_, alone.tree_)
    random = TAOForestClassifier(n_estimators=2, max_depth=2, leaf_type="linear", random_state=0).fit(X, y)
    assert not np.array_equal(random.estimators_[0].tree_.bias, forest.estimators_[0].tree_.bias)


def test_forest_regressor_refuses_the_clustering_initial_tree_before_fitting():
    X, y = make_oblique_classification(100, 3, random_state=0)
    with pytest.raises(ValueError, match="init='cluster'.*needs a classifier"):
        TAOForestRegressor(n_estimators=2, init="cluster").fit(X, y.astype(float))


def test_leaf_C_reaches_every_tree():
    X, y = make_oblique_classification(300, 4, random_state=3)
    y = y + 0.5 * X[:, 1]  # not a step: pure 0/1 leaves would need no coefficients at any penalty
    forest = TAOForestRegressor(n_estimators=2, max_depth=2, leaf_C=0.05, bootstrap=False, max_samples=0.9,
                                random_state=0).fit(X, y)
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=2)
    for tree, seed in zip(forest.estimators_, seeds):
        assert tree.leaf_C == 0.05 and tree.C == forest.C
        counts = sample_counts(seed, len(y), forest._n_samples_tree(len(y)), False)
        rows = np.flatnonzero(counts)
        alone = TAORegressor(max_depth=2, leaf_type="linear", C=100.0, leaf_C=0.05, penalty_factors=None,
                             random_state=int(seed), n_jobs=1)
        alone._fit_rows(X[rows], y[rows], counts[rows].astype(float))
        assert_tree_equal(tree.tree_, alone.tree_)
    dense = TAOForestRegressor(n_estimators=2, max_depth=2, bootstrap=False, max_samples=0.9,
                               random_state=0).fit(X, y)
    assert forest.n_parameters() < dense.n_parameters()  # a strong leaf penalty zeroes leaf coefficients


@pytest.mark.parametrize("leaf_type", ["constant", "linear"])
def test_soft_voting_averages_probabilities_and_hard_voting_counts_one_vote_per_tree(leaf_type):
    X, y = make_oblique_classification(400, 4, random_state=2)
    forest = TAOForestClassifier(n_estimators=5, max_depth=2, leaf_type=leaf_type, random_state=0).fit(X, y)
    assert forest.voting == "soft"
    probabilities = [e.tree_.predict(X) for e in forest.estimators_]
    np.testing.assert_allclose(forest.predict_proba(X), np.mean(probabilities, axis=0))
    forest.set_params(voting="hard")
    K = len(forest.classes_)
    votes = np.mean([np.eye(K)[np.argmax(p, axis=1)] for p in probabilities], axis=0)
    np.testing.assert_array_equal(forest.predict_proba(X), votes)
    assert set(np.unique(votes * 5)) <= set(range(6))  # vote shares are multiples of 1/5
    np.testing.assert_array_equal(forest.predict(X), forest.classes_[np.argmax(votes, axis=1)])


def test_voting_must_be_soft_or_hard():
    X, y = make_oblique_classification(100, 3)
    with pytest.raises(ValueError, match="voting"):
        TAOForestClassifier(n_estimators=2, voting="majority").fit(X, y)


def test_forest_files_written_before_voting_keep_their_vote(tmp_path):
    import json

    X, y = make_oblique_classification(300, 4, random_state=2)
    for leaf_type, was in (("constant", "hard"), ("linear", "soft")):
        forest = TAOForestClassifier(n_estimators=3, max_depth=2, leaf_type=leaf_type, random_state=0).fit(X, y)
        path, old = tmp_path / "new.npz", tmp_path / "old.npz"
        save(forest, path)
        with np.load(path, allow_pickle=False) as d:
            files = {k: d[k] for k in d.files}
        doc = json.loads(files["model.json"].tobytes())
        del doc["params"]["voting"]
        files["model.json"] = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
        np.savez(old, **files)
        back = load(old)
        assert back.voting == was
        np.testing.assert_array_equal(back.predict_proba(X), forest.set_params(voting=was).predict_proba(X))


def test_forest_beats_its_trees_on_noisy_data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(1200, 5))
    y = ((X[:, 0] * X[:, 1] > 0) ^ (rng.uniform(size=1200) < 0.1)).astype(int)
    Xt = rng.uniform(-1, 1, size=(2000, 5))
    yt = (Xt[:, 0] * Xt[:, 1] > 0).astype(int)
    forest = TAOForestClassifier(n_estimators=10, max_depth=4, leaf_type="constant", random_state=0).fit(X, y)
    # the vote beats its members: each tree alone (bootstrap sample, own initial tree) is worse
    members = [np.mean(forest.classes_[np.argmax(e.tree_.predict(Xt), axis=1)] == yt) for e in forest.estimators_]
    assert forest.score(Xt, yt) > np.mean(members) + 0.01


def test_forest_regressor_averages_trees():
    rng = np.random.default_rng(1)
    X = rng.uniform(-1, 1, size=(500, 3))
    y = X[:, 0] + np.where(X[:, 1] > 0, 1.0, -1.0)
    f = TAOForestRegressor(n_estimators=4, max_depth=2, random_state=0).fit(X, y)
    np.testing.assert_allclose(f.predict(X), np.mean([e.tree_.predict(X).ravel() for e in f.estimators_], axis=0))
    assert f.score(X, y) > 0.95


@pytest.mark.parametrize("Est", [TAOForestClassifier, TAOForestRegressor])
def test_forest_save_load_predicts_identically(tmp_path, Est):
    X, y = make_oblique_classification(300, 4)
    y = np.array(["u", "v"])[y] if Est is TAOForestClassifier else X @ [1.0, 0, 2, 0]
    f = Est(n_estimators=3, max_depth=2, random_state=0).fit(X, y)
    save(f, tmp_path / "f.npz")
    back = load(tmp_path / "f.npz")
    np.testing.assert_array_equal(back.predict(X), f.predict(X))
    assert back.n_parameters() == f.n_parameters()


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster, \
            Client(cluster, set_as_default=False) as c:
        yield c


def test_trees_as_cluster_tasks_give_the_same_forest(client):
    X, y = make_oblique_classification(400, 4, random_state=4)
    local = TAOForestClassifier(n_estimators=4, max_depth=2, random_state=0).fit(X, y)
    dist = TAOForestClassifier(n_estimators=4, max_depth=2, random_state=0).fit(X, y, client=client)
    for a, b in zip(local.estimators_, dist.estimators_):
        assert_tree_equal(a.tree_, b.tree_)


def test_forest_on_zarr_cuts_each_sample_from_the_blocks_and_matches_numpy(tmp_path, client):
    from taodist.io import open_zarr, to_zarr

    X, y = make_oblique_classification(500, 4, random_state=5)
    path = to_zarr({"X": X}, tmp_path / "x.zarr", rows_per_chunk=120)
    params = dict(n_estimators=3, max_depth=2, random_state=0)
    local = TAOForestClassifier(**params).fit(X.astype(np.float32), y)
    dist = TAOForestClassifier(**params).fit(open_zarr(path, component="X"), y, client=client)
    for a, b in zip(local.estimators_, dist.estimators_):
        assert_tree_equal(a.tree_, b.tree_)
    Xd = open_zarr(path, component="X")
    lazy = dist.predict(Xd)
    assert hasattr(lazy, "dask")
    np.testing.assert_array_equal(lazy.compute(scheduler="sync"), local.predict(X.astype(np.float32)))


def test_forest_trees_too_big_for_a_worker_train_through_the_distributed_single_tree_path(tmp_path, client):
    import dask

    from taodist.io import open_zarr, to_zarr

    X, y = make_oblique_classification(500, 4, random_state=6)
    path = to_zarr({"X": X}, tmp_path / "x.zarr", rows_per_chunk=120)
    X32 = X.astype(np.float32)
    with dask.config.set({"taodist.out-of-core": True}):  # as if no sample fitted on one worker
        forest = TAOForestClassifier(n_estimators=2, max_depth=2, leaf_type="constant", random_state=0).fit(
            open_zarr(path, component="X"), y, client=client)
    seeds = np.random.RandomState(0).randint(np.iinfo(np.int32).max, size=2)
    for est, seed in zip(forest.estimators_, seeds):
        # the reference: a single tree on all rows in memory, the bootstrap sample as integer weights
        ref = TAOClassifier(max_depth=2, leaf_type="constant", random_state=int(seed), n_jobs=1,
                            penalty_factors=None)
        ref._fit_rows(X32.astype(np.float64), y, sample_counts(int(seed), len(y), len(y), True).astype(float), classes=np.arange(2))
        assert_tree_equal(est.tree_, ref.tree_)
