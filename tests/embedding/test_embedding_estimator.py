"""TAOEmbedding: the thesis' claim (the joint tree beats the direct fit), the transformer contract, errors, files."""

import importlib.util

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits
from sklearn.utils.estimator_checks import parametrize_with_checks

from taodist import TAOEmbedding, export_text, load, save
from taodist.embedding import ElasticEmbeddingObjective, TSNEObjective
from taodist.testing import assert_tree_equal

#: small enough for seconds per fit, large enough for the path to matter (measured in the first test's comments);
#: the thesis' setting (dense linear leaves, a random initial tree, every outer step), not the defaults
THESIS = dict(leaf_C=None, init="random", n_iter_no_change=None, penalty_decay=0.0, z_iter=100)
FAST = dict(max_depth=3, perplexity=20.0, n_outer=10, tao_iter=5, free_iter=500, random_state=0, **THESIS)


@pytest.fixture(scope="module")
def digits():
    return load_digits().data[:300]


def _method(method):
    if method == "tsne":
        pytest.importorskip("openTSNE")
    return method


@pytest.fixture(scope="module")
def fitted(digits):
    """One fit per method, shared by the tests that only read it."""
    cache = {}

    def get(method):
        if method not in cache:
            cache[method] = TAOEmbedding(method=_method(method), **FAST).fit(digits)
        return cache[method]

    return get


@pytest.mark.parametrize("method", ["ee", "tsne"])
def test_the_joint_tree_embeds_better_than_the_direct_fit(digits, fitted, method):
    # thesis section 4.2: the tree learned with the embedding beats a tree fitted to the free embedding afterwards,
    # on the embedding objective of the tree's own output. Measured here (300 digits, depth 3, C=10):
    # t-SNE KL 1.15 (direct fit) -> 0.73, EE 5.54 -> 5.07 (free embedding 0.33 and 4.68).
    emb = fitted(method)
    direct = TAOEmbedding(method=method, **{**FAST, "n_outer": 0}).fit(digits)
    objective = (TSNEObjective if method == "tsne" else ElasticEmbeddingObjective)(emb.affinities_)
    joint_value, direct_value = objective.value(emb.transform(digits)), objective.value(direct.transform(digits))
    free_value = objective.value(emb.free_embedding_)
    assert direct.best_iteration_ == 0 and direct_value == pytest.approx(emb.history_[0]["objective"], rel=1e-9)
    assert joint_value == pytest.approx(emb.history_[emb.best_iteration_]["objective"], rel=1e-9)
    # at least a third of the gap between the direct fit and the free embedding closed
    assert joint_value < direct_value - (direct_value - free_value) / 3
    assert emb.best_iteration_ > 0


def test_few_z_iterations_per_step_embed_better_than_many(digits):
    # the default z_iter=5 against 100 per Z step, with the estimator's other defaults: the few keep Z near the
    # tree's output, so the tree follows it (300 digits: KL of F(X) 0.52 against 0.63; direct fit 1.20)
    _method("tsne")
    fast = dict(max_depth=3, perplexity=20.0, n_outer=10, tao_iter=5, free_iter=500, random_state=0)
    few, many = (TAOEmbedding(**fast, z_iter=z).fit(digits) for z in (5, 100))
    assert TAOEmbedding().z_iter == 5
    objective = TSNEObjective(few.affinities_)
    few_value, many_value = objective.value(few.transform(digits)), objective.value(many.transform(digits))
    assert few_value < 0.9 * many_value < 0.9 * few.history_[0]["objective"]


def test_a_tree_collapsed_to_a_constant_is_scored_as_the_constant_map(digits):
    # a strong penalty collapses the tree to one constant leaf: every point at one place, whose KL is
    # sum p log p + log(N (N - 1)) > 0. openTSNE's Barnes-Hut sum gave -43.4 here, the lowest objective on any
    # path, so such a tree was kept as the best (breast cancer with C=0.1: one leaf, "KL" -45)
    pytest.importorskip("openTSNE")
    X = digits[:150]
    emb = TAOEmbedding(max_depth=2, C=1e-3, perplexity=10.0, n_outer=2, free_iter=100,
                       random_state=0, **{**THESIS, "z_iter": 10}).fit(X)
    assert emb.tree_.n_leaves() == 1 and np.ptp(emb.embedding_, axis=0).max() == 0
    p = emb.affinities_.data
    constant = np.sum(p * np.log(p)) + np.log(len(X) * (len(X) - 1))
    assert [h["objective"] for h in emb.history_] == pytest.approx([constant] * 3, rel=1e-12)


@pytest.mark.parametrize("method", ["ee", "tsne"])
def test_transform_is_the_trees_output_on_training_new_and_sparse_rows(digits, fitted, method):
    emb = fitted(method)
    np.testing.assert_array_equal(emb.transform(digits), emb.tree_.predict(digits))
    np.testing.assert_array_equal(emb.embedding_, emb.transform(digits))
    new = load_digits().data[300:400]
    Z_new = emb.transform(new)
    assert Z_new.shape == (100, 2) and np.isfinite(Z_new).all()
    np.testing.assert_allclose(emb.transform(sp.csr_matrix(new)), Z_new, rtol=1e-12, atol=1e-12)
    assert list(emb.get_feature_names_out()) == ["taoembedding0", "taoembedding1"]


@pytest.mark.parametrize("method, n_components", [("ee", 1), ("ee", 4), ("tsne", 3)])
def test_other_dimensions_give_as_many_columns_and_a_path(digits, method, n_components):
    emb = TAOEmbedding(method=_method(method), n_components=n_components, **{**FAST, "n_outer": 3})
    Z = emb.fit_transform(digits[:150])
    assert Z.shape == (150, n_components) and emb.tree_.n_outputs == n_components
    assert emb.history_[emb.best_iteration_]["objective"] <= emb.history_[0]["objective"]


def test_fit_transform_returns_embedding_and_equals_fit_then_transform(digits):
    params = {**FAST, "method": "ee", "n_outer": 2}
    emb = TAOEmbedding(**params)
    Z = emb.fit_transform(digits)
    assert Z is emb.embedding_
    np.testing.assert_array_equal(Z, TAOEmbedding(**params).fit(digits).transform(digits))


@pytest.mark.parametrize("method", ["ee", "tsne"])
def test_the_same_random_state_gives_the_same_model(digits, fitted, method):
    a, b = fitted(method), TAOEmbedding(method=method, **FAST).fit(digits)
    assert_tree_equal(a.tree_, b.tree_)
    np.testing.assert_array_equal(a.coordinates_, b.coordinates_)
    assert [h["objective"] for h in a.history_] == [h["objective"] for h in b.history_]


def test_sparse_rows_fit_the_same_affinities_and_an_embedding_as_good(digits):
    # the pixels are small integers: jitter the non-zero ones so that no two neighbours tie in distance
    # (exact kNN breaks ties differently for dense and sparse rows)
    X = digits + np.where(digits > 0, np.random.default_rng(0).uniform(0, 0.01, size=digits.shape), 0.0)
    params = {**FAST, "method": "ee", "n_outer": 4}
    dense = TAOEmbedding(**params).fit(X)
    sparse = TAOEmbedding(**params).fit(sp.csr_matrix(X))
    np.testing.assert_allclose(sparse.affinities_.toarray(), dense.affinities_.toarray(), rtol=1e-9, atol=1e-15)
    # EE's free embedding is a minimisation from the same spectral start, stopped at a relative move of 1e-4:
    # the same up to that tolerance (measured: 7.5e-6 apart at most, on coordinates of about 5)
    np.testing.assert_allclose(sparse.free_embedding_, dense.free_embedding_, rtol=0, atol=1e-4)
    assert sparse.history_[-1]["objective"] == pytest.approx(dense.history_[-1]["objective"], rel=1e-3)


def test_the_history_starts_at_the_direct_fit_and_records_every_outer_step(fitted):
    emb = fitted("ee")
    assert [h["iteration"] for h in emb.history_] == list(range(11))
    mus = [h["mu"] for h in emb.history_[1:]]
    np.testing.assert_allclose(mus, 1e-5 * 1.4 ** np.arange(10))
    best = min(range(11), key=lambda k: emb.history_[k]["objective"])
    assert emb.best_iteration_ == best
    assert all(h["objective"] >= h["z_objective"] * 0.5 for h in emb.history_)  # sane values, no NaN
    assert emb.coordinates_.shape == emb.free_embedding_.shape == (300, 2)


def test_export_text_prints_the_oblique_splits_and_linear_leaves(fitted):
    text = export_text(fitted("ee"))
    assert ">= 0" in text and "linear, intercept" in text


def test_a_saved_embedding_loads_and_transforms_the_same(tmp_path, digits, fitted):
    emb = fitted("ee")
    save(emb, tmp_path / "emb.npz")
    back = load(tmp_path / "emb.npz")
    assert isinstance(back, TAOEmbedding) and back.get_params() == emb.get_params()
    np.testing.assert_array_equal(back.transform(digits), emb.transform(digits))


@pytest.mark.parametrize("params, X, error, match", [
    ({"perplexity": -5.0}, None, ValueError, "perplexity"),
    ({"perplexity": 120.0}, None, ValueError, "perplexity=120.0 is too large for n_samples = 100"),
    ({"n_neighbors": 5, "perplexity": 10.0}, None, ValueError, "must be larger than perplexity"),
    ({"n_components": 4}, None, ValueError, "n_components <= 3"),
    ({}, "nan", ValueError, "NaN"),
    ({}, "two rows", ValueError, "n_samples = 2"),
])
def test_bad_input_is_refused_with_a_clear_message(params, X, error, match):
    rows = load_digits().data[:100].copy()
    if X == "nan":
        rows[3, 5] = np.nan
    elif X == "two rows":
        rows = rows[:2]
    with pytest.raises(error, match=match):
        TAOEmbedding(**{"perplexity": 10.0, **params}).fit(rows)


def test_tsne_without_opentsne_says_how_to_install_it(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "openTSNE", None)  # import fails as if not installed
    with pytest.raises(ImportError, match=r"taodist\[embedding\]"):
        TAOEmbedding(method="tsne", perplexity=5.0).fit(load_digits().data[:50])


# scikit-learn's checks use tens of rows: a perplexity and path to suit them
CHECKED = [TAOEmbedding(method=method, max_depth=2, perplexity=3.0, n_outer=2, tao_iter=2, free_iter=50, z_iter=10,
                        random_state=0)
           for method in ["ee"] + (["tsne"] if importlib.util.find_spec("openTSNE") else [])]


@parametrize_with_checks(CHECKED)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_with_a_client_the_tree_steps_run_on_the_cluster_and_give_the_same_model(digits, two_worker_client):
    params = {**FAST, "method": "ee", "n_outer": 3}
    local = TAOEmbedding(**params).fit(digits)
    dist = TAOEmbedding(**params).fit(digits, client=two_worker_client)
    assert_tree_equal(dist.tree_, local.tree_)
    np.testing.assert_array_equal(dist.embedding_, local.embedding_)
