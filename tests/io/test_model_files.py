"""Tampered, damaged and foreign model files: a clean ValueError, never a crash.

Every corrupted file is loaded *and* predicted with in a child process, so a
segfault, a heap-corruption abort or an endless loop fails the test (signal
or timeout) instead of killing or hanging pytest. Cases are grouped, one
child per group, to keep the number of interpreter starts small.
"""

import json
import os
import subprocess
import sys
import warnings
import zipfile

import numpy as np
import pytest

from taodist import TAOClassifier, TAOForestClassifier, TAORegressor, save
from taodist.testing import make_oblique_classification

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository
#: generous: a child imports taodist and loads the cached numba kernel (~3 s on an idle core)
CHILD_TIMEOUT = 120

# Loads and predicts with each file given on the command line, one JSON line per file:
# {"case", "error": exception type or null, "message"}. Exit code 1 if any file loaded and predicted
# without a ValueError, or raised another exception (the parent says which).
_CHILD = r"""
import json, sys, warnings
import numpy as np
from taodist import load
warnings.simplefilter("ignore")
X = np.load(sys.argv[1])
clean = True
for case, path in json.loads(sys.argv[2]):
    try:
        load(path).predict(X)
        result = {"case": case, "error": None, "message": ""}
    except ValueError as exc:
        result = {"case": case, "error": "ValueError", "message": str(exc)}
    except Exception as exc:
        result = {"case": case, "error": type(exc).__name__, "message": str(exc)}
    clean &= result["error"] == "ValueError"
    print(json.dumps(result), flush=True)
sys.exit(0 if clean else 1)
"""


def _run_child(code, *args):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT, env=env)
    # a negative code is a signal (SIGSEGV, SIGABRT from heap corruption): the process crashed
    assert proc.returncode >= 0, f"child killed by signal {-proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
    return proc


# ---------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Small fitted models saved once: oblique, linear-leaf axis, forest of 2, regressor; and X."""
    folder = tmp_path_factory.mktemp("models")
    X, y = make_oblique_classification(120, 4, random_state=0)
    fits = {
        # (the plain penalty: with the adaptive one these small fits prune nodes that the cases below tamper with)
        "clf": TAOClassifier(max_depth=3, max_iter=2, penalty_factors=None, random_state=0).fit(X, y),
        "linear": TAOClassifier(max_depth=2, max_iter=2, leaf_type="linear", node_type="axis", penalty_factors=None,
                                random_state=0).fit(X, y),
        "forest": TAOForestClassifier(n_estimators=2, max_depth=2, max_iter=2, n_jobs=1, random_state=0).fit(X, y),
        "reg": TAORegressor(max_depth=2, max_iter=2, leaf_type="constant", random_state=0).fit(X, X @ [1.0, 2, 0, 0]),
        "linreg": TAORegressor(max_depth=2, max_iter=2, leaf_type="linear", random_state=0).fit(X, X @ [1.0, 2, 0, 0]),
        # four classes (quartiles of a direction), leaves limited to 2 of them
        "softmax": TAOClassifier(max_depth=2, max_iter=2, leaf_type="linear", leaf_classes=2, random_state=0).fit(
            X, np.searchsorted(np.quantile(X @ [1.0, -1, 0.5, 0], [0.25, 0.5, 0.75]), X @ [1.0, -1, 0.5, 0])),
    }
    paths = {}
    for name, est in fits.items():
        paths[name] = folder / f"{name}.npz"
        save(est, paths[name])
    np.save(folder / "X.npy", X)
    return {"paths": paths, "X": folder / "X.npy", "fits": fits, "folder": folder}


def _tamper(src, dst, edit):
    """Copy model ``src`` to ``dst`` after ``edit(arrays, doc)`` changed its arrays/JSON header in place."""
    with np.load(src, allow_pickle=False) as d:
        arrays = {k: d[k] for k in d.files}
    header = arrays["model.json"]
    doc = json.loads(header.tobytes())
    edit(arrays, doc)
    if arrays.get("model.json") is header:  # the edit did not replace the header itself: write the edited doc
        arrays["model.json"] = np.frombuffer(json.dumps(doc).encode(), dtype=np.uint8)
    np.savez(dst, **arrays)


def _set(key, index, value):
    def edit(a, doc):
        a[key] = a[key].copy()
        a[key][index] = value
    return edit


def _drop(*keys):
    def edit(a, doc):
        for k in keys:
            del a[k]
    return edit


def _header(change):
    def edit(a, doc):
        change(doc)
    return edit


def _add_orphan_leaf(a, doc):
    """One more node (a leaf) that no node points to: unreachable from the root."""
    for k in ("children_left", "children_right", "feature"):
        a["tree0/" + k] = np.append(a["tree0/" + k], -1).astype(a["tree0/" + k].dtype)
    for k in ("bias", "threshold"):
        a["tree0/" + k] = np.append(a["tree0/" + k], 0.0)
    a["tree0/kind"] = np.append(a["tree0/kind"], 0).astype(a["tree0/kind"].dtype)
    a["tree0/value"] = np.vstack([a["tree0/value"], a["tree0/value"][-1:]])
    a["tree0/weights_indptr"] = np.append(a["tree0/weights_indptr"], a["tree0/weights_indptr"][-1])


def _limited_leaf_entries(a):
    """``(value, K, leaf, outside class, inside class with weights)`` of the first leaf that has all three."""
    value = a["tree0/value"].copy()
    K = value.shape[1]
    nnz = np.diff(a["tree0/leaf_coef_indptr"]).reshape(-1, K)
    for leaf in np.flatnonzero(a["tree0/children_left"] < 0):
        outside, weighted = np.isneginf(value[leaf]), nnz[leaf] > 0
        if outside.any() and weighted.any():
            return value, K, leaf, int(np.flatnonzero(outside)[0]), int(np.flatnonzero(weighted)[0])
    raise AssertionError("the softmax fixture has no limited leaf with weights")


def _limited_leaf_edit(change):
    def edit(a, doc):
        value, K, leaf, outside, weighted = _limited_leaf_entries(a)
        change(value, leaf, outside, weighted)
        a["tree0/value"] = value
    return edit


def _one_class_too_many(a, doc):
    """A leaf that keeps leaf_classes classes gets one more (a finite logit for an outside class)."""
    value = a["tree0/value"].copy()
    k = doc["trees"][0]["leaf_classes"]
    full = (a["tree0/children_left"] < 0) & (np.isfinite(value).sum(axis=1) == k) & np.isneginf(value).any(axis=1)
    leaf = np.flatnonzero(full)[0]
    value[leaf, np.flatnonzero(np.isneginf(value[leaf]))[0]] = 0.0
    a["tree0/value"] = value


def _leaf_range_reversed(a, doc):
    """A leaf whose output range has its low end above its high end."""
    r = a["tree0/leaf_range"].copy()
    leaf = np.flatnonzero(a["tree0/children_left"] < 0)[0]
    r[leaf, 0, 0], r[leaf, 1, 0] = 1.0, 0.0
    a["tree0/leaf_range"] = r


def _swap_indptr(a, doc):
    p = a["tree0/weights_indptr"].copy()
    p[1], p[2] = p[2] + 1, p[1]  # 0, x+1, x... : decreasing
    a["tree0/weights_indptr"] = p


def _first_leaf_value(value):
    """Set the first leaf's class shares of the oblique classifier to ``value`` (a row)."""
    def edit(a, doc):
        leaf = np.flatnonzero(a["tree0/children_left"] < 0)[0]
        a["tree0/value"] = a["tree0/value"].copy()
        a["tree0/value"][leaf] = value
    return edit


def _nested_header(depth):
    def edit(a, doc):
        a["model.json"] = np.frombuffer(("[" * depth + "]" * depth).encode(), dtype=np.uint8)
    return edit


def _dimensions(n):
    def edit(a, doc):
        doc["trees"][0]["n_features"] = n
        doc["fitted"]["n_features_in_"] = n
    return edit


# (case, model, edit, expected message fragment)
TAMPERED = {
    "escapes": [
        ("nested JSON", "clf", _nested_header(100_000), "nested too deeply"),
        ("n_features of 4,001 digits", "clf", _header(lambda d: d["trees"][0].update(n_features=10**4000)),
         "more than 30 digits"),
        ("a consistent 10^12 features", "clf", _dimensions(10**12), "at most 2**31 - 1"),
        ("negative class share", "clf", _first_leaf_value([-130.0, 131.0]), "shares in [0, 1]"),
        ("shares summing to 0.5", "clf", _first_leaf_value([0.5, 0.0]), "summing to 1"),
        ("a huge class share", "clf", _first_leaf_value([1e308, 0.0]), "shares in [0, 1]"),
    ],
    "structure": [
        ("child out of range", "clf", _set("tree0/children_left", 0, 999), "is out of range"),
        ("negative child", "clf", _set("tree0/children_right", 1, -7), "is out of range"),
        ("one child only", "clf", _set("tree0/children_right", 0, -1), "has children"),
        ("child cycle to root", "clf", _set("tree0/children_left", 1, 0), "reached more than once"),
        ("self loop", "clf", _set("tree0/children_left", 2, 2), "reached more than once"),
        ("node reached twice", "clf", _set("tree0/children_right", 0, 1), "reached more than once"),
        ("unreachable node", "clf", _add_orphan_leaf, "cannot be reached from the root"),
        ("decision node marked leaf", "clf", _set("tree0/kind", 0, 0), "kind 0 must mark exactly the leaves"),
        ("unknown kind", "clf", _set("tree0/kind", 0, 7), "has kind 7"),
        ("nan bias", "clf", _set("tree0/bias", 0, np.nan), "must be finite"),
        ("value wrong shape", "clf", lambda a, d: a.update({"tree0/value": a["tree0/value"][:, :1]}), "value has shape"),
        ("children wrong dtype", "clf", lambda a, d: a.update({"tree0/children_left": a["tree0/children_left"] * 1.0}),
         "dtype float64; expected an integer dtype"),
        ("children wrong length", "clf", lambda a, d: a.update({"tree0/children_right": a["tree0/children_right"][:-1]}),
         "(one per node)"),
        ("missing array", "clf", _drop("tree0/kind"), "'tree0/kind' is missing"),
        # float16 passed the old "a floating dtype" check, then failed in scipy or the compiled router
        ("weights float16", "clf", lambda a, d: a.update({"tree0/weights_data": a["tree0/weights_data"].astype(np.float16)}),
         "weights_data has dtype float16; expected float32 or float64"),
        ("leaf_coef float16", "linreg",
         lambda a, d: a.update({"tree0/leaf_coef_data": a["tree0/leaf_coef_data"].astype(np.float16)}),
         "leaf_coef_data has dtype float16; expected float32 or float64"),
        ("bias float16", "clf", lambda a, d: a.update({"tree0/bias": a["tree0/bias"].astype(np.float16)}),
         "bias has dtype float16"),
    ],
    "features": [
        ("n_features in header raised", "clf", _header(lambda d: d["trees"][0].update(n_features=5)),
         "tree 0 has 5 features but the model was fitted on n_features_in_ = 4"),
        ("n_features in header lowered", "clf", _header(lambda d: d["trees"][0].update(n_features=2)),
         "feature indices must be in 0..1"),
        ("sparse index out of range", "clf", _set("tree0/weights_indices", 0, 50), "refers to feature 50"),
        ("sparse index negative", "clf", _set("tree0/weights_indices", 0, -2), "refers to feature -2"),
        ("indptr non-monotone", "clf", _swap_indptr, "decreases at row"),
        ("indptr past the data", "clf", _set("tree0/weights_indptr", -1, 10**6), "ends at 1000000"),
        ("indptr wrong length", "clf", lambda a, d: a.update({"tree0/weights_indptr": a["tree0/weights_indptr"][:-1]}),
         "weights_indptr has"),
        ("weights infinite", "clf", _set("tree0/weights_data", 0, np.inf), "must be finite"),
        ("negative axis feature", "linear", _set("tree0/feature", 0, -3), "splits on feature -3"),
        ("axis feature too large", "linear", _set("tree0/feature", 0, 4), "splits on feature 4"),
        ("nan threshold", "linear", _set("tree0/threshold", 0, np.nan), "must be finite"),
        ("leaf_coef indptr short", "linear",
         lambda a, d: a.update({"tree0/leaf_coef_indptr": a["tree0/leaf_coef_indptr"][:-1]}), "leaf_coef_indptr has"),
        ("leaf_coef missing part", "linear", _drop("tree0/leaf_coef_indices"), "'tree0/leaf_coef_indices' is missing"),
        ("linear leaves without leaf_coef", "linear",
         _drop("tree0/leaf_coef_data", "tree0/leaf_coef_indices", "tree0/leaf_coef_indptr"), "leaf_coef is NoneType"),
    ],
    "header": [
        ("wrong estimator name", "clf", _header(lambda d: d.update(estimator="os.system")), "unknown estimator"),
        # (without leaf_classes and leaf_warm_start, classifier-only parameters that TAORegressor would refuse first)
        ("estimator of the other task", "clf",
         _header(lambda d: (d.update(estimator="TAORegressor"), d["params"].pop("leaf_classes"),
                            d["params"].pop("leaf_warm_start"), d["params"].pop("class_weight"))),
         "a TAORegressor uses 'regression' trees"),
        ("unknown task", "clf", _header(lambda d: d["trees"][0].update(task="ranking")), "has task 'ranking'"),
        ("unknown leaf type", "clf", _header(lambda d: d["trees"][0].update(leaf_type="deep")), "has leaf_type 'deep'"),
        # JSON lists are unhashable: these raised TypeError from the membership test
        ("estimator a list", "clf", _header(lambda d: d.update(estimator=["TAOClassifier"])), "unknown estimator"),
        ("leaf type a list", "clf", _header(lambda d: d["trees"][0].update(leaf_type=["constant"])),
         "has leaf_type ['constant']"),
        ("task a list", "clf", _header(lambda d: d["trees"][0].update(task=["classification"])),
         "has task ['classification']"),
        ("invalid parameter value", "clf", _header(lambda d: d["params"].update(max_depth="deep")),
         "parameters are not valid"),
        ("unknown fitted attribute", "clf", _header(lambda d: d["fitted"].update(predict=1)),
         "unknown fitted attribute 'predict'"),
        ("unknown fitted array", "clf", lambda a, d: a.update({"fitted/predict": np.zeros(2)}),
         "unknown fitted array 'fitted/predict'"),
        ("n_features_in_ not an int", "clf", _header(lambda d: d["fitted"].update(n_features_in_="4")),
         "expected a positive integer"),
        ("classes vs outputs", "clf", lambda a, d: a.update({"fitted/classes_": np.arange(3)}),
         "3 classes but the trees have 2 outputs"),
        ("header not JSON", "clf", lambda a, d: a.update({"model.json": np.frombuffer(b"{not json", np.uint8)}),
         "not valid UTF-8 JSON"),
        ("header a JSON list", "clf", lambda a, d: a.update({"model.json": np.frombuffer(b"[1, 2]", np.uint8)}),
         "expected a JSON object"),
        ("header wrong dtype", "clf", lambda a, d: a.update({"model.json": np.zeros(3)}), "model.json is a float64"),
        ("no trees listed", "clf", _header(lambda d: d.update(trees=[])), "lists no trees"),
        ("regressor without _y_1d", "reg", _header(lambda d: d["fitted"].pop("_y_1d")), "needs _y_1d"),
        ("regressor _y_1d with 2 outputs", "reg",
         lambda a, d: (a.update({"tree0/value": np.hstack([a["tree0/value"]] * 2)}),
                       d["trees"][0].update(n_outputs=2), d["fitted"].update(n_outputs_=2)),
         "_y_1d is true (one target) but the trees have 2 outputs"),
    ],
    "softmax": [
        ("leaf_classes above n_outputs", "softmax", _header(lambda d: d["trees"][0].update(leaf_classes=9)),
         "has leaf_classes 9; expected null or an integer in 1..4"),
        ("leaf_classes not an int", "softmax", _header(lambda d: d["trees"][0].update(leaf_classes="2")),
         "has leaf_classes '2'"),
        ("leaf_classes unlike the parameter", "softmax", _header(lambda d: d["trees"][0].update(leaf_classes=3)),
         "tree 0 has leaf_classes 3 but the model's parameter is 2"),
        ("leaf_classes on constant leaves", "clf",
         _header(lambda d: (d["trees"][0].update(leaf_classes=1), d["params"].update(leaf_classes=1))),
         "it needs linear classification leaves"),
        ("+inf logit", "softmax", _limited_leaf_edit(lambda v, i, o, w: v.__setitem__((i, o), np.inf)),
         "NaN or +inf logit"),
        ("nan logit", "softmax", _limited_leaf_edit(lambda v, i, o, w: v.__setitem__((i, w), np.nan)),
         "NaN or +inf logit"),
        ("leaf with no class", "softmax", _limited_leaf_edit(lambda v, i, o, w: v.__setitem__(i, -np.inf)),
         "has no class (every logit is -inf)"),
        ("weights for an outside class", "softmax", _limited_leaf_edit(lambda v, i, o, w: v.__setitem__((i, w), -np.inf)),
         "which is outside it (logit -inf)"),
        ("more classes than leaf_classes", "softmax", _one_class_too_many, "has 3 classes (finite logits) but "
         "leaf_classes is 2"),
        ("-inf logit without a limit", "linear", _set("tree0/value", (-1, 0), -np.inf), "leaf outputs must be finite"),
    ],
    "regression": [
        ("leaf_range low above high", "linreg", _leaf_range_reversed, "with low <= high and no NaN"),
        ("leaf_range nan", "linreg", _set("tree0/leaf_range", (0, 1, 0), np.nan), "with low <= high and no NaN"),
        ("leaf_range wrong shape", "linreg",
         lambda a, d: a.update({"tree0/leaf_range": a["tree0/leaf_range"][:, :1]}), "expected (n_nodes, 2, n_outputs)"),
        ("leaf_range one per node missing", "linreg",
         lambda a, d: a.update({"tree0/leaf_range": a["tree0/leaf_range"][:-1]}), "(one per node)"),
        ("leaf_range on constant leaves", "reg",
         lambda a, d: a.update({"tree0/leaf_range": np.zeros((len(a["tree0/value"]), 2, 1))}),
         "only linear regression leaves clip"),
    ],
    "forest": [
        ("forest tree arrays missing", "forest", _drop(*[f"tree1/{k}" for k in ("children_left", "value")]),
         "'tree1/children_left' is missing"),
        ("forest tree entry missing", "forest", _header(lambda d: d["trees"].pop()),
         "holds 1 tree(s) but a TAOForestClassifier with these parameters has 2"),
        ("forest tree with other n_features", "forest", _header(lambda d: d["trees"][1].update(n_features=6)),
         "tree 1 has 6 features"),
        ("forest tree cycle", "forest", _set("tree1/children_left", 0, 0), "reached more than once"),
    ],
}


def _damaged_files(models, folder):
    """Files that are not taodist models at all, or no longer whole ones."""
    good = models["paths"]["clf"].read_bytes()
    cases = []

    def write(name, data, expected):
        (folder / name).write_bytes(data)
        cases.append((name, folder / name, expected))

    write("truncated.npz", good[: len(good) // 2], "damaged or truncated")
    write("truncated_tail.npz", good[:-10], "damaged or truncated")
    write("empty.npz", b"", "it is empty")
    write("random.npz", np.random.default_rng(0).bytes(4096), "not an .npz (zip) archive")
    write("text.npz", b"children_left = [1, 2, 3]\n", "not an .npz (zip) archive")
    np.save(folder / "array.npy", np.arange(4))
    os.replace(folder / "array.npy", folder / "array.npz")
    cases.append(("array.npz", folder / "array.npz", "single .npy array"))
    with zipfile.ZipFile(folder / "foreign.npz", "w") as z:
        z.writestr("hello.txt", "not ours")
    cases.append(("foreign.npz", folder / "foreign.npz", "not a taodist model (no model.json entry)"))
    with zipfile.ZipFile(folder / "duplicate.npz", "w") as z, zipfile.ZipFile(models["paths"]["clf"]) as src:
        for name in src.namelist():
            z.writestr(name, src.read(name))
        with warnings.catch_warnings():  # zipfile warns of the duplicate it is asked to write
            warnings.simplefilter("ignore", UserWarning)
            z.writestr("model.json.npy", src.read("model.json.npy"))  # a second header: np.load reads the last
    cases.append(("duplicate.npz", folder / "duplicate.npz", "holds 'model.json.npy' more than once"))
    np.savez(folder / "other.npz", a=np.arange(3))
    cases.append(("other.npz", folder / "other.npz", "not a taodist model (no model.json entry)"))
    # a zip whose member header claims more data than there is
    data = bytearray(good)
    data[len(data) // 3: len(data) // 3 + 64] = b"\x00" * 64
    write("zeroed.npz", bytes(data), "")
    return cases


def _check_results(proc, expected):
    """Every case ended in a ValueError saying ``expected[case]``; returns the messages by case."""
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    seen = {r["case"]: r for r in lines}
    assert set(seen) == set(expected), f"child stopped early:\n{proc.stdout}\n{proc.stderr}"
    for case, fragment in expected.items():
        r = seen[case]
        assert r["error"] == "ValueError", f"{case}: got {r['error']}: {r['message']}"
        assert fragment in r["message"], f"{case}: {r['message']!r} does not say {fragment!r}"
    assert proc.returncode == 0, proc.stderr  # the child's own verdict: ValueErrors only
    return {case: r["message"] for case, r in seen.items()}


@pytest.mark.parametrize("group", sorted(TAMPERED))
def test_tampered_models_raise_a_clear_value_error(models, tmp_path, group):
    files, expected = [], {}
    for i, (case, model, edit, fragment) in enumerate(TAMPERED[group]):
        path = tmp_path / f"case{i}.npz"
        _tamper(models["paths"][model], path, edit)
        files.append((case, str(path)))
        expected[case] = fragment
    messages = _check_results(_run_child(_CHILD, str(models["X"]), json.dumps(files)), expected)
    for case, path in files:
        assert path in messages[case], f"{case}: the message does not name the file: {messages[case]}"


def test_damaged_and_foreign_files_raise_a_clear_value_error(models, tmp_path):
    cases = _damaged_files(models, tmp_path)
    proc = _run_child(_CHILD, str(models["X"]), json.dumps([(name, str(p)) for name, p, _ in cases]))
    _check_results(proc, {name: fragment for name, _, fragment in cases})


def test_untampered_copies_still_load_and_predict_the_same(models, tmp_path):
    """The tampering helper itself changes nothing when the edit is empty (guards the tests above)."""
    from taodist import load

    X = np.load(models["X"])
    for name, path in models["paths"].items():
        _tamper(path, tmp_path / f"{name}.npz", lambda a, d: None)
        np.testing.assert_array_equal(load(tmp_path / f"{name}.npz").predict(X), models["fits"][name].predict(X))


def test_cli_predict_on_a_tampered_model_is_one_error_line(models, tmp_path):
    cyclic = tmp_path / "cyclic.npz"
    _tamper(models["paths"]["clf"], cyclic, _set("tree0/children_left", 1, 0))
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(models["paths"]["clf"].read_bytes()[:200])
    code = "from taodist.cli import main; main(prog_name='taodist')"
    for model in (cyclic, truncated):
        out = tmp_path / "p.npy"
        proc = _run_child(code, "predict", str(model), str(models["X"]), "-o", str(out))
        assert proc.returncode == 1, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and str(model) in lines[0], proc.stderr
        assert "Traceback" not in proc.stderr and not out.exists()


# ------------------------------------------------------------------- router
_ROUTE_CHILD = r"""
import json
import numpy as np, scipy.sparse as sp
from taodist.model.route import _route, route
from taodist.model.tree import complete_tree

def tree():
    t = complete_tree(2, 4, 2, "oblique", task="classification", leaf_type="constant")
    t.weights = sp.csr_matrix(np.tile([1.0, 0, -1, 0], (7, 1)) * (t.kind == 1)[:, None])
    return t

def corrupt(change):
    t = tree(); change(t); return t

X = np.random.default_rng(0).normal(size=(50, 4))
cases = {
    "child out of range": lambda t: t.children_left.__setitem__(0, 40),
    "cycle": lambda t: t.children_left.__setitem__(1, 0),
    "self loop": lambda t: t.children_right.__setitem__(2, 2),
    "one child": lambda t: t.children_right.__setitem__(0, -1),
    "axis feature out of range": lambda t: (t.kind.__setitem__(0, 2), t.feature.__setitem__(0, 9)),
    "negative axis feature": lambda t: (t.kind.__setitem__(0, 2), t.feature.__setitem__(0, -1)),
    "sparse index out of range": lambda t: t.weights.indices.__setitem__(0, 10**6),
    "indptr decreasing": lambda t: t.weights.indptr.__setitem__(1, 50),
    "short kind": lambda t: setattr(t, "kind", t.kind[:3]),
}
for name, change in cases.items():
    try:
        route(corrupt(change), X)
        print(json.dumps({"case": name, "error": None, "message": ""}), flush=True)
    except ValueError as exc:
        print(json.dumps({"case": name, "error": "ValueError", "message": str(exc)}), flush=True)
try:
    route(tree(), X[:, :3])
    print(json.dumps({"case": "X too narrow", "error": None, "message": ""}), flush=True)
except ValueError as exc:
    print(json.dumps({"case": "X too narrow", "error": "ValueError", "message": str(exc)}), flush=True)

# the kernel itself, called past route()'s checks with a cycle, stops instead of spinning
t = tree()
left = t.children_left.astype(np.int64); left[1] = 0
right = t.children_right.astype(np.int64)
out = np.zeros(X.shape[0], dtype=np.int64)
W = t.weights
_route(X, np.full(7, -1, dtype=np.int64), np.zeros((1, 4)), W.indptr.astype(np.int64), W.indices.astype(np.int64),
       W.data, t.bias, t.kind, t.feature.astype(np.int64), t.threshold, np.full(7, -1, dtype=np.int64),
       np.zeros(7, dtype=bool), left, right, out)
print(json.dumps({"case": "kernel bound", "leaves": sorted(set(out.tolist()))}), flush=True)
"""


def test_route_refuses_corrupted_trees_instead_of_crashing():
    proc = _run_child(_ROUTE_CHILD)
    assert proc.returncode == 0, proc.stderr
    results = [json.loads(line) for line in proc.stdout.splitlines()]
    kernel = results.pop()
    assert len(results) == 10, proc.stdout
    for r in results:
        assert r["error"] == "ValueError" and r["message"].startswith("route():"), r
    # rows whose walk hits the cycle end at -1 (route() turns that into a ValueError); the others at a leaf
    assert kernel["case"] == "kernel bound" and -1 in kernel["leaves"], kernel
    assert all(leaf == -1 or 3 <= leaf <= 6 for leaf in kernel["leaves"]), kernel
