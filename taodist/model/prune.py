"""Post-processing after TAO: remove dead branches and pure subtrees.

* A **dead branch** is a child that no training point reaches; its parent is
  replaced by the other child's subtree. With an l1 penalty a node whose
  weights become zero sends everything one way, so this is how TAO prunes.
* A **pure subtree** is one whose leaves all give the same prediction; it is
  replaced by a single leaf. For regression and linear leaves that means
  identical leaf parameters; for constant classification leaves the same
  predicted class, the merged leaf holding the pooled class distribution.

Neither changes the prediction of any training point (a test checks it).
"""

import numpy as np


def prune(tree, X, sample_weight=None):
    """Return a pruned, compact copy of ``tree`` given its training inputs."""
    if sample_weight is None:
        sample_weight = np.ones(X.shape[0])
    path = tree.decision_path(X)
    visits = np.asarray(path.sum(axis=0)).ravel()
    reach = np.asarray(path.T @ sample_weight).ravel()
    return prune_with_counts(tree, visits, reach)


def prune_with_counts(tree, visits, reach):
    """Prune given, per node, the training rows reaching it and their summed weight.

    The counts can be reduced over row chunks on a cluster. Dropping a dead
    branch does not change which rows reach the kept nodes, so the counts
    carry over to the compacted tree.
    """
    tree, kept = _drop_dead_branches(tree, visits)
    return _merge_pure_subtrees(tree, np.asarray(reach, dtype=np.float64)[kept])


def _drop_dead_branches(tree, visits):
    """The tree without dead branches, and the old id of every kept node."""
    t = tree.copy()
    cl, cr = t.children_left, t.children_right

    def live(i):
        # follow single-child chains down to the first node that splits data
        while cl[i] >= 0 and (visits[cl[i]] == 0) != (visits[cr[i]] == 0):
            i = cr[i] if visits[cl[i]] == 0 else cl[i]
        return i

    root = live(0)
    stack = [root]
    while stack:
        i = stack.pop()
        if cl[i] >= 0:
            cl[i], cr[i] = live(cl[i]), live(cr[i])
            stack += [cl[i], cr[i]]
    return t.subtree(root, return_order=True)


def _merge_pure_subtrees(tree, reach):
    t = tree.copy()
    n = t.n_nodes
    same = np.zeros(n, dtype=bool)  # subtree below i predicts one thing
    order = np.argsort(t.node_depth, kind="stable")[::-1]  # children before parents
    for i in order:
        if t.children_left[i] < 0:
            same[i] = True
            continue
        a, b = t.children_left[i], t.children_right[i]
        if same[a] and same[b] and t.leaf_model.same_prediction(t, a, b):
            same[i] = True
            t.leaf_model.merge(t, i, a, b, reach[a], reach[b])
            reach[i] = reach[a] + reach[b]
    collapse = [i for i in range(n) if same[i] and t.children_left[i] >= 0]
    # only the topmost collapsed nodes matter; subtree() stops descending there
    return t.subtree(0, replace_with_leaf=collapse)


