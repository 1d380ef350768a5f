"""Jobs that run inside a Dask cluster: submit, status, logs, cancel, result.

``submit`` starts one *driver task* for the job and hands it to the
scheduler with :func:`distributed.fire_and_forget`, so the job keeps running
after the submitting process exits. The driver runs on a worker, secedes
from the worker's thread pool (``worker_client``) while it waits on the
fit's own tasks, and writes the model to the job's ``output`` path — a path
the workers see (the shared store).

All job state lives on the scheduler, none in the client:

* ``Variable("taodist-job-<id>")`` — the job's record: state, timestamps,
  error, output path, metrics;
* ``Lock("taodist-job-lock-<id>")`` — makes state changes by the driver and
  by ``cancel`` atomic;
* ``Event("taodist-cancel-<id>")`` — set by ``cancel``; the driver checks it
  at every progress checkpoint (each TAO level, forest tree, LapTAO outer
  iteration) and stops there, so a cancelled job never writes a model;
* the scheduler's event log: topic ``taodist-job-<id>`` holds the job's log
  lines, topic ``taodist-jobs`` one entry per submitted job.

This state lasts as long as the scheduler; models in the store outlive it.
"""

import os
import tempfile
import time
import traceback
import uuid
from pathlib import Path

from .jobs import JobError, run_job

STATES = ("queued", "running", "finished", "failed", "cancelled")
FINAL_STATES = ("finished", "failed", "cancelled")
JOBS_TOPIC = "taodist-jobs"


class JobCancelled(Exception):
    """Raised at a progress checkpoint of a job whose cancel event is set."""


def _record_name(job_id):
    return f"taodist-job-{job_id}"


def _lock_name(job_id):
    return f"taodist-job-lock-{job_id}"


def _cancel_name(job_id):
    return f"taodist-cancel-{job_id}"


def _log_topic(job_id):
    return f"taodist-job-{job_id}"


def submit(client, job):
    """Start ``job`` inside the cluster and return its id at once.

    Parameters
    ----------
    client : distributed.Client
    job : taodist.service.Job
        A validated job (:func:`taodist.service.load_job`). Its data and
        output paths are opened by the workers.

    Returns
    -------
    str
        The job id, for :func:`job_status`, :func:`job_logs`,
        :func:`cancel` and :func:`fetch_result`.
    """
    from distributed import Variable, fire_and_forget

    job_id = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    record = {"id": job_id, "state": "queued", "estimator": job.estimator, "source": str(job.source),
              "output": str(job.output), "submitted": time.time(), "started": None, "ended": None,
              "error": None, "metrics": None}
    Variable(_record_name(job_id), client=client).set(record)
    client.log_event(JOBS_TOPIC, {"id": job_id, "estimator": job.estimator})
    future = client.submit(_drive, job, job_id, key=f"taodist-driver-{job_id}", pure=False)
    fire_and_forget(future)
    return job_id


def list_jobs(client):
    """The records of every job submitted to this scheduler, oldest first."""
    ids = [msg["id"] for _, msg in client.get_events(JOBS_TOPIC)]
    return [_read_record(client, i) for i in ids]


def job_status(client, job_id):
    """The job's record (a dict with ``state`` among :data:`STATES`, ``error``, ...)."""
    known = {msg["id"] for _, msg in client.get_events(JOBS_TOPIC)}
    if job_id not in known:
        raise JobError(f"No job {job_id!r} on scheduler {client.scheduler.address}; "
                       f"`taodist status` lists the {len(known)} known job(s).")
    return _read_record(client, job_id)


def job_logs(client, job_id):
    """The job's log as a list of ``(timestamp, line)``."""
    job_status(client, job_id)
    return [(t, msg) for t, msg in client.get_events(_log_topic(job_id))]


def cancel(client, job_id):
    """Ask a job to stop; returns its record after the request.

    A queued job is marked cancelled at once (its driver exits when it
    starts); a running one stops at its next progress checkpoint and is
    then marked cancelled by its driver. Finished jobs are left alone.
    """
    from distributed import Event

    if job_status(client, job_id)["state"] in FINAL_STATES:
        return _read_record(client, job_id)
    Event(_cancel_name(job_id), client=client).set()
    _transition(client, job_id, "cancelled", allowed_from=("queued",), ended=time.time())
    return _read_record(client, job_id)


def fetch_result(client, job_id, path):
    """Copy a finished job's model from the store to the local ``path``.

    A worker reads the model file (the client need not see the store); it is
    written to a temporary name, checked with :func:`taodist.load`, then
    renamed, so ``path`` is either the whole model or untouched.
    """
    from ..io import load

    record = job_status(client, job_id)
    if record["state"] != "finished":
        detail = f": {record['error']}" if record.get("error") else ""
        raise JobError(f"Job {job_id} is {record['state']}{detail}; only a finished job has a model.")
    data = client.submit(_read_bytes, record["output"], pure=False).result()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".taodist-result-", suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        load(tmp)  # a model that does not load never replaces ``path``
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def _read_bytes(path):
    return Path(path).read_bytes()


def _read_record(client, job_id):
    from distributed import Variable

    return Variable(_record_name(job_id), client=client).get(timeout=30)


def _transition(client, job_id, state, *, allowed_from, **fields):
    """Set the job's state if it is now one of ``allowed_from``; returns the new record or None."""
    from distributed import Lock, Variable

    with Lock(_lock_name(job_id)):  # uses the current client (Lock takes none explicitly)
        var = Variable(_record_name(job_id), client=client)
        record = var.get(timeout=30)
        if record["state"] not in allowed_from:
            return None
        record.update(fields, state=state)
        var.set(record)
        return record


def describe(event, info):
    """One human-readable line for a progress event of :mod:`taodist._progress`."""
    if event == "tao_iteration":
        return (f"TAO iteration {info['iteration']}/{info['max_iter']}: objective {info['objective']:.6g} "
                f"({info['seconds']:.1f}s)")
    if event == "tao_level":
        return f"TAO iteration {info['iteration']}: depth {info['depth']} done ({info['n_nodes']} nodes)"
    if event == "forest_tree":
        return f"forest: {info['done']}/{info['total']} trees"
    if event == "laptao_outer":
        return (f"LapTAO outer iteration {info['iteration']}/{info['n_outer']}: mu {info['mu']:.3g}, "
                f"||z - t|| {info['constraint']:.4g}")
    return f"{event}: {info}"


def _drive(job, job_id):
    """The driver task: runs on a worker, fits, writes the model, records the outcome."""
    from distributed import Event, get_worker, worker_client

    worker = get_worker().address
    # seceded: this task holds no worker thread while the fit's tasks run
    with worker_client() as client:
        # "running" too: a driver re-run after its worker died starts over
        record = _transition(client, job_id, "running", allowed_from=("queued", "running"),
                             started=time.time(), worker=worker)
        if record is None:
            return  # cancelled before it started
        topic = _log_topic(job_id)
        cancel_event = Event(_cancel_name(job_id), client=client)

        def log(line):
            client.log_event(topic, line)

        def progress(event, info):
            if cancel_event.is_set():
                raise JobCancelled()
            log(describe(event, info))

        log(f"started on {worker}")
        try:
            if cancel_event.is_set():
                raise JobCancelled()
            est, metadata = run_job(job, client=client, log=log, progress=progress, return_metadata=True)
        except JobCancelled:
            log("cancelled; no model written")
            _transition(client, job_id, "cancelled", allowed_from=("running",), ended=time.time())
        except Exception as exc:  # any failure is the job's outcome, reported in its status
            log(traceback.format_exc())
            _transition(client, job_id, "failed", allowed_from=("running",), ended=time.time(),
                        error=f"{type(exc).__name__}: {exc}")
        else:
            _transition(client, job_id, "finished", allowed_from=("running",), ended=time.time(),
                        metrics=metadata["metrics"], fit_seconds=metadata["fit_seconds"])
