"""Training jobs from the command line: ``fit`` a job file here, or ``submit`` it to a cluster.

A submitted job is followed with ``status``, ``logs``, ``cancel`` and
``result`` (:mod:`taodist.service.cluster` keeps its state on the scheduler).
A job is its submitter's: another user's job is listed only by
``status --all``, and ``logs``, ``cancel`` and ``result`` refuse it
(:mod:`taodist.service.users` says who a user is).
"""

import contextlib
import json
import time

import click

from ..service import JobError, job_from_mapping, load_job, run_job, with_params
from ..service.cluster import FINAL_STATES, JobCancelled, client_held_job, fetch_result, job_logs, job_status, list_jobs
from ..service.cluster import cancel as cancel_job
from ..service.cluster import submit as submit_job
from ..service.users import owner_label
from ..solvers.l1_logistic import first_run_compiles
from ..utils.progress import ProgressPrinter
from ._common import COMPILING_NOTICE, cluster_client, cluster_options, fail, out_of_memory


@click.command()
@click.argument("job_file", type=click.Path(dir_okay=False))
@cluster_options()
@click.option("--in-process", is_flag=True, help="Fit in this process instead of on a Dask cluster.")
@click.option("--param", "overrides", multiple=True, metavar="KEY=VALUE",
              help="Replace a parameter of the job's estimator (repeatable), e.g. --param max_depth=6; "
                   "values are read as YAML (6, 0.5, true, null, auto).")
@click.option("--estimator", default=None, help="With a data file: the estimator to fit [default: TAOClassifier].")
@click.option("-o", "--output", default=None, help="With a data file: where to write the model [default: model.npz].")
@click.option("--target", default=None, help="With a CSV or Parquet data file: the column holding y [default: y].")
def fit(job_file, scheduler, tls_ca_file, tls_cert, tls_key, in_process, overrides, estimator, output, target):
    """Run the training job JOB_FILE (YAML) here, wait for it and write its model.

    Keys: estimator, params, train, optional validation (fraction or data),
    output. The job is validated before any data is read. Progress (TAO
    iteration, level, objective, elapsed, ETA; trees of a forest) is printed.
    Zarr data is handed to the cluster lazily (read chunk by chunk where the
    tasks run); with --in-process it is read into memory.

    JOB_FILE may also be a data file (.npz with X and y, .csv or .parquet):
    the job is then made from --estimator, --param, --output and --target.
    """
    job = _job_of(job_file, estimator, output, target)
    if overrides:
        try:
            job = with_params(job, overrides)
        except JobError as exc:
            raise fail(exc)
    with cluster_client(scheduler, in_process, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        # a shared cluster: the job is recorded there while it runs, holding its output against submits
        held = client_held_job(client, job) if scheduler is not None else contextlib.nullcontext((None, None))
        with held as (job_id, check_cancelled):
            if job_id is not None:
                click.echo(f"job {job_id} on {scheduler} (`taodist status`, `taodist cancel {job_id}`)")
            if client is not None:
                click.echo(f"Dask dashboard: {client.dashboard_link}")
            if first_run_compiles():
                click.echo(COMPILING_NOTICE)
            with ProgressPrinter() as printer:
                def log(line):
                    printer.finish()  # a progress line left open on a terminal
                    click.echo(line)

                def progress(event, info):
                    if check_cancelled is not None:
                        check_cancelled()
                    printer(event, info)

                run_job(job, client=client, log=log, progress=progress, checkpoint=check_cancelled)


#: what `taodist fit` takes as a data file instead of a job file
_DATA_SUFFIXES = (".npz", ".csv", ".parquet")


def _job_of(job_file, estimator, output, target):
    """The job file's job, or the job the command line describes for a data file."""
    if not str(job_file).lower().endswith(_DATA_SUFFIXES):
        given = [f"--{name}" for name, value in (("estimator", estimator), ("output", output), ("target", target))
                 if value is not None]
        if given:
            raise fail(f"{', '.join(given)} describe(s) a fit of a data file; the job file {job_file} names its "
                       "estimator, output and target itself.")
        return _load_job(job_file)
    doc = {"estimator": estimator or "TAOClassifier", "train": str(job_file), "output": output or "model.npz"}
    if target is not None:
        doc["target"] = target
    try:
        return job_from_mapping(doc, job_file, base=".")
    except JobError as exc:
        raise fail(exc)


def _load_job(job_file):
    try:
        return load_job(job_file)
    except JobError as exc:
        raise fail(exc)


@click.command()
@click.argument("job_file", type=click.Path(dir_okay=False))
@cluster_options(required=True)
def submit(job_file, scheduler, tls_ca_file, tls_cert, tls_key):
    """Start the job JOB_FILE inside the cluster and print its id (last line).

    The job runs as a driver task on a worker and goes on after this command
    exits; its data and output paths are opened by the workers (shared
    storage). Follow it with `taodist status/logs/cancel/result JOB`. A job
    whose output an unfinished job on this scheduler is writing is refused,
    and so is one whose output is outside the scheduler's results root
    (TAODIST_RESULTS_ROOT), when it sets one. The job is yours: your TLS
    certificate's subject, or your token (TAODIST_TOKEN, else
    ~/.config/taodist/token, made on first use), is recorded as its owner.
    """
    job = _load_job(job_file)
    with cluster_client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        job_id = submit_job(client, job)
    click.echo(f"submitted {job.estimator} job; follow it with: taodist status {job_id}")
    click.echo(job_id)


@click.command()
@click.argument("job_id", required=False)
@cluster_options(required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the job record (or a list of them) as JSON, for scripts.")
@click.option("--all", "everyone", is_flag=True,
              help="List every user's jobs, with their owners (listing gives no access to them).")
def status(job_id, scheduler, tls_ca_file, tls_cert, tls_key, as_json, everyone):
    """Print JOB_ID's state (queued, running, finished, failed, cancelled), or list your jobs.

    Without JOB_ID, lists your own jobs (and jobs submitted before jobs had
    owners); --all lists everyone's, with an owner column.
    """
    with cluster_client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        if as_json:
            records = list_jobs(client, everyone) if job_id is None else job_status(client, job_id)
            click.echo(json.dumps(records, sort_keys=True, default=str))
            return
        if job_id is None:
            for r in list_jobs(client, everyone):
                owner = f"  {owner_label(r.get('owner')):<20}" if everyone else ""
                click.echo(f"{r['id']}  {r['state']:<9}{owner}  {r['estimator']:<20}  {r['output']}")
            return
        record = job_status(client, job_id)
    click.echo(record["state"] + (f": {record['error']}" if record["state"] == "failed" else ""))


@click.command()
@click.argument("job_id")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@cluster_options(required=True)
def logs(job_id, follow, scheduler, tls_ca_file, tls_cert, tls_key):
    """Print the log of your job JOB_ID (kept on the scheduler)."""
    with cluster_client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
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


@click.command()
@click.argument("job_id")
@cluster_options(required=True)
def cancel(job_id, scheduler, tls_ca_file, tls_cert, tls_key):
    """Cancel your job JOB_ID: a queued job never starts, a running one stops at its next level or tree."""
    with cluster_client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        record = cancel_job(client, job_id)
    click.echo(f"{job_id}: {record['state']}" + (" (stopping at its next checkpoint)"
                                                  if record["state"] == "running" else ""))


@click.command()
@click.argument("job_id")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Where to write the model.")
@cluster_options(required=True)
@click.option("--json", "as_json", is_flag=True,
              help="Print the finished job's record and the path written as JSON, for scripts.")
def result(job_id, output, scheduler, tls_ca_file, tls_cert, tls_key, as_json):
    """Write the model of your finished job JOB_ID to OUTPUT (read it with taodist.load)."""
    with cluster_client(scheduler, False, tls_ca_file, tls_cert, tls_key) as client, _job_errors():
        fetch_result(client, job_id, output)
        record = job_status(client, job_id) if as_json else None
    if as_json:
        click.echo(json.dumps({**record, "written": str(output)}, sort_keys=True, default=str))
        return
    click.echo(f"wrote {output}")


@contextlib.contextmanager
def _job_errors():
    """Turn the errors a job command can meet into one ``Error:`` line and exit code 1.

    JobError (a bad job or job id), ValueError/TypeError (data a fit
    refuses, e.g. NaN), and OSError/TimeoutError (files, or the scheduler
    connection lost mid-command) are expected failures, not bugs: no
    traceback.
    """
    try:
        yield
    except JobCancelled:
        raise fail("the job was cancelled (taodist cancel); no model was written.") from None
    except JobError as exc:
        raise fail(exc)
    except (ValueError, TypeError) as exc:
        raise fail(f"{type(exc).__name__}: {exc}")
    except TimeoutError as exc:
        raise fail(f"The Dask scheduler did not answer in time ({exc or 'timeout'}); check that it is running.")
    except OSError as exc:
        raise fail(f"{type(exc).__name__}: {exc}")
    except MemoryError as exc:
        raise out_of_memory(exc) from None
