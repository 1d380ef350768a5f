"""The job journal: job records and log lines kept on disk by the scheduler, so they outlive it.

Job state lives in the scheduler's memory (:mod:`taodist.service.cluster`);
a scheduler that restarts would forget every job. When the scheduler's
environment sets ``TAODIST_JOURNAL`` to a folder (a volume that outlives the
scheduler's container), every change of a job's record and every line of
its log is also written there, by the scheduler process itself (the
functions here run on the scheduler through ``run_on_scheduler``; the
clients and drivers need not see that folder):

* ``<folder>/<job id>.json``: the job's latest record, replaced atomically
  (written to a temporary name, then renamed);
* ``<folder>/<job id>.log``: its log, one JSON ``[time, line]`` per line,
  appended.

After a restart the new scheduler knows no job; the first command that asks
for one restores the journal's records and logs into it (see
:func:`taodist.service.cluster.restore_journal`). A job that had not ended
lost its driver with the old scheduler: it is then marked ``failed`` with
that reason, which frees its output.
"""

import json
import os
import re

from ..io.atomic import atomic_write
from .jobs import JobError

#: the scheduler's environment variable naming the journal folder
JOURNAL_VARIABLE = "TAODIST_JOURNAL"

_JOB_ID = re.compile(r"^[0-9A-Za-z-]{1,64}$")


def journal_folder():
    """The journal folder the scheduler's environment sets, or None (no journal)."""
    folder = os.environ.get(JOURNAL_VARIABLE)
    return folder or None


def _paths(folder, job_id):
    if not _JOB_ID.match(job_id):  # ids are made by taodist; anything else must not become a path
        raise ValueError(f"not a taodist job id: {job_id!r}")
    return os.path.join(folder, f"{job_id}.json"), os.path.join(folder, f"{job_id}.log")


def write_record(job_id, record, dask_scheduler=None):
    """Run on the scheduler: replace the job's journalled record; False without a journal."""
    folder = journal_folder()
    if folder is None:
        return False
    path, _ = _paths(folder, job_id)
    try:
        os.makedirs(folder, exist_ok=True)
        atomic_write(path, json.dumps(record, default=str).encode())
    except OSError as exc:
        raise _unwritable(folder, exc) from None
    return True


def append_log(job_id, timestamp, line, dask_scheduler=None):
    """Run on the scheduler: append one line to the job's journalled log; False without a journal."""
    folder = journal_folder()
    if folder is None:
        return False
    _, path = _paths(folder, job_id)
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "a") as f:
            f.write(json.dumps([timestamp, line], default=str) + "\n")
    except OSError as exc:
        raise _unwritable(folder, exc) from None
    return True


def _unwritable(folder, exc):
    return JobError(f"The scheduler cannot write its job journal in {folder} ({JOURNAL_VARIABLE}): "
                    f"{exc.strerror or exc}. Make that folder writable for the scheduler's user, or unset "
                    f"{JOURNAL_VARIABLE} to keep job state in the scheduler's memory only.")


def read_journal(dask_scheduler=None):
    """Run on the scheduler: ``[(record, [(time, line), ...]), ...]`` of every journalled job, oldest first.

    A record that cannot be read (cut short by a crash of the machine, which
    the atomic rename makes unlikely) is skipped; a log line cut short at the
    end is dropped.
    """
    folder = journal_folder()
    if folder is None or not os.path.isdir(folder):
        return []
    jobs = []
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".json"):
            continue
        try:
            with open(os.path.join(folder, name)) as f:
                record = json.load(f)
        except (OSError, ValueError):
            continue
        if not isinstance(record, dict) or not _JOB_ID.match(str(record.get("id", ""))):
            continue
        lines = []
        _, log = _paths(folder, record["id"])
        if os.path.exists(log):
            with open(log) as f:
                for text in f:
                    try:
                        t, line = json.loads(text)
                    except ValueError:
                        continue
                    lines.append((t, line))
        jobs.append((record, lines))
    jobs.sort(key=lambda job: (job[0].get("submitted") or 0, job[0]["id"]))
    return jobs
