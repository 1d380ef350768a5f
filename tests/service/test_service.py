import os

import numpy as np
import pytest
from click.testing import CliRunner

from taodist import TAOClassifier, load, save
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
    # a NUL in a path made os.path raise a bare "embedded null byte" that named no field (found by fuzzing)
    ('estimator: TAOClassifier\ntrain: "t.npz\\0"\noutput: o.npz\n', r"train: 't.npz\\x00' holds a NUL character"),
    ('estimator: TAOClassifier\ntrain: t.npz\noutput: "o\\0.npz"\n', "output: .* holds a NUL character"),
    ('estimator: TAOClassifier\ntrain: {X: t.npz, y: "y\\0.npy"}\noutput: o.npz\n', "train.y: .* holds a NUL"),
])
def test_bad_job_files_are_refused_naming_the_field(tmp_path, text, message):
    with pytest.raises(JobError, match=message):
        load_job(_job(tmp_path, text))


@pytest.mark.parametrize("content,message", [
    (b"estimator: TAOClassifier\ntrain: t.npz\noutput: m\xff.npz\n", r"is not UTF-8 text \(byte 47 is b'\\xff'\)"),
    (("estimator: TAOClassifier\ntrain: t.npz\noutput: o.npz\nparams: " + "[" * 50_000 + "]" * 50_000 + "\n").encode(),
     "nested too deeply"),
    # a billion laughs inside params: loaded in no time (aliases share one object), but scikit-learn's message
    # about the bad max_depth spelled out all 9^9 values (minutes, gigabytes)
    (("estimator: TAOClassifier\ntrain: t.npz\noutput: o.npz\nparams: {max_depth: [&a0 [lol, lol, lol, lol, lol, "
      "lol, lol, lol, lol], " + ", ".join(f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9))
      + "]}\n").encode(), "stands for more than 100,000 values once its YAML aliases are expanded"),
    # PyYAML keeps the last of a repeated key: the second estimator switched the job's estimator silently
    (b"estimator: TAOClassifier\nestimator: TAORegressor\ntrain: t.npz\noutput: o.npz\n",
     r"the key 'estimator' is given twice \(line 2\)"),
    (b"estimator: TAOClassifier\ntrain: nosuchprotocol://bucket/t.npz\noutput: o.npz\n",
     r"train: 'nosuchprotocol://bucket/t.npz' cannot be read here: .*protocol 'nosuchprotocol'"),
])
def test_job_files_that_gave_tracebacks_are_one_error_line(tmp_path, content, message):
    (tmp_path / "job.yaml").write_bytes(content)
    with pytest.raises(JobError, match=message):
        load_job(tmp_path / "job.yaml")
    result = CliRunner().invoke(main, ["fit", str(tmp_path / "job.yaml"), "--in-process"])
    assert result.exit_code == 1 and result.output.startswith("Error: ") and result.output.count("\n") == 1, result.output


def test_a_fit_that_runs_out_of_memory_is_one_error_line(data):
    tmp_path, X, y = data
    job = _job(tmp_path, "estimator: TAOForestClassifier\nparams: {n_estimators: 1000000000000}\ntrain: train.npz\n"
                         "output: m.npz\n")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process"])
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-1].startswith("Error: out of memory: Unable to allocate")
    assert "Traceback" not in result.output and not (tmp_path / "m.npz").exists()


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
    save(TAOClassifier(max_depth=1, max_iter=1).fit(X, y), tmp_path / "m.npz")
    previous = (tmp_path / "m.npz").read_bytes()
    Xbad = X.copy()
    Xbad[3, 1] = np.inf  # (NaN is a missing value, which TAO learns from)
    np.savez(tmp_path / "bad.npz", X=Xbad, y=y)
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: bad.npz\noutput: m.npz\n"))
    with pytest.raises(ValueError, match="infinity"):
        run_job(job, log=lambda m: None)
    assert (tmp_path / "m.npz").read_bytes() == previous
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


# ---------------------------------------------------------------- a job never destroys its inputs
@pytest.mark.parametrize("output", ["train.npz", "./sub/../train.npz", "link.npz"])
def test_an_output_that_is_the_train_file_is_refused_up_front(data, output):
    tmp_path, X, y = data
    os.symlink(tmp_path / "train.npz", tmp_path / "link.npz")
    before = (tmp_path / "train.npz").read_bytes()
    (tmp_path / "sub").mkdir()
    with pytest.raises(JobError, match=r"output: .* would overwrite the job's own train data"):
        load_job(_job(tmp_path, f"estimator: TAOClassifier\ntrain: train.npz\noutput: {output}\n"))
    result = CliRunner().invoke(main, ["fit", str(tmp_path / "job.yaml"), "--in-process"])
    assert result.exit_code != 0 and result.output.count("\n") == 1 and result.output.startswith("Error: output:")
    assert (tmp_path / "train.npz").read_bytes() == before


def test_an_output_that_is_the_validation_file_is_refused(data):
    tmp_path, X, y = data
    np.savez(tmp_path / "val.npz", X=X, y=y)
    with pytest.raises(JobError, match="own validation data"):
        load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: train.npz\nvalidation: val.npz\noutput: val.npz\n"))


@pytest.mark.parametrize("output", ["train.zarr", "train.zarr/model.npz", "train.zarr/X/model.npz"])
def test_an_output_inside_an_input_zarr_store_is_refused(data, output):
    from taodist.io import to_zarr

    tmp_path, X, y = data
    to_zarr({"X": X, "y": y}, tmp_path / "train.zarr")
    for train in ("train.zarr", "{X: train.zarr/X, y: train.zarr/y}"):
        with pytest.raises(JobError, match="would overwrite the job's own train data"):
            load_job(_job(tmp_path, f"estimator: TAOClassifier\ntrain: {train}\noutput: {output}\n"))


def test_an_output_that_is_a_directory_is_refused_before_the_fit(data):
    tmp_path, X, y = data
    (tmp_path / "models").mkdir()
    with pytest.raises(JobError, match="output: .*models is an existing directory; give the path of a model file"):
        load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: train.npz\noutput: models\n"))


# ---------------------------------------------------------------- a job writes only a new file or over a model
def test_a_job_replaces_a_model_taodist_wrote(data):
    tmp_path, X, y = data
    save(TAOClassifier(max_depth=1, max_iter=1).fit(X, y), tmp_path / "m.npz", metadata={"run": 1})
    run_job(load_job(_job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2}\ntrain: train.npz\n"
                                    "output: m.npz\n")), log=lambda m: None)
    assert "run" not in load_metadata(tmp_path / "m.npz")


def test_a_job_never_replaces_another_file_unless_told_to_overwrite(data):
    tmp_path, X, y = data
    (tmp_path / "notes.npz").write_bytes(b"somebody's data")
    with pytest.raises(JobError, match=r"output: .*notes.npz exists and is not a taodist model file.*overwrite: true"):
        load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: train.npz\noutput: notes.npz\n"))
    result = CliRunner().invoke(main, ["fit", str(tmp_path / "job.yaml"), "--in-process"])
    assert result.exit_code != 0 and result.output.count("\n") == 1 and result.output.startswith("Error: output:")
    assert (tmp_path / "notes.npz").read_bytes() == b"somebody's data"
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2}\ntrain: train.npz\n"
                                  "output: notes.npz\noverwrite: true\n"))
    run_job(job, log=lambda m: None)
    load(tmp_path / "notes.npz")
    with pytest.raises(JobError, match=r"overwrite: expected true or false; got \"yes\" \(a string\)"):
        load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: train.npz\noutput: m.npz\noverwrite: 'yes'\n"))


@pytest.mark.parametrize("overwrite", ["false", "true"])
def test_a_job_never_writes_over_a_fifo_even_when_told_to_overwrite(data, overwrite):
    tmp_path, X, y = data
    os.mkfifo(tmp_path / "pipe.npz")  # opening it to read a header would block: refused from stat alone
    with pytest.raises(JobError, match=r"output: .*pipe.npz exists and is a FIFO"):
        load_job(_job(tmp_path, f"estimator: TAOClassifier\ntrain: train.npz\noutput: pipe.npz\n"
                                f"overwrite: {overwrite}\n"))


def test_an_output_that_became_another_file_during_the_fit_is_not_replaced(data):
    tmp_path, X, y = data
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2, max_iter: 2}\n"
                                  "train: train.npz\noutput: m.npz\n"))

    def someone_writes_the_output(event, info):
        if not (tmp_path / "m.npz").exists():
            (tmp_path / "m.npz").write_bytes(b"written meanwhile")

    with pytest.raises(JobError, match="exists and is not a taodist model file"):
        run_job(job, log=lambda m: None, progress=someone_writes_the_output)
    assert (tmp_path / "m.npz").read_bytes() == b"written meanwhile"


def test_an_output_name_too_long_for_the_file_system_is_refused_before_the_fit(data):
    tmp_path, X, y = data
    with pytest.raises(JobError, match=r"output: the file name .* is 304 bytes long; .* takes at most 255"):
        load_job(_job(tmp_path, f"estimator: TAOClassifier\ntrain: train.npz\noutput: {'m' * 300}.npz\n"))
    # a name that fits is written, however long: the temporary file beside it keeps only its start
    name = "m" * 250 + ".npz"
    run_job(load_job(_job(tmp_path, f"estimator: TAOClassifier\nparams: {{max_depth: 1}}\ntrain: train.npz\n"
                                    f"output: {name}\n")), log=lambda m: None)
    load(tmp_path / name)


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write in any folder")
def test_an_output_folder_nobody_may_write_in_is_refused_before_the_fit(data):
    tmp_path, X, y = data
    (tmp_path / "locked").mkdir(mode=0o500)
    with pytest.raises(JobError, match=r"output: cannot write in .*locked \(no permission\)"):
        load_job(_job(tmp_path, "estimator: TAOClassifier\ntrain: train.npz\noutput: locked/sub/m.npz\n"))


def test_a_job_stopped_at_its_last_checkpoint_writes_nothing(data):
    # the job service's cancel check, run once the model file is complete and before it replaces the output
    tmp_path, X, y = data
    save(TAOClassifier(max_depth=1, max_iter=1).fit(X, y), tmp_path / "m.npz")
    before = (tmp_path / "m.npz").read_bytes()
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2}\ntrain: train.npz\noutput: m.npz\n"))

    class Stopped(Exception):
        pass

    def cancelled():
        raise Stopped

    with pytest.raises(Stopped):
        run_job(job, log=lambda m: None, checkpoint=cancelled)
    assert (tmp_path / "m.npz").read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["job.yaml", "m.npz", "train.npz"]  # no temporary file left


# ---------------------------------------------------------------- strict types in the job schema
@pytest.mark.parametrize("field_text,message", [
    ("validation: true", r"validation: expected a fraction in \(0, 1\) of train, or a path .*; got true \(a boolean\)"),
    ("validation: false", r"validation: expected a fraction .*; got false \(a boolean\)"),
    ("validation: [0.1]", r"validation: expected .*; got \[0.1\] \(a list\)"),
    ("validation: 0", r"validation: a fraction must be in \(0, 1\); got 0"),
    ("estimator: [TAOClassifier]", r"estimator: expected the name of an estimator \(a string, one of .*\); "
                                   r"got \[\"TAOClassifier\"\] \(a list\)"),
    ("estimator: 3", r"estimator: expected the name of an estimator .*; got 3 \(a number\)"),
    ("output: 5", r"output: expected the path of the model file .*; got 5 \(a number\)"),
    ("output: ''", r"output: expected .*non-empty string.*; got \"\" \(a string\)"),
    ("output: [m.npz]", r"output: expected .*; got \[\"m.npz\"\] \(a list\)"),
    ("output:", r"output: expected .*; got null \(empty \(null\)\)"),
    ("output: s3://bucket/m.npz", r"output: 's3://bucket/m.npz' is a URL"),
    ("params: [1, 2]", r"params: expected a mapping of TAOClassifier parameters .*; got \[1, 2\] \(a list\)"),
    ("params: max_depth=3", r"params: expected a mapping .*; got \"max_depth=3\" \(a string\)"),
    ("train: true", r"train: expected a path to an .npz file, a CSV or Parquet table, or a Zarr store .*; got true \(a boolean\)"),
    ("train: {X: 1, y: 2}", r"train: expected .*; got \{\"X\": 1, \"y\": 2\} \(a mapping\)"),
])
def test_wrong_types_in_a_job_file_name_the_field_the_value_and_the_expected_type(tmp_path, field_text, message):
    fields = {"estimator": "estimator: TAOClassifier", "train": "train: t.npz", "output": "output: o.npz"}
    fields[field_text.split(":")[0]] = field_text
    with pytest.raises(JobError, match=message):
        load_job(_job(tmp_path, "\n".join(fields.values()) + "\n"))


def test_a_boolean_validation_never_opens_file_descriptor_0_or_1(data, monkeypatch):
    import builtins

    from taodist.service import Job

    tmp_path, X, y = data
    opened = []
    real_open = builtins.open

    def spy(file, *args, **kwargs):
        opened.append(file)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", spy)
    for value in ("true", "false"):
        with pytest.raises(JobError, match="validation:"):
            load_job(_job(tmp_path, f"estimator: TAOClassifier\ntrain: train.npz\nvalidation: {value}\noutput: m.npz\n"))
    # a Job built by hand (as a worker receives it) is refused where the data is read, too
    for value in (True, False, 1):
        job = Job("TAOClassifier", {}, tmp_path / "train.npz", value, tmp_path / "m.npz", tmp_path / "job.yaml")
        with pytest.raises(JobError, match="validation: expected"):
            run_job(job, log=lambda m: None)
    assert opened and not any(isinstance(f, (bool, int)) for f in opened), opened
    assert not (tmp_path / "m.npz").exists()


# ---------------------------------------------------------------- Zarr inputs stay on storage
@pytest.fixture
def threaded_client():
    from distributed import Client, LocalCluster

    # in-process workers over the inproc:// transport: no sockets at all
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        yield client


def test_zarr_job_data_reaches_fit_as_a_lazy_dask_array(data, threaded_client, monkeypatch):
    import dask.array as da

    from taodist.io import to_zarr
    from taodist.service import Job

    tmp_path, X, y = data
    to_zarr({"X": X, "y": y}, tmp_path / "train.zarr", rows_per_chunk=100)
    seen = []
    make_estimator = Job.make_estimator

    def spying(job):
        est = make_estimator(job)
        fit = est.fit
        est.fit = lambda X, y, **kwargs: (seen.append(X), fit(X, y, **kwargs))[1]
        return est

    monkeypatch.setattr(Job, "make_estimator", spying)
    job = load_job(_job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2, random_state: 0}\n"
                                  "train: train.zarr\nvalidation: 0.2\noutput: m.npz\n"))
    lines = []
    est, meta = run_job(job, client=threaded_client, log=lines.append, return_metadata=True)
    assert len(seen) == 1 and isinstance(seen[0], da.Array), type(seen[0])
    assert seen[0].shape == (len(y) - round(0.2 * len(y)), 4) and "lazy Zarr chunks" in lines[0]
    assert meta["data_fingerprint_of"] == "zarr store metadata" and len(meta["data_fingerprint"]) == 16
    assert 0.8 < meta["metrics"]["validation_score"] <= 1.0
    # in process the store is read into memory; the same rows give the same tree
    local = run_job(job, log=lambda m: None)
    assert isinstance(seen[1], np.ndarray)
    np.testing.assert_array_equal(est.predict(X), local.predict(X))


def test_zarr_fingerprint_reads_metadata_not_data(data, monkeypatch):
    import dask.array as da

    from taodist.io import to_zarr
    from taodist.service.jobs import store_fingerprint

    tmp_path, X, y = data
    to_zarr({"X": X, "y": y}, tmp_path / "train.zarr", rows_per_chunk=100)

    def no_reading(*args, **kwargs):
        raise AssertionError("the fingerprint read array data")

    monkeypatch.setattr(da.Array, "compute", no_reading)
    monkeypatch.setattr(da.Array, "__array__", no_reading)
    first = store_fingerprint(tmp_path / "train.zarr", 0.1)
    assert first == store_fingerprint(tmp_path / "train.zarr", 0.1) != store_fingerprint(tmp_path / "train.zarr", 0.2)
    spec = {"X": tmp_path / "train.zarr" / "X", "y": tmp_path / "train.zarr" / "y"}
    assert len(store_fingerprint(spec)) == 16
    monkeypatch.undo()
    X2 = X.copy()
    X2[0, 0] += 1.0
    to_zarr({"X": X2, "y": y}, tmp_path / "train.zarr", rows_per_chunk=100, overwrite=True)  # the store rewritten
    assert store_fingerprint(tmp_path / "train.zarr", 0.1) != first


def test_fit_param_overrides_replace_the_job_files_parameters_and_are_checked(data):
    tmp_path, X, y = data
    job = _job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2, random_state: 0}\n"
                         "train: train.npz\noutput: m.npz\n")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process", "--param", "max_depth=3",
                                       "--param", "C=null", "--param", "leaf_classes="])
    assert result.exit_code == 1 and result.output.count("\n") == 1, result.output
    assert result.output.startswith("Error: params: The 'C' parameter of TAOClassifier must be")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process", "--param", "max_depth=3",
                                       "--param", "tol=0.01"])
    assert result.exit_code == 0, result.output
    model = load(tmp_path / "m.npz")
    assert model.max_depth == 3 and model.tol == 0.01 and model.random_state == 0
    for bad, says in (("max_depth", "expected KEY=VALUE"), ("nope=1", "['nope'] are not parameters of"),
                      ("max_depth=[1", "is not a YAML scalar")):
        result = CliRunner().invoke(main, ["fit", str(job), "--in-process", "--param", bad])
        assert result.exit_code == 1 and says in result.output and result.output.count("\n") == 1, result.output


def test_fit_says_when_the_first_fit_compiles(data, monkeypatch):
    import taodist.cli.jobs as jobs_cli
    from taodist.cli._common import COMPILING_NOTICE

    tmp_path, X, y = data
    job = _job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 1}\ntrain: train.npz\noutput: m.npz\n")
    monkeypatch.setattr(jobs_cli, "first_run_compiles", lambda: True)
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process"])
    assert result.exit_code == 0 and COMPILING_NOTICE in result.output, result.output
    monkeypatch.setattr(jobs_cli, "first_run_compiles", lambda: False)
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process"])
    assert result.exit_code == 0 and "compiling" not in result.output, result.output


def test_a_job_reads_a_csv_table_with_its_target_column(data):
    tmp_path, X, y = data
    lines = ["a,b,c,d,label"] + [",".join(f"{v:.6f}" for v in row) + f",{int(t)}" for row, t in zip(X, y)]
    (tmp_path / "train.csv").write_text("\n".join(lines) + "\n")
    job = _job(tmp_path, "estimator: TAOClassifier\nparams: {max_depth: 2, random_state: 0}\ntrain: train.csv\n"
                         "target: label\noutput: m.npz\n")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process"])
    assert result.exit_code == 0, result.output
    assert load(tmp_path / "m.npz").score(X, y) > 0.9
    job = _job(tmp_path, "estimator: TAOClassifier\ntrain: train.csv\noutput: m2.npz\n")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process"])
    assert result.exit_code == 1 and "has no column 'y'; columns: a, b, c, d, label. Name the target column with " \
        "the job's `target:` field." in result.output, result.output


def test_fit_takes_a_data_file_with_the_job_on_the_command_line(data, monkeypatch):
    tmp_path, X, y = data
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["fit", "train.npz", "--in-process", "--param", "max_depth=2",
                                       "--param", "random_state=0", "-o", "models/t.npz"])
    assert result.exit_code == 0, result.output
    model = load(tmp_path / "models" / "t.npz")
    assert type(model).__name__ == "TAOClassifier" and model.max_depth == 2 and model.score(X, y) > 0.9
    result = CliRunner().invoke(main, ["fit", "train.npz", "--in-process", "--estimator", "TAORegressor",
                                       "--param", "max_depth=1"])
    assert result.exit_code == 0 and type(load(tmp_path / "model.npz")).__name__ == "TAORegressor", result.output
    job = _job(tmp_path, "estimator: TAOClassifier\ntrain: train.npz\noutput: m.npz\n")
    result = CliRunner().invoke(main, ["fit", str(job), "--in-process", "--target", "label"])
    assert result.exit_code == 1 and result.output.startswith("Error: --target describe(s) a fit of a data file")


@pytest.mark.parametrize("dtype, estimator", [("float32", "TAOClassifier"), ("float64", "TAORegressor"),
                                              ("float64", "TAOForestClassifier")])
def test_a_job_on_a_cluster_has_the_workers_compile_its_kernels_before_the_fit(data, threaded_client, monkeypatch,
                                                                              dtype, estimator):
    # the tiny warm-up fit must be of the job's estimator kind, width, dtype and sparsity (the kernels
    # are specialised on them); forests fit their trees as tasks and are left to compile there
    import taodist.service.jobs as jobs

    tmp_path, X, y = data
    np.savez(tmp_path / "train.npz", X=X.astype(dtype), y=y)
    calls, started = [], []
    monkeypatch.setattr(jobs, "compile_ahead", lambda client, est, n_features, sparse, dtype: calls.append(
        (client, type(est).__name__, est.get_params()["max_depth"], n_features, sparse, np.dtype(dtype))))
    make_estimator = jobs.Job.make_estimator

    def spying(job):
        est = make_estimator(job)
        fit = est.fit
        est.fit = lambda X, y, **kwargs: (started.append(len(calls)), fit(X, y, **kwargs))[1]
        return est

    monkeypatch.setattr(jobs.Job, "make_estimator", spying)
    job = load_job(_job(tmp_path, f"estimator: {estimator}\nparams: {{max_depth: 2, random_state: 0}}\n"
                                  "train: train.npz\noutput: m.npz\n"))
    run_job(job, client=threaded_client, log=lambda m: None)
    expected = [] if estimator == "TAOForestClassifier" else [
        (threaded_client, estimator, 2, X.shape[1], False, np.dtype(dtype))]
    assert calls == expected and started == [len(expected)]  # before the fit
    run_job(job, log=lambda m: None)  # in process: nothing to compile ahead of
    assert calls == expected
