"""``taodist demo``: a sparse oblique TAO tree on real data, from start to finish, and what to do next."""

import os
import time
import warnings

import click
import numpy as np
from click.core import ParameterSource
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split

from ..dask._client import cluster_workers, local_workers
from ..datasets import data_dir, dataset_width, load_dataset
from ..estimators.compile_ahead import compile_ahead
from ..estimators.tree import TAOClassifier
from ..io import save
from ..solvers.l1_logistic import first_run_compiles
from ..utils.progress import ProgressPrinter, reporting
from ._common import COMPILING_NOTICE, cluster_client, cluster_options, fail

_NEXT_STEPS = """\
next:
  keep and draw the tree:  {save}taodist inspect {model} --plot tree.png
                           (each decision node's weights drawn as an image; pip install 'taodist[plot]')
  your own data:           taodist fit job.yaml, with a job file such as
                               estimator: TAOClassifier
                               params: {{max_depth: 8, C: 30}}
                               train: data/train.npz      # arrays X and y, or a Zarr store (taodist convert)
                               validation: 0.1
                               output: models/tree.npz
  on a shared cluster:     taodist submit job.yaml --scheduler tcp://HOST:8786   (docs/guide/jobs.md)"""


@click.command()
@click.option("--dataset", default="mnist", show_default=True, help="Name of an .npz in ../shared/data.")
@click.option("--max-depth", default=8, show_default=True, type=click.IntRange(1, 20))
@click.option("--C", "C", default=30.0, show_default=True, type=click.FloatRange(min=0, min_open=True))
@click.option("--max-iter", default=15, show_default=True, type=click.IntRange(0))
@click.option("--random-state", default=0, show_default=True, type=int)
@click.option("--save", "save_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the fitted tree to this .npz file (for `taodist inspect --plot`).")
@cluster_options()
@click.option("--in-process", is_flag=True, help="Fit in this process (threads) instead of on a Dask cluster.")
def demo(dataset, max_depth, C, max_iter, random_state, save_path, scheduler, tls_ca_file, tls_cert, tls_key,
         in_process):
    """Fit a sparse oblique TAO tree on real data and report test error, size and time.

    Uses MNIST from ../shared/data (scikit-learn's bundled digits when that
    folder is absent). The fit runs on an embedded Dask LocalCluster (one
    worker process per core) unless --scheduler or --in-process is given;
    the training rows are row chunks on the workers. Progress (TAO
    iteration and level, objective, elapsed time, ETA) is printed as the
    fit goes.
    """
    if save_path and not os.path.isdir(os.path.dirname(os.path.abspath(save_path))):
        raise fail(f"--save {save_path}: folder {os.path.dirname(os.path.abspath(save_path))} does not exist; "
                   "create it or choose another path.")
    embedded = not in_process and scheduler is None
    if embedded:
        click.echo(f"starting a local Dask cluster ({local_workers()} worker processes)...")
    cluster_start = time.perf_counter()
    # the cluster first: a wrong --scheduler is reported before minutes of data loading
    with warnings.catch_warnings(), cluster_client(scheduler, in_process, tls_ca_file, tls_cert, tls_key) as client:
        warnings.simplefilter("ignore", ConvergenceWarning)
        startup = time.perf_counter() - cluster_start
        if client is not None:
            click.echo(f"Dask cluster: {len(cluster_workers(client))} workers, dashboard "
                       f"{client.dashboard_link}")
        # the papers' MNIST setting, fitted on every training row: early_stopping="auto" would hold a tenth out
        clf = TAOClassifier(max_depth=max_depth, C=C, max_iter=max_iter, random_state=random_state,
                            early_stopping=False)
        compiling = first_run_compiles()
        if compiling:
            click.echo(COMPILING_NOTICE)
            width = dataset_width(dataset)
            if client is not None and width is not None:  # the workers compile while this process loads the data
                compile_ahead(client, clf, width, dtype=np.float32)
        Xtr, ytr, Xte, yte, source = _load_data(dataset)
        click.echo(f"data: {source}, train {Xtr.shape}, test {Xte.shape}")
        click.echo(f"fitting a depth-{max_depth} sparse oblique tree (C={C:g}): at most {max_iter} TAO iterations "
                   f"of {max_depth + 1} levels each; the ETA assumes all of them run (TAO usually stops earlier)")
        start = time.perf_counter()
        with ProgressPrinter() as printer, reporting(printer):
            clf.fit(Xtr, ytr, client=client)  # with a client: row blocks scattered to the workers
        seconds = time.perf_counter() - start
        click.echo("fit done" + (", stopping the local cluster..." if embedded else ""))
    tree = clf.tree_
    dense = tree.n_decision_nodes() * Xtr.shape[1]
    click.echo(f"TAO iterations: {clf.n_iter_}, objective {clf.history_[0]:.1f} -> {clf.history_[-1]:.1f}")
    click.echo(f"test error: {100 * (1 - clf.score(Xte, yte)):.2f}%  (train {100 * (1 - clf.score(Xtr, ytr)):.2f}%)")
    click.echo(
        f"tree: depth {tree.max_depth}, {tree.n_leaves()} leaves, {tree.n_decision_nodes()} decision nodes, "
        f"{tree.n_nonzero_weights()} non-zero weights ({100 * tree.n_nonzero_weights() / max(dense, 1):.1f}% of dense), "
        f"{tree.n_parameters()} parameters, {tree.inference_flops(np.asarray(Xte, dtype=np.float64)):.0f} FLOPs/prediction"
    )
    click.echo(f"fit time: {seconds:.1f}s" + (f" (plus {startup:.1f}s to start the local cluster)" if embedded else ""))
    if save_path:
        save(clf, save_path, metadata={"demo": {"dataset": source, "fit_seconds": seconds}})
        click.echo(f"model written to {save_path}")
    click.echo(_NEXT_STEPS.format(save="" if save_path else "taodist demo --save demo.npz && ",
                                  model=save_path or "demo.npz"))


def _load_data(dataset):
    """``(X_train, y_train, X_test, y_test, source)``: the benchmark set; scikit-learn's digits in place of the
    default set when it is missing. A set named with ``--dataset`` that is not there is an error."""
    try:
        return (*load_dataset(dataset), dataset)
    except FileNotFoundError as exc:
        named = click.get_current_context().get_parameter_source("dataset") is ParameterSource.COMMANDLINE
        if named:
            folder = data_dir()
            available = sorted(p.stem for p in folder.glob("*.npz")) if folder is not None else []
            raise fail(f"{exc} Available: {', '.join(available) if available else 'none'}; or leave "
                       "--dataset out to fit MNIST (scikit-learn's digits when MNIST is absent).") from None
        click.echo(f"{exc} Falling back to scikit-learn's digits.")
        X, y = load_digits(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X / 16.0, y, test_size=0.25, random_state=0, stratify=y)
        return Xtr, ytr, Xte, yte, "digits (scikit-learn)"
