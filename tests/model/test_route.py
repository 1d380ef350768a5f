"""The compiled walk: few rows on one thread, many on numba's threads, the same leaves."""

import numpy as np

from taodist.model.route import SERIAL_ROUTE_ROWS, route
from taodist.testing import random_fitted_tree


def test_rows_on_the_decision_boundaries_reach_the_same_leaf_in_small_and_large_batches():
    # Every row is put on one decision node's hyperplane (margin 0 up to rounding), where the order
    # of a margin's sums decides its side: a serial walk that summed in another order than the
    # parallel one would send some of these rows elsewhere.
    rng = np.random.default_rng(0)
    for seed, n_features in [(0, 5), (1, 17), (2, 64)]:
        tree = random_fitted_tree(4, n_features, 3, "oblique", random_state=seed)
        W = tree.weights.toarray()
        internal = np.flatnonzero(tree.children_left >= 0)
        n = 2 * SERIAL_ROUTE_ROWS
        X = rng.normal(size=(n, n_features))
        on = rng.choice(internal, n)
        w = W[on]
        X -= ((np.einsum("ij,ij->i", w, X) + tree.bias[on]) / np.einsum("ij,ij->i", w, w))[:, None] * w
        for dtype in (np.float64, np.float32):
            Xd = X.astype(dtype)
            whole = route(tree, Xd)  # one call, many rows: the parallel kernel
            pieces = np.concatenate([route(tree, Xd[i:i + 100]) for i in range(0, n, 100)])  # the serial one
            np.testing.assert_array_equal(pieces, whole)
