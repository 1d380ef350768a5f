"""The deployment topology with real processes: a `dask scheduler`, two `dask worker`s, the CLI."""

import json
import os
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from taodist import load
from taodist.cli import main
from taodist.testing import make_oblique_classification


@pytest.fixture
def scheduler_address(tmp_path):
    bindir = os.path.dirname(sys.executable)
    dask = os.path.join(bindir, "dask")
    sfile = tmp_path / "scheduler.json"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", ":0",
                               "--scheduler-file", str(sfile)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        deadline = time.time() + 60
        while not sfile.exists() and time.time() < deadline:
            time.sleep(0.2)
        for _ in range(2):
            procs.append(subprocess.Popen([dask, "worker", "--scheduler-file", str(sfile), "--nthreads", "1",
                                           "--nworkers", "1", "--host", "127.0.0.1"],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        address = json.loads(sfile.read_text())["address"]
        from distributed import Client

        with Client(address, timeout=30) as c:
            c.wait_for_workers(2, timeout=60)
        yield address
    finally:
        for p in procs[::-1]:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def test_fit_job_on_a_scheduler_with_two_worker_processes(tmp_path, scheduler_address):
    X, y = make_oblique_classification(600, 5, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    (tmp_path / "job.yaml").write_text("estimator: TAOClassifier\nparams: {max_depth: 3, random_state: 0}\n"
                                       "train: train.npz\noutput: out/m.npz\n")
    r = CliRunner().invoke(main, ["fit", str(tmp_path / "job.yaml"), "--scheduler", scheduler_address])
    assert r.exit_code == 0, r.output
    model = load(tmp_path / "out" / "m.npz")
    from taodist import TAOClassifier

    local = TAOClassifier(max_depth=3, random_state=0).fit(X, y)
    np.testing.assert_array_equal(model.predict(X), local.predict(X))


def test_unreachable_scheduler_times_out_naming_the_address(tmp_path):
    (tmp_path / "t.npz").write_bytes(b"")
    (tmp_path / "job.yaml").write_text("estimator: TAOClassifier\ntrain: t.npz\noutput: m.npz\n")
    start = time.time()
    r = CliRunner().invoke(main, ["fit", str(tmp_path / "job.yaml"), "--scheduler", "tcp://127.0.0.1:1"])
    assert r.exit_code != 0 and "tcp://127.0.0.1:1" in r.output
    assert time.time() - start < 60
