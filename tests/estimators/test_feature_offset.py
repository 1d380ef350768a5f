"""Columns far from zero (a year, a longitude, an air pressure): fitted shifted to start at zero, so where a
column's zero lies does not change the model, as it does not change CART's."""

import numpy as np
import pytest
import scipy.sparse as sp

from taodist import TAOClassifier, TAOForestClassifier, TAORegressor
from taodist.estimators.execution import feature_offset


def test_only_columns_whose_range_is_shorter_than_their_distance_from_zero_are_shifted():
    X = np.array([[2001.0, -93.7, 0.0, -1.0, 5.0, 3.0, 7.0],
                  [2009.0, -93.5, 1.0, 1.0, 9.0, 3.0, np.nan],
                  [2004.0, -93.6, 0.5, 0.0, 12.0, 3.0, 7.5]])
    # a year, a longitude, pixels from 0, a signed column, a column nearer zero than its range, a constant,
    # a column with a missing value
    np.testing.assert_array_equal(feature_offset(X), [2001.0, -93.7, 0.0, 0.0, 0.0, 0.0, 7.0])
    np.testing.assert_array_equal(feature_offset(sp.csr_matrix(X[:, :2])), [0.0, 0.0])


def _integer_rows(seed=0, n=600):
    """Columns that start at 0, integer valued (so that adding a year to them is exact), and labels."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 40, size=(n, 4)).astype(np.float64)
    X -= X.min(axis=0)
    y = (X[:, 0] + 0.5 * X[:, 1] > 30).astype(int) + (X[:, 2] > 25)
    return X, y


@pytest.mark.parametrize("make", [
    lambda: TAOClassifier(random_state=0),
    lambda: TAOClassifier(max_depth=3, leaf_type="linear", random_state=0),
    lambda: TAOClassifier(max_depth=3, node_type="axis", random_state=0),
])
def test_a_classifier_does_not_depend_on_where_a_column_far_from_zero_starts(make):
    X, y = _integer_rows()
    shift = np.array([2000.0, 0.0, -500.0, 1013.0])  # column 1 stays at zero
    near, far = make().fit(X, y), make().fit(X + shift, y)
    np.testing.assert_array_equal(far.predict(X + shift), near.predict(X))
    np.testing.assert_array_equal(far.tree_.weights.toarray(), near.tree_.weights.toarray())
    np.testing.assert_allclose(far.history_, near.history_, rtol=1e-12)
    np.testing.assert_allclose(far.feature_importances_, near.feature_importances_, rtol=1e-12)
    # the fitted tree takes raw rows: its hyperplanes and thresholds moved with the columns
    near.tree_.shift_features(shift)
    for name in ("bias", "threshold", "value"):
        np.testing.assert_allclose(getattr(far.tree_, name), getattr(near.tree_, name), rtol=1e-9, atol=1e-9)


def test_a_regressor_of_linear_leaves_does_not_depend_on_where_a_column_far_from_zero_starts():
    X, _ = _integer_rows(1)
    y = np.sin(X[:, 0] / 6.0) + 0.1 * X[:, 1] * (X[:, 2] > 20)
    shift = np.array([1990.0, 0.0, 0.0, -75.0])
    near = TAORegressor(random_state=0).fit(X, y)
    far = TAORegressor(random_state=0).fit(X + shift, y)
    np.testing.assert_allclose(far.predict(X + shift), near.predict(X), rtol=1e-9, atol=1e-9)


def test_a_forest_does_not_depend_on_where_a_column_far_from_zero_starts():
    X, y = _integer_rows(2)
    shift = np.array([0.0, 2000.0, 2000.0, 0.0])
    near = TAOForestClassifier(n_estimators=3, random_state=0).fit(X, y)
    far = TAOForestClassifier(n_estimators=3, random_state=0).fit(X + shift, y)
    np.testing.assert_array_equal(far.predict_proba(X + shift), near.predict_proba(X))


def test_a_year_column_is_as_usable_as_a_column_starting_at_zero():
    # the label is the year: divided by max |x| unshifted, the column varies over 0.5% of [-1, 1]
    rng = np.random.default_rng(3)
    year = rng.integers(1990, 2021, size=800).astype(np.float64)
    X = np.column_stack([year, rng.normal(size=800)])
    y = (year >= 2007).astype(int)
    model = TAOClassifier(max_depth=2, random_state=0).fit(X, y)
    assert np.mean(model.predict(X) != y) == 0.0
