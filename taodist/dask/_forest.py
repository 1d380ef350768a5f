"""Forest trees on a Dask cluster: one task per tree, or the distributed single-tree path."""

import uuid

import numpy as np
import scipy.sparse as sp
from distributed import as_completed

from ..tao.bagging import fit_tree, sample_counts
from ..utils.progress import report
from ..utils.rows import as_rows, stack_rows
from ._data import entries_per_row, row_bytes, worker_memory_limits

#: a tree whose sample (float64 rows + float32 copy) exceeds this share of the
#: smallest worker's memory is not gathered into one task
_GATHER_FRACTION = 0.25


def fit_trees_on_workers(client, make_tree, data, seeds, n_samples_tree, bootstrap, fit_kwargs):
    """NumPy data: fit one tree per seed, each as one task; returns the fitted trees in seed order.

    The training arrays are scattered to the workers once; a tree task gets
    only its seed and draws its sample on the worker.
    """
    # Keys of this fit's own: content-hashed rows or seed-named trees would take the keys of an
    # earlier fit of the same data, which the scheduler frees as that fit's futures are released
    # ("lost dependencies").
    X, y, sw = client.scatter(list(data), broadcast=True, hash=False)
    run = uuid.uuid4().hex[:8]
    futures = [
        client.submit(fit_tree, make_tree, X, y, sw, int(seed), n_samples_tree, bootstrap, fit_kwargs,
                      key=f"taodist-forest-tree-{run}-{i}-{int(seed)}", pure=False)
        for i, seed in enumerate(seeds)
    ]
    try:
        for done, _ in enumerate(as_completed(futures, loop=client.loop), start=1):
            report("forest_tree", done=done, total=len(futures))  # may raise to stop the fit
        return client.gather(futures)
    finally:
        client.cancel([f for f in futures if not f.done()])


def fit_trees_from_chunks(client, make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs):
    """Dask X (e.g. Zarr): fit one tree per seed without ever gathering X.

    A tree's sample is drawn from its seed as integer counts per row. If the
    sample fits in a quarter of the smallest worker's memory, one small task
    per row block cuts that block's sampled rows where the block is read,
    and one task fits the tree on those pieces -- the same tree as an
    in-process forest. Otherwise the tree trains through the distributed
    single-tree path on all of X with the counts as sample weights (same
    objective; rows with count 0 weigh nothing), streaming X if it is larger
    than the workers' memory. The Dask config key ``taodist.out-of-core``
    (True/False) forces one path. At most one gathered tree per worker is in
    flight, which bounds the memory the samples take.
    """
    import dask

    n, d = X.shape
    setting = dask.config.get("taodist.out-of-core", "auto")
    all_limits = worker_memory_limits(client)
    limits = [m for m in all_limits if m > 0]
    budget = _GATHER_FRACTION * min(limits) if limits else np.inf
    # a sampled row's bytes: sparse rows by their stored entries (one counting pass), not their width
    bytes_per_row = row_bytes(X, entries_per_row(X)) if setting == "auto" and limits else 12 * d
    starts = np.r_[0, np.cumsum(X.chunks[0])]
    blocks = X.to_delayed().ravel()
    window = max(1, len(all_limits))
    run = uuid.uuid4().hex[:8]  # this fit's own task keys (see fit_trees_on_workers)
    trees, running = [None] * len(seeds), {}
    done = 0
    try:
        for i, seed in enumerate(seeds):
            seed = int(seed)
            counts = sample_counts(seed, n, n_samples_tree, bootstrap)
            rows = np.flatnonzero(counts)
            gather = (rows.size * bytes_per_row <= budget) if setting == "auto" else not setting
            if not gather:
                tree = make_tree(seed)
                tree._fit_rows(X, y, sample_weight * counts, client=client, streamable=True, **fit_kwargs)
                trees[i] = tree
                done += 1
                report("forest_tree", done=done, total=len(seeds))
                continue
            while len(running) >= window:
                done += _collect(running, trees, client, done, len(seeds))
            pieces = []
            for b, (lo, hi) in enumerate(zip(starts[:-1], starts[1:])):
                local = rows[(rows >= lo) & (rows < hi)] - lo
                if local.size:
                    pieces.append(dask.delayed(_take, pure=False)(blocks[b], local))
            futures = client.compute(pieces)
            running[client.submit(_fit_tree_on_pieces, make_tree, futures, y[rows],
                                  sample_weight[rows] * counts[rows], seed, fit_kwargs,
                                  key=f"taodist-forest-tree-{run}-{i}-{seed}", pure=False)] = i
        while running:
            done += _collect(running, trees, client, done, len(seeds))
        return trees
    finally:
        client.cancel(list(running))


def _collect(running, trees, client, done, total):
    """Wait for one running tree task; store its tree. Returns 1."""
    future = next(iter(as_completed(list(running), loop=client.loop)))
    trees[running.pop(future)] = future.result()
    report("forest_tree", done=done + 1, total=total)
    return 1


def _take(block, local_rows):
    return (block if sp.issparse(block) else np.asarray(block))[local_rows]


def _fit_tree_on_pieces(make_tree, pieces, y, sample_weight, seed, fit_kwargs):
    tree = make_tree(seed)
    tree._fit_rows(as_rows(stack_rows(pieces)), y, sample_weight, **fit_kwargs)
    return tree
