"""Feature importances of a fitted tree: how much of the training rows' routing each feature carries."""

import numpy as np
import scipy.sparse as sp

from .kinds import AXIS, OBLIQUE


def feature_importances(tree, node_counts, scale):
    """Each feature's share of the routing decisions made for the training rows.

    Every decision node hands out its training rows' count (``node_counts``)
    over the features it decides on: an axis node all to its feature, an
    oblique node in proportion to the magnitude of its weights on unit-free
    features (``|w_j| * scale[j]``, with ``scale`` the features' scale in the
    fit: max |x|, or a regression tree's spread with linear leaves; so a
    feature's units do not change its share). The shares are
    summed over the nodes and normalised to sum to 1 (all zeros for a tree
    that is a single leaf). Like scikit-learn's impurity importances these
    describe the fitted tree, not the data: a feature the l1 penalty left out
    has importance 0 even if it is as informative as one kept.

    Parameters
    ----------
    tree : Tree
    node_counts : array-like of shape (n_nodes,)
        Training rows reaching each node.
    scale : ndarray of shape (n_features,)

    Returns
    -------
    importances : ndarray of shape (n_features,)
    """
    counts = np.asarray(node_counts, dtype=np.float64)
    out = np.zeros(tree.n_features)
    axis = np.flatnonzero(tree.kind == AXIS)
    np.add.at(out, tree.feature[axis], counts[axis])
    oblique = np.flatnonzero(tree.kind == OBLIQUE)
    if len(oblique):
        mass = abs(tree.weights[oblique]) @ sp.diags(np.asarray(scale, dtype=np.float64))
        totals = np.asarray(mass.sum(axis=1)).ravel()
        share = np.where(totals > 0, counts[oblique] / np.where(totals > 0, totals, 1.0), 0.0)
        out += np.asarray((sp.diags(share) @ mass).sum(axis=0)).ravel()
    total = out.sum()
    return out / total if total > 0 else out
