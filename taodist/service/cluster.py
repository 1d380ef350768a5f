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
* ``Variable("taodist-driver-<id>")`` — holds the driver task's future
  until the driver has recorded the job's outcome. Holding it keeps an
  *erred* driver's state (and exception) on the scheduler, which a
  ``fire_and_forget`` task alone would not: when the driver's workers keep
  dying (``KilledWorker``) the driver cannot record anything itself, so
  whoever reads the record next (``status``, ``logs``, ``submit``...)
  finds the erred future and marks the job ``failed`` with the reason
  (checked when read rather than by a scheduler plugin, which would need
  taodist installed on the scheduler and would not outlive it either);
* ``Lock("taodist-submit")`` — makes "no unfinished job writes this
  output" and the new record atomic across submitters;
* the scheduler's event log: topic ``taodist-job-<id>`` holds the job's log
  lines, topic ``taodist-jobs`` one entry per submitted job.

``taodist fit --scheduler`` fits from the calling process instead
(:func:`client_held_job`): its record holds the output the same way, with
the client's id in place of a driver; a record whose client has left the
scheduler without recording an outcome is marked ``failed`` when read.

Every record names its ``owner`` (:mod:`taodist.service.users`: the TLS
client certificate's subject the scheduler saw, else the hash of the user's
token). :func:`cancel`, :func:`job_logs` and :func:`fetch_result` refuse
another user's job, and :func:`list_jobs` lists the caller's own jobs unless
asked for everyone's. A record without an owner (written by a taodist that
predates owners) stays open to every user, as every job was then. When the
scheduler's environment sets ``TAODIST_RESULTS_ROOT``, a submitted job's
output must resolve inside that folder: checked by :func:`submit` and again
by the driver on its worker, before the fit and just before the model
replaces ``output``.

This state lasts as long as the scheduler, unless the scheduler keeps a
journal (``TAODIST_JOURNAL`` in its environment, :mod:`taodist.service.journal`):
every record it is given and every log line is then also written to that
folder, and a restarted scheduler gets them back at the first command that
asks (:func:`restore_journal`); jobs that had not ended are failed then, as
their drivers went with the old scheduler. Models in the store outlive it
either way. A model written by a job carries the job's id in its metadata,
and :func:`fetch_result` returns it only if the file still holds that job's
model.
"""

import contextlib
import errno
import os
import stat
import time
import traceback
import uuid
from pathlib import Path

from distributed import Event, Lock, Variable, fire_and_forget, get_worker, worker_client
from distributed.scheduler import KilledWorker

from ..dask._client import SchedulerLostError
from ..io import load, load_metadata
from ..io.atomic import atomic_write
from .jobs import JobError, check_paths, run_job
from .journal import append_log, journal_folder, read_journal, write_record
from .users import (
    RESULTS_ROOT_VARIABLE,
    certificate_owner,
    check_results_root,
    owner_label,
    results_root_of,
    token_owner,
    user_token,
)

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


def _driver_name(job_id):
    return f"taodist-driver-{job_id}"


_SUBMIT_LOCK = "taodist-submit"
#: how long one read of the job state on the scheduler may wait: a stopped scheduler (SIGSTOP, a hung host)
#: then ends a command with one error instead of hanging it (``logs --follow`` reads every second)
SCHEDULER_TIMEOUT = 30
#: how long a status read waits for the scheduler to report an erred driver
_DRIVER_PROBE_SECONDS = 0.5


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

    Raises
    ------
    JobError
        If the job would overwrite its own data, or if a job on this
        scheduler that has not ended writes the same output (two jobs
        replacing one file leave whichever finished last, and ``result``
        could not tell which job's model it returns), or if the
        scheduler sets a results root (``TAODIST_RESULTS_ROOT``) and the
        output does not resolve inside it.

    Notes
    -----
    The job's record names its owner, this client's user
    (:func:`client_owner`): only that user may cancel it, read its log or
    fetch its model.
    """
    check_paths(job)
    check_results_root(job, results_root(client))
    owner = client_owner(client)
    job_id = _new_job_id()
    with _lock(client, _SUBMIT_LOCK):
        check_output_free(client, job)
        record = {"id": job_id, "state": "queued", "owner": owner, "estimator": job.estimator,
                  "source": str(job.source),
                  "output": str(job.output), "output_real": os.path.realpath(job.output),
                  "driver": _driver_name(job_id), "client": client.id, "submitted": time.time(), "started": None,
                  "ended": None,
                  "error": None, "metrics": None}
        _set_record(client, job_id, record)
        client.log_event(JOBS_TOPIC, {"id": job_id, "estimator": job.estimator})
    future = client.submit(_drive, job, job_id, key=f"taodist-driver-{job_id}", pure=False)
    Variable(_driver_name(job_id), client=client).set(future)
    fire_and_forget(future)
    return job_id


@contextlib.contextmanager
def client_held_job(client, job):
    """Record ``job`` on the scheduler while this client fits it (``taodist fit --scheduler``).

    Like :func:`submit`, the record holds the job's output, so a submit to the
    same output is refused while the fit runs, and the job shows in ``status``
    and can be cancelled. Yields ``(job_id, check_cancelled)``: call
    ``check_cancelled()`` at progress checkpoints and before the model
    replaces the output; it raises :class:`JobCancelled` once the job is
    cancelled. The outcome is recorded when the block ends. The record
    names this client's user as its owner (:func:`client_owner`). The
    results root does not apply: the model is written by this process, with
    its user's own permissions, not by the cluster's workers.

    Raises
    ------
    JobError
        If a job on this scheduler that has not ended writes the same output.
    """
    check_paths(job)
    owner = client_owner(client)
    job_id = _new_job_id()
    with _lock(client, _SUBMIT_LOCK):
        check_output_free(client, job)
        record = {"id": job_id, "state": "running", "owner": owner, "estimator": job.estimator,
                  "source": str(job.source),
                  "output": str(job.output), "output_real": os.path.realpath(job.output), "driver": None,
                  "client": client.id, "submitted": time.time(), "started": time.time(), "ended": None,
                  "error": None, "metrics": None}
        _set_record(client, job_id, record)
        client.log_event(JOBS_TOPIC, {"id": job_id, "estimator": job.estimator})
    cancel_event = Event(_cancel_name(job_id), client=client)

    def check_cancelled():
        if cancel_event.is_set():
            raise JobCancelled()

    try:
        yield job_id, check_cancelled
    except (Exception, KeyboardInterrupt) as exc:  # Ctrl-C too: the record must not stay running
        cancelled = isinstance(exc, (JobCancelled, KeyboardInterrupt))
        try:
            _transition(client, job_id, "cancelled" if cancelled else "failed", allowed_from=("running",),
                        ended=time.time(),
                        error=None if cancelled else f"{type(exc).__name__}: {' '.join(str(exc).split())}")
        except Exception:
            if not isinstance(exc, SchedulerLostError):
                raise
            # the record went with the scheduler (a journalled one is failed when restored): the fit's own
            # error, which says so, is the one to raise, not this write's
        raise
    _transition(client, job_id, "finished", allowed_from=("running",), ended=time.time())


def _new_job_id():
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"


def _scheduler_side(client_id=None, dask_scheduler=None):
    """Run on the scheduler: its results root setting, and the certificate the client ``client_id`` connected with.

    The certificate is the one the scheduler verified on that client's
    connection (Dask keeps it in the TLS comm's ``extra_info``); None over
    plain TCP.
    """
    peercert = None
    stream = dask_scheduler.client_comms.get(client_id) if client_id else None
    comm = getattr(stream, "comm", None)
    if comm is not None:
        try:
            peercert = comm.extra_info.get("peercert")
        except Exception:  # a comm closing under us: no certificate to report
            peercert = None
    return {"results_root": os.environ.get(RESULTS_ROOT_VARIABLE), "peercert": peercert}


def _ask_scheduler(client, client_id=None):
    """:func:`_scheduler_side` run on the scheduler (see :func:`_on_scheduler`)."""
    return _on_scheduler(client, _scheduler_side, client_id)


def _on_scheduler(client, function, *args):
    """``function(*args)`` run on the scheduler, which must import this taodist version (its image has it)."""
    try:
        return client.run_on_scheduler(function, *args)
    except (ImportError, AttributeError) as exc:  # no taodist there, or one without this function
        raise JobError(f"The scheduler at {client.scheduler.address} cannot run this taodist's code "
                       f"({type(exc).__name__}: {exc}); run it from the taodist image of this version, or install "
                       "the same taodist version where the scheduler runs.") from exc


#: owners decided from a client's certificate, by client id (a connection's certificate does not change)
_CERTIFICATE_OWNERS = {}


def client_owner(client):
    """The identity this client acts as: the owner recorded in its jobs' records.

    ``tls:<subject>`` when the client connected over mutual TLS and the
    scheduler sees its certificate; otherwise ``token:<sha256>`` of the
    user's token (:func:`taodist.service.users.user_token`: ``TAODIST_TOKEN``
    or the token file, generated on first use).

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    str

    Raises
    ------
    JobError
        When there is no certificate and the token cannot be read or kept.
    """
    if client.id not in _CERTIFICATE_OWNERS:
        view = _ask_scheduler(client, client.id)
        _CERTIFICATE_OWNERS[client.id] = certificate_owner(view["peercert"])
    return _CERTIFICATE_OWNERS[client.id] or token_owner(user_token())


def results_root(client):
    """The results root the scheduler sets (its environment variable ``TAODIST_RESULTS_ROOT``), or None.

    Parameters
    ----------
    client : distributed.Client

    Returns
    -------
    str or None

    Raises
    ------
    JobError
        If the scheduler's value is not an absolute path.
    """
    return results_root_of(_ask_scheduler(client)["results_root"])


def check_owner(client, record, action):
    """Refuse ``action`` (a verb: ``"cancel"``) on a job another user owns.

    A record without an owner, written before jobs had owners, is open to
    every user.

    Parameters
    ----------
    client : distributed.Client
    record : dict
        The job's record.
    action : str
        What was asked, for the message.

    Raises
    ------
    JobError
        Naming the job's owner and the caller's identity.
    """
    owner = record.get("owner")
    if owner is None:
        return
    me = client_owner(client)
    if owner != me:
        raise JobError(f"job {record['id']} belongs to another user ({owner_label(owner)}; you are "
                       f"{owner_label(me)}): only its owner may {action} it. If it is yours, use the TLS "
                       "certificate or the token (token file or TAODIST_TOKEN) it was submitted with.")


def check_output_free(client, job):
    """Refuse ``job`` if a job on this scheduler that has not ended writes the same output file.

    Parameters
    ----------
    client : distributed.Client
    job : taodist.service.Job
        Its ``output`` is compared, as a real path, with the outputs recorded
        by :func:`submit` (real paths on the submitting machines).

    Raises
    ------
    JobError
        Naming the other job and what to do.
    """
    output_real = os.path.realpath(job.output)
    ids = [msg["id"] for _, msg in _events(client, JOBS_TOPIC)]
    same = [r for r in (_read_record(client, i) for i in ids)
            if r["state"] not in FINAL_STATES and r.get("output_real", r["output"]) == output_real]
    others = _reconcile(client, same)  # a job whose driver died no longer holds its output
    me = client_owner(client) if any(o.get("owner") for o in others) else None
    for other in others:
        if other["state"] not in FINAL_STATES:
            if other.get("owner") not in (None, me):
                raise JobError(f"output: {job.output} is being written by job {other['id']} ({other['state']}) of "
                               f"another user ({owner_label(other['owner'])}); give this job another output.")
            raise JobError(f"output: {job.output} is being written by job {other['id']} ({other['state']}); "
                           f"wait for it (taodist logs -f {other['id']}), cancel it (taodist cancel "
                           f"{other['id']}), or give this job another output.")


def _events(client, topic):
    """The scheduler's events of ``topic`` (``client.get_events``), or TimeoutError after :data:`SCHEDULER_TIMEOUT`."""
    return client.sync(client.scheduler.events, topic=topic, callback_timeout=SCHEDULER_TIMEOUT)


def list_jobs(client, everyone=False):
    """The records of this user's jobs on this scheduler, oldest first (see :func:`job_status`).

    Parameters
    ----------
    client : distributed.Client
    everyone : bool, default=False
        List every user's jobs. Listing gives no access: another user's job
        still cannot be cancelled, read or fetched.

    Returns
    -------
    list of dict
        The records whose ``owner`` is this client's user
        (:func:`client_owner`), and those without an owner (jobs submitted
        before jobs had owners), unless ``everyone``.
    """
    restore_journal(client)
    ids = [msg["id"] for _, msg in _events(client, JOBS_TOPIC)]
    records = [_read_record(client, i) for i in ids]
    if not everyone:
        me = client_owner(client)
        records = [r for r in records if r.get("owner") in (None, me)]
    return _reconcile(client, records)


def job_status(client, job_id):
    """The job's record: a dict with ``state`` among :data:`STATES`, ``error``, ``output``, ...

    A job that is not final but whose driver task erred on the scheduler
    (its workers died: ``KilledWorker``; or anything the driver could not
    record) is marked ``failed`` here, with the reason, so it never stays
    ``running`` with no driver. Any user may read any job's record (its
    state, error and output path); the job's log and model are its owner's.

    Raises
    ------
    JobError
        For an id this scheduler does not know.
    """
    _check_known(client, job_id)
    return _reconcile(client, [_read_record(client, job_id)])[0]


def _check_known(client, job_id):
    known = {msg["id"] for _, msg in _events(client, JOBS_TOPIC)}
    if job_id not in known:  # a job from before a restart of the scheduler, if it keeps a journal
        restore_journal(client)
        known = {msg["id"] for _, msg in _events(client, JOBS_TOPIC)}
    if job_id not in known:
        raise JobError(f"No job {job_id!r} on scheduler {client.scheduler.address}; "
                       f"`taodist status` lists the {len(known)} known job(s).")


def _reconcile(client, records):
    """Mark failed the unfinished jobs whose driver task erred or ended without recording an outcome,
    and those fitted from a client (``taodist fit --scheduler``) that has left the scheduler."""
    records = _reconcile_client_held(client, records)
    pending, orphans = {}, []
    for r in records:
        if r["state"] not in FINAL_STATES and r.get("driver"):
            try:
                pending[r["id"]] = Variable(r["driver"], client=client).get(timeout=2)
            except TimeoutError:  # deleted by a driver that has just recorded its outcome, or never set:
                if r["state"] == "queued":  # the submitter died between the record and the driver task
                    orphans.append(r)
                continue
    if orphans:
        records = _fail_orphans(client, records, orphans)
    if not pending:
        return records
    _settle(pending.values(), _DRIVER_PROBE_SECONDS)
    out = []
    for r in records:
        future = pending.get(r["id"])
        reason = None if future is None else _driver_failure(future)
        if reason is not None:
            failed = _transition(client, r["id"], "failed", allowed_from=("queued", "running"), ended=time.time(),
                                 error=reason)
            if failed is not None:
                _log(client, r["id"], f"failed: {reason}")
            else:  # the driver recorded its outcome after the record was read: keep that one
                failed = _read_record(client, r["id"])
            _forget_driver(client, r["id"])
            r = failed
        out.append(r)
    return out


def _settle(futures, timeout):
    """Wait up to ``timeout`` seconds for the futures to be done (running drivers are not).

    The scheduler reports an erred or finished key shortly after a client
    asks for it. Polled rather than ``distributed.wait``, which needs
    ``client.as_current()``: that sets Dask's global config and restores it on
    exit, so two threads reading job states at once could leave
    ``scheduler="dask.distributed"`` set for good (the process's later
    ``compute()`` calls then fail with "no Client active").
    """
    deadline = time.monotonic() + timeout
    while not all(f.done() for f in futures) and time.monotonic() < deadline:
        time.sleep(0.02)


def _fail_orphans(client, records, orphans):
    """Queued jobs with no driver task whose submitting client has left: their driver will never start."""
    return _fail_if_client_left(client, records, orphans, "queued",
                                "the process that submitted this job ended before its driver task was started; "
                                "nothing ran. Submit the job again.")


def _reconcile_client_held(client, records):
    held = [r for r in records if r["state"] not in FINAL_STATES and r.get("client") and not r.get("driver")]
    return _fail_if_client_left(client, records, held, "running",
                                "the client fitting this job (taodist fit --scheduler) left the scheduler without "
                                "recording an outcome; its model was not written by this job. Run it again.")


def _fail_if_client_left(client, records, candidates, state, reason):
    """``records`` with each of ``candidates`` still in ``state`` marked failed if its client left the scheduler."""
    if not candidates:
        return records
    connected = set(client.run_on_scheduler(_scheduler_clients))
    failed = {}
    for r in candidates:
        if r.get("client") and r["client"] not in connected:
            failed[r["id"]] = (_transition(client, r["id"], "failed", allowed_from=(state,), ended=time.time(),
                                           error=reason) or _read_record(client, r["id"]))
    return [failed.get(r["id"], r) for r in records]


def _scheduler_clients(dask_scheduler=None):
    return list(dask_scheduler.clients)


def _driver_failure(future):
    """Why a driver future ended without its job being final, or None while it may still run."""
    if future.status == "error":
        exc = future.exception(timeout=10)
        if isinstance(exc, KilledWorker):
            return (f"KilledWorker: the worker running the job's driver died {exc.allowed_failures + 1} time(s) "
                    f"(last {exc.last_worker.address}; distributed.scheduler.allowed-failures="
                    f"{exc.allowed_failures}); see that worker's log (out of memory? crash?) and resubmit.")
        return f"the job's driver task failed: {type(exc).__name__}: {' '.join(str(exc).split())}"
    if future.status == "finished":
        return "the job's driver task ended without recording an outcome; see `taodist logs` and resubmit."
    if future.status == "cancelled":
        return "the job's driver task was cancelled on the scheduler; resubmit the job."
    return None


def _forget_driver(client, job_id):
    """Release the driver's future once the job is final, so the scheduler forgets the task."""
    try:
        Variable(_driver_name(job_id), client=client).delete()
    except Exception:  # already gone: nothing to release
        pass


def job_logs(client, job_id):
    """The job's log as a list of ``(timestamp, line)``.

    Read the job's status first (:func:`job_status`) when following a log:
    a job found failed there gets its reason logged, and everything logged
    before a final state is then in this list.

    Raises
    ------
    JobError
        For an unknown job, or another user's (:func:`check_owner`).
    """
    _check_known(client, job_id)
    check_owner(client, _read_record(client, job_id), "read the log of")
    # a line is {"at": when it was logged, "line": text} (restored lines keep their times); a plain string
    # was logged by a taodist that predates the journal
    return [(msg["at"], msg["line"]) if isinstance(msg, dict) else (t, msg)
            for t, msg in _events(client, _log_topic(job_id))]


def cancel(client, job_id):
    """Ask a job to stop; returns its record after the request.

    A queued job is marked cancelled at once (its driver exits when it
    starts); a running one stops at its next progress checkpoint and is
    then marked cancelled by its driver. Finished jobs are left alone.

    Raises
    ------
    JobError
        For an unknown job, or another user's (:func:`check_owner`).
    """
    _check_known(client, job_id)
    check_owner(client, _read_record(client, job_id), "cancel")
    if job_status(client, job_id)["state"] in FINAL_STATES:
        return _read_record(client, job_id)
    Event(_cancel_name(job_id), client=client).set()
    _transition(client, job_id, "cancelled", allowed_from=("queued",), ended=time.time())
    return _read_record(client, job_id)


def fetch_result(client, job_id, path):
    """Copy a finished job's model from the store to the local ``path``.

    A worker reads the model file (the client need not see the store); it is
    written to a temporary name, checked with :func:`taodist.load` and
    checked to carry this job's id in its metadata (the file at the job's
    output may have been replaced since, by another job or by hand), then
    renamed, so ``path`` is either this job's whole model or untouched.

    Raises
    ------
    JobError
        If the job is another user's (:func:`check_owner`), is not
        finished, its model cannot be read, or the file at its output is
        not the model this job wrote.
    """
    _check_known(client, job_id)
    check_owner(client, _read_record(client, job_id), "fetch the model of")
    record = job_status(client, job_id)
    if record["state"] != "finished":
        detail = f": {record['error']}" if record.get("error") else ""
        raise JobError(f"Job {job_id} is {record['state']}{detail}; only a finished job has a model.")
    try:
        data = client.submit(_read_bytes, record["output"], pure=False).result()
    except OSError as exc:
        raise JobError(f"Job {job_id}'s model {record['output']} cannot be read by the workers: "
                       f"{exc.strerror or exc}; was it moved or deleted from the store?") from exc
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    def vet(tmp):  # a model that does not load, or that another writer left there, never replaces ``path``
        try:
            load(tmp)
            written_by = load_metadata(tmp).get("job_id")
        except ValueError as exc:
            raise JobError(f"{record['output']} is no longer a taodist model ({exc}); job {job_id}'s model "
                           "was replaced after it finished. Nothing was written; resubmit the job.") from exc
        if written_by != job_id:
            by = f"job {written_by}" if written_by else "something other than a taodist job"
            raise JobError(f"{record['output']} now holds a model written by {by}, not by job {job_id} "
                           "(the file was replaced after the job finished). Nothing was written; resubmit the "
                           "job, or take that model with `taodist result` of the job that wrote it.")

    atomic_write(path, data, check=vet)
    return path


def _read_bytes(path):
    """The bytes of a regular file. Opened without blocking and checked on the open descriptor: a FIFO put at
    a job's output would otherwise block the reading worker's thread until something wrote to it."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "it is no longer a regular file (a FIFO, device or socket was put there)")
        return fh.read()


def _read_record(client, job_id):
    return Variable(_record_name(job_id), client=client).get(timeout=SCHEDULER_TIMEOUT)


def _set_record(client, job_id, record):
    """Set the job's record on the scheduler, and in its journal when the scheduler keeps one."""
    Variable(_record_name(job_id), client=client).set(record)
    _on_scheduler(client, write_record, job_id, record)


def _log(client, job_id, line):
    """One line of the job's log: an event of its topic, and a line of its journal when the scheduler keeps one."""
    timestamp = time.time()
    client.log_event(_log_topic(job_id), {"at": timestamp, "line": line})
    _on_scheduler(client, append_log, job_id, timestamp, line)


def _journal_pending(dask_scheduler=None):
    """Run on the scheduler: whether it keeps a journal that no client has restored into it yet."""
    return journal_folder() is not None and not getattr(dask_scheduler, _RESTORED, False)


def _journal_to_restore(dask_scheduler=None):
    """Run on the scheduler: the journal (:func:`read_journal`), or None once restored into this scheduler."""
    return None if getattr(dask_scheduler, _RESTORED, False) else read_journal()


def _journal_restored(dask_scheduler=None):
    setattr(dask_scheduler, _RESTORED, True)


#: the scheduler attribute marking its journal as restored (it lives as long as the scheduler process)
_RESTORED = "_taodist_journal_restored"
_JOURNAL_LOCK = "taodist-journal"


def restore_journal(client):
    """Bring the journal's jobs into a scheduler that does not know them (it restarted); once per scheduler.

    Every journalled job the scheduler has no record of gets its record and
    log back. One that had not ended lost its driver with the old scheduler:
    it is marked ``failed``, saying so, which frees its output. A scheduler
    without a journal (``TAODIST_JOURNAL`` unset in its environment) has
    nothing to restore.

    Parameters
    ----------
    client : distributed.Client
    """
    if not _on_scheduler(client, _journal_pending):
        return
    with _lock(client, _JOURNAL_LOCK):
        jobs = _on_scheduler(client, _journal_to_restore)
        if jobs is None:  # another client restored it meanwhile
            return
        known = {msg["id"] for _, msg in _events(client, JOBS_TOPIC)}
        for record, lines in jobs:
            job_id = record["id"]
            if job_id in known:
                continue
            for timestamp, line in lines:
                client.log_event(_log_topic(job_id), {"at": timestamp, "line": line})
            if record.get("state") not in FINAL_STATES:
                reason = (f"the scheduler restarted while this job was {record.get('state')}; its driver was lost "
                          "with it and no model was written by this job. Submit it again.")
                record.update(state="failed", ended=time.time(), error=reason, driver=None, client=None)
                _log(client, job_id, f"failed: {reason}")
            _set_record(client, job_id, record)
            client.log_event(JOBS_TOPIC, {"id": job_id, "estimator": record.get("estimator")})
        _on_scheduler(client, _journal_restored)


def _lock(client, name):
    """The scheduler's Lock ``name``, through ``client``.

    ``Lock`` takes no client; left alone it binds to whichever client is
    the process's default, which is not ``client`` once another one has
    been made and closed in the same process.
    """
    return Lock(name, scheduler_rpc=client.scheduler, loop=client.loop)


def _transition(client, job_id, state, *, allowed_from, **fields):
    """Set the job's state if it is now one of ``allowed_from``; returns the new record or None."""
    with _lock(client, _lock_name(job_id)):
        var = Variable(_record_name(job_id), client=client)
        record = var.get(timeout=SCHEDULER_TIMEOUT)
        if record["state"] not in allowed_from:
            return None
        record.update(fields, state=state)
        _set_record(client, job_id, record)
        return record


def describe(event, info):
    """One human-readable line for a progress event of :mod:`taodist.utils.progress`."""
    if event == "tao_iteration":
        return (f"TAO iteration {info['iteration']}/{info['max_iter']}: objective {info['objective']:.6g} "
                f"({info['seconds']:.1f}s)")
    if event == "tao_level":
        return f"TAO iteration {info['iteration']}: depth {info['depth']} done ({info['n_nodes']} nodes)"
    if event == "tao_validation":
        return (f"TAO iteration {info['iteration']}: validation error {info['score']:.6g} "
                f"(best: iteration {info['best_iteration']})")
    if event == "forest_tree":
        return f"forest: {info['done']}/{info['total']} trees"
    if event == "laptao_outer":
        return (f"LapTAO outer iteration {info['iteration']}/{info['n_outer']}: mu {info['mu']:.3g}, "
                f"||z - t|| {info['constraint']:.4g}")
    return f"{event}: {info}"


def _drive(job, job_id):
    """The driver task: runs on a worker, fits, writes the model, records the outcome."""
    worker = get_worker().address
    # seceded: this task holds no worker thread while the fit's tasks run
    with worker_client() as client:
        _drive_in(client, job, job_id, worker)
        # the outcome is recorded (or the job was cancelled before it started): nobody needs this task's
        # state any more. Had the driver died or raised instead, its erred future stays held for _reconcile.
        _forget_driver(client, job_id)


def _drive_in(client, job, job_id, worker):
    # "running" too: a driver re-run after its worker died starts over
    record = _transition(client, job_id, "running", allowed_from=("queued", "running"),
                         started=time.time(), worker=worker)
    if record is None:
        return  # cancelled before it started
    cancel_event = Event(_cancel_name(job_id), client=client)

    def log(line):
        _log(client, job_id, line)

    def check_cancelled():
        if cancel_event.is_set():
            raise JobCancelled()

    def progress(event, info):
        check_cancelled()
        log(describe(event, info))

    log(f"started on {worker}")
    try:
        if cancel_event.is_set():
            raise JobCancelled()
        # checked again here, where the model is written: links on the store may resolve differently than
        # where the job was submitted
        root = results_root(client)
        check_results_root(job, root)

        def last_checks():  # the model file is complete; it replaces the output only if these still hold
            check_cancelled()  # a cancel after the fit: no model
            check_results_root(job, root)  # a link swapped in under the output while the job fitted

        est, metadata = run_job(job, client=client, log=log, progress=progress, return_metadata=True,
                                job_id=job_id, checkpoint=last_checks)
    except JobCancelled:
        log("cancelled; no model written")
        _transition(client, job_id, "cancelled", allowed_from=("running",), ended=time.time())
    except Exception as exc:  # any failure is the job's outcome, reported in its status
        log(traceback.format_exc())
        _transition(client, job_id, "failed", allowed_from=("running",), ended=time.time(),
                    error=f"{type(exc).__name__}: {' '.join(str(exc).split())}")
    else:
        _transition(client, job_id, "finished", allowed_from=("running",), ended=time.time(),
                    metrics=metadata["metrics"], fit_seconds=metadata["fit_seconds"])
