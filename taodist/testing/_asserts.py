"""Tree equality for tests."""

import numpy as np


def assert_tree_equal(a, b):
    """Assert two trees have identical structure and parameters."""
    for name in ("children_left", "children_right", "kind", "feature", "threshold", "bias", "value"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.weights.toarray(), b.weights.toarray(), err_msg="weights")
    assert (a.leaf_coef is None) == (b.leaf_coef is None), "leaf_coef presence"
    if a.leaf_coef is not None:
        np.testing.assert_array_equal(a.leaf_coef.toarray(), b.leaf_coef.toarray(), err_msg="leaf_coef")
    for name in ("leaf_range", "missing_column", "missing_right"):
        assert (getattr(a, name) is None) == (getattr(b, name) is None), f"{name} presence"
        if getattr(a, name) is not None:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    assert (a.task, a.leaf_type, a.leaf_classes) == (b.task, b.leaf_type, b.leaf_classes)
