"""TAOEmbedding from the command line and in pictures: job files, `taodist predict`, `taodist inspect`, the plot."""

import json
import re

import numpy as np
import pytest
from click.testing import CliRunner
from sklearn.datasets import load_digits

from taodist import TAOEmbedding, load, save
from taodist.cli import main
from taodist.io import load_metadata, open_zarr, to_zarr
from taodist.service import JobError, load_job, run_job

PARAMS = "{method: ee, max_depth: 3, perplexity: 20.0, n_outer: 2, tao_iter: 5, free_iter: 200, random_state: 0}"
FAST = dict(method="ee", max_depth=3, perplexity=20.0, n_outer=2, tao_iter=5, free_iter=200, random_state=0)


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:300], y[:300], X[300:400]


def _job(folder, train, extra=""):
    path = folder / "job.yaml"
    path.write_text(f"estimator: TAOEmbedding\nparams: {PARAMS}\ntrain: {train}\noutput: emb.npz\n{extra}")
    return path


def _invoke(*args):
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result


def test_a_job_with_labels_fits_saves_and_predicts_new_rows(tmp_path, digits):
    X, y, X_new = digits
    np.savez(tmp_path / "train.npz", X=X, y=y)
    np.savez(tmp_path / "new.npz", X=X_new)
    r = _invoke("fit", _job(tmp_path, "train.npz"), "--in-process")
    assert r.exit_code == 0, r.output
    assert "embedding outer step 2/2" in r.output and "model written to" in r.output
    model = load(tmp_path / "emb.npz")
    direct = TAOEmbedding(**FAST).fit(X, y)  # the job fits what the estimator fits
    np.testing.assert_array_equal(model.transform(X_new), direct.transform(X_new))
    np.testing.assert_array_equal(model.node_class_counts_, direct.node_class_counts_)
    r = _invoke("predict", tmp_path / "emb.npz", tmp_path / "new.npz", "-o", tmp_path / "Z.npy")
    assert r.exit_code == 0, r.output
    assert "wrote" in r.output and "(100 rows x 2 coordinates)" in r.output
    Z = np.load(tmp_path / "Z.npy")
    assert Z.shape == (100, 2)
    np.testing.assert_array_equal(Z, direct.transform(X_new))
    meta = load_metadata(tmp_path / "emb.npz")
    assert meta["estimator"] == "TAOEmbedding" and meta["n_train"] == 300 and meta["metrics"] == {}


@pytest.mark.parametrize("layout", ["npz X only", "X mapping", "zarr without y", "csv without y"])
def test_a_job_without_labels_fits_and_its_model_has_no_class_counts(tmp_path, digits, layout):
    X, _, _ = digits
    X = X[:150]
    if layout == "npz X only":
        np.savez(tmp_path / "x.npz", X=X)
        train = "x.npz"
    elif layout == "X mapping":
        np.save(tmp_path / "x.npy", X)
        train = "{X: x.npy}"
    elif layout == "zarr without y":
        to_zarr({"X": X}, tmp_path / "x.zarr", dtype=np.float64)
        train = "x.zarr"
    else:
        np.savetxt(tmp_path / "x.csv", X, delimiter=",", header=",".join(f"p{j}" for j in range(64)), comments="")
        train = "x.csv"
    r = _invoke("fit", _job(tmp_path, train), "--in-process")
    assert r.exit_code == 0, r.output
    assert "no labels: the leaves get no class counts" in r.output
    model = load(tmp_path / "emb.npz")
    assert model.n_features_in_ == 64 and model.node_counts_[0] == 150
    assert not hasattr(model, "classes_") and model.explain()["leaves"][0]["class_counts"] is None


def test_a_validation_fraction_is_scored_by_trustworthiness(tmp_path, digits):
    X, y, _ = digits
    np.savez(tmp_path / "train.npz", X=X, y=y)
    est, meta = run_job(load_job(_job(tmp_path, "train.npz", "validation: 0.2\n")), log=lambda line: None,
                        return_metadata=True)
    m = meta["metrics"]
    assert meta["n_train"] == 240 and m["validation_rows_scored"] == 60 and m["trustworthiness_n_neighbors"] == 10
    assert 0.5 < m["validation_trustworthiness"] <= 1.0
    assert est.node_counts_[0] == 240


def test_fit_takes_a_data_file_with_the_estimator_on_the_command_line(tmp_path, digits, monkeypatch):
    X, _, X_new = digits
    np.savez(tmp_path / "x.npz", X=X[:150])
    to_zarr({"X": X_new}, tmp_path / "new.zarr", rows_per_chunk=40, dtype=np.float64)
    monkeypatch.chdir(tmp_path)
    r = _invoke("fit", "x.npz", "--estimator", "TAOEmbedding", "--in-process", "-o", "m.npz",
                *[a for k, v in FAST.items() for a in ("--param", f"{k}={v}")])
    assert r.exit_code == 0, r.output
    model = load(tmp_path / "m.npz")
    r = _invoke("predict", "m.npz", "new.zarr", "-o", "Z.zarr")  # lazily, one row chunk at a time
    assert r.exit_code == 0, r.output
    Z = open_zarr(tmp_path / "Z.zarr").compute()
    assert Z.shape == (100, 2) and Z.dtype == np.float64
    np.testing.assert_allclose(Z, model.transform(X_new), rtol=1e-12)


@pytest.mark.parametrize("text, match", [
    ("train: {X: x.npy, labels: y.npy}", r"train: expected .*\{X: path\} alone"),
    ("train: x.npz\nparams: {n_components: 0}", "n_components"),
])
def test_bad_embedding_job_files_are_refused_naming_the_field(tmp_path, text, match):
    (tmp_path / "job.yaml").write_text(f"estimator: TAOEmbedding\noutput: o.npz\n{text}\n")
    with pytest.raises(JobError, match=match):
        load_job(tmp_path / "job.yaml")


def test_a_supervised_job_still_needs_its_labels(tmp_path, digits):
    X, _, _ = digits
    np.savez(tmp_path / "x.npz", X=X)
    (tmp_path / "job.yaml").write_text("estimator: TAORegressor\ntrain: x.npz\noutput: o.npz\n")
    r = _invoke("fit", tmp_path / "job.yaml", "--in-process")
    assert r.exit_code == 1 and "has no arrays X and y" in r.output
    (tmp_path / "job.yaml").write_text("estimator: TAORegressor\ntrain: {X: x.npy}\noutput: o.npz\n")
    with pytest.raises(JobError, match=r"train: expected .*\{X: path, y: path\}"):
        load_job(tmp_path / "job.yaml")


@pytest.mark.parametrize("case, match", [
    ("continuous labels", "Unknown label type: y holds continuous values"),
    ("rows differ", "train: X has 300 rows but y has 299"),
    ("no X", "has no array X or X_train"),
])
def test_bad_embedding_data_is_one_error_line(tmp_path, digits, case, match):
    X, y, _ = digits
    if case == "continuous labels":
        np.savez(tmp_path / "train.npz", X=X, y=np.linspace(0, 1, len(X)))
    elif case == "rows differ":
        np.savez(tmp_path / "train.npz", X=X, y=y[:-1])
    else:
        np.savez(tmp_path / "train.npz", Z=X)
    r = _invoke("fit", _job(tmp_path, "train.npz"), "--in-process")
    assert r.exit_code == 1, r.output
    last = r.output.strip().splitlines()[-1]
    assert last.startswith("Error: ") and re.search(match, last), r.output
    assert "Traceback" not in r.output and not (tmp_path / "emb.npz").exists()


def test_predict_with_rows_of_other_features_is_one_error_line(saved, digits):
    folder, _ = saved
    X, _, _ = digits
    np.save(folder / "narrow.npy", X[:, :10])
    r = _invoke("predict", folder / "emb.npz", folder / "narrow.npy", "-o", folder / "out.npy")
    assert r.exit_code == 1 and r.output.strip() == f"Error: {folder / 'narrow.npy'} has 10 features; the model was fitted on 64."
    assert not (folder / "out.npy").exists()


@pytest.fixture(scope="module")
def saved(digits, tmp_path_factory):
    X, y, _ = digits
    folder = tmp_path_factory.mktemp("saved")
    emb = TAOEmbedding(**FAST).fit(X, y)
    save(emb, folder / "emb.npz")
    np.savez(folder / "rows.npz", X=X)
    return folder, emb


def test_inspect_prints_each_nodes_top_features_and_each_leafs_region_and_classes(saved):
    folder, emb = saved
    r = _invoke("inspect", folder / "emb.npz")
    assert r.exit_code == 0, r.output
    info = emb.explain()
    for node in info["decision_nodes"]:
        top = node["top_positive"][0]
        assert f"  node {node['node']} (depth {node['depth']}, {node['n_nonzero']} non-zero weights, " in r.output
        assert f"+ {top['feature']} ({top['weight']:.3g})" in r.output
    for leaf in info["leaves"]:
        line = next(line for line in r.output.splitlines() if line.startswith(f"  leaf #{leaf['leaf']} "))
        assert f"(node {leaf['node']}), {leaf['n_train']} training points, region [" in line
        counts = dict(item.split(":") for item in line.split("classes ")[1].split())
        assert sum(int(v) for v in counts.values()) == leaf["n_train"]
    r = _invoke("inspect", folder / "emb.npz", "--rules")
    assert r.exit_code == 0 and "[top +: " in r.output and "leaves, left to right" not in r.output


def test_inspect_json_holds_the_explanation(saved):
    folder, emb = saved
    r = _invoke("inspect", folder / "emb.npz", "--json")
    assert r.exit_code == 0, r.output
    facts = json.loads(r.output)
    assert facts["estimator"] == "TAOEmbedding" and facts["classes"] == list(range(10))
    assert facts["embedding"] == json.loads(json.dumps(emb.explain()))
    assert sum(leaf["n_train"] for leaf in facts["embedding"]["leaves"]) == 300


def test_inspect_plot_draws_the_tree_beside_the_embedding(saved):
    pytest.importorskip("matplotlib")
    folder, _ = saved
    for extra in ([], ["--data", folder / "rows.npz"]):
        out = folder / f"plot{len(extra)}.png"
        r = _invoke("inspect", folder / "emb.npz", "--plot", out, *extra)
        assert r.exit_code == 0, r.output
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = _invoke("inspect", folder / "emb.npz", "--plot", folder / "p.png", "--tree", "1")
    assert r.exit_code == 1 and r.output.strip() == f"Error: --tree 1: {folder / 'emb.npz'} holds 1 tree(s) (0 to 0)."


def test_plot_embedding_tree_colours_points_by_leaf_and_outlines_the_regions(saved, digits):
    pytest.importorskip("matplotlib")
    from matplotlib.collections import PathCollection
    from matplotlib.patches import Polygon, Rectangle

    from taodist.plot import plot_embedding_tree

    _, emb = saved
    X, _, _ = digits
    fig = plot_embedding_tree(emb, X)
    ax_tree, ax_emb = fig.axes
    leaves = emb.tree_.apply(X)
    scatters = [c for c in ax_emb.collections if isinstance(c, PathCollection)]
    reached = [i for i in emb.explain()["leaves"] if i["n_train"]]
    assert len(scatters) == len(reached)  # one colour per leaf reached
    counts = np.bincount(leaves)
    assert sorted(len(s.get_offsets()) for s in scatters) == sorted(counts[counts > 0])
    hulls = [p for p in ax_emb.patches if isinstance(p, Polygon)]
    assert 1 <= len(hulls) <= len(reached)
    for text in (f"#{k}" for k in range(1, emb.tree_.n_leaves() + 1)):
        assert any(t.get_text().startswith(text) for t in ax_tree.texts)
    fig = plot_embedding_tree(emb)  # the regions recorded at fit time: one box per leaf
    boxes = [p for p in fig.axes[1].patches if isinstance(p, Rectangle)]
    assert len(boxes) == len(reached)
    for box, leaf in zip(boxes, reached):
        (x0, y0), (x1, y1) = leaf["box"]
        assert box.get_xy() == pytest.approx((x0, y0)) and box.get_width() == pytest.approx(x1 - x0)


def test_plot_embedding_tree_refuses_what_it_cannot_draw(saved, digits):
    pytest.importorskip("matplotlib")
    from taodist.plot import plot_embedding_tree

    _, emb = saved
    X, _, _ = digits
    with pytest.raises(TypeError, match="draws a TAOEmbedding"):
        plot_embedding_tree(emb.tree_)
    with pytest.raises(ValueError, match="X has 10 features; the model was fitted on 64"):
        plot_embedding_tree(emb, X[:, :10])
    one = TAOEmbedding(**{**FAST, "n_components": 1, "n_outer": 0}).fit(X[:150])
    with pytest.raises(ValueError, match="n_components = 1"):
        plot_embedding_tree(one)
