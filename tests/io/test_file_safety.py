"""Output paths: taodist never deletes what it did not write, and writes like a plain open() would.

Every output folder used here holds a sentinel file; a refused command must
leave it in place, print one ``Error: ...`` line and exit non-zero.
"""

import os
import stat

import numpy as np
import pytest
from click.testing import CliRunner

from taodist import TAOClassifier, load, save
from taodist.cli import main
from taodist.io import open_zarr, to_zarr
from taodist.io.atomic import atomic_write, is_taodist_store
from taodist.testing import make_oblique_classification


def _folder_with_sentinel(path):
    path.mkdir(parents=True, exist_ok=True)
    (path / "sentinel.txt").write_text("keep me")
    return path / "sentinel.txt"


def _invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _assert_one_error_line(result, *fragments):
    assert result.exit_code != 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], result.output


@pytest.fixture
def csv_file(tmp_path):
    path = tmp_path / "src" / "good.csv"
    path.parent.mkdir()
    path.write_text("a,b,y\n1,2,0\n3,4,1\n5,6,1\n")
    return path


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("model")
    X, y = make_oblique_classification(100, 3, random_state=0)
    clf = TAOClassifier(max_depth=2, max_iter=2, random_state=0).fit(X, y)
    save(clf, folder / "m.npz")
    np.save(folder / "X.npy", X)
    return folder / "m.npz", folder / "X.npy", clf


# ------------------------------------------------------------------ convert
def test_convert_refuses_an_existing_folder_it_did_not_write(tmp_path, csv_file):
    sentinel = _folder_with_sentinel(tmp_path / "out")
    for extra in ([], ["--overwrite"]):
        r = _invoke("convert", csv_file, tmp_path / "out", *extra)
        _assert_one_error_line(r, "not a store taodist wrote")
        assert sentinel.read_text() == "keep me" and os.listdir(tmp_path / "out") == ["sentinel.txt"]


def test_convert_refuses_the_working_directory(tmp_path, csv_file, monkeypatch):
    sentinel = _folder_with_sentinel(tmp_path / "cwd")
    monkeypatch.chdir(tmp_path / "cwd")
    for extra in ([], ["--overwrite"]):
        r = _invoke("convert", csv_file, ".", *extra)
        _assert_one_error_line(r, "working directory")
        assert sentinel.read_text() == "keep me"


def test_convert_refuses_the_source_files_folder(csv_file):
    sentinel = _folder_with_sentinel(csv_file.parent)
    for extra in ([], ["--overwrite"]):
        r = _invoke("convert", csv_file, csv_file.parent, *extra)
        _assert_one_error_line(r)
        assert sentinel.read_text() == "keep me" and csv_file.exists()


def test_convert_never_deletes_its_source_even_inside_its_own_store(tmp_path, csv_file):
    store = tmp_path / "d.zarr"
    assert _invoke("convert", csv_file, store).exit_code == 0
    inside = store / "good.csv"  # the source now lives inside a store taodist wrote
    inside.write_text(csv_file.read_text())
    r = _invoke("convert", inside, store, "--overwrite")
    _assert_one_error_line(r, "would be deleted")
    assert inside.exists()


def test_convert_overwrite_replaces_only_a_store_taodist_wrote(tmp_path, csv_file):
    store = tmp_path / "d.zarr"
    assert _invoke("convert", csv_file, store).exit_code == 0
    assert is_taodist_store(store)
    r = _invoke("convert", csv_file, store)  # exists: refused without --overwrite
    _assert_one_error_line(r, "--overwrite")
    csv_file.write_text("a,b,y\n7,8,0\n")
    r = _invoke("convert", csv_file, store, "--overwrite")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(open_zarr(store, component="X").compute(), [[7, 8]])
    assert [p for p in os.listdir(tmp_path) if p.startswith(".")] == []  # no temporary left behind


# ------------------------------------------------------------------ predict
def test_predict_refuses_an_existing_folder_named_zarr(tmp_path, model):
    model_path, X_path, _ = model
    sentinel = _folder_with_sentinel(tmp_path / "existing_dir.zarr")
    for extra in ([], ["--overwrite"]):
        r = _invoke("predict", model_path, X_path, "-o", tmp_path / "existing_dir.zarr", *extra)
        _assert_one_error_line(r, "not a store taodist wrote")
        assert sentinel.read_text() == "keep me"


def test_predict_overwrite_replaces_its_own_store(tmp_path, model):
    model_path, X_path, clf = model
    out = tmp_path / "p.zarr"
    assert _invoke("predict", model_path, X_path, "-o", out).exit_code == 0
    _assert_one_error_line(_invoke("predict", model_path, X_path, "-o", out), "--overwrite")
    r = _invoke("predict", model_path, X_path, "-o", out, "--overwrite")
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(open_zarr(out).compute(), clf.predict(np.load(X_path)))


def test_predict_refuses_to_replace_its_input(tmp_path, model):
    model_path, X_path, _ = model
    copy = tmp_path / "X.npy"
    copy.write_bytes(X_path.read_bytes())
    _assert_one_error_line(_invoke("predict", model_path, copy, "-o", copy), "would replace the input")
    np.testing.assert_array_equal(np.load(copy), np.load(X_path))


def test_predict_reports_the_path_it_wrote_and_refuses_unknown_suffixes(tmp_path, model):
    model_path, X_path, clf = model
    (tmp_path / "out").mkdir()
    r = _invoke("predict", model_path, X_path, "-o", tmp_path / "out" / "noext")
    _assert_one_error_line(r, ".npy", ".zarr")
    assert os.listdir(tmp_path / "out") == []
    out = tmp_path / "out" / "p.NPY"  # np.save would have written p.NPY.npy
    r = _invoke("predict", model_path, X_path, "-o", out)
    assert r.exit_code == 0 and f"wrote {out} (" in r.output, r.output
    assert os.listdir(tmp_path / "out") == ["p.NPY"]
    np.testing.assert_array_equal(np.load(out), clf.predict(np.load(X_path)))


def test_predict_with_wrong_features_writes_nothing(tmp_path, model):
    model_path, X_path, _ = model
    np.save(tmp_path / "narrow.npy", np.load(X_path)[:, :2])
    r = _invoke("predict", model_path, tmp_path / "narrow.npy", "-o", tmp_path / "p.npy")
    _assert_one_error_line(r, "2 features")
    r = _invoke("predict", model_path, tmp_path / "narrow.npy", "-o", tmp_path / "p.zarr")
    _assert_one_error_line(r, "2 features")
    assert sorted(os.listdir(tmp_path)) == ["narrow.npy"]


# ------------------------------------------------------------------ CSV input
@pytest.mark.parametrize("text,fragments", [
    ("a,b,y\n1,2,0\n3,abc,1\n", ["line 3", "column 'b'", "'abc'", "not a number"]),
    ("a,b,y\n1,,0\n", ["line 2", "column 'b'", "is empty"]),
    ("a,b,y\n1,2,0\n3,4\n", ["line 3", "has 2 values", "3 columns"]),
    ("", ["is empty"]),
    ("a,b,y\n", ["no data rows"]),
])
def test_convert_names_the_bad_csv_line_and_writes_nothing(tmp_path, text, fragments):
    (tmp_path / "d.csv").write_text(text)
    r = _invoke("convert", tmp_path / "d.csv", tmp_path / "d.zarr")
    _assert_one_error_line(r, *fragments)
    assert os.listdir(tmp_path) == ["d.csv"]


def test_convert_reports_damaged_npz_in_one_line(tmp_path):
    (tmp_path / "d.npz").write_bytes(b"PK\x03\x04 truncated")
    _assert_one_error_line(_invoke("convert", tmp_path / "d.npz", tmp_path / "d.zarr"), "Could not read")
    assert os.listdir(tmp_path) == ["d.npz"]


# ------------------------------------------------------------ library level
def test_to_zarr_marks_its_stores_and_refuses_other_paths(tmp_path):
    sentinel = _folder_with_sentinel(tmp_path / "plain")
    with pytest.raises(FileExistsError, match="not a store taodist wrote"):
        to_zarr({"X": np.ones((4, 2))}, tmp_path / "plain", overwrite=True)
    assert sentinel.exists()
    (tmp_path / "file.zarr").write_text("a file")
    with pytest.raises(FileExistsError):
        to_zarr(np.ones((4, 2)), tmp_path / "file.zarr", overwrite=True)
    assert (tmp_path / "file.zarr").read_text() == "a file"
    path = to_zarr(np.ones((4, 2)), tmp_path / "x.zarr")
    assert is_taodist_store(path) and not is_taodist_store(tmp_path / "plain")
    to_zarr(np.zeros((3, 2)), path, overwrite=True)
    np.testing.assert_array_equal(open_zarr(path).compute(), np.zeros((3, 2)))


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_written_files_follow_the_umask(tmp_path, model, umask):
    model_path, X_path, clf = model
    old = os.umask(umask)
    try:
        save(clf, tmp_path / "m.npz")
        assert _invoke("predict", model_path, X_path, "-o", tmp_path / "p.npy").exit_code == 0
        atomic_write(tmp_path / "b.bin", b"bytes")
    finally:
        os.umask(old)
    for name in ("m.npz", "p.npy", "b.bin"):
        assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == 0o666 & ~umask, name


def test_atomic_write_check_failure_leaves_the_old_file(tmp_path, model):
    target = tmp_path / "model.npz"
    target.write_bytes(b"old")

    def refuse(tmp):
        assert os.path.dirname(tmp) == str(tmp_path)  # the temporary lies beside the target
        raise ValueError("not a model")

    with pytest.raises(ValueError, match="not a model"):
        atomic_write(target, b"new", check=refuse)
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["model.npz"]
    # what service/cluster.py does with a downloaded model: bytes, vetted by load() before the rename
    atomic_write(target, model[0].read_bytes(), check=load)
    assert load(target).get_params() == model[2].get_params()
    with pytest.raises(IsADirectoryError):
        atomic_write(tmp_path, b"x")


def test_inspect_plot_refuses_to_replace_the_model(tmp_path, model):
    copy = tmp_path / "m.npz"
    copy.write_bytes(model[0].read_bytes())
    _assert_one_error_line(_invoke("inspect", copy, "--plot", copy), "would replace the model")
    assert copy.read_bytes() == model[0].read_bytes()
