"""Shared test helpers: data makers, brute-force references, tree equality.

Kept in the package (like ``xgboost.testing``) so that tests of every layer,
and users checking their own builds, use the same oracles.
"""

from ._asserts import assert_tree_equal
from ._makers import make_oblique_classification, random_fitted_tree
from ._references import brute_force_axis_split, naive_apply, naive_objective

__all__ = [
    "assert_tree_equal",
    "brute_force_axis_split",
    "make_oblique_classification",
    "naive_apply",
    "naive_objective",
    "random_fitted_tree",
]
