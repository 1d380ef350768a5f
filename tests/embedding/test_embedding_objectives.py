"""The embedding objectives against independent references: finite differences, scikit-learn, openTSNE itself."""

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.spatial.distance import pdist, squareform
from sklearn.datasets import load_digits

from taodist.embedding import ElasticEmbeddingObjective, TSNEObjective, joint_affinities
from taodist.embedding._affinities import neighbours_for, spectral_start
from taodist.embedding._tsne import pulled
from taodist.laptao import affinity_graph


@pytest.fixture
def opentsne():
    """openTSNE's t-SNE module (the optional extra ``embedding``)."""
    return pytest.importorskip("openTSNE.tsne")


def _random_P(n=40, seed=0):
    rng = np.random.default_rng(seed)
    A = rng.uniform(size=(n, n)) * (rng.uniform(size=(n, n)) < 0.3)
    np.fill_diagonal(A, 0)
    A = A + A.T
    return sp.csr_matrix(A / A.sum()), rng


def _finite_differences(f, Z, h=1e-6):
    G = np.empty_like(Z)
    for idx in np.ndindex(*Z.shape):
        e = np.zeros_like(Z)
        e[idx] = h
        G[idx] = (f(Z + e) - f(Z - e)) / (2 * h)
    return G


def test_elastic_embedding_objective_is_the_pairwise_sum_of_its_definition():
    P, rng = _random_P()
    Z = rng.normal(size=(40, 2))
    ee = ElasticEmbeddingObjective(P, repulsion=7.0)
    d2 = squareform(pdist(Z, "sqeuclidean"))
    off = ~np.eye(40, dtype=bool)
    expected = np.sum(P.toarray() * d2) + 7.0 * np.exp(-d2)[off].sum() / (40 * 39)
    assert ee.value(Z) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("scale", [0.3, 2.0])  # near and far points: the repulsion's kernel matters, then fades
def test_elastic_embedding_gradient_equals_finite_differences(scale):
    P, rng = _random_P()
    Z = scale * rng.normal(size=(40, 2))
    ee = ElasticEmbeddingObjective(P, repulsion=100.0)
    value, grad = ee.value_and_gradient(Z)
    assert value == pytest.approx(ee.value(Z), rel=1e-14)
    np.testing.assert_allclose(grad, _finite_differences(ee.value, Z), rtol=1e-5, atol=1e-8 * np.abs(grad).max())


def test_elastic_embedding_steps_never_raise_the_pulled_objective_and_approach_a_stationary_point():
    P, rng = _random_P(60)
    ee = ElasticEmbeddingObjective(P, repulsion=100.0)
    Z, U, mu = 0.1 * rng.normal(size=(60, 2)), rng.normal(size=(60, 2)), 0.05

    def pulled_value_and_gradient(Z):
        value, grad = ee.value_and_gradient(Z)
        return value + 0.5 * mu * np.sum((Z - U) ** 2), grad + mu * (Z - U)

    values, first_gradient = [pulled_value_and_gradient(Z)[0]], pulled_value_and_gradient(Z)[1]
    for _ in range(12):  # the line search accepts only decreases
        Z = ee.minimise(Z, U, mu, n_iter=25, tol=0.0)
        values.append(pulled_value_and_gradient(Z)[0])
    assert np.all(np.diff(values) <= 0) and values[-1] < values[0]
    # linear convergence (the attractive Hessian preconditions a repulsion-dominated problem here)
    assert np.abs(pulled_value_and_gradient(Z)[1]).max() < 1e-3 * np.abs(first_gradient).max()


def test_tsne_objective_and_gradient_equal_scikit_learns_exact_kl_divergence(opentsne):
    from sklearn.manifold._t_sne import _kl_divergence

    P, rng = _random_P(50)
    Z = 3 * rng.normal(size=(50, 2))
    value, grad = TSNEObjective(P).value_and_gradient(Z)
    kl, grad_sk = _kl_divergence(Z.ravel(), squareform(P.toarray(), checks=False), 1.0, 50, 2, compute_error=True)
    assert value == pytest.approx(kl, rel=1e-10)
    np.testing.assert_allclose(grad, grad_sk.reshape(50, 2), rtol=1e-9, atol=1e-14)


def test_opentsnes_gradient_is_a_quarter_of_the_exact_one(opentsne):
    # the Z steps run openTSNE's optimiser, whose gradient (and learning rates) are a quarter of the KL divergence's:
    # the pull is added in those units (tsne.pulled)
    P, rng = _random_P(50)
    Z = 3 * rng.normal(size=(50, 2))
    tsne = TSNEObjective(P)
    value, grad = opentsne.kl_divergence_bh(np.ascontiguousarray(Z), tsne.P, dof=1, bh_params={"theta": 0.0},
                                            should_eval_error=True)
    exact_value, exact_grad = tsne.value_and_gradient(Z)
    assert value == pytest.approx(exact_value, rel=1e-10)
    np.testing.assert_allclose(4.0 * grad, exact_grad, rtol=1e-9, atol=1e-14)


def test_tsne_objective_is_exact_when_points_coincide(opentsne):
    # a tree's embedding puts all the points of a leaf whose linear map is constant at one place. openTSNE's
    # Barnes-Hut sum (theta = 0) left coincident points out of the normaliser: the KL of 150 digits all at one
    # point came out -43.4 instead of +2.6, and the estimator kept such a collapsed tree as its best
    n = 60
    P, rng = _random_P(n)
    p = P.toarray()
    nz = p > 0
    tsne = TSNEObjective(P)

    def reference(Z):
        W = 1.0 / (1.0 + squareform(pdist(Z, "sqeuclidean")))
        np.fill_diagonal(W, 0.0)
        return float(np.sum(p[nz] * np.log(p[nz] / (W / W.sum())[nz])))

    one_point = np.full((n, 2), 1.5)
    assert tsne.value(one_point) == pytest.approx(np.sum(p[nz] * np.log(p[nz])) + np.log(n * (n - 1)), rel=1e-12)
    clusters = np.repeat(3 * rng.normal(size=(4, 2)), n // 4, axis=0)  # four leaves mapped to four points
    assert tsne.value(clusters) == pytest.approx(reference(clusters), rel=1e-12)
    value, grad = tsne.value_and_gradient(clusters)
    assert value == pytest.approx(reference(clusters), rel=1e-12)
    np.testing.assert_allclose(grad, _finite_differences(tsne.value, clusters), rtol=1e-5, atol=1e-9)


def test_tsne_pull_is_added_in_opentsnes_units_and_is_nothing_at_mu_zero(opentsne):
    kl_divergence_bh = opentsne.kl_divergence_bh
    P, rng = _random_P(30)
    Z, U, mu = rng.normal(size=(30, 2)), rng.normal(size=(30, 2)), 0.3
    params = dict(dof=1, bh_params={"theta": 0.0}, should_eval_error=True)
    plain = kl_divergence_bh(Z.copy(), P, **params)
    same = pulled(kl_divergence_bh, U, 0.0)(Z.copy(), P, **params)
    assert same[0] == plain[0]
    np.testing.assert_array_equal(same[1], plain[1])
    f = pulled(kl_divergence_bh, U, mu)

    def value(A):
        return f(np.ascontiguousarray(A), P, **params)[0]

    assert value(Z) == pytest.approx(plain[0] + 0.5 * mu * np.sum((Z - U) ** 2), rel=1e-12)
    # openTSNE's gradients are a quarter of the true one: the pull's must be too
    np.testing.assert_allclose(4 * f(Z.copy(), P, **params)[1], _finite_differences(value, Z), rtol=1e-5, atol=1e-9)


def test_tsne_z_step_with_mu_zero_is_opentsnes_own_optimiser(opentsne):
    P, rng = _random_P(60)
    Z0 = rng.normal(size=(60, 2))
    Z0 -= Z0.mean(axis=0)
    U = np.zeros_like(Z0)  # mean zero: the step's change of frame is no shift at all
    ours = TSNEObjective(P).minimise(Z0, U, 0.0, n_iter=30)
    theirs = Z0.copy(order="C")
    opentsne.gradient_descent()(theirs, P, 30, opentsne.kl_divergence_bh, learning_rate=60, momentum=0.8, theta=0.5,
                                n_jobs=1)
    np.testing.assert_array_equal(ours, theirs)


def test_tsne_z_step_lowers_the_pulled_objective(opentsne):
    X = load_digits().data[:150]
    P = joint_affinities(X, 10.0, 30)
    tsne = TSNEObjective(P)
    Z = tsne.free(spectral_start(P, 2), 300)
    U, mu = Z + 1.0, 1e-3

    def pulled_value(A):
        return tsne.value(A) + 0.5 * mu * np.sum((A - U) ** 2)

    # U is Z shifted, so the KL of U is the KL of Z: a good step removes the pull and keeps the KL
    pull = pulled_value(Z) - tsne.value(Z)
    assert pulled_value(tsne.minimise(Z, U, mu, 200)) < tsne.value(Z) + 0.1 * pull
    assert tsne.value(Z) < tsne.value(spectral_start(P, 2))  # the free embedding lowered the KL


def test_joint_affinities_are_lapTAOs_entropic_affinities_scaled_to_sum_one():
    X = load_digits().data[:120]
    P = joint_affinities(X, 10.0, 30)
    W = affinity_graph(X, n_neighbors=30, perplexity=10.0)
    np.testing.assert_allclose(P.toarray(), W.toarray() / W.sum(), rtol=1e-14)
    assert abs(P - P.T).max() == 0 and P.sum() == pytest.approx(1.0)
    # sparse rows: the same graph (non-zero pixels jittered, so no neighbours tie in distance)
    X = X + np.where(X > 0, np.random.default_rng(0).uniform(0, 0.01, size=X.shape), 0.0)
    P = joint_affinities(X, 10.0, 30)
    Ps = joint_affinities(sp.csr_matrix(X), 10.0, 30)
    np.testing.assert_allclose(Ps.toarray(), P.toarray(), rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(spectral_start(Ps, 2), spectral_start(P, 2), rtol=1e-6, atol=1e-12)


def test_spectral_start_is_the_leading_nontrivial_generalised_eigenvectors_scaled():
    P = joint_affinities(load_digits().data[:200], 10.0, 30)
    Y = spectral_start(P, 3)
    assert Y.flags.c_contiguous and Y[:, 0].std() == pytest.approx(1e-4)
    d = np.asarray(P.sum(axis=1)).ravel()
    lam = [(y @ (P @ y)) / (y @ (d * y)) for y in Y.T]
    for y, eigenvalue in zip(Y.T, lam):  # P y = lambda D y, and D-orthogonal to the constants
        np.testing.assert_allclose(P @ y, eigenvalue * d * y, atol=1e-8 * np.abs(d * y).max())
        assert abs(d @ y) < 1e-8 * np.abs(d * y).sum()
    assert 1 > lam[0] >= lam[1] >= lam[2]
    # the largest eigenvalues below the trivial one: none left out between them
    all_lam = np.linalg.eigvalsh(np.diag(d**-0.5) @ P.toarray() @ np.diag(d**-0.5))[::-1]
    np.testing.assert_allclose(lam, all_lam[1:4], rtol=1e-8)


def test_spectral_start_of_many_points_by_lanczos_equals_the_dense_eigendecomposition(monkeypatch):
    import taodist.embedding._affinities as affinities

    P = joint_affinities(load_digits().data[:300], 10.0, 30)
    dense = spectral_start(P, 2)
    monkeypatch.setattr(affinities, "DENSE_EIGEN_MAX", 100)  # 300 points: eigsh
    np.testing.assert_allclose(spectral_start(P, 2, random_state=0), dense, rtol=1e-4, atol=1e-4 * np.abs(dense).max())


@pytest.mark.parametrize("perplexity, n_neighbors, n, match", [
    (30.0, None, 31, "perplexity=30.0 is too large for n_samples = 31"),
    (5.0, 4, 50, "n_neighbors=4 must be larger than perplexity"),
    (5.0, 60, 50, "n_neighbors=60 must be less than n_samples"),
    (2.0, None, 2, "n_samples = 2"),
])
def test_neighbours_refuse_what_the_perplexity_cannot_have(perplexity, n_neighbors, n, match):
    with pytest.raises(ValueError, match=match):
        neighbours_for(perplexity, n_neighbors, n)


def test_neighbours_default_to_three_times_the_perplexity_within_the_samples():
    assert neighbours_for(10.0, None, 500) == 30
    assert neighbours_for(10.0, None, 20) == 19
