"""The adaptive l1 penalty (``penalty_factors="auto"``): a column's weights cost more the less a univariate F test
finds it related to the target, so that columns of noise are dear to use in a hyperplane or a Lasso leaf."""

import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.feature_selection import f_classif, f_regression

from taodist import TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor, load, save
from taodist.estimators import execution
from taodist.estimators.relevance import MAX_PENALTY_FACTOR, f_test_pvalues, relevance_penalty_factors
from taodist.testing import assert_tree_equal


def _signal_and_noise(seed, n=240, n_noise=20):
    """Two informative columns (one binary) and ``n_noise`` columns of noise; three classes."""
    rng = np.random.default_rng(seed)
    X = np.column_stack([rng.normal(size=n), rng.integers(0, 2, n), rng.normal(size=(n, n_noise))])
    y = (X[:, 0] + 0.8 * X[:, 1] + 0.4 * rng.normal(size=n) > 0.4).astype(int) + (X[:, 0] > 1.2)
    return X, y


def test_f_tests_equal_scikit_learns_with_unit_weights():
    X, y = _signal_and_noise(0)
    X[:, 5] = 3.0  # a constant column: p = 1
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # scikit-learn's note of the constant column
        expected = np.nan_to_num(f_classif(X, y)[1], nan=1.0)
    np.testing.assert_allclose(f_test_pvalues(X, y), expected, rtol=1e-9, atol=1e-300)
    # sparse rows (class sums kept sparse): the same tests
    np.testing.assert_allclose(f_test_pvalues(sp.csr_matrix(X), y), expected, rtol=1e-8, atol=1e-300)
    target = 2.0 * X[:, 0] - X[:, 3] + np.random.default_rng(1).normal(size=len(y))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        expected = np.nan_to_num(f_regression(X, target)[1], nan=1.0)
    np.testing.assert_allclose(f_test_pvalues(X, target, task="regression"), expected, rtol=1e-9, atol=1e-300)


def test_f_tests_of_several_outputs_keep_the_least_p_value_and_weights_count_as_frequencies():
    X, y = _signal_and_noise(2)
    Y = np.column_stack([X[:, 0] + 0.1 * np.arange(len(y)) % 3, X[:, 4]])
    both = f_test_pvalues(X, Y, task="regression")
    each = [f_test_pvalues(X, Y[:, k], task="regression") for k in range(2)]
    np.testing.assert_allclose(both, np.minimum(*each), rtol=1e-12)
    w = np.random.default_rng(3).uniform(0.5, 2.0, len(y))
    # rescaled to sum to the rows: the same tests for any multiple of the weights
    np.testing.assert_allclose(f_test_pvalues(X, y, w), f_test_pvalues(X, y, 7.0 * w), rtol=1e-9)
    assert not np.allclose(f_test_pvalues(X, y, w), f_test_pvalues(X, y))


def test_factors_follow_the_p_values_within_their_bounds():
    X, y = _signal_and_noise(4)
    factors = relevance_penalty_factors(X, y, None, "classification")
    p = f_test_pvalues(X, y)
    inverse = 1.0 / np.clip(-np.log10(p) / 3.0, 1.0 / MAX_PENALTY_FACTOR, 1.0)
    np.testing.assert_array_equal(factors, np.round(inverse * 16) / 16)  # to a sixteenth
    assert np.all(np.abs(factors - inverse) <= 1 / 32)
    assert factors[0] == 1.0 and factors[1] == 1.0  # p <= 0.001: the plain penalty
    assert np.median(factors[2:]) > 3.0 and factors.max() == MAX_PENALTY_FACTOR
    # sparse rows: the same tests, so a sparse and a dense fit of the same values give the same model
    np.testing.assert_array_equal(relevance_penalty_factors(sp.csr_matrix(X), y, None, "classification"), factors)
    target = X[:, 0] + np.random.default_rng(4).normal(size=len(y))
    np.testing.assert_allclose(f_test_pvalues(sp.csr_matrix(X), target, task="regression"),
                               f_test_pvalues(X, target, task="regression"), rtol=1e-9)


def test_factors_are_tested_on_rows_at_a_fixed_stride(monkeypatch):
    monkeypatch.setattr(execution, "FENCE_ROWS", 50)
    X, y = _signal_and_noise(5, n=240)
    w = np.linspace(0.5, 1.5, len(y))
    inverse = 1.0 / np.clip(-np.log10(f_test_pvalues(X[::5], y[::5], w[::5])) / 3.0, 0.1, 1.0)
    np.testing.assert_array_equal(relevance_penalty_factors(X, y, w, "classification"), np.round(inverse * 16) / 16)
    assert not np.array_equal(relevance_penalty_factors(X[:50], y[:50], w[:50], "classification"),
                              relevance_penalty_factors(X, y, w, "classification"))


def test_columns_of_noise_get_less_weight_and_the_tree_fits_less_noise():
    X, y = _signal_and_noise(6)
    X_test, y_test = _signal_and_noise(7, n=2000)
    auto = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    plain = TAOClassifier(max_depth=3, random_state=0, penalty_factors=None).fit(X, y)
    assert plain.penalty_factors_ is None
    np.testing.assert_allclose(auto.penalty_factors_, relevance_penalty_factors(X, y, None, "classification"))

    def noise_share(model):  # the share of the weights, in units of each column's spread, on the noise
        W = abs(model.tree_.weights).toarray() * X.std(axis=0)
        return W[:, 2:].sum() / W.sum()

    assert noise_share(auto) < 0.7 * noise_share(plain)
    assert auto.score(X_test, y_test) > plain.score(X_test, y_test) + 0.02


def test_axis_aligned_trees_of_constant_leaves_have_no_factors():
    X, y = _signal_and_noise(8)
    auto = TAOClassifier(max_depth=3, node_type="axis", random_state=0).fit(X, y)
    plain = TAOClassifier(max_depth=3, node_type="axis", random_state=0, penalty_factors=None).fit(X, y)
    assert auto.penalty_factors_ is None
    assert_tree_equal(auto.tree_, plain.tree_)


def test_regression_lasso_leaves_pay_the_factors_too():
    X, y = _signal_and_noise(9)
    target = X[:, 0] + 0.5 * X[:, 1] + 0.3 * np.random.default_rng(9).normal(size=len(y))
    auto = TAORegressor(max_depth=2, random_state=0).fit(X, target)
    plain = TAORegressor(max_depth=2, random_state=0, penalty_factors=None).fit(X, target)
    np.testing.assert_allclose(auto.penalty_factors_, relevance_penalty_factors(X, target, None, "regression"))

    def leaf_noise(model):
        coef = abs(model.tree_.leaf_coef).toarray() * X.std(axis=0)
        return coef[:, 2:].sum() / coef.sum()

    assert leaf_noise(auto) < leaf_noise(plain)


@pytest.mark.parametrize("Forest, task", [(TAOForestClassifier, "classification"),
                                          (TAOForestRegressor, "regression")])
def test_forests_test_the_columns_once_for_all_their_trees(Forest, task):
    X, y = _signal_and_noise(10)
    target = y if task == "classification" else X[:, 0] + X[:, 1]
    forest = Forest(n_estimators=3, max_depth=2, random_state=0, penalty_factors="auto").fit(X, target)
    np.testing.assert_allclose(forest.penalty_factors_, relevance_penalty_factors(X, target, None, task))
    for tree in forest.estimators_:
        assert tree.penalty_factors is None  # (fitted in worker processes: equal, not the same array)
        np.testing.assert_array_equal(tree.penalty_factors_, forest.penalty_factors_)
    # the regression forests' default; the classification forests' is the plain penalty
    assert Forest().penalty_factors == ("auto" if task == "regression" else None)
    plain = Forest(n_estimators=3, max_depth=2, random_state=0, penalty_factors=None).fit(X, target)
    assert plain.penalty_factors_ is None and all(t.penalty_factors_ is None for t in plain.estimators_)


def test_a_saved_model_keeps_its_factors_and_an_edited_file_is_refused(tmp_path):
    X, y = _signal_and_noise(11)
    model = TAOClassifier(max_depth=2, random_state=0).fit(X, y)
    path = tmp_path / "model.npz"
    save(model, path)
    np.testing.assert_array_equal(load(path).penalty_factors_, model.penalty_factors_)
    with np.load(path) as data:
        arrays = dict(data)
    arrays["fitted/penalty_factors_"] = arrays["fitted/penalty_factors_"][:3].copy()
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    with pytest.raises(ValueError, match="penalty_factors_ must hold a finite factor of at least 1 for each of the 22"):
        load(bad)


@pytest.mark.parametrize("value", ["f_test", 1.0, True])
def test_penalty_factors_must_be_auto_or_none(value):
    X, y = _signal_and_noise(12, n=60)
    with pytest.raises(ValueError, match="penalty_factors"):
        TAOClassifier(penalty_factors=value).fit(X, y)
