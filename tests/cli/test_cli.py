import re

import numpy as np
import pytest
from click.testing import CliRunner

from taodist.cli import main
from taodist.io import open_zarr


def test_convert_npz_to_zarr_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(120, 4)), rng.integers(0, 3, size=120)
    np.savez(tmp_path / "d.npz", X_train=X, y_train=y)
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "d.npz"), str(tmp_path / "d.zarr"),
                                       "--rows-per-chunk", "50"])
    assert result.exit_code == 0, result.output
    Xz = open_zarr(tmp_path / "d.zarr", component="X")
    assert Xz.chunks[0] == (50, 50, 20)
    np.testing.assert_allclose(Xz.compute(), X.astype(np.float32))
    np.testing.assert_array_equal(open_zarr(tmp_path / "d.zarr", component="y").compute(), y)


def test_convert_refuses_unknown_formats_clearly(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    result = CliRunner().invoke(main, ["convert", str(tmp_path / "a.txt"), str(tmp_path / "o.zarr")])
    assert result.exit_code != 0 and "expected .npz, .npy, .csv or .parquet" in result.output


def test_demo_of_a_named_data_set_that_is_not_there_is_one_error_line(monkeypatch, tmp_path):
    # it fell back to digits and exited 0, as if the user had asked for digits
    np.savez(tmp_path / "letter.npz", X_train=np.zeros((2, 2)), y_train=[0, 1], X_test=np.zeros((1, 2)), y_test=[0])
    monkeypatch.setenv("TAODIST_DATA", str(tmp_path))
    result = CliRunner().invoke(main, ["demo", "--dataset", "nope", "--in-process", "--max-iter", "1"])
    assert result.exit_code == 1, result.output
    last = result.output.splitlines()[-1]
    assert last.startswith("Error: Data set 'nope' not found") and "Available: letter;" in last, result.output
    assert "Falling back" not in result.output


def test_demo_falls_back_to_digits_and_beats_chance_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("TAODIST_DATA", str(tmp_path))  # an empty folder: no MNIST there
    result = CliRunner().invoke(main, ["demo", "--in-process", "--max-depth", "6", "--max-iter", "3"])
    assert result.exit_code == 0, result.output
    assert "Falling back to scikit-learn's digits" in result.output
    err = float(re.search(r"test error: ([\d.]+)%", result.output).group(1))
    # 10 classes: chance is 90%. Depth 6 because shallower trees' error depends strongly on the random
    # initial tree (depth 4: 5-33% across seeds; depth 6: 4-9% over seeds 0-9)
    assert err < 20.0
    assert re.search(r"\d+ leaves, \d+ decision nodes, \d+ non-zero weights", result.output)
    # progress as the fit goes (CliRunner's output is not a terminal: one line per iteration), then what next
    assert re.search(r"^\[ *\d+\.\ds\] TAO iteration 1/3: objective \S+, \d+\.\ds, ETA <= ", result.output, re.M)
    assert "taodist inspect demo.npz --plot tree.png" in result.output and "estimator: TAOClassifier" in result.output
    assert "Traceback" not in result.output and "ERROR" not in result.output


def test_predict_and_inspect_a_saved_model(tmp_path):
    from taodist import TAOClassifier, save
    from taodist.io import to_zarr
    from taodist.testing import make_oblique_classification

    X, y = make_oblique_classification(300, 4, random_state=0)
    clf = TAOClassifier(max_depth=2, random_state=0).fit(X, y)
    save(clf, tmp_path / "m.npz")
    np.savez(tmp_path / "test.npz", X_test=X)
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "m.npz"), str(tmp_path / "test.npz"), "-o", str(tmp_path / "p.npy")])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), clf.predict(X))
    to_zarr({"X": X}, tmp_path / "x.zarr", rows_per_chunk=100)
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "m.npz"), str(tmp_path / "x.zarr"), "-o", str(tmp_path / "p.zarr")])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(open_zarr(tmp_path / "p.zarr").compute(), clf.predict(X))
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--rules"])
    assert r.exit_code == 0, r.output
    assert f"leaves {clf.tree_.n_leaves()}" in r.output and "leaf" in r.output.splitlines()[-1]
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "test.npz")])
    assert r.exit_code != 0 and "not a taodist model" in r.output


def test_convert_csv_with_a_target_column(tmp_path):
    (tmp_path / "d.csv").write_text("a,b,label\n1,2,0\n3,4,1\n5,6.5,1\n")
    r = CliRunner().invoke(main, ["convert", str(tmp_path / "d.csv"), str(tmp_path / "d.zarr"), "--target", "label"])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(open_zarr(tmp_path / "d.zarr", component="X").compute(), [[1, 2], [3, 4], [5, 6.5]])
    np.testing.assert_array_equal(open_zarr(tmp_path / "d.zarr", component="y").compute(), [0, 1, 1])
    r = CliRunner().invoke(main, ["convert", str(tmp_path / "d.csv"), str(tmp_path / "e.zarr"), "--target", "nope"])
    assert r.exit_code != 0 and "no column 'nope'" in r.output


def test_inspect_plot_draws_the_tree_and_rejects_a_bad_image_shape(tmp_path):
    from sklearn.datasets import load_digits

    from taodist import TAOClassifier, save

    X, y = load_digits(return_X_y=True)
    clf = TAOClassifier(max_depth=2, max_iter=2, random_state=0).fit(X[:400], y[:400])
    save(clf, tmp_path / "m.npz")
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--plot", str(tmp_path / "tree.png")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "tree.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--plot", str(tmp_path / "bad.png"),
                                  "--image-shape", "7x7"])
    assert r.exit_code != 0 and "64" in r.output and "49" in r.output and not (tmp_path / "bad.png").exists()


def _one_error_line(result):
    """The command failed with exactly one line, `Error: ...`, and no traceback."""
    lines = result.output.strip().splitlines()
    return (result.exit_code != 0 and len(lines) == 1 and lines[0].startswith("Error: ")
            and isinstance(result.exception, (SystemExit, type(None))))


def test_a_malformed_or_unreachable_scheduler_is_one_error_line(tmp_path):
    import socket
    import time

    (tmp_path / "t.npz").write_bytes(b"")
    (tmp_path / "job.yaml").write_text("estimator: TAOClassifier\ntrain: t.npz\noutput: m.npz\n")
    with socket.socket() as s:  # a port on 127.0.0.1 that nothing listens on
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    start = time.time()
    for address, message in [("notaurl", "'notaurl' is not a scheduler address"),
                             ("http://127.0.0.1:8786", "unknown protocol 'http'"),
                             (f"tcp://127.0.0.1:{closed_port}", "Could not reach the Dask scheduler")]:
        for args in (["status"], ["logs", "JOB"], ["submit", str(tmp_path / "job.yaml")],
                     ["fit", str(tmp_path / "job.yaml")], ["demo", "--max-iter", "0"]):
            result = CliRunner().invoke(main, [*args, "--scheduler", address])
            assert _one_error_line(result), (args, result.output, result.exception)
            assert message in result.output, result.output
            assert "expected tcp://HOST:PORT" in result.output or "Check the address" in result.output
    assert time.time() - start < 30  # refused at once, not after connect timeouts
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.yaml", "t.npz"]  # nothing written


def test_something_that_is_not_a_scheduler_is_one_error_line_within_the_timeout():
    import socket
    import threading

    from taodist.dask._client import connect

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    accepted = []
    threading.Thread(target=lambda: accepted.append(server.accept()), daemon=True).start()  # accepts, never answers
    try:
        address = "tcp://127.0.0.1:%d" % server.getsockname()[1]
        with pytest.raises(ConnectionError, match="no Dask handshake within 2s") as info:
            connect(address, timeout=2)
        assert "\n" not in str(info.value)
    finally:
        server.close()


def _busy(seconds):
    import time

    end = time.time() + seconds
    while time.time() < end:
        sum(range(10_000))  # holds the GIL: the worker is slow to stop, as after a real fit


def test_the_embedded_cluster_shuts_down_silently_after_a_fit(capfd, monkeypatch):
    """What `taodist demo` does around its fit, on a tiny one: progress lines, then no shutdown noise."""
    from distributed import fire_and_forget

    from taodist import TAOClassifier
    from taodist.dask import _client
    from taodist.testing import make_oblique_classification
    from taodist.utils.progress import ProgressPrinter, reporting

    monkeypatch.setattr(_client, "local_workers", lambda: 2)
    X, y = make_oblique_classification(400, 4, random_state=0)
    lines = []
    with _client.embedded_cluster() as client:
        assert client.scheduler.address.startswith("tcp://127.0.0.1:")
        with ProgressPrinter(write=lines.append, tty=False) as printer, reporting(printer):
            TAOClassifier(max_depth=2, max_iter=2, random_state=0).fit(X, y, client=client)
        # workers still busy at shutdown: without the quiet shutdown, "still alive after 4.0 seconds, killing"
        for _ in range(2):
            fire_and_forget(client.submit(_busy, 8, pure=False))
        capfd.readouterr()  # only what the shutdown prints counts
    out, err = capfd.readouterr()
    assert any("TAO iteration 1/2: objective" in line for line in lines)
    assert not [line for line in (out + err).splitlines()
                if "Traceback" in line or "ERROR" in line or "WARNING" in line or "distributed." in line], out + err
    import logging

    assert logging.getLogger("distributed.scheduler").level != logging.CRITICAL  # levels restored afterwards


def test_inspect_reports_inference_cost_of_a_softmax_tree(tmp_path):
    from sklearn.datasets import make_blobs

    from taodist import TAOClassifier, save

    X, y = make_blobs(600, n_features=4, centers=6, cluster_std=2.0, random_state=0)
    clf = TAOClassifier(max_depth=2, leaf_type="linear", leaf_classes=2, max_iter=2, random_state=0).fit(X, y)
    save(clf, tmp_path / "m.npz")
    np.savez(tmp_path / "x.npz", X=X)
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--data", str(tmp_path / "x.npz")])
    assert r.exit_code == 0, r.output
    assert "softmax leaves limited to 2 of 6 classes" in r.output
    flops, scored = clf.tree_.leaf_path_costs()
    assert f"mean over leaves: {flops.mean():.1f} FLOPs, {scored.mean():.2f} classes scored (of 6)" in r.output
    assert (f"mean over the 600 rows of {tmp_path / 'x.npz'}: {clf.tree_.inference_flops(X):.1f} FLOPs, "
            f"{clf.tree_.mean_classes_scored(X):.2f} classes scored (of 6)") in r.output
    np.savez(tmp_path / "narrow.npz", X=X[:, :3])
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--data", str(tmp_path / "narrow.npz")])
    assert r.exit_code != 0 and "has 3 features; the model was fitted on 4" in r.output


def test_inspect_shows_how_a_model_encodes_missing_values_and_names_them_in_its_rules(tmp_path):
    from taodist import TAOClassifier, save

    rng = np.random.RandomState(0)
    X = rng.randn(400, 3)
    y = rng.rand(400) < 0.5
    X[y, 1] = np.nan  # the label is whether x1 was recorded
    save(TAOClassifier(max_depth=1, random_state=0).fit(X, y), tmp_path / "m.npz")
    np.savez(tmp_path / "test.npz", X_test=X)
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--rules", "--data", str(tmp_path / "test.npz")])
    assert r.exit_code == 0, r.output
    assert "encoding: input 3 columns -> 4 features; 1 with missing values (value + indicator)" in r.output
    assert "x1 is missing" in r.output and "mean over the 400 rows" in r.output


def test_predict_writes_probabilities_with_proba_and_inspect_prints_json(tmp_path):
    import json

    from taodist import TAOClassifier, TAORegressor, save
    from taodist.testing import make_oblique_classification

    X, y = make_oblique_classification(300, 4, random_state=0)
    clf = TAOClassifier(max_depth=2, random_state=0).fit(X, y)
    save(clf, tmp_path / "m.npz")
    np.savez(tmp_path / "test.npz", X_test=X)
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "m.npz"), str(tmp_path / "test.npz"), "--proba",
                                  "-o", str(tmp_path / "p.npy")])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load(tmp_path / "p.npy"), clf.predict_proba(X))
    r = CliRunner().invoke(main, ["inspect", str(tmp_path / "m.npz"), "--json"])
    assert r.exit_code == 0, r.output
    facts = json.loads(r.output)
    assert facts["estimator"] == "TAOClassifier" and facts["leaves"] == clf.tree_.n_leaves()
    assert facts["classes"] == clf.classes_.tolist() and facts["n_features_in"] == 4
    save(TAORegressor(max_depth=1).fit(X, y.astype(float)), tmp_path / "r.npz")
    r = CliRunner().invoke(main, ["predict", str(tmp_path / "r.npz"), str(tmp_path / "test.npz"), "--proba",
                                  "-o", str(tmp_path / "q.npy")])
    assert r.exit_code == 1 and r.output == f"Error: --proba needs a classifier; {tmp_path / 'r.npz'} holds a TAORegressor.\n"


def test_dash_h_is_help_and_warnings_are_one_line(tmp_path):
    r = CliRunner().invoke(main, ["-h"])
    assert r.exit_code == 0 and "Usage:" in r.output
    r = CliRunner().invoke(main, ["predict", "-h"])
    assert r.exit_code == 0 and "--proba" in r.output
    from taodist.cli import _one_line_warning

    runner = CliRunner()
    with runner.isolation() as (out, err, *_):
        _one_line_warning(UserWarning("TAO stopped at max_iter=1 before\n   the relative decrease"), UserWarning,
                          "x.py", 3)
        assert err.getvalue() == b"Warning: TAO stopped at max_iter=1 before the relative decrease\n"


def test_ctrl_c_during_a_demo_fit_on_the_embedded_cluster_ends_with_one_line(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from taodist.datasets import data_dir

    if not (data_dir() / "mnist.npz").exists():
        pytest.skip("needs MNIST in ../shared/data")
    taodist = [sys.executable, "-c", "from taodist.cli import main; main()"]
    # SIGINT as a terminal leaves it, even where this test runs with it ignored (a background job of a script)
    proc = subprocess.Popen([*taodist, "demo", "--max-iter", "50"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines = []
    deadline = time.time() + 300
    for line in proc.stdout:  # wait until TAO iterates on the cluster's workers (a first fit compiles first)
        lines.append(line)
        if line.startswith("[") and "TAO iteration 1/" in line or time.time() > deadline:
            break
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)  # a terminal's Ctrl-C: the whole foreground process group
    rest, _ = proc.communicate(timeout=120)
    output = "".join(lines) + rest
    assert proc.returncode != 0, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output and "ERROR" not in output, output
    assert output.rstrip().splitlines()[-1] == "Aborted!", output
