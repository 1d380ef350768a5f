import os

import numpy as np
import pytest
from click.testing import CliRunner

from taodist import load
from taodist.cli import main
from taodist.io import load_metadata
from taodist.service import JobError, load_job, run_job
from taodist.testing import make_oblique_classification


@pytest.fixture
def data(tmp_path):
    X, y = make_oblique_classification(400, 4, random_state=0)
    np.savez(tmp_path / "train.npz", X=X, y=y)
    return tmp_path, X, y


def _job(tmp_path, text):
    p = tmp_path / "job.yaml"
    p.write_text(text)
    return p


def test_a_job_fits_and_writes_a_model_with_metadata(data):
    tmp_path, X, y = data
    job = _job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2, random_state: 0}\n"
                         "train: train.npz\nvalidation: 0.2\noutput: models/m.npz\n")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process"])
    assert result.exit_code == 0, result.output
    model = load(tmp_path / "models" / "m.npz")
    assert model.score(X, y) > 0.9
    meta = load_metadata(tmp_path / "models" / "m.npz")
    assert meta["estimator"] == "TAOClassifier" and meta["n_train"] == len(y) - round(0.2 * len(y))
    assert 0.9 < meta["metrics"]["validation_score"] <= 1.0 and len(meta["data_fingerprint"]) == 16


@pytest.mark.parametrize("text,message", [
    ("estimator: [unclosed", "not valid YAML"),
    ("estimator: Bogus\ntrain: t.npz\noutput: o.npz\n", "allowed: .*TAOClassifier"),
    ("estimator: TAOClassifier\ntrain: t.npz\noutput: o.npz\ncommand: rm -rf /\n", r"Unknown field\(s\) \['command'\]"),
    ("estimator: TAOClassifier\nparams: {depth: 3}\ntrain: t.npz\noutput: o.npz\n", r"\['depth'\] are not parameters"),
    ("estimator: TAOClassifier\nparams: {max_depth: -1}\ntrain: t.npz\noutput: o.npz\n", "max_depth"),
    ("estimator: TAOClassifier\noutput: o.npz\n", r"Missing field\(s\) \['train'\]"),
    ("estimator: TAOClassifier\ntrain: t.npz\nvalidation: 1.5\noutput: o.npz\n", r"validation: a fraction must be in \(0, 1\)"),
])
def test_bad_job_files_are_refused_naming_the_field(tmp_path, text, message):
    with pytest.raises(JobError, match=message):
        load_job(_job(tmp_path, text))


def test_missing_data_and_row_mismatch_are_clear(data):
    tmp_path, X, y = data
    with pytest.raises(JobError, match="train: cannot read"):
        run_job(load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: nope.npz\noutput: o.npz\n")), log=lambda m: None)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "y.npy", y[:-5])
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: {X: X.npy, y: y.npy}\noutput: o.npz\n"))
    with pytest.raises(JobError, match=f"X has {len(y)} rows but y has {len(y) - 5}"):
        run_job(job, log=lambda m: None)


def test_a_failed_job_never_replaces_an_existing_model(data):
    tmp_path, X, y = data
    (tmp_path / "m.npz").write_bytes(b"previous model")
    Xbad = X.copy()
    Xbad[3, 1] = np.nan
    np.savez(tmp_path / "bad.npz", X=Xbad, y=y)
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: bad.npz\noutput: m.npz\n"))
    with pytest.raises(ValueError, match="NaN"):
        run_job(job, log=lambda m: None)
    assert (tmp_path / "m.npz").read_bytes() == b"previous model"
    assert sorted(os.listdir(tmp_path)) == ["bad.npz", "job.yaml", "m.npz", "train.npz"]


def test_job_data_given_as_fsspec_urls(data):
    from taodist.io import to_zarr

    tmp_path, X, y = data
    np.save(tmp_path / "X.npy", X)
    to_zarr({"y": y}, tmp_path / "y.zarr")
    url = (tmp_path / "train.npz").as_uri()  # file:///...
    job = load_job(_job(tmp_path, f"estimator: TAOClassifier\nparams: {{max_depth: 2, random_state: 0}}\n"
                                  f"train: {{X: {(tmp_path / 'X.npy').as_uri()}, y: {tmp_path.as_uri()}/y.zarr/y}}\n"
                                  f"validation: {url}\noutput: m.npz\n"))
    assert job.train["X"].startswith("file://") and job.validation == url
    est = run_job(job, log=lambda m: None)
    np.testing.assert_array_equal(est.predict(X), load(tmp_path / "m.npz").predict(X))
    assert load_metadata(tmp_path / "m.npz")["metrics"]["validation_score"] > 0.9
    with pytest.raises(JobError, match="train: cannot read file://"):
        run_job(load_job(_job(tmp_path, f"estimator: TAOClassifier\ntrain: {tmp_path.as_uri()}/none.npz\n"
                                        "output: o.npz\n")), log=lambda m: None)
