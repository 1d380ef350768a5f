"""Clients racing on the same jobs, and a model write that the operating system refuses halfway.

Two clients (of one user) act at the same moment, released together by a
barrier, many times: the scheduler's locks must make each outcome one of the
outcomes the commands promise, never a mix of two.
"""

import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
from distributed import Client, LocalCluster

from taodist import load
from taodist.service import JobError, load_job
from taodist.service.cluster import FINAL_STATES, cancel, job_logs, job_status, submit
from taodist.testing import make_oblique_classification


@pytest.fixture(scope="module")
def two_clients():
    """Two clients of one scheduler whose worker is a process with two threads (drivers need a worker that
    is not this process: see tests/service/test_service_users.py)."""
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                      dashboard_address=None) as local, \
            Client(local, set_as_default=False) as a, Client(local, set_as_default=False) as b:
        yield a, b


def _job_file(folder, name, params, output, estimator="TAOForestClassifier"):
    path = folder / f"{name}.yaml"
    path.write_text(f"estimator: {estimator}\nparams: {params}\ntrain: train.npz\noutput: {output}\n")
    return load_job(path)


def at_once(*calls):
    """Run the calls in threads released together; returns each one's result or exception, in order."""
    barrier, out = threading.Barrier(len(calls)), [None] * len(calls)

    def run(i, call):
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # the outcome under test
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return out


def wait_final(client, job_id, timeout=120):
    deadline = time.monotonic() + timeout
    while (record := job_status(client, job_id))["state"] not in FINAL_STATES:
        assert time.monotonic() < deadline, record
        time.sleep(0.1)
    return record


@pytest.fixture
def train(tmp_path):
    X, y = make_oblique_classification(600, 5, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    return tmp_path, X


def test_two_clients_submitting_to_one_output_at_once_start_exactly_one_job(two_clients, train):
    folder, _ = train
    a, b = two_clients
    for round_ in range(5):
        output = f"models/m{round_}.npz"
        jobs = [_job_file(folder, f"{who}{round_}", "{n_estimators: 200, max_depth: 3, random_state: %d}" % i,
                          output) for i, who in enumerate("ab")]
        outcomes = at_once(lambda: submit(a, jobs[0]), lambda: submit(b, jobs[1]))
        accepted = [o for o in outcomes if isinstance(o, str)]
        refused = [o for o in outcomes if isinstance(o, JobError)]
        assert len(accepted) == 1 and len(refused) == 1, outcomes
        assert accepted[0] in str(refused[0]) and "is being written by job" in str(refused[0]), refused
        cancel(a, accepted[0])  # frees the output for good: the next round uses another one anyway
        assert wait_final(b, accepted[0])["state"] == "cancelled"


def test_two_clients_cancelling_one_running_job_at_once_end_it_once(two_clients, train):
    folder, _ = train
    a, b = two_clients
    for round_ in range(3):
        job_id = submit(a, _job_file(folder, f"long{round_}", "{n_estimators: 4000, max_depth: 3}",
                                     f"models/long{round_}.npz"))
        while job_status(a, job_id)["state"] != "running":
            time.sleep(0.05)
        first, second, read = at_once(lambda: cancel(a, job_id), lambda: cancel(b, job_id),
                                      lambda: job_status(b, job_id))
        for record in (first, second, read):
            assert isinstance(record, dict) and record["state"] in ("running", "cancelled"), record
        record = wait_final(b, job_id)
        assert record["state"] == "cancelled" and record["error"] is None, record
        lines = [line for _, line in job_logs(a, job_id)]
        assert sum("cancelled" in line for line in lines) == 1, lines
        assert not (folder / "models" / f"long{round_}.npz").exists()


def test_a_cancel_racing_a_job_s_end_gives_a_model_or_a_cancelled_job_never_both(two_clients, train):
    # cancels sent at seeded moments around the job's end: each job either finished with its model in
    # place, or was cancelled with nothing written -- never "cancelled" with a model at its output
    folder, X = train
    a, b = two_clients
    def start(name):
        return submit(a, _job_file(folder, name, "{n_estimators: 40, max_depth: 3, random_state: 0}",
                                   f"models/{name}.npz"))

    began = time.monotonic()
    assert wait_final(a, start("uncancelled"))["state"] == "finished"
    duration = time.monotonic() - began  # cancels are drawn over the job's own duration
    rng = np.random.default_rng(0)
    outcomes = []
    for round_ in range(6):
        output = folder / "models" / f"race{round_}.npz"
        job_id = start(f"race{round_}")
        time.sleep(rng.uniform(0.0, duration))
        cancel(b, job_id)
        state = wait_final(a, job_id)["state"]
        outcomes.append(state)
        if state == "finished":
            assert load(output).predict(X).shape == (len(X),)
        else:
            assert state == "cancelled" and not output.exists(), state
        assert [p.name for p in output.parent.glob(".taodist-*")] == []  # no temporary file left either
    assert set(outcomes) <= {"finished", "cancelled"}


WRITE_PAST_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
import numpy as np
from taodist import TAOForestClassifier, load, save
from taodist.testing import make_oblique_classification

X, y = make_oblique_classification(600, 5, random_state=0)
old = TAOForestClassifier(n_estimators=2, max_depth=2, random_state=0).fit(X, y)
save(old, sys.argv[1])
new = TAOForestClassifier(n_estimators=60, max_depth=4, random_state=1).fit(X, y)
want = old.predict(X)  # compiled now: numba writes its cache files, which the limit below would refuse
size = len(open(sys.argv[1], "rb").read())
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (4 * size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
try:
    save(new, sys.argv[1])
except OSError as exc:
    print("refused:", exc.errno, exc)
np.testing.assert_array_equal(load(sys.argv[1]).predict(X), want)
print("old model intact")
"""


def test_a_model_write_the_system_refuses_halfway_leaves_the_previous_model_and_no_temporary_file(tmp_path):
    # a real write failure at the OS level (a file-size limit: the write fails partway as on a full disk),
    # not a patched function: the model is written to a temporary name and renamed, so `output` keeps the
    # previous model and the temporary file is removed
    import errno

    output = tmp_path / "m.npz"
    done = subprocess.run([sys.executable, "-c", WRITE_PAST_A_FILE_SIZE_LIMIT, str(output)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"refused: {errno.EFBIG}" in done.stdout and "old model intact" in done.stdout, done.stdout
    assert os.listdir(tmp_path) == ["m.npz"]
