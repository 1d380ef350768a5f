"""The ``taodist`` command line (click ships with Dask)."""

import time

import click
import numpy as np


@click.group()
@click.version_option(package_name="taodist")
def main():
    """taodist: Tree Alternating Optimization trees, forests and LapTAO."""


@main.command()
@click.option("--dataset", default="mnist", show_default=True, help="Name of an .npz in ../shared/data.")
@click.option("--max-depth", default=8, show_default=True, type=click.IntRange(1, 20))
@click.option("--C", "C", default=10.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--max-iter", default=15, show_default=True, type=click.IntRange(0))
@click.option("--random-state", default=0, show_default=True, type=int)
def demo(dataset, max_depth, C, max_iter, random_state):
    """Fit a sparse oblique TAO tree on real data and report test error, size and time.

    Uses MNIST from ../shared/data; falls back to scikit-learn's bundled
    digits when that folder is absent.
    """
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from . import TAOClassifier
    from .datasets import load_dataset

    try:
        Xtr, ytr, Xte, yte = load_dataset(dataset)
        source = dataset
    except FileNotFoundError as exc:
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        click.echo(f"{exc} Falling back to scikit-learn's digits.")
        X, y = load_digits(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=0.25, random_state=0, stratify=y)
        source = "digits (scikit-learn)"
    click.echo(f"data: {source}, train {Xtr.shape}, test {Xte.shape}")
    clf = TAOClassifier(max_depth=max_depth, C=C, max_iter=max_iter, random_state=random_state)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf.fit(Xtr, ytr)
    seconds = time.perf_counter() - start
    tree = clf.tree_
    dense = tree.n_decision_nodes() * Xtr.shape[1]
    click.echo(f"TAO iterations: {clf.n_iter_}, objective {clf.history_[0]:.1f} -> {clf.history_[-1]:.1f}")
    click.echo(f"test error: {100 * (1 - clf.score(Xte, yte)):.2f}%  (train {100 * (1 - clf.score(Xtr, ytr)):.2f}%)")
    click.echo(
        f"tree: depth {tree.max_depth}, {tree.n_leaves()} leaves, {tree.n_decision_nodes()} decision nodes, "
        f"{tree.n_nonzero_weights()} non-zero weights ({100 * tree.n_nonzero_weights() / max(dense, 1):.1f}% of dense), "
        f"{tree.n_parameters()} parameters, {tree.inference_flops(np.asarray(Xte, dtype=np.float64)):.0f} FLOPs/prediction"
    )
    click.echo(f"fit time: {seconds:.1f}s")
