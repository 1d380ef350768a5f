"""The ``taodist`` command line (click ships with Dask)."""

import time

import click
import numpy as np


@click.group()
@click.version_option(package_name="taodist")
def main():
    """taodist: Tree Alternating Optimization trees, forests and LapTAO."""


def cluster_options(required=False):
    """--scheduler plus the TLS files of distributed's ``Security`` (mutual TLS)."""

    def decorate(command):
        for option in reversed([
            click.option("--scheduler", required=required, envvar="DASK_SCHEDULER_ADDRESS",
                         help="Address of a Dask scheduler (tcp:// or tls://; env DASK_SCHEDULER_ADDRESS)."
                         + ("" if required else " Default: an embedded LocalCluster.")),
            click.option("--tls-ca-file", type=click.Path(exists=True, dir_okay=False),
                         help="CA certificate for a tls:// scheduler."),
            click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False),
                         help="This client's certificate (signed by that CA)."),
            click.option("--tls-key", type=click.Path(exists=True, dir_okay=False),
                         help="This client's private key (if not inside --tls-cert)."),
        ]):
            command = option(command)
        return command

    return decorate


def _security(tls_ca_file, tls_cert, tls_key):
    if not (tls_ca_file or tls_cert or tls_key):
        return None  # distributed then reads its config (distributed.comm.tls.*)
    if not (tls_ca_file and tls_cert):
        raise click.UsageError("TLS needs both --tls-ca-file and --tls-cert (and --tls-key unless the "
                               "certificate file holds the key).")
    from distributed.security import Security

    return Security(tls_ca_file=tls_ca_file, tls_client_cert=tls_cert, tls_client_key=tls_key,
                    require_encryption=True)


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
  on a shared cluster:     taodist submit job.yaml --scheduler tcp://HOST:8786   (README: "Jobs on a shared cluster")"""


@main.command()
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
    import os
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    from .. import TAOClassifier
    from ..datasets import load_dataset
    from ..utils.progress import ProgressPrinter, reporting

    if save_path and not os.path.isdir(os.path.dirname(os.path.abspath(save_path))):
        raise _fail(f"--save {save_path}: folder {os.path.dirname(os.path.abspath(save_path))} does not exist; "
                    "create it or choose another path.")
    embedded = not in_process and scheduler is None
    if embedded:
        click.echo(f"starting a local Dask cluster ({_local_workers()} worker processes)...")
    cluster_start = time.perf_counter()
    # the cluster first: a wrong --scheduler is reported before minutes of data loading
    with warnings.catch_warnings(), _client(scheduler, in_process, tls_ca_file, tls_cert, tls_key) as client:
        warnings.simplefilter("ignore", ConvergenceWarning)
        startup = time.perf_counter() - cluster_start
        if client is not None:
            from ..dask._client import cluster_workers

            click.echo(f"Dask cluster: {len(cluster_workers(client))} workers, dashboard "
                       f"{client.dashboard_link}")
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
        from ..io import save

        save(clf, save_path, metadata={"demo": {"dataset": source, "fit_seconds": seconds}})
        click.echo(f"model written to {save_path}")
    click.echo(_NEXT_STEPS.format(save="" if save_path else "taodist demo --save demo.npz && ",
                                  model=save_path or "demo.npz"))


def _local_workers():
    import os

    return os.cpu_count() or 1


def _silence_distributed_logs(level=None):
    """Set every ``distributed`` logger of this process to ``level`` (default CRITICAL).

    Run in the worker processes too (through ``Client.run``) just before an
    embedded cluster is shut down.

    Returns
    -------
    dict
        The previous level of each logger, to restore.
    """
    import logging

    level = logging.CRITICAL if level is None else level
    names = ["distributed"] + [n for n in list(logging.root.manager.loggerDict) if n.startswith("distributed.")]
    old = {}
    for name in names:
        logger = logging.getLogger(name)
        old[name] = logger.level
        logger.setLevel(level)
    return old


def _shutdown_quietly(client, cluster):
    """Close ``client``, then ``cluster``, without distributed's shutdown chatter.

    Closing a LocalCluster makes its scheduler, nannies and workers log
    heartbeat failures, "worker process still alive, killing" and
    tracebacks of connections closed under them: noise after a run that
    went well, which reads like a failure. The ``distributed`` loggers of
    every process are silenced for the shutdown only (anything logged while
    the work ran was shown as usual), and the client goes first so that
    nothing of ours still talks to the scheduler while it and the workers stop.
    """
    import contextlib
    import logging

    with contextlib.suppress(Exception):  # workers already gone need no silencing
        client.run(_silence_distributed_logs, on_error="ignore")
    old = _silence_distributed_logs()
    try:
        client.close()
        cluster.close()
    finally:
        for name, level in old.items():
            logging.getLogger(name).setLevel(level)


def _embedded_cluster():
    """A context yielding a client of a new LocalCluster on 127.0.0.1, shut down quietly on exit."""
    import contextlib

    from distributed import Client

    from ..dask._client import embedded_local_cluster

    @contextlib.contextmanager
    def run():
        cluster = embedded_local_cluster(n_workers=_local_workers(), threads_per_worker=1, processes=True,
                                         host="127.0.0.1", dashboard_address=":0")
        try:
            client = Client(cluster)
        except BaseException:
            cluster.close()
            raise
        try:
            yield client
        finally:
            _shutdown_quietly(client, cluster)

    return run()


def _client(scheduler, in_process=False, tls_ca_file=None, tls_cert=None, tls_key=None):
    """A context yielding None (in-process), a client of ``scheduler``, or an embedded cluster's."""
    import contextlib

    if in_process:
        return contextlib.nullcontext(None)
    security = _security(tls_ca_file, tls_cert, tls_key)
    if scheduler is None:
        return _embedded_cluster()
    return _connect(scheduler, security)


def _handshake(address, security, timeout):
    """Open and close one Dask comm to ``address`` within ``timeout`` seconds, handshake included.

    distributed's ``connect`` bounds the connection but not the handshake
    read that follows, so a server that accepts and then says nothing (an
    HTTP server, the dashboard's port) would hang ``Client()`` for ever.
    """
    import asyncio

    from distributed.comm import connect
    from distributed.security import Security

    args = (security or Security()).get_connection_args("client")

    async def probe():
        comm = await asyncio.wait_for(connect(address, timeout=timeout, **args), timeout)
        await comm.close()

    try:
        asyncio.run(probe())
    except asyncio.TimeoutError:
        raise TimeoutError(f"no Dask handshake within {timeout}s (is this a Dask scheduler's address?)") from None


def _fail(message):
    """A click error printed as the single line ``Error: message`` (exit code 1)."""
    return click.ClickException(" ".join(str(message).split()))


def _connect(address, security=None, timeout=10):
    """A client of the scheduler at ``address``, or a one-line error naming the problem and the fix.

    A malformed address is refused before any connection; a closed port is
    reported at once (a plain TCP probe) rather than after the client's
    connect timeout; anything else that goes wrong while connecting (a
    timeout, a TLS handshake refused, something that is not a Dask
    scheduler answering) becomes the same kind of one-line error.
    """
    import socket

    from distributed import Client
    from distributed.comm.addressing import parse_address, parse_host_port

    hint = "expected tcp://HOST:PORT or tls://HOST:PORT, e.g. tcp://scheduler:8786"
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except (ValueError, TypeError) as exc:
        raise _fail(f"--scheduler {address!r} is not a scheduler address ({exc}); {hint}.")
    if scheme not in ("tcp", "tls", "inproc", "ws", "wss", "ucx"):
        raise _fail(f"--scheduler {address!r}: unknown protocol {scheme!r}; {hint}.")
    if scheme == "tls" and security is None:
        import dask

        if not dask.config.get("distributed.comm.tls.ca-file", None):
            raise _fail(
                f"{address} is a TLS scheduler: pass --tls-ca-file and --tls-cert (and --tls-key), or set "
                "distributed.comm.tls.ca-file / .client.cert / .client.key in the Dask config.")
    if host is not None:
        probe = min(timeout, 5)
        try:
            socket.create_connection((host, port), timeout=probe).close()
        except OSError as exc:
            reason = f"no answer within {probe}s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            raise _fail(f"Could not reach the Dask scheduler at {address}: {reason}. Check the address and that "
                        "the scheduler is running (and that no firewall is in the way).")
    try:
        _handshake(address, security, timeout)
        return Client(address, timeout=timeout, security=security)
    except (OSError, TimeoutError) as exc:
        raise _fail(f"Could not reach the Dask scheduler at {address} within {timeout}s: {exc}. Check the "
                    "address, that the scheduler is running, and the TLS files for a tls:// scheduler.")
    except Exception as exc:  # e.g. something that is not a Dask scheduler listening on that port
        raise _fail(f"Could not talk to a Dask scheduler at {address}: {type(exc).__name__}: {exc}. Check that "
                    "this is the scheduler's address (not its dashboard's) and that both sides run the same "
                    "dask/distributed versions.")


@main.command()
@click.argument("job_file", type=click.Path(dir_okay=False))
@cluster_options()
@click.option("--in-process", is_flag=True, help="Fit in this process instead of on a Dask cluster.")
def fit(job_file, scheduler, tls_ca_file, tls_cert, tls_key, in_process):
    """Run the training job JOB_FILE (YAML) here, wait for it and write its model.

    Keys: estimator, params, train, optional validation (fraction or data),
    output. The job is validated before any data is read. Progress (TAO
    iteration, level, objective, elapsed, ETA; trees of a forest) is printed.
    Zarr data is handed to the cluster lazily (read chunk by chunk where the
    tasks run); with --in-process it is read into memory.
    """
    from ..service import run_job
    from ..utils.progress import ProgressPrinter

    job = _load_job(job_file)
    with _client(scheduler, in_process, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        if scheduler is not None:  # a shared cluster: refuse an output that one of its jobs is writing
            from ..service.cluster import check_output_free

            check_output_free(client, job)
        if client is not None:
            click.echo(f"Dask dashboard: {client.dashboard_link}")
        with ProgressPrinter() as printer:
            def log(line):
                printer.finish()  # a progress line left open on a terminal
                click.echo(line)

            run_job(job, client=client, log=log, progress=printer)


def _load_job(job_file):
    from ..service import JobError, load_job

    try:
        return load_job(job_file)
    except JobError as exc:
        raise _fail(exc)


@main.command()
@click.argument("job_file", type=click.Path(dir_okay=False))
@cluster_options(required=True)
def submit(job_file, scheduler, tls_ca_file, tls_cert, tls_key):
    """Start the job JOB_FILE inside the cluster and print its id (last line).

    The job runs as a driver task on a worker and goes on after this command
    exits; its data and output paths are opened by the workers (shared
    storage). Follow it with `taodist status/logs/cancel/result JOB`. A job
    whose output an unfinished job on this scheduler is writing is refused.
    """
    from ..service.cluster import submit as submit_job

    job = _load_job(job_file)
    with _client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        job_id = submit_job(client, job)
    click.echo(f"submitted {job.estimator} job; follow it with: taodist status {job_id}")
    click.echo(job_id)


@main.command()
@click.argument("job_id", required=False)
@cluster_options(required=True)
def status(job_id, scheduler, tls_ca_file, tls_cert, tls_key):
    """Print JOB_ID's state (queued, running, finished, failed, cancelled), or list all jobs."""
    from ..service.cluster import job_status, list_jobs

    with _client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        if job_id is None:
            for r in list_jobs(client):
                click.echo(f"{r['id']}  {r['state']:<9}  {r['estimator']:<20}  {r['output']}")
            return
        record = job_status(client, job_id)
    click.echo(record["state"] + (f": {record['error']}" if record["state"] == "failed" else ""))


@main.command()
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@cluster_options(required=True)
def logs(job_id, follow, scheduler, tls_ca_file, tls_cert, tls_key):
    """Print the log of job JOB_ID (kept on the scheduler)."""
    from ..service.cluster import FINAL_STATES, job_logs, job_status

    with _client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        shown = 0
        while True:
            # the state first: once it is final, this read of the log holds every line (the reason included)
            state = job_status(client, job_id)["state"]
            lines = job_logs(client, job_id)
            for t, line in lines[shown:]:
                click.echo(f"{time.strftime('%H:%M:%S', time.localtime(t))} {line}")
            shown = len(lines)
            if not follow or state in FINAL_STATES:
                break
            time.sleep(1.0)


@main.command()
@click.argument("job_id")
@cluster_options(required=True)
def cancel(job_id, scheduler, tls_ca_file, tls_cert, tls_key):
    """Cancel job JOB_ID: a queued job never starts, a running one stops at its next level or tree."""
    from ..service.cluster import cancel as cancel_job

    with _client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        record = cancel_job(client, job_id)
    click.echo(f"{job_id}: {record['state']}" + (" (stopping at its next checkpoint)"
                                                  if record["state"] == "running" else ""))


@main.command()
@click.argument("job_id")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the model.")
@cluster_options(required=True)
def result(job_id, output, scheduler, tls_ca_file, tls_cert, tls_key):
    """Write the model of the finished job JOB_ID to OUTPUT (read it with taodist.load)."""
    from ..service.cluster import fetch_result

    with _client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        fetch_result(client, job_id, output)
    click.echo(f"wrote {output}")


def _job_errors():
    """Turn the errors a job command can meet into one ``Error:`` line and exit code 1.

    JobError (a bad job or job id), ValueError/TypeError (data a fit
    refuses, e.g. NaN), and OSError/TimeoutError (files, or the scheduler
    connection lost mid-command) are expected failures, not bugs: no
    traceback.
    """
    import contextlib

    from ..service import JobError

    @contextlib.contextmanager
    def translate():
        try:
            yield
        except JobError as exc:
            raise _fail(exc)
        except (ValueError, TypeError) as exc:
            raise _fail(f"{type(exc).__name__}: {exc}")
        except TimeoutError as exc:
            raise _fail(f"The Dask scheduler did not answer in time ({exc or 'timeout'}); check that it is running.")
        except OSError as exc:
            raise _fail(f"{type(exc).__name__}: {exc}")

    return translate()


@main.command()
@click.argument("model_path", type=click.Path(exists=True, dir_okay=False))
@click.argument("data", type=click.Path(exists=True))
@click.option("-o", "--output", required=True, type=click.Path(),
              help="Predictions: a .npy file (an existing file is replaced), or a .zarr store (chunked).")
@click.option("--overwrite", is_flag=True,
              help="Replace an existing .zarr OUTPUT if taodist wrote it (other folders are never replaced).")
def predict(model_path, data, output, overwrite):
    """Predict with MODEL_PATH on DATA (.npz with X or X_test, .npy, or a Zarr store)."""
    from ..io import to_zarr
    from ..io.atomic import atomic_write, check_replaceable, contains

    suffix = _suffix(output)
    if suffix not in (".npy", ".zarr"):
        raise click.ClickException(f"Unsupported output {output}: its name must end in .npy (one file) or .zarr "
                                   "(a chunked store).")
    with _as_cli_errors():
        for source in (model_path, data):
            if contains(output, source):
                raise click.ClickException(f"Refusing to write to {output}: it would replace the input {source}; "
                                           "choose a new output path.")
        if suffix == ".zarr":
            check_replaceable(output, overwrite)  # before any work: a refused write costs nothing
        model = _load_model(model_path)
        X = _read_predict_data(data)
        pred = model.predict(X)
        if suffix == ".zarr":
            written = to_zarr(pred, output, dtype=np.float64, overwrite=overwrite)
        else:
            pred = np.asarray(pred.compute() if hasattr(pred, "compute") else pred)
            if pred.dtype.kind not in "biuf":
                raise click.ClickException(f"This model predicts {pred.dtype} labels (e.g. {str(pred.flat[0])!r}); "
                                           ".npy and .zarr outputs hold numbers only: fit with numeric class labels.")
            written = atomic_write(output, lambda fh: np.save(fh, pred))  # a file object: np.save adds no suffix
    click.echo(f"wrote {written} ({X.shape[0]} predictions)")


def _suffix(path):
    """``".npy"`` for ``out/P.NPY`` (lower case; a trailing slash ignored); "" without one."""
    import os

    return os.path.splitext(os.path.basename(path.rstrip("/\\")))[1].lower()


def _read_predict_data(data):
    """The X of DATA: an array from .npz/.npy (in memory) or a lazily read Zarr array."""
    from ..io import open_zarr

    suffix = _suffix(data)
    if suffix in (".npz", ".npy"):
        try:
            X = np.load(data, allow_pickle=False)
            if not isinstance(X, np.ndarray):  # an .npz archive
                with X as d:
                    key = next((k for k in ("X", "X_test", "X_train") if k in d.files), None)
                    if key is None:
                        raise click.ClickException(f"{data} has no array X, X_test or X_train "
                                                   f"(found: {', '.join(d.files) or 'none'}).")
                    X = d[key]
        except click.ClickException:
            raise
        except Exception as exc:  # noqa: BLE001 -- numpy/zipfile raise many types for a damaged file
            raise click.ClickException(f"Could not read {data} as {suffix}: {_one_line(exc)}")
    else:  # a Zarr array, or a group holding X: predicted lazily, chunk by chunk
        try:
            X = open_zarr(data, component="X")
        except Exception:  # noqa: BLE001 -- not a group with X: try the store as one array
            try:
                X = open_zarr(data)
            except Exception as exc:  # noqa: BLE001
                raise click.ClickException(f"Could not read {data}: expected .npz, .npy or a Zarr store "
                                           f"({_one_line(exc)}).")
    if X.ndim != 2:
        raise click.ClickException(f"{data} holds an array of shape {X.shape}; expected rows x features (2-D).")
    return X


def _one_line(exc):
    """An exception as one line of text (messages from numpy and zipfile may span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _as_cli_errors():
    """Expected failures -- bad input files, refused outputs -- as one ``Error: ...`` line, exit code 1."""
    import contextlib

    @contextlib.contextmanager
    def translate():
        try:
            yield
        except (ValueError, OSError) as exc:
            raise click.ClickException(_one_line(exc)) from exc

    return translate()


@main.command()
@click.argument("model_path", type=click.Path(exists=True, dir_okay=False))
@click.option("--rules", is_flag=True, help="Print the tree's rules (single trees).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Draw the tree to this PNG: each node's weights (as an image when features are pixels).")
@click.option("--tree", "tree_index", type=click.IntRange(0), default=0, show_default=True,
              help="Which tree of a forest --plot draws.")
@click.option("--image-shape", default=None, metavar="HxW",
              help="Draw weights as HxW images (default: square images when the feature count is a square).")
@click.option("--plot-depth", type=click.IntRange(0), default=None, help="Draw only this many levels.")
@click.option("--data", "data", type=click.Path(exists=True), default=None,
              help="Also average the inference cost over the rows of this data (.npz with X or X_test, .npy, "
                   "or a Zarr store) instead of over leaves only.")
def inspect(model_path, rules, plot_path, tree_index, image_shape, plot_depth, data):
    """Size, sparsity, inference cost and metadata of a saved model; its rules with --rules, a drawing with --plot.

    Inference cost (thesis Appendix A): FLOPs per prediction are the non-zero
    parameters on the root-to-leaf path; classes scored are the classes the
    reached leaf gives a non-zero probability (a softmax leaf limited to k
    classes scores k). Both are averaged over the leaves, each leaf counting
    once, and with --data over the rows of that data (leaves weighed by use).
    """
    import json

    from .. import export_text
    from ..io import load_metadata
    from ..io.atomic import contains

    if plot_path and contains(plot_path, model_path):  # checked before anything is printed
        raise click.ClickException(f"--plot {plot_path} would replace the model itself; give a new .png path.")
    model = _load_model(model_path)  # checked: the metadata and the drawing below read a valid file
    trees = [e.tree_ for e in model.estimators_] if hasattr(model, "estimators_") else [model.tree_]
    click.echo(f"{type(model).__name__}: {len(trees)} tree(s)")
    click.echo(f"leaves {sum(t.n_leaves() for t in trees)}, decision nodes {sum(t.n_decision_nodes() for t in trees)}, "
               f"non-zero weights {sum(t.n_nonzero_weights() for t in trees)}, "
               f"parameters {sum(t.n_parameters() for t in trees)}, max depth {max(t.max_depth for t in trees)}")
    for line in _inference_cost_lines(trees, data):
        click.echo(line)
    meta = load_metadata(model_path)
    if meta:
        click.echo("metadata: " + json.dumps(meta, sort_keys=True))
    if rules:
        if len(trees) != 1:
            raise click.ClickException("--rules prints a single tree; this model is a forest.")
        click.echo(export_text(model), nl=False)
    if plot_path:
        from ..plot import plot_tree

        shape = None
        if image_shape:
            try:
                shape = tuple(int(v) for v in image_shape.lower().split("x"))
            except ValueError:
                raise click.BadParameter(f"expected HxW such as 28x28, got {image_shape!r}", param_hint="--image-shape")
        try:
            plot_tree(model, plot_path, tree_index=tree_index, image_shape=shape, max_depth=plot_depth)
        except (ValueError, ImportError, OSError) as exc:
            raise click.ClickException(_one_line(exc))
        click.echo(f"wrote {plot_path}")


def _inference_cost_lines(trees, data):
    """``taodist inspect``'s lines on inference cost, summed over a forest's trees."""
    K = trees[0].n_outputs
    limits = {t.leaf_classes for t in trees}
    lines = []
    if limits != {None}:
        lines.append(f"softmax leaves limited to {', '.join(str(k) for k in sorted(limits, key=str))} of {K} classes")
    costs = [t.leaf_path_costs() for t in trees]
    flops = sum(float(f.mean()) for f, _ in costs)
    scored = sum(float(c.mean()) for _, c in costs)
    what = "classes scored" if trees[0].task == "classification" else "outputs"
    lines.append(f"per prediction, mean over leaves: {flops:.1f} FLOPs, {scored:.2f} {what} (of {K})")
    if data is not None:
        with _as_cli_errors():
            X = _read_predict_data(data)
            X = np.asarray(X.compute() if hasattr(X, "compute") else X, dtype=np.float64)
            if X.shape[1] != trees[0].n_features:
                raise click.ClickException(f"{data} has {X.shape[1]} features; the model was fitted on "
                                           f"{trees[0].n_features}.")
            flops = sum(t.inference_flops(X) for t in trees)
            scored = sum(t.mean_classes_scored(X) for t in trees)
        lines.append(f"per prediction, mean over the {X.shape[0]} rows of {data}: {flops:.1f} FLOPs, "
                     f"{scored:.2f} {what} (of {K})")
    return lines


def _load_model(path):
    from ..io import load

    try:
        return load(path)
    except ValueError as exc:
        raise click.ClickException(str(exc))


@main.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path())
@click.option("--rows-per-chunk", type=click.IntRange(1), default=None, help="Default: ~64 MiB per chunk.")
@click.option("--target", default="y", show_default=True, help="CSV/Parquet column holding y (others are X).")
@click.option("--overwrite", is_flag=True,
              help="Replace OUT if it is a store taodist wrote (other paths are never replaced).")
def convert(source, out, rows_per_chunk, target, overwrite):
    """Convert SOURCE (.npz with X/y or X_train/y_train, .npy, .csv, .parquet) to a chunked Zarr store OUT.

    OUT holds arrays X (float32) and, when present, y; read them with
    taodist.io.open_zarr(OUT, component="X"). A scipy.sparse .npz file
    (scipy.sparse.save_npz) becomes a sparse X, never densified. OUT must be a new path, or,
    with --overwrite, a store taodist wrote; nothing else is ever deleted.
    """
    from ..io import to_zarr
    from ..io.atomic import check_replaceable

    with _as_cli_errors():
        check_replaceable(out, overwrite, keep=[source])  # before reading: a refused write costs nothing
        arrays = _read_table(source, target)
        if arrays["X"].ndim != 2:
            raise click.ClickException(f"{source}: X has shape {arrays['X'].shape}; expected rows x features (2-D).")
        written = to_zarr(arrays, out, rows_per_chunk=rows_per_chunk, overwrite=overwrite)
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
    click.echo(f"wrote {written}: {shapes}")


def _read_table(source, target):
    suffix = _suffix(source)
    if suffix in (".npz", ".npy"):
        try:
            loaded = np.load(source, allow_pickle=False)
            if not isinstance(loaded, np.ndarray):
                with loaded as d:
                    if {"data", "indices", "indptr", "format", "shape"} <= set(d.files):
                        import scipy.sparse as sp

                        return {"X": sp.load_npz(source)}  # scipy.sparse.save_npz: written as a sparse store
                    for xk, yk in (("X", "y"), ("X_train", "y_train")):
                        if xk in d.files:
                            return {"X": d[xk], **({"y": d[yk]} if yk in d.files else {})}
                    raise click.ClickException(f"{source} has no array 'X' or 'X_train' "
                                               f"(found: {', '.join(d.files) or 'none'}).")
        except click.ClickException:
            raise
        except Exception as exc:  # noqa: BLE001 -- numpy/zipfile raise many types for a damaged file
            raise click.ClickException(f"Could not read {source} as {suffix}: {_one_line(exc)}")
        return {"X": loaded}
    if suffix == ".csv":
        return _read_csv(source, target)
    if suffix == ".parquet":
        try:
            import pandas as pd
        except ImportError as exc:
            raise click.ClickException(f"Reading Parquet needs pandas and pyarrow ({exc}); pip install pandas pyarrow.")
        try:
            pdf = pd.read_parquet(source)
        except ImportError as exc:
            raise click.ClickException(f"Reading Parquet needs pyarrow ({_one_line(exc)}); pip install pyarrow.")
        except Exception as exc:  # noqa: BLE001 -- pyarrow's errors for a damaged file have many types
            raise click.ClickException(f"Could not read {source} as Parquet: {_one_line(exc)}")
        if target not in pdf.columns:
            raise click.ClickException(f"{source} has no column {target!r}; columns: {', '.join(map(str, pdf.columns))}.")
        return {"X": pdf.drop(columns=[target]).to_numpy(), "y": pdf[target].to_numpy()}
    raise click.ClickException(f"Unsupported input {source}: expected .npz, .npy, .csv or .parquet.")


def _read_csv(source, target):
    """A numeric CSV with a header row: ``y`` is column ``target``, ``X`` the others (NumPy only).

    NumPy's C parser reads the file; if it refuses, the file is scanned again
    with the csv module to name the line and column at fault (a text cell or
    a row with the wrong number of values) in the error.
    """
    import csv
    import warnings

    try:
        with open(source, newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), None)
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8 CSV.")
    names = [h.strip() for h in header or []]
    if not any(names):
        raise click.ClickException(f"{source} is empty; expected a header line of column names, then numeric rows.")
    if target not in names:
        raise click.ClickException(f"{source} has no column {target!r}; columns: {', '.join(names)}.")
    try:
        with warnings.catch_warnings():  # "input contained no data": reported below as an error
            warnings.filterwarnings("ignore", message="loadtxt: input contained no data", category=UserWarning)
            table = np.loadtxt(source, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2, comments=None,
                               quotechar='"', encoding="utf-8-sig")
    except ValueError as exc:
        raise click.ClickException(_csv_problem(source, names)
                                   or f"{source} is not a numeric CSV: {_one_line(exc)}")
    if table.shape[0] == 0:
        raise click.ClickException(f"{source} has a header but no data rows.")
    if table.shape[1] != len(names):
        raise click.ClickException(f"{source}: its rows have {table.shape[1]} values but the header names "
                                   f"{len(names)} columns; every row needs one value per column.")
    y_col = names.index(target)
    return {"X": np.delete(table, y_col, axis=1), "y": table[:, y_col]}


def _csv_problem(source, names):
    """The first ragged row or non-numeric cell of a CSV, described by line and column (None if none found)."""
    import csv

    with open(source, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for row in reader:
            if not row:  # a blank line: skipped by the parser too
                continue
            line = reader.line_num
            if len(row) != len(names):
                return (f"{source} line {line} has {len(row)} values but the header names {len(names)} columns "
                        f"({', '.join(names)}); every row needs one value per column.")
            for name, cell in zip(names, row):
                try:
                    float(cell)
                except ValueError:
                    found = "is empty" if not cell.strip() else f"holds {cell.strip()!r}, which is not a number"
                    return (f"{source} line {line}, column {name!r} {found}; every cell must be a number "
                            "(encode text categories as numbers first).")
    return None
