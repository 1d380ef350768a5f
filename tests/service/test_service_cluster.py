"""The deployment topology with real processes: a `dask scheduler`, two `dask worker`s, the CLI.

These stand in for docker-compose.yml (no Docker engine on CI): the same
commands the containers run, on 127.0.0.1.
"""

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from taodist import TAOClassifier, load, save
from taodist.cli import main
from taodist.testing import make_oblique_classification

BINDIR = Path(sys.executable).parent


@contextmanager
def running_cluster(folder, tls_args=()):
    """A `dask scheduler` and two single-threaded `dask worker` processes; yields (address, worker procs)."""
    sfile = folder / "scheduler.json"
    quiet = dict(stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    scheduler = [str(BINDIR / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address",
                 ":0", "--scheduler-file", str(sfile), *tls_args]
    if tls_args:
        scheduler += ["--protocol", "tls"]
    procs = [subprocess.Popen(scheduler, **quiet)]
    workers = []
    try:
        deadline = time.time() + 60
        while not sfile.exists() and time.time() < deadline:
            time.sleep(0.2)
        for _ in range(2):
            workers.append(subprocess.Popen([str(BINDIR / "dask"), "worker", "--scheduler-file", str(sfile),
                                             "--nthreads", "1", "--nworkers", "1", "--host", "127.0.0.1",
                                             *tls_args], **quiet))
        procs += workers
        address = json.loads(sfile.read_text())["address"]
        _wait_for_workers(address, 2, tls_args)
        yield address, workers
    finally:
        for p in procs[::-1]:
            p.kill()  # nothing to save: a graceful shutdown only adds seconds per test
        for p in procs:
            p.wait(timeout=30)


def _wait_for_workers(address, n, tls_args):
    from distributed import Client
    from distributed.security import Security

    security = None
    if tls_args:
        files = dict(zip(tls_args[::2], tls_args[1::2]))
        security = Security(tls_ca_file=files["--tls-ca-file"], tls_client_cert=files["--tls-cert"],
                            tls_client_key=files["--tls-key"], require_encryption=True)
    with Client(address, timeout=30, security=security) as c:
        c.wait_for_workers(n, timeout=60)


@pytest.fixture
def cluster(tmp_path):
    with running_cluster(tmp_path) as running:
        yield running


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def write_job(folder, name, params, train="train.npz", estimator="TAOClassifier"):
    path = folder / f"{name}.yaml"
    path.write_text(f"estimator: {estimator}\nparams: {json.dumps(params)}\ntrain: {train}\n"
                    f"output: models/{name}.npz\n")
    return path


TAODIST = [sys.executable, "-m", "taodist.cli"]  # the `taodist` script, whether or not taodist is installed


def submit_in_a_process(job, address, *extra):
    """`taodist submit` as its own process, which exits before the job ends; returns the job id."""
    done = subprocess.run([*TAODIST, "submit", str(job), "--scheduler", address, *extra],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout
    return done.stdout.strip().splitlines()[-1]


def wait_for_state(address, job_id, states=("finished", "failed", "cancelled"), timeout=180, tls=()):
    deadline = time.time() + timeout
    while time.time() < deadline:
        code, out = cli("status", job_id, "--scheduler", address, *tls)
        assert code == 0, out
        if out.split(":")[0].strip() in states:
            return out.strip()
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} still {out!r} after {timeout}s")


def test_fit_job_on_a_scheduler_with_two_worker_processes(tmp_path, cluster):
    address, _ = cluster
    X, y = make_oblique_classification(600, 5, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job = write_job(tmp_path, "m", {"max_depth": 3, "random_state": 0})
    code, out = cli("fit", job, "--scheduler", address)
    assert code == 0, out
    assert "TAO iteration 1/" in out and "objective" in out
    model = load(tmp_path / "models" / "m.npz")
    local = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), local.predict(X))


def test_submitted_job_outlives_the_submitter_and_its_model_is_fetched(tmp_path, cluster):
    address, _ = cluster
    X, y = make_oblique_classification(800, 6, random_state=1)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job_id = submit_in_a_process(write_job(tmp_path, "tree", {"max_depth": 3, "random_state": 2}), address)
    assert wait_for_state(address, job_id) == "finished"
    code, out = cli("logs", job_id, "--scheduler", address)
    assert code == 0 and "TAO iteration 1/" in out and "model written" in out, out
    code, out = cli("status", "--scheduler", address)
    assert code == 0 and job_id in out and "finished" in out, out
    code, out = cli("status", job_id, "--scheduler", address, "--json")
    assert code == 0 and json.loads(out)["state"] == "finished" and json.loads(out)["id"] == job_id, out
    code, out = cli("status", "--scheduler", address, "--json")
    assert code == 0 and job_id in [r["id"] for r in json.loads(out)], out

    code, out = cli("result", job_id, "-o", tmp_path / "fetched" / "model.npz", "--scheduler", address, "--json")
    assert code == 0, out
    record = json.loads(out)
    assert record["id"] == job_id and record["state"] == "finished"
    assert record["written"] == str(tmp_path / "fetched" / "model.npz")
    model = load(tmp_path / "fetched" / "model.npz")
    local = TAOClassifier(max_depth=3, random_state=2).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), local.predict(X))
    np.testing.assert_allclose(model.predict_proba(X), local.predict_proba(X))

    # a job whose data is corrupt fails with the reason in its status; it has no result
    (tmp_path / "bad.npz").write_bytes(b"not an npz archive")
    bad = submit_in_a_process(write_job(tmp_path, "bad", {"max_depth": 2}, train="bad.npz"), address)
    state = wait_for_state(address, bad)
    assert state.startswith("failed") and "bad.npz" in state, state
    code, out = cli("result", bad, "-o", tmp_path / "bad-model.npz", "--scheduler", address)
    assert code != 0 and "failed" in out and not (tmp_path / "bad-model.npz").exists()
    code, out = cli("status", "no-such-job", "--scheduler", address)
    assert code != 0 and "no-such-job" in out


def test_cancelled_job_stops_and_leaves_the_previous_model_untouched(tmp_path, cluster):
    address, _ = cluster
    X, y = make_oblique_classification(4000, 10, random_state=3)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    (tmp_path / "models").mkdir()
    previous = tmp_path / "models" / "slow.npz"
    save(TAOClassifier(max_depth=1, max_iter=1).fit(X[:200], y[:200]), previous)
    before = previous.read_bytes()
    # many trees: minutes of work whatever the solver, reporting progress after every tree
    # (a single tree converges in a few iterations however large max_iter is)
    job = write_job(tmp_path, "slow", {"n_estimators": 2000, "max_depth": 5, "random_state": 0},
                    estimator="TAOForestClassifier")
    job_id = submit_in_a_process(job, address)
    deadline = time.time() + 120
    while "forest: 2/" not in cli("logs", job_id, "--scheduler", address)[1]:
        assert time.time() < deadline, "the job never finished its second tree"
        time.sleep(0.5)
    code, out = cli("cancel", job_id, "--scheduler", address)
    assert code == 0, out
    assert wait_for_state(address, job_id, timeout=60) == "cancelled"
    assert "forest: 2000/" not in cli("logs", job_id, "--scheduler", address)[1]
    assert previous.read_bytes() == before
    assert sorted(p.name for p in previous.parent.iterdir()) == ["slow.npz"]  # no temporary files left


def test_twenty_jobs_at_once_all_complete_with_the_right_models(tmp_path, cluster):
    from distributed import Client

    from taodist.service import load_job
    from taodist.service.cluster import list_jobs, submit

    address, _ = cluster
    X, y = make_oblique_classification(300, 4, random_state=4)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    seeds = range(20)
    with Client(address) as client:
        ids = [submit(client, load_job(write_job(tmp_path, f"job{s}", {"max_depth": 2, "max_iter": 3,
                                                                        "random_state": s}))) for s in seeds]
        deadline = time.time() + 300
        while True:
            records = {r["id"]: r for r in list_jobs(client)}
            if all(records[i]["state"] in ("finished", "failed", "cancelled") for i in ids):
                break
            assert time.time() < deadline, {i: records[i]["state"] for i in ids}
            time.sleep(1)
    not_finished = {i: (records[i]["state"], records[i]["error"]) for i in ids if records[i]["state"] != "finished"}
    assert not not_finished, not_finished  # state and reason of each job that did not finish
    for s in seeds:
        model = load(tmp_path / "models" / f"job{s}.npz")
        local = TAOClassifier(max_depth=2, max_iter=3, random_state=s).fit(X, y)
        np.testing.assert_array_equal(model.predict(X), local.predict(X))


def test_a_worker_killed_during_a_job_does_not_fail_it(tmp_path, cluster):
    address, workers = cluster
    X, y = make_oblique_classification(3000, 8, random_state=5)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    params = {"max_depth": 4, "max_iter": 12, "tol": 0.0, "random_state": 0}
    job_id = submit_in_a_process(write_job(tmp_path, "survivor", params), address)
    deadline = time.time() + 120
    while "TAO iteration 1/" not in cli("logs", job_id, "--scheduler", address)[1]:
        assert time.time() < deadline
        time.sleep(0.2)
    os.kill(workers[0].pid, signal.SIGKILL)
    assert wait_for_state(address, job_id) == "finished"
    model = load(tmp_path / "models" / "survivor.npz")
    local = TAOClassifier(**params).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), local.predict(X))


def test_unreachable_scheduler_times_out_naming_the_address(tmp_path):
    (tmp_path / "t.npz").write_bytes(b"")
    (tmp_path / "job.yaml").write_text("estimator: TAOClassifier\ntrain: t.npz\noutput: m.npz\n")
    start = time.time()
    code, out = cli("fit", tmp_path / "job.yaml", "--scheduler", "tcp://127.0.0.1:1")
    assert code != 0 and "tcp://127.0.0.1:1" in out
    code, out = cli("status", "--scheduler", "tcp://127.0.0.1:1")
    assert code != 0 and "tcp://127.0.0.1:1" in out
    assert time.time() - start < 60


def _certificates(folder, name):
    """A self-signed CA and a certificate+key for 127.0.0.1 signed by it; returns the three paths."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    valid = dict(not_valid_before=now - datetime.timedelta(hours=1), not_valid_after=now + datetime.timedelta(days=1))

    def build(subject, issuer, public_key, signing_key, ca):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer).public_key(public_key)
             .serial_number(x509.random_serial_number()).not_valid_before(valid["not_valid_before"])
             .not_valid_after(valid["not_valid_after"])
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return b.sign(signing_key, hashes.SHA256())

    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} test CA")])
    ca = build(ca_name, ca_name, ca_key.public_key(), ca_key, True)
    cert = build(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]), ca_name, key.public_key(),
                 ca_key, False)
    paths = folder / f"{name}-ca.pem", folder / f"{name}-cert.pem", folder / f"{name}-key.pem"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return paths


def test_tls_cluster_serves_certified_clients_and_refuses_others(tmp_path):
    pytest.importorskip("cryptography")
    ca, cert, key = _certificates(tmp_path, "cluster")
    tls = ("--tls-ca-file", str(ca), "--tls-cert", str(cert), "--tls-key", str(key))
    X, y = make_oblique_classification(400, 4, random_state=6)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    with running_cluster(tmp_path, tls) as (address, _):
        assert address.startswith("tls://")
        job_id = submit_in_a_process(write_job(tmp_path, "secure", {"max_depth": 2, "random_state": 0}),
                                     address, *tls)
        assert wait_for_state(address, job_id, tls=tls) == "finished"
        code, out = cli("result", job_id, "-o", tmp_path / "secure.npz", "--scheduler", address, *tls)
        assert code == 0, out
        np.testing.assert_array_equal(load(tmp_path / "secure.npz").predict(X),
                                      TAOClassifier(max_depth=2, random_state=0).fit(X, y).predict(X))

        # no certificate: refused before connecting, saying what is needed
        code, out = cli("status", "--scheduler", address)
        assert code != 0 and "--tls-ca-file" in out
        # a certificate from another CA: the handshake is refused
        other_ca, other_cert, other_key = _certificates(tmp_path, "intruder")
        code, out = cli("status", job_id, "--scheduler", address, "--tls-ca-file", other_ca,
                        "--tls-cert", other_cert, "--tls-key", other_key)
        assert code != 0 and "Could not reach" in out and address in out


# ---------------------------------------------------------------- outputs, results and lost drivers
@pytest.fixture
def threaded_cluster():
    """A scheduler and one 4-thread worker inside this process, on 127.0.0.1; yields (address, client)."""
    from distributed import Client, LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=4, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as local, Client(local) as client:
        yield local.scheduler_address, client


def _wait(client, job_id, states=("finished", "failed", "cancelled"), timeout=120):
    from taodist.service.cluster import job_status

    deadline = time.time() + timeout
    while (record := job_status(client, job_id))["state"] not in states:
        assert time.time() < deadline, record
        time.sleep(0.2)
    return record


def test_two_unfinished_jobs_may_not_write_the_same_output(tmp_path):
    from distributed import Client, LocalCluster

    from taodist.service import JobError, load_job
    from taodist.service.cluster import cancel, job_status, submit

    X, y = make_oblique_classification(300, 4, random_state=3)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    first_file = write_job(tmp_path, "m", {"max_depth": 2})
    (tmp_path / "alias").symlink_to(tmp_path)  # the same output file through another path
    twin = tmp_path / "twin.yaml"
    twin.write_text(first_file.read_text().replace("output: models/m.npz", "output: alias/models/m.npz"))
    # no workers: submitted jobs stay queued, unfinished for as long as the test needs
    with LocalCluster(n_workers=0, processes=False, protocol="tcp", host="127.0.0.1",
                      dashboard_address=None) as local, Client(local) as client:
        address = local.scheduler_address
        first = submit(client, load_job(first_file))
        with pytest.raises(JobError, match=f"output: .*m.npz is being written by job {first} \\(queued\\)"):
            submit(client, load_job(twin))
        code, out = cli("submit", twin, "--scheduler", address)
        assert code != 0 and out.startswith("Error: output:") and out.count("\n") == 1 and first in out, out
        code, out = cli("fit", twin, "--scheduler", address)  # a fit run here, on that cluster, too
        assert code != 0 and out.startswith("Error: output:") and first in out, out
        other = submit(client, load_job(write_job(tmp_path, "other", {"max_depth": 2})))  # another output: fine
        assert cancel(client, first)["state"] == "cancelled"
        second = submit(client, load_job(twin))  # the first job has ended: its output is free
        assert [job_status(client, i)["state"] for i in (first, other, second)] == ["cancelled", "queued", "queued"]
    assert not (tmp_path / "models").exists()


def test_result_refuses_a_model_its_job_did_not_write(tmp_path, threaded_cluster):
    from taodist import save
    from taodist.io import load_metadata
    from taodist.service import JobError, load_job
    from taodist.service.cluster import fetch_result, submit

    address, client = threaded_cluster
    X, y = make_oblique_classification(300, 4, random_state=4)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job_id = submit(client, load_job(write_job(tmp_path, "m", {"max_depth": 2, "max_iter": 2})))
    assert _wait(client, job_id)["state"] == "finished"
    assert load_metadata(tmp_path / "models" / "m.npz")["job_id"] == job_id
    code, out = cli("result", job_id, "-o", tmp_path / "ok.npz", "--scheduler", address)
    assert code == 0 and load(tmp_path / "ok.npz").predict(X).shape == (len(y),), out

    # the file at the job's output replaced afterwards, by hand or by a plain `taodist fit`
    save(TAOClassifier(max_depth=1, max_iter=1).fit(X, y), tmp_path / "models" / "m.npz")
    with pytest.raises(JobError, match=f"not by job {job_id}"):
        fetch_result(client, job_id, tmp_path / "fetched.npz")
    code, out = cli("result", job_id, "-o", tmp_path / "fetched.npz", "--scheduler", address)
    assert code != 0 and out.startswith("Error: ") and out.count("\n") == 1 and f"not by job {job_id}" in out
    assert not (tmp_path / "fetched.npz").exists()
    (tmp_path / "models" / "m.npz").unlink()
    code, out = cli("result", job_id, "-o", tmp_path / "fetched.npz", "--scheduler", address)
    assert code != 0 and "cannot be read by the workers" in out and out.count("\n") == 1
    assert not (tmp_path / "fetched.npz").exists()
    # a FIFO put there: reading it used to block the worker's thread (and `result`) until something wrote to it
    os.mkfifo(tmp_path / "models" / "m.npz")
    start = time.time()
    code, out = cli("result", job_id, "-o", tmp_path / "fetched.npz", "--scheduler", address)
    assert code != 0 and "no longer a regular file" in out and out.count("\n") == 1, out
    assert time.time() - start < 30 and not (tmp_path / "fetched.npz").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".taodist")]  # no temporary file left


async def _die():
    os._exit(1)  # what a segfault or the kernel's OOM killer does to a worker


def test_a_driver_whose_workers_die_fails_the_job_with_the_reason(tmp_path):
    """KilledWorker on the driver: nothing runs to record it, yet status/logs must end (real processes)."""
    import dask
    from distributed import Client, LocalCluster

    from taodist.service import load_job
    from taodist.service.cluster import submit

    X, y = make_oblique_classification(3000, 8, random_state=5)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job = load_job(write_job(tmp_path, "doomed", {"max_depth": 5, "max_iter": 500, "tol": 0.0, "random_state": 0}))
    # the scheduler gives a task up the first time a worker dies under it (default: after 3 deaths)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                         dashboard_address=None) as local, Client(local) as client:
        address = local.scheduler_address
        job_id = submit(client, job)
        victim = _wait(client, job_id, ("running", "finished", "failed", "cancelled"))["worker"]  # its driver's
        client.run(_die, workers=[victim], wait=False)
        record = _wait(client, job_id, timeout=60)
        assert record["state"] == "failed" and "KilledWorker" in record["error"] and victim in record["error"]
        code, out = cli("status", job_id, "--scheduler", address)
        assert code == 0 and out.startswith("failed: KilledWorker") and victim in out, out
        follow = subprocess.run([*TAODIST, "logs", job_id, "--follow", "--scheduler", address],
                                capture_output=True, text=True, timeout=60)  # ends: it does not hang
        assert follow.returncode == 0 and "failed: KilledWorker" in follow.stdout, follow.stdout + follow.stderr
        assert not (tmp_path / "models" / "doomed.npz").exists()


def test_a_fit_run_from_a_client_holds_its_output_and_ends_with_a_recorded_outcome(tmp_path, threaded_cluster):
    """`taodist fit --scheduler` fits from the calling process: its record holds the output against submits,
    a cancel reaches it, and a client that leaves without an outcome leaves a failed job, not a running one."""
    from distributed import Client

    from taodist.service import JobError, load_job
    from taodist.service.cluster import JobCancelled, cancel, client_held_job, job_status, list_jobs, submit

    address, client = threaded_cluster
    X, y = make_oblique_classification(300, 4, random_state=3)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job_file = write_job(tmp_path, "m", {"max_depth": 2})
    with client_held_job(client, load_job(job_file)) as (job_id, check_cancelled):
        assert job_status(client, job_id)["state"] == "running"
        with pytest.raises(JobError, match=f"output: .*m.npz is being written by job {job_id} \\(running\\)"):
            submit(client, load_job(job_file))
        check_cancelled()  # not cancelled: nothing raised
    assert job_status(client, job_id)["state"] == "finished"

    with pytest.raises(JobCancelled):
        with client_held_job(client, load_job(job_file)) as (second, check_cancelled):
            cancel(client, second)
            check_cancelled()
    assert job_status(client, second)["state"] == "cancelled"

    other = Client(address, set_as_default=False)
    held = client_held_job(other, load_job(job_file))
    third, _ = held.__enter__()  # its fit never ends: the client goes away mid-job
    other.close()
    record = job_status(client, third)
    assert record["state"] == "failed" and "left the scheduler" in record["error"], record
    assert [r["id"] for r in list_jobs(client)] == [job_id, second, third]
    submit_free = load_job(job_file)  # the output is free again
    assert job_status(client, submit(client, submit_free))["state"] in ("queued", "running", "finished")


def test_a_job_whose_submitter_died_before_starting_its_driver_is_failed_not_queued_forever(tmp_path,
                                                                                        threaded_cluster):
    from distributed import Client

    from taodist.service import load_job
    from taodist.service.cluster import job_status, list_jobs, submit

    address, client = threaded_cluster
    X, y = make_oblique_classification(200, 4, random_state=3)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job_file = write_job(tmp_path, "m", {"max_depth": 2})

    class Killed(BaseException):
        pass

    other = Client(address, set_as_default=False)

    def killed_here(*args, **kwargs):  # the record is written; the process dies before the driver is submitted
        raise Killed

    other.submit = killed_here
    with pytest.raises(Killed):
        submit(other, load_job(job_file))
    other.close()
    (job_id,) = [r["id"] for r in list_jobs(client)]
    record = job_status(client, job_id)
    assert record["state"] == "failed" and "ended before its driver task was started" in record["error"], record
    assert job_status(client, submit(client, load_job(job_file)))["state"] != "failed"  # the output is free


def test_logs_follow_ends_with_one_error_when_the_scheduler_stops(tmp_path, monkeypatch):
    import threading

    from distributed import Client, Variable

    from taodist.service import cluster as service

    sfile = tmp_path / "scheduler.json"
    scheduler = subprocess.Popen([str(BINDIR / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                  "--dashboard-address", ":0", "--scheduler-file", str(sfile)],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        while not sfile.exists() and time.time() < deadline:
            time.sleep(0.2)
        address = json.loads(sfile.read_text())["address"]
        with Client(address, timeout=30) as client:  # a running job, as its driver records it
            client.log_event(service.JOBS_TOPIC, {"id": "j1"})
            Variable("taodist-job-j1", client=client).set({"id": "j1", "state": "running", "output": "m.npz",
                                                           "estimator": "TAOClassifier", "error": None})
        monkeypatch.setattr(service, "SCHEDULER_TIMEOUT", 2)
        threading.Timer(3.0, os.kill, (scheduler.pid, signal.SIGSTOP)).start()
        start = time.time()
        code, out = cli("logs", "j1", "-f", "--scheduler", address)
        assert code == 1 and "did not answer in time" in out, out
        assert out.count("Error") == 1 and "Traceback" not in out
        assert time.time() - start < 30
    finally:
        scheduler.send_signal(signal.SIGCONT)
        scheduler.kill()
        scheduler.wait(timeout=30)


def _start_scheduler(folder, env):
    """A `dask scheduler` process with ``env``; returns (process, address)."""
    sfile = folder / f"scheduler-{time.monotonic_ns()}.json"
    proc = subprocess.Popen([str(BINDIR / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0",
                             "--dashboard-address", ":0", "--scheduler-file", str(sfile)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    while not sfile.exists() and time.time() < deadline:
        time.sleep(0.2)
    return proc, json.loads(sfile.read_text())["address"]


def _start_worker(address, env=None):
    # no nanny: the process stopped or killed is the worker itself
    proc = subprocess.Popen([str(BINDIR / "dask"), "worker", address, "--nthreads", "1", "--no-nanny",
                             "--host", "127.0.0.1"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _wait_for_workers(address, 1, ())
    return proc


def test_a_restarted_scheduler_gets_its_jobs_back_from_the_journal(tmp_path):
    # A finished job keeps its state, metrics, log and model; a running and a queued one lost their
    # driver with the scheduler and are failed saying so, which frees their outputs for a new submit.
    X, y = make_oblique_classification(400, 4, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    env = {**os.environ, "TAODIST_JOURNAL": str(tmp_path / "journal")}
    procs = []
    try:
        scheduler, address = _start_scheduler(tmp_path, env)
        worker = _start_worker(address)
        procs += [scheduler, worker]
        done = submit_in_a_process(write_job(tmp_path, "done", {"max_depth": 2, "random_state": 0}), address)
        assert wait_for_state(address, done).startswith("finished")
        long_job = write_job(tmp_path, "long", {"n_estimators": 2000, "max_depth": 6, "random_state": 0},
                             estimator="TAOForestClassifier")
        running = submit_in_a_process(long_job, address)
        wait_for_state(address, running, states=("running",))
        os.kill(worker.pid, signal.SIGSTOP)  # no driver can start now
        queued = submit_in_a_process(write_job(tmp_path, "queued", {"max_depth": 2}), address)
        code, out = cli("status", queued, "--scheduler", address)
        assert out.startswith("queued"), out
        restart = time.time()
        for p in (scheduler, worker):
            p.kill()
            p.wait(timeout=30)
        scheduler, address = _start_scheduler(tmp_path, env)  # a new scheduler, empty but for the journal
        procs += [scheduler, _start_worker(address)]

        code, out = cli("status", "--json", "--scheduler", address)
        assert code == 0, out
        states = {r["id"]: r for r in json.loads(out)}
        assert states[done]["state"] == "finished" and states[done]["fit_seconds"] > 0, states[done]
        for job_id, was in ((running, "running"), (queued, "queued")):
            assert states[job_id]["state"] == "failed", states[job_id]
            assert f"the scheduler restarted while this job was {was}" in states[job_id]["error"]
        from distributed import Client

        from taodist.service.cluster import job_logs
        with Client(address, timeout=30) as client:
            lines = job_logs(client, done)
        assert any("model written to" in line for _, line in lines) and all(t < restart for t, _ in lines), lines
        code, out = cli("result", done, "-o", tmp_path / "fetched.npz", "--scheduler", address)
        assert code == 0, out
        np.testing.assert_array_equal(load(tmp_path / "fetched.npz").predict(X),
                                      load(tmp_path / "models" / "done.npz").predict(X))
        assert not (tmp_path / "models" / "long.npz").exists()
        # the failed job's output is free again: the same job is accepted and runs
        again = submit_in_a_process(write_job(tmp_path, "long", {"n_estimators": 2, "max_depth": 2},
                                              estimator="TAOForestClassifier"), address)
        assert wait_for_state(address, again).startswith("finished")
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def test_a_job_s_status_is_read_through_a_client_that_is_not_the_default(tmp_path):
    # reading a running job's status probes its driver with distributed's wait(), which asks for the
    # default client: through a client made with set_as_default=False it failed with "No clients found"
    from distributed import Client, LocalCluster

    from taodist.service import load_job
    from taodist.service.cluster import FINAL_STATES, job_status, submit

    X, y = make_oblique_classification(400, 4, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job = load_job(write_job(tmp_path, "m", {"n_estimators": 40, "max_depth": 6, "random_state": 0},
                             estimator="TAOForestClassifier"))
    # worker processes: an in-process worker's own client would be found as the default and hide it
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, dashboard_address=None) as local, \
            Client(local, set_as_default=False) as client:
        job_id = submit(client, job)
        seen = []
        while (record := job_status(client, job_id))["state"] not in FINAL_STATES:
            seen.append(record["state"])
            time.sleep(0.1)
    assert record["state"] == "finished" and "running" in seen, (record, seen)


#: a lock whose holder died is released in 2 s (Dask's default: 30 s, checked every 10 s)
SHORT_LEASES = {"DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_TIMEOUT": "2s",
                "DASK_DISTRIBUTED__SCHEDULER__LOCKS__LEASE_VALIDATION_INTERVAL": "500ms"}

#: a client that takes a job's lock (as `cancel`, or a `status` failing a job, does for a moment) and waits
HOLD_LOCK = """
import sys, time
from distributed import Client, Lock
client = Client(sys.argv[1], timeout=30)
Lock("taodist-job-lock-" + sys.argv[2], scheduler_rpc=client.scheduler, loop=client.loop).acquire()
print("held", flush=True)
time.sleep(600)
"""


def test_clients_killed_while_following_a_log_or_holding_a_job_s_lock_leave_the_jobs_unharmed(tmp_path, monkeypatch):
    # A job's state lives on the scheduler, so a client killed mid-command (`logs -f` between two reads, or
    # with the job's lock held) leaves nothing a later command or the job's driver waits on for long: the
    # scheduler drops the dead client's connection, and its lock lease times out
    import dask
    from distributed import Client

    X, y = make_oblique_classification(2000, 6, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    env = {**os.environ, **SHORT_LEASES}
    for key, value in SHORT_LEASES.items():
        monkeypatch.setenv(key, value)
    procs = []
    try:
        scheduler, address = _start_scheduler(tmp_path, env)
        procs += [scheduler, _start_worker(address, env), _start_worker(address, env)]
        forest = {"n_estimators": 60, "max_depth": 4, "random_state": 0}
        followed = submit_in_a_process(write_job(tmp_path, "followed", forest, estimator="TAOForestClassifier"),
                                       address)
        wait_for_state(address, followed, states=("running",))
        with Client(address, timeout=30) as client:
            def clients():
                return set(client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.clients)))

            before = clients()
            for lines_first in (0, 1, 3):  # killed as it connects, after its first read, a few reads in
                follower = subprocess.Popen([*TAODIST, "logs", followed, "-f", "--scheduler", address],
                                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
                for _ in range(lines_first):
                    follower.stdout.readline()
                follower.kill()
                follower.wait(timeout=30)
            deadline = time.time() + 20
            while clients() - before and time.time() < deadline:  # the dead clients' connections are dropped
                time.sleep(0.2)
            assert not clients() - before
        assert wait_for_state(address, followed).startswith("finished")
        code, out = cli("logs", followed, "--scheduler", address)
        assert code == 0 and "forest: 60/60 trees" in out and "model written to" in out, out

        held = submit_in_a_process(write_job(tmp_path, "held", {**forest, "n_estimators": 2000},
                                             estimator="TAOForestClassifier"), address)
        wait_for_state(address, held, states=("running",))
        holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, address, held], env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        assert holder.stdout.readline().strip() == "held"
        holder.kill()
        holder.wait(timeout=30)
        start = time.time()
        with dask.config.set({"distributed.scheduler.locks.lease-timeout": "2s"}):
            code, out = cli("cancel", held, "--scheduler", address)  # waits for the dead holder's lease
        assert code == 0 and "stopping at its next checkpoint" in out, out
        assert time.time() - start < 20
        assert wait_for_state(address, held).startswith("cancelled")
        assert not (tmp_path / "models" / "held.npz").exists()
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def test_fit_on_a_scheduler_that_dies_mid_fit_ends_with_one_error_line(tmp_path):
    # `taodist fit --scheduler`: the fit's client loses its scheduler; the command says so in one line
    # (not the lower-level error of whichever call noticed first, nor the record it could not write)
    X, y = make_oblique_classification(4000, 10, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    job = write_job(tmp_path, "m", {"n_estimators": 2000, "max_depth": 5, "random_state": 0},
                    estimator="TAOForestClassifier")
    procs = []
    try:
        scheduler, address = _start_scheduler(tmp_path, os.environ)
        procs += [scheduler, _start_worker(address), _start_worker(address)]
        fit = subprocess.Popen([*TAODIST, "fit", str(job), "--scheduler", address], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        procs.append(fit)
        lines = []
        while not any("forest:" in line for line in lines):  # the fit is under way
            lines.append(fit.stdout.readline())
            assert lines[-1], lines
        scheduler.kill()
        killed = time.time()
        out, _ = fit.communicate(timeout=120)
        lines += out.splitlines(keepends=True)
        assert time.time() - killed < 60
        assert fit.returncode == 1, lines
        errors = [line for line in lines if "Error" in line or "ERROR" in line or "Traceback" in line]
        assert len(errors) == 1 and errors[0].startswith("Error: SchedulerLostError: The Dask scheduler at "), lines
        assert "was lost during the fit" in errors[0] and not (tmp_path / "models" / "m.npz").exists()
    finally:
        for p in procs[::-1]:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)

