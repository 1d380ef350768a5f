"""Forest trees as tasks on a Dask cluster."""

from distributed import as_completed

from .._forest import fit_tree
from .._progress import report


def fit_trees_on_cluster(client, make_tree, data, seeds, n_samples_tree, bootstrap, fit_kwargs):
    """Fit one tree per seed, each as one task; returns the fitted trees in seed order.

    The training arrays are scattered to the workers once; a tree task gets
    only its seed and draws its sample on the worker.
    """
    X, y, sw = client.scatter(list(data), broadcast=True)
    futures = [
        client.submit(fit_tree, make_tree, X, y, sw, int(seed), n_samples_tree, bootstrap, fit_kwargs,
                      key=f"taodist-forest-tree-{i}-{int(seed)}", pure=False)
        for i, seed in enumerate(seeds)
    ]
    try:
        for done, _ in enumerate(as_completed(futures, loop=client.loop), start=1):
            report("forest_tree", done=done, total=len(futures))  # may raise to stop the fit
        return client.gather(futures)
    finally:
        client.cancel([f for f in futures if not f.done()])
