import json
import os

import numpy as np
import pytest

from taodist import TAOClassifier, TAORegressor, load, save
from taodist.testing import assert_tree_equal, make_oblique_classification

CASES = [
    (TAOClassifier, dict(max_depth=3), "classification"),
    (TAOClassifier, dict(max_depth=2, leaf_type="linear", node_type="axis"), "classification"),
    (TAORegressor, dict(max_depth=3), "regression"),
    (TAORegressor, dict(max_depth=2, leaf_type="linear"), "regression"),
]


@pytest.mark.parametrize("Est,params,task", CASES)
def test_save_load_predicts_identically(tmp_path, Est, params, task):
    X, y = make_oblique_classification(300, 4)
    y = np.array(["a", "b"])[y] if task == "classification" else X @ [1.0, 2, 0, 0]
    est = Est(random_state=0, **params).fit(X, y)
    path = tmp_path / "model.npz"
    save(est, path)
    back = load(path)
    assert type(back) is Est and back.get_params() == est.get_params()
    assert_tree_equal(back.tree_, est.tree_)
    np.testing.assert_array_equal(back.predict(X), est.predict(X))
    np.testing.assert_array_equal(back.history_, est.history_)


def test_file_is_json_plus_arrays_and_versioned(tmp_path):
    X, y = make_oblique_classification(100, 3)
    path = tmp_path / "m.npz"
    save(TAOClassifier(max_depth=2, random_state=0).fit(X, y), path)
    data = np.load(path, allow_pickle=False)  # no pickle needed to read it
    doc = json.loads(data["model.json"].tobytes())
    assert doc["format"] == "taodist" and doc["format_version"] == 1
    assert doc["estimator"] == "TAOClassifier"


def test_load_refuses_other_files_clearly(tmp_path):
    bad = tmp_path / "x.npz"
    np.savez(bad, a=np.arange(3))
    with pytest.raises(ValueError, match="not a taodist model"):
        load(bad)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a readable taodist model"):
        load(tmp_path / "junk.npz")


def test_failed_save_leaves_no_partial_file(tmp_path, monkeypatch):
    X, y = make_oblique_classification(100, 3)
    est = TAOClassifier(max_depth=2, random_state=0).fit(X, y)

    def explode(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", explode)
    with pytest.raises(OSError):
        save(est, tmp_path / "m.npz")
    assert os.listdir(tmp_path) == []


def test_save_unfitted_is_refused():
    with pytest.raises(ValueError, match="not fitted"):
        save(TAOClassifier(), "never.npz")


def test_softmax_tree_with_limited_leaves_round_trips(tmp_path):
    from sklearn.datasets import make_blobs

    X, y = make_blobs(600, n_features=4, centers=6, cluster_std=2.0, random_state=0)
    est = TAOClassifier(max_depth=2, leaf_type="linear", leaf_classes=2, init="cluster", max_iter=3,
                        random_state=0).fit(X, y)
    assert np.isneginf(est.tree_.value).any()  # classes outside leaves: -inf logits to store
    path = tmp_path / "softmax.npz"
    save(est, path)
    doc = json.loads(np.load(path, allow_pickle=False)["model.json"].tobytes())
    assert doc["trees"][0]["leaf_classes"] == 2 and doc["params"]["leaf_classes"] == 2
    assert doc["params"]["init"] == "cluster"
    back = load(path)
    assert back.get_params() == est.get_params() and back.tree_.leaf_classes == 2
    assert_tree_equal(back.tree_, est.tree_)
    np.testing.assert_array_equal(back.predict_proba(X), est.predict_proba(X))


def test_unlimited_trees_record_no_leaf_class_limit(tmp_path):
    X, y = make_oblique_classification(100, 3)
    path = tmp_path / "m.npz"
    save(TAOClassifier(max_depth=2, leaf_type="linear", max_iter=1, random_state=0).fit(X, y), path)
    doc = json.loads(np.load(path, allow_pickle=False)["model.json"].tobytes())
    assert "leaf_classes" not in doc["trees"][0]
    assert load(path).tree_.leaf_classes is None


def test_linear_regressor_files_without_leaf_ranges_load_unclipped(tmp_path):
    # files written before linear regression leaves were clipped have no leaf_range: their leaves stay unbounded
    X, y = make_oblique_classification(300, 4)
    # rows far outside the training range, unclipped (no fences), reach the leaves' linear models as they are
    est = TAORegressor(max_depth=2, leaf_type="linear", outlier_fence=None, random_state=0).fit(X, X @ [1.0, 2, 0, 0])
    assert est.tree_.leaf_range is not None
    path, old = tmp_path / "new.npz", tmp_path / "old.npz"
    save(est, path)
    with np.load(path, allow_pickle=False) as d:
        np.savez(old, **{k: d[k] for k in d.files if k != "tree0/leaf_range"})
    back = load(old)
    assert back.tree_.leaf_range is None
    far = 100 * X[:5]
    t = est.tree_
    leaves = est.apply(far)
    affine = t.value[leaves, 0] + np.einsum("ij,ij->i", far, t.leaf_coef.toarray()[leaves])
    np.testing.assert_allclose(back.predict(far), affine, rtol=1e-12)
    assert not np.allclose(est.predict(far), affine)  # the new file clips them
