import re

import numpy as np
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


def test_demo_falls_back_to_digits_and_beats_chance_clearly(monkeypatch, tmp_path):
    monkeypatch.setenv("TAODIST_DATA", str(tmp_path))  # an empty folder: no MNIST there
    result = CliRunner().invoke(main, ["demo", "--dataset", "nope", "--in-process", "--max-depth", "4",
                                       "--max-iter", "3"])
    assert result.exit_code == 0, result.output
    assert "Falling back to scikit-learn's digits" in result.output
    err = float(re.search(r"test error: ([\d.]+)%", result.output).group(1))
    assert err < 30.0  # 10 classes: chance is 90%
    assert re.search(r"\d+ leaves, \d+ decision nodes, \d+ non-zero weights", result.output)
