"""Bagging for TAO forests: each tree's sample, and fitting trees on it.

Every tree's sample is generated from one seed per tree (like
scikit-learn's ``_generate_sample_indices``), so a tree task ships a seed,
not rows, and the forest is the same whether the trees run in worker
processes here or as tasks on a Dask cluster (:mod:`taodist.dask._forest`).
"""

import numpy as np
from joblib import Parallel, delayed

from ..utils.progress import report


def sample_counts(seed, n_samples, max_samples, bootstrap):
    """How many times each row appears in a tree's sample (a deterministic draw)."""
    rng = np.random.RandomState(seed)
    if bootstrap:
        return np.bincount(rng.randint(0, n_samples, size=max_samples), minlength=n_samples)
    counts = np.zeros(n_samples, dtype=np.int64)
    counts[rng.choice(n_samples, size=max_samples, replace=False)] = 1
    return counts


def fit_tree(make_tree, X, y, sample_weight, seed, n_samples_tree, bootstrap, fit_kwargs):
    """Fit one forest tree on its sample; returns the fitted single-tree estimator.

    The sample is expressed as integer weights on the rows it contains
    (repeated rows count several times), so only those rows are copied.
    """
    counts = sample_counts(seed, X.shape[0], n_samples_tree, bootstrap)
    rows = np.flatnonzero(counts)
    tree = make_tree(seed)
    tree._fit_rows(X[rows], y[rows], sample_weight[rows] * counts[rows], **fit_kwargs)
    return tree


def fit_trees_locally(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs, *, n_jobs):
    """One tree per seed in ``n_jobs`` joblib worker processes; returns them in seed order.

    Processes (joblib/loky, which memory-maps X instead of copying it) rather
    than threads: liblinear node solves hold a process-wide lock.
    """
    trees = []
    for tree in Parallel(n_jobs=n_jobs, return_as="generator")(
        delayed(fit_tree)(make_tree, X, y, sample_weight, s, n_samples_tree, bootstrap, fit_kwargs) for s in seeds
    ):
        trees.append(tree)
        report("forest_tree", done=len(trees), total=len(seeds))
    return trees


def out_of_bag_mean(trees, X, seeds, n_samples_tree, bootstrap):
    """Per row of ``X`` (the forest's training rows), the mean prediction of the trees whose sample left it out.

    The samples are drawn again from the trees' ``seeds`` (:func:`sample_counts`).
    Returns ``(mean, counts)``: ``mean`` of shape (n_samples, n_outputs), zero
    where ``counts``, the number of trees that left the row out, is zero.
    """
    n = X.shape[0]
    total, counts = None, np.zeros(n, dtype=np.int64)
    for tree, seed in zip(trees, seeds):
        left_out = np.flatnonzero(sample_counts(seed, n, n_samples_tree, bootstrap) == 0)
        if len(left_out) == 0:
            continue
        out = np.asarray(tree.tree_.predict(X[left_out]), dtype=np.float64).reshape(len(left_out), -1)
        if total is None:
            total = np.zeros((n, out.shape[1]))
        total[left_out] += out
        counts[left_out] += 1
    if total is None:
        return np.zeros((n, 1)), counts
    seen = counts > 0
    total[seen] /= counts[seen, None]
    return total, counts
