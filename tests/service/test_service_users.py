"""Users of one scheduler kept apart: job owners (token or TLS certificate) and the results root.

Two users are two clients with different identities: the environment
variable ``TAODIST_TOKEN`` switched between the commands of user A and user
B (each command connects anew), or two TLS client certificates from the
cluster's CA.
"""

import json
import os
import stat
import time

import numpy as np
import pytest
from click.testing import CliRunner

from taodist import TAOClassifier, load
from taodist.cli import main
from taodist.testing import make_oblique_classification

ALICE = "alice-token-0123456789abcdef"
BOB = "bob-token-0123456789abcdef012"


def cli(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


def as_user(monkeypatch, token, *args):
    """The command line run by the user whose token is ``token``."""
    monkeypatch.setenv("TAODIST_TOKEN", token)
    return cli(*args)


def write_job(folder, name, output=None, train="train.npz",
              params='{"max_depth": 2, "max_iter": 2, "random_state": 0}'):  # seeded: compared with a local fit
    path = folder / f"{name}.yaml"
    path.write_text(f"estimator: TAOClassifier\nparams: {params}\ntrain: {train}\n"
                    f"output: {output or f'models/{name}.npz'}\n")
    return path


def one_error_line(out):
    return out.startswith("Error: ") and out.count("\n") == 1 and "Traceback" not in out


@pytest.fixture
def data(tmp_path):
    X, y = make_oblique_classification(300, 4, random_state=3)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    return X, y


@pytest.fixture
def idle_cluster():
    """A scheduler in this process with no workers (submitted jobs stay queued); yields (address, cluster)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=0, processes=True, threads_per_worker=1, host="127.0.0.1",
                      dashboard_address=None) as local:
        yield local.scheduler_address, local


@pytest.fixture
def worker_cluster():
    """A scheduler in this process (its environment is the test's) and one 2-thread worker process; yields its
    address. A worker process, not a thread: in one process a worker's drivers would adopt the default client,
    which is the client of whichever command runs at that moment, and which that command closes."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, threads_per_worker=2, processes=True, host="127.0.0.1",
                      dashboard_address=None) as local:
        yield local.scheduler_address


def submitted(monkeypatch, token, job_file, address):
    code, out = as_user(monkeypatch, token, "submit", job_file, "--scheduler", address)
    assert code == 0, out
    return out.strip().splitlines()[-1]


def wait_for(monkeypatch, token, address, job_id, states=("finished", "failed", "cancelled"), timeout=120):
    deadline = time.time() + timeout
    while True:
        code, out = as_user(monkeypatch, token, "status", job_id, "--scheduler", address)
        assert code == 0, out
        if out.split(":")[0].strip() in states:
            return out.strip()
        assert time.time() < deadline, out
        time.sleep(0.3)


# ------------------------------------------------------------------------------------------ owners
def test_another_user_cannot_cancel_a_queued_job_nor_reuse_its_output_and_lists_only_their_own(
        tmp_path, monkeypatch, data, idle_cluster):
    address, _ = idle_cluster
    a_job = submitted(monkeypatch, ALICE, write_job(tmp_path, "a"), address)
    b_job = submitted(monkeypatch, BOB, write_job(tmp_path, "b"), address)

    code, out = as_user(monkeypatch, BOB, "cancel", a_job, "--scheduler", address)
    assert code == 1 and one_error_line(out), out
    assert f"job {a_job} belongs to another user (token " in out and "only its owner may cancel it" in out
    assert wait_for(monkeypatch, ALICE, address, a_job, ("queued",)) == "queued"  # untouched
    # the same output as Alice's unfinished job: refused, without suggesting to cancel her job
    code, out = as_user(monkeypatch, BOB, "submit", write_job(tmp_path, "b2", output="models/a.npz"),
                        "--scheduler", address)
    assert code == 1 and one_error_line(out) and f"by job {a_job} (queued) of another user" in out, out
    assert "taodist cancel" not in out

    # status: one's own jobs; --all everyone's, with their owners
    code, out = as_user(monkeypatch, BOB, "status", "--scheduler", address)
    assert code == 0 and b_job in out and a_job not in out, out
    code, out = as_user(monkeypatch, BOB, "status", "--all", "--scheduler", address)
    assert code == 0 and b_job in out and a_job in out, out
    a_line = next(line for line in out.splitlines() if a_job in line)
    b_line = next(line for line in out.splitlines() if b_job in line)
    assert "token " in a_line and a_line.split()[3] != b_line.split()[3]  # two owners, told apart
    code, out = as_user(monkeypatch, ALICE, "status", "--json", "--scheduler", address)
    records = json.loads(out)
    assert [r["id"] for r in records] == [a_job]
    assert records[0]["owner"].startswith("token:") and ALICE not in out  # only the token's hash is kept
    code, out = as_user(monkeypatch, BOB, "status", "--all", "--json", "--scheduler", address)
    assert [r["id"] for r in json.loads(out)] == [a_job, b_job]

    code, out = as_user(monkeypatch, ALICE, "cancel", a_job, "--scheduler", address)
    assert code == 0 and out.strip() == f"{a_job}: cancelled", out
    code, out = as_user(monkeypatch, BOB, "cancel", b_job, "--scheduler", address)
    assert code == 0 and out.strip() == f"{b_job}: cancelled", out


def test_a_fit_run_from_a_client_is_owned_by_its_user_too(tmp_path, monkeypatch, data, idle_cluster):
    """`taodist fit --scheduler` records its job with an owner: another user cannot cancel it."""
    from distributed import Client

    from taodist.service import load_job
    from taodist.service.cluster import client_held_job

    address, _ = idle_cluster
    monkeypatch.setenv("TAODIST_TOKEN", ALICE)
    with Client(address, set_as_default=False) as client, \
            client_held_job(client, load_job(write_job(tmp_path, "held"))) as (job_id, check_cancelled):
        code, out = as_user(monkeypatch, BOB, "cancel", job_id, "--scheduler", address)
        assert code == 1 and one_error_line(out) and f"job {job_id} belongs to another user" in out, out
        check_cancelled()  # not cancelled
        code, out = as_user(monkeypatch, ALICE, "status", "--scheduler", address)
        assert code == 0 and job_id in out and "running" in out, out
    code, out = as_user(monkeypatch, BOB, "status", job_id, "--scheduler", address)
    assert code == 0 and out.strip() == "finished", out


def test_another_user_cannot_read_the_log_or_fetch_the_model_of_a_finished_job(tmp_path, monkeypatch, data,
                                                                                worker_cluster):
    X, y = data
    address = worker_cluster
    job_id = submitted(monkeypatch, ALICE, write_job(tmp_path, "a"), address)
    assert wait_for(monkeypatch, BOB, address, job_id) == "finished"  # anyone may read a job's state

    for args in (("logs", job_id), ("logs", job_id, "--follow"), ("result", job_id, "-o", tmp_path / "stolen.npz"),
                 ("cancel", job_id)):
        code, out = as_user(monkeypatch, BOB, *args, "--scheduler", address)
        assert code == 1 and one_error_line(out) and f"job {job_id} belongs to another user" in out, (args, out)
    assert not (tmp_path / "stolen.npz").exists()

    code, out = as_user(monkeypatch, ALICE, "logs", job_id, "--scheduler", address)
    assert code == 0 and "model written" in out, out
    code, out = as_user(monkeypatch, ALICE, "result", job_id, "-o", tmp_path / "mine.npz", "--scheduler", address)
    assert code == 0, out
    np.testing.assert_array_equal(load(tmp_path / "mine.npz").predict(X),
                                  load(tmp_path / "models" / "a.npz").predict(X))
    code, out = as_user(monkeypatch, ALICE, "cancel", job_id, "--scheduler", address)
    assert code == 0 and out.strip() == f"{job_id}: finished", out


def test_records_without_an_owner_stay_open_to_every_user(tmp_path, monkeypatch, data, worker_cluster):
    """A job recorded by a taodist that predates owners: listed for everyone, and anyone may act on it."""
    from distributed import Client, Variable

    address = worker_cluster
    job_id = submitted(monkeypatch, ALICE, write_job(tmp_path, "old"), address)
    assert wait_for(monkeypatch, ALICE, address, job_id) == "finished"
    with Client(address, set_as_default=False) as client:  # the record as an older taodist wrote it
        record = Variable(f"taodist-job-{job_id}", client=client).get()
        del record["owner"]
        Variable(f"taodist-job-{job_id}", client=client).set(record)

    code, out = as_user(monkeypatch, BOB, "status", "--scheduler", address)
    assert code == 0 and job_id in out, out
    code, out = as_user(monkeypatch, BOB, "status", "--all", "--scheduler", address)
    assert code == 0 and "(no owner)" in out, out
    code, out = as_user(monkeypatch, BOB, "logs", job_id, "--scheduler", address)
    assert code == 0 and "model written" in out, out
    code, out = as_user(monkeypatch, BOB, "result", job_id, "-o", tmp_path / "old.npz", "--scheduler", address)
    assert code == 0 and load(tmp_path / "old.npz") is not None, out
    code, out = as_user(monkeypatch, BOB, "cancel", job_id, "--scheduler", address)
    assert code == 0 and out.strip() == f"{job_id}: finished", out


def test_the_token_is_made_once_private_and_a_shared_one_is_refused(tmp_path, monkeypatch):
    from taodist.service import JobError
    from taodist.service.users import token_file, token_owner, user_token

    path = token_file()
    assert str(path).startswith(os.environ["XDG_CONFIG_HOME"])  # the test's own config folder
    assert user_token(create=False) is None and not path.exists()
    token = user_token()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and path.read_text().strip() == token
    assert user_token() == token and len(token) >= 32  # kept: the same user from one command to the next
    assert token_owner(token) == token_owner(user_token()) != token_owner(token + "x")
    assert not [p for p in path.parent.iterdir() if p.name != "token"]  # no temporary file left

    path.chmod(0o644)
    with pytest.raises(JobError, match="readable or writable by other users .*chmod 600"):
        user_token()
    path.chmod(0o600)
    monkeypatch.setenv("TAODIST_TOKEN", "short")
    with pytest.raises(JobError, match="at least 16 characters"):
        user_token()
    monkeypatch.setenv("TAODIST_TOKEN", ALICE)
    assert user_token() == ALICE  # the variable wins over the file


def test_a_shared_token_file_stops_the_command_with_one_error_line(tmp_path, monkeypatch, idle_cluster):
    from taodist.service.users import token_file, user_token

    address, _ = idle_cluster
    user_token()
    token_file().chmod(0o640)
    code, out = cli("status", "--scheduler", address)
    assert code == 1 and one_error_line(out) and "chmod 600" in out, out


def _tls_files(folder, names):
    """A CA and, for each name, a certificate (CN=name) and key it signed; returns {name: (ca, cert, key)}."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "users test CA")])

    def build(subject, public_key, ca):
        b = (x509.CertificateBuilder().subject_name(subject).issuer_name(ca_name).public_key(public_key)
             .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(hours=1))
             .not_valid_after(now + datetime.timedelta(days=1))
             .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
        if not ca:
            b = b.add_extension(x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        return b.sign(ca_key, hashes.SHA256())

    ca_path = folder / "ca.pem"
    ca_path.write_bytes(build(ca_name, ca_key.public_key(), True).public_bytes(serialization.Encoding.PEM))
    files = {}
    for name in names:
        key = ec.generate_private_key(ec.SECP256R1())
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name),
                             x509.NameAttribute(NameOID.ORGANIZATION_NAME, "lab")])
        cert_path, key_path = folder / f"{name}-cert.pem", folder / f"{name}-key.pem"
        cert_path.write_bytes(build(subject, key.public_key(), False).public_bytes(serialization.Encoding.PEM))
        key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))
        files[name] = (ca_path, cert_path, key_path)
    return files


def test_over_tls_the_owner_is_the_client_certificate_the_scheduler_saw(tmp_path, monkeypatch, data):
    """Two certificates, one token: the certificates tell the users apart (the token is not used)."""
    pytest.importorskip("cryptography")
    from distributed import Client, LocalCluster
    from distributed.security import Security

    from taodist.service import load_job
    from taodist.service.cluster import client_owner, submit

    files = _tls_files(tmp_path, ["cluster", "alice", "bob"])
    ca, cert, key = files["cluster"]
    security = Security(tls_ca_file=str(ca), tls_scheduler_cert=str(cert), tls_scheduler_key=str(key),
                        tls_worker_cert=str(cert), tls_worker_key=str(key), tls_client_cert=str(cert),
                        tls_client_key=str(key), require_encryption=True)
    monkeypatch.setenv("TAODIST_TOKEN", ALICE)  # both users hold the same token: only the certificates differ

    def tls(name):
        return ("--tls-ca-file", files[name][0], "--tls-cert", files[name][1], "--tls-key", files[name][2])

    with LocalCluster(n_workers=0, processes=False, protocol="tls", host="127.0.0.1", security=security,
                      dashboard_address=None) as local:
        address = local.scheduler_address
        alice = Security(tls_ca_file=str(ca), tls_client_cert=str(files["alice"][1]),
                         tls_client_key=str(files["alice"][2]), require_encryption=True)
        with Client(address, security=alice, set_as_default=False) as client:
            assert client_owner(client) == "tls:CN=alice,O=lab"
            job_id = submit(client, load_job(write_job(tmp_path, "a")))
        code, out = cli("cancel", job_id, "--scheduler", address, *tls("bob"))
        assert code == 1 and one_error_line(out), out
        assert "belongs to another user (CN=alice,O=lab; you are CN=bob,O=lab)" in out
        code, out = cli("status", "--scheduler", address, *tls("bob"))
        assert code == 0 and job_id not in out, out
        code, out = cli("cancel", job_id, "--scheduler", address, *tls("alice"))
        assert code == 0 and out.strip() == f"{job_id}: cancelled", out


# ----------------------------------------------------------------------------------- results root
def test_outputs_outside_the_results_root_are_refused_links_and_dots_included(tmp_path, monkeypatch, data,
                                                                              worker_cluster):
    X, y = data
    address = worker_cluster
    root = tmp_path / "results"
    (root / "team").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (root / "escape").symlink_to(outside)  # a link inside the root to a folder outside it
    (root / "inside").symlink_to(root / "team")  # a link that stays inside: fine
    monkeypatch.setenv("TAODIST_RESULTS_ROOT", str(root))  # the scheduler runs in this process: its setting

    refused = {"outside": tmp_path / "m.npz", "dots": root / ".." / "m.npz", "link": root / "escape" / "m.npz",
               "root itself": root}
    for name, output in refused.items():
        code, out = cli("submit", write_job(tmp_path, name.replace(" ", "_"), output=output), "--scheduler", address)
        assert code == 1 and one_error_line(out), (name, out)
        assert "Error: output:" in out and (f"outside the results root {root}" in out
                                            or "existing directory" in out), (name, out)
    assert "resolves to" in cli("submit", write_job(tmp_path, "l", output=root / "escape" / "m.npz"),
                                "--scheduler", address)[1]
    assert not list(outside.iterdir()) and not (tmp_path / "m.npz").exists()

    # inside the root (through a link that stays inside too), trained on data outside it
    for name, output in (("ok", root / "team" / "ok.npz"), ("linked", root / "inside" / "linked.npz")):
        job_id = submitted(monkeypatch, ALICE, write_job(tmp_path, name, output=output), address)
        assert wait_for(monkeypatch, ALICE, address, job_id) == "finished"
    np.testing.assert_array_equal(load(root / "team" / "ok.npz").predict(X),
                                  TAOClassifier(max_depth=2, max_iter=2, random_state=0).fit(X, y).predict(X))
    assert (root / "team" / "linked.npz").exists()

    monkeypatch.setenv("TAODIST_RESULTS_ROOT", "relative/results")
    code, out = cli("submit", write_job(tmp_path, "bad", output=root / "team" / "bad.npz"), "--scheduler", address)
    assert code == 1 and one_error_line(out) and "is not an absolute path" in out, out


def test_the_driver_checks_the_results_root_again_where_it_writes(tmp_path, monkeypatch, data, idle_cluster):
    """A folder replaced by a link out of the root after the submit: the job fails, nothing is written."""
    address, local = idle_cluster
    root = tmp_path / "results"
    (root / "team").mkdir(parents=True)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    monkeypatch.setenv("TAODIST_RESULTS_ROOT", str(root))
    job_id = submitted(monkeypatch, ALICE, write_job(tmp_path, "a", output=root / "team" / "a.npz"), address)
    (root / "team").rmdir()
    (root / "team").symlink_to(outside)
    local.scale(1)  # a worker: the queued job's driver starts
    state = wait_for(monkeypatch, ALICE, address, job_id)
    assert state.startswith("failed: JobError: output:") and "outside the results root" in state, state
    assert not list(outside.iterdir())
