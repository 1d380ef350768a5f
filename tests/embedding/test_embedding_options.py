"""TAOEmbedding's options from the ablation (issue 45): early stopping, constant leaves, leaf_C, the CART start,
the penalty that falls with mu."""

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits

from taodist import TAOEmbedding
from taodist.embedding import ElasticEmbeddingObjective
from taodist.estimators.execution import ResidentRows

#: EE needs no openTSNE and is fast at 300 points; the options act on the tree steps, the same for both methods.
#: From the thesis' setting (dense leaves, random initial tree, every step), so that each test changes one option
FAST = dict(method="ee", max_depth=3, perplexity=20.0, n_outer=10, tao_iter=5, free_iter=300, random_state=0,
            leaf_C=None, init="random", n_iter_no_change=None, penalty_decay=0.0)


@pytest.fixture(scope="module")
def digits():
    return load_digits().data[:300]


@pytest.fixture(scope="module")
def full_path(digits):
    return TAOEmbedding(**{**FAST, "n_outer": 12}).fit(digits)


def _objective(emb, X):
    return ElasticEmbeddingObjective(emb.affinities_).value(emb.transform(X))


def test_early_stopping_stops_after_n_iter_no_change_steps_and_keeps_the_best_tree(digits, full_path):
    # the full path's objectives, to find where a patience of 1 stops: at the first step that does not improve
    objectives = [h["objective"] for h in full_path.history_]
    best, stop = 0, None
    for k in range(1, len(objectives)):
        if objectives[k] < objectives[best]:
            best = k
        elif k - best >= 1:
            stop = k
            break
    assert stop is not None and stop < 12, "the full path never failed to improve: pick another setting"
    early = TAOEmbedding(**{**FAST, "n_outer": 12, "n_iter_no_change": 1}).fit(digits)
    assert len(early.history_) - 1 == stop
    assert early.best_iteration_ == best == stop - 1
    # the same path up to the stop, then the best tree on it: the full path's tree at that step
    np.testing.assert_allclose([h["objective"] for h in early.history_], objectives[:stop + 1], rtol=1e-12)
    assert _objective(early, digits) == pytest.approx(objectives[best], rel=1e-9)


def test_early_stopping_that_never_triggers_runs_every_step(digits, full_path):
    emb = TAOEmbedding(**{**FAST, "n_outer": 12, "n_iter_no_change": 50}).fit(digits)
    assert len(emb.history_) == 13
    np.testing.assert_array_equal(emb.embedding_, full_path.embedding_)


def test_constant_leaves_give_a_tree_without_leaf_weights_that_maps_each_leaf_to_one_point(digits):
    emb = TAOEmbedding(**{**FAST, "leaf_type": "constant", "max_depth": 4}).fit(digits)
    tree = emb.tree_
    assert tree.leaf_type == "constant" and tree.leaf_coef is None
    # every point that reaches a leaf lands on that leaf's one point
    leaves = tree.apply(digits)
    assert len(np.unique(emb.embedding_, axis=0)) == len(np.unique(leaves)) > 1
    for leaf in np.unique(leaves):
        assert np.ptp(emb.embedding_[leaves == leaf], axis=0).max() == 0
    assert all(leaf["n_nonzero"] == 0 for leaf in emb.explain()["leaves"])


def test_leaf_C_penalises_only_the_leaves(digits):
    same = TAOEmbedding(**{**FAST, "n_outer": 2, "C": 10.0, "leaf_C": 10.0}).fit(digits)
    default = TAOEmbedding(**{**FAST, "n_outer": 2, "C": 10.0}).fit(digits)
    np.testing.assert_array_equal(same.embedding_, default.embedding_)  # None means C
    sparse_leaves = TAOEmbedding(**{**FAST, "n_outer": 2, "C": 10.0, "leaf_C": 0.01}).fit(digits)
    per_leaf = lambda emb: emb.tree_.leaf_coef.nnz / emb.tree_.n_leaves()  # noqa: E731
    assert per_leaf(sparse_leaves) < per_leaf(default) / 2
    # the decision nodes keep their penalty: still oblique, several weights each
    internal = ~sparse_leaves.tree_.is_leaf
    assert sparse_leaves.tree_.weights[np.flatnonzero(internal)].getnnz(axis=1).max() > 1


def test_the_cart_start_routes_like_cart_on_the_free_embedding_before_tao(digits, monkeypatch):
    # with init="cart" the initial tree is scikit-learn's CART of max_depth on the free embedding (in the tree's
    # units): capture it before the first TAO step changes it
    from sklearn.tree import DecisionTreeRegressor

    from taodist.estimators import execution

    seen = []
    real = execution.ResidentRows.tao_optimize

    def spy(self, tree, y, sample_weight, **kw):
        if not seen:
            seen.append((tree.copy(), self.X, y.copy()))
        return real(self, tree, y, sample_weight, **kw)

    monkeypatch.setattr(execution.ResidentRows, "tao_optimize", spy)
    emb = TAOEmbedding(**{**FAST, "n_outer": 0, "init": "cart"}).fit(digits)
    tree, Xs, targets = seen[0]
    cart = DecisionTreeRegressor(max_depth=FAST["max_depth"]).fit(Xs, targets)
    np.testing.assert_array_equal(tree.apply(Xs), cart.apply(Xs))
    assert emb.best_iteration_ == 0 and emb.tree_.n_leaves() >= 2


def test_the_cart_start_takes_sparse_rows(digits):
    emb = TAOEmbedding(**{**FAST, "n_outer": 1, "init": "cart"}).fit(sp.csr_matrix(digits))
    assert emb.transform(sp.csr_matrix(digits)).shape == (300, 2)


@pytest.mark.parametrize("params, match", [
    ({"leaf_type": "quadratic"}, "leaf_type"),
    ({"leaf_C": 0.0}, "leaf_C"),
    ({"n_iter_no_change": 0}, "n_iter_no_change"),
    ({"init": "cluster"}, "init"),
    ({"penalty_decay": -0.5}, "penalty_decay"),
])
def test_bad_options_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        TAOEmbedding(**{**FAST, **params}).fit(load_digits().data[:60])


def test_a_leaf_that_maps_its_points_to_one_spot_keeps_its_centroid_in_its_box(digits, tmp_path):
    # coincident coordinates summed and divided by their count can round an ulp outside their own [min, max]:
    # such a model's file was refused as edited on load (found with the defaults' sparse leaves)
    from taodist import load, save

    emb = TAOEmbedding(**{**FAST, "leaf_type": "constant", "max_depth": 4}).fit(digits)
    lo, hi = emb.node_bounds_[:, 0], emb.node_bounds_[:, 1]
    reached = emb.node_counts_ > 0
    assert (lo[reached] <= emb.node_centroids_[reached]).all() and (emb.node_centroids_[reached] <= hi[reached]).all()
    save(emb, tmp_path / "e.npz")
    np.testing.assert_array_equal(load(tmp_path / "e.npz").transform(digits), emb.transform(digits))


@pytest.mark.parametrize("decay, leaf_C", [(0.5, 0.1), (1.0, None), (0.0, 0.1)])
def test_each_tree_step_is_penalised_by_the_fixed_penalty_times_mu0_over_mu_to_the_decay(digits, monkeypatch,
                                                                                          decay, leaf_C):
    seen = []
    tao_optimize = ResidentRows.tao_optimize

    def spy(self, tree, targets, weights, **kwargs):
        seen.append((kwargs["alpha"], kwargs["leaf_alpha"]))
        return tao_optimize(self, tree, targets, weights, **kwargs)

    monkeypatch.setattr(ResidentRows, "tao_optimize", spy)
    C, mu0, factor = 4.0, 1e-3, 2.0
    emb = TAOEmbedding(**{**FAST, "n_outer": 4, "C": C, "leaf_C": leaf_C, "mu0": mu0, "mu_factor": factor,
                          "penalty_decay": decay}).fit(digits)
    assert len(seen) == 5 == len(emb.history_)
    for k, ((alpha, leaf_alpha), record) in enumerate(zip(seen, emb.history_)):
        # the direct fit (k = 0) and the first outer step (mu = mu0) have the fixed penalty
        expected = 1.0 if k == 0 else (mu0 / (mu0 * factor**(k - 1)))**decay
        assert record["penalty_factor"] == pytest.approx(expected, rel=1e-12)
        assert alpha == pytest.approx(expected / C, rel=1e-12)
        if leaf_C is None:
            assert leaf_alpha is None
        else:
            assert leaf_alpha == pytest.approx(expected / leaf_C, rel=1e-12)


def test_with_sparse_leaves_a_falling_penalty_lets_the_path_beat_the_direct_fit(digits):
    # with the ablation's sparse leaves and CART's start, a fixed penalty shrinks the tree as mu grows and the
    # path's best tree is hardly better than the direct fit; with the augmented Lagrangian's lambda / mu the
    # tree keeps following the embedding. Measured here (EE): direct fit 10.80; best on the path 8.10 with a
    # fixed penalty (step 5 of 8 run), 4.95 with decay 1 (step 10, the last)
    sparse = {**FAST, "leaf_C": 0.1, "init": "cart", "n_iter_no_change": 3}
    fixed = TAOEmbedding(**sparse).fit(digits)
    falling = TAOEmbedding(**{**sparse, "penalty_decay": 1.0}).fit(digits)
    direct = falling.history_[0]["objective"]
    assert fixed.history_[0]["objective"] == direct  # the same direct fit: the decay acts on the outer steps only
    best = falling.history_[falling.best_iteration_]["objective"]
    assert best == pytest.approx(_objective(falling, digits), rel=1e-9)
    assert best < 0.6 * direct and best < 0.8 * fixed.history_[fixed.best_iteration_]["objective"]
    # and the objective of F(X) falls along most of the path, as the fixed penalty's does not
    path = np.array([h["objective"] for h in falling.history_])
    assert (np.diff(path) < 0).sum() >= 0.7 * (len(path) - 1)
