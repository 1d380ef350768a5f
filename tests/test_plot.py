"""taodist.plot.plot_tree: pictures of fitted trees."""

import os
import sys

import numpy as np
import pytest
from sklearn.datasets import load_digits, load_iris
from sklearn.exceptions import NotFittedError

pytest.importorskip("matplotlib")

from matplotlib.image import AxesImage, imread  # noqa: E402

from taodist import TAOClassifier, TAOForestClassifier  # noqa: E402
from taodist.model.kinds import AXIS, LEAF, OBLIQUE  # noqa: E402
from taodist.plot import plot_tree  # noqa: E402
from taodist.testing import random_fitted_tree  # noqa: E402

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X[:600], y[:600]


@pytest.fixture(scope="module")
def oblique_digits(digits):
    return TAOClassifier(max_depth=3, max_iter=2, random_state=0, n_jobs=1).fit(*digits)


@pytest.fixture(scope="module")
def axis_digits(digits):
    return TAOClassifier(max_depth=3, max_iter=2, node_type="axis", random_state=0, n_jobs=1).fit(*digits)


def _images(fig):
    return [a for ax in fig.axes for a in ax.get_children() if isinstance(a, AxesImage)]


def _texts(fig):
    return [t.get_text() for ax in fig.axes for t in ax.texts]


def _oblique_decisions(tree):
    return np.flatnonzero((tree.kind == OBLIQUE) & ~tree.is_leaf)


# ------------------------------------------------------------------ output
def test_png_is_written_atomically(oblique_digits, tmp_path):
    path = tmp_path / "tree.png"
    assert plot_tree(oblique_digits, path) == path
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    img = imread(path)
    assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
    assert os.listdir(tmp_path) == ["tree.png"]  # the temporary file was moved, not left behind


def test_existing_file_is_replaced(oblique_digits, tmp_path):
    path = tmp_path / "tree.png"
    path.write_bytes(b"old contents")
    plot_tree(oblique_digits, str(path))
    assert path.read_bytes()[:8] == PNG_SIGNATURE
    assert os.listdir(tmp_path) == ["tree.png"]


def test_failed_save_leaves_no_files(oblique_digits, tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    def boom(self, *args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(Figure, "savefig", boom)
    with pytest.raises(RuntimeError, match="disk full"):
        plot_tree(oblique_digits, tmp_path / "tree.png")
    assert os.listdir(tmp_path) == []


def test_no_path_returns_a_figure_and_leaves_pyplot_alone(oblique_digits):
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    before = plt.get_fignums()
    fig = plot_tree(oblique_digits)
    assert isinstance(fig, Figure)
    assert plt.get_fignums() == before


# ---------------------------------------------------------------- contents
def test_one_weight_image_per_oblique_decision_node(oblique_digits):
    tree = oblique_digits.tree_
    nodes = _oblique_decisions(tree)
    assert nodes.size > 0
    images = _images(plot_tree(oblique_digits))
    assert len(images) == nodes.size
    # each image is a node's weights as 8x8, its colour scale symmetric around 0 at max |w|
    expected = {int(i): tree.weights[i].toarray().reshape(8, 8) for i in nodes}
    for im in images:
        data = np.asarray(im.get_array())
        assert data.shape == (8, 8)
        match = [i for i, w in expected.items() if np.allclose(w, data)]
        assert len(match) == 1
        vmin, vmax = im.get_clim()
        assert vmin == pytest.approx(-vmax)
        assert vmax == pytest.approx(np.abs(expected[match[0]]).max())


def test_nonzero_counts_and_leaf_classes_are_annotated(oblique_digits):
    tree = oblique_digits.tree_
    texts = _texts(plot_tree(oblique_digits))
    for i in _oblique_decisions(tree):
        assert f"#{i}: {tree.weights[i].nnz}/64 nnz" in texts
    leaves = np.flatnonzero(tree.is_leaf)
    leaf_texts = sorted(t for t in texts if t.isdigit())
    assert leaf_texts == sorted(str(oblique_digits.classes_[np.argmax(tree.value[i])]) for i in leaves)


def test_axis_tree_draws_tests_not_images(axis_digits):
    tree = axis_digits.tree_
    fig = plot_tree(axis_digits)
    assert _images(fig) == []
    tests = [t for t in _texts(fig) if ">=" in t]
    assert len(tests) == int(((tree.kind == AXIS) & ~tree.is_leaf).sum()) > 0
    assert all(t.startswith("x[") for t in tests)
    first = f"x[{tree.feature[0]}] >=\n{tree.threshold[0]:.4g}"
    assert first in tests


def test_axis_tree_uses_feature_names(axis_digits):
    names = [f"pixel_{j // 8}_{j % 8}" for j in range(64)]
    texts = _texts(plot_tree(axis_digits, feature_names=names))
    f = axis_digits.tree_.feature[0]
    assert any(t.startswith(names[f] + " >=") for t in texts)
    with pytest.raises(ValueError, match="3 names.*64 features"):
        plot_tree(axis_digits, feature_names=["a", "b", "c"])


def test_non_square_features_draw_stems_unless_image_shape_is_given():
    X, y = load_iris(return_X_y=True)
    model = TAOClassifier(max_depth=2, max_iter=1, random_state=0, n_jobs=1).fit(X, y)
    n_oblique = _oblique_decisions(model.tree_).size
    assert n_oblique > 0
    assert _images(plot_tree(model)) == []  # 4 features: a stem plot, not a 2x2 image
    assert len(_images(plot_tree(model, image_shape=(1, 4)))) == n_oblique


def test_image_shape_must_match_the_number_of_features(oblique_digits):
    with pytest.raises(ValueError, match=r"49.*64"):
        plot_tree(oblique_digits, image_shape=(7, 7))
    with pytest.raises(ValueError, match="pair of positive integers"):
        plot_tree(oblique_digits, image_shape=(64,))
    assert len(_images(plot_tree(oblique_digits, image_shape=(4, 16)))) == _oblique_decisions(oblique_digits.tree_).size


def test_max_depth_truncates_the_drawing(oblique_digits):
    tree = oblique_digits.tree_
    assert tree.max_depth >= 2 and tree.kind[0] == OBLIQUE
    fig = plot_tree(oblique_digits, max_depth=1)
    assert len(_images(fig)) == 1  # only the root's weights
    assert any("nodes)" in t for t in _texts(fig))
    fig0 = plot_tree(oblique_digits, max_depth=0)
    assert _images(fig0) == [] and any("nodes)" in t for t in _texts(fig0))
    with pytest.raises(ValueError, match="max_depth"):
        plot_tree(oblique_digits, max_depth=-1)


def test_linear_leaves_and_regression_values():
    tree = random_fitted_tree(2, 5, 1, "oblique", task="regression", leaf_type="linear")
    texts = _texts(plot_tree(tree))
    assert texts.count("linear") == int((tree.kind == LEAF).sum())
    const = random_fitted_tree(2, 5, 1, "axis", task="regression", leaf_type="constant")
    texts = _texts(plot_tree(const))
    for i in np.flatnonzero(const.is_leaf):
        assert f"{const.value[i, 0]:.3g}" in texts


def test_draws_into_given_axes(oblique_digits):
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert plot_tree(oblique_digits, ax=ax) is fig
    assert len(ax.images) == _oblique_decisions(oblique_digits.tree_).size


# ------------------------------------------------------------------ forests
def test_forest_tree_index(digits):
    X, y = digits
    forest = TAOForestClassifier(
        n_estimators=2, max_depth=2, max_iter=1, leaf_type="constant", random_state=0, n_jobs=1
    ).fit(X[:300], y[:300])
    fig = plot_tree(forest, tree_index=1)
    assert len(_images(fig)) == _oblique_decisions(forest.estimators_[1].tree_).size
    # leaves are labelled with the forest's classes, not the trees' class codes
    leaf_texts = {t for t in _texts(fig) if t.isdigit()}
    assert leaf_texts <= {str(c) for c in forest.classes_}
    with pytest.raises(ValueError, match=r"tree_index=99.*2 trees"):
        plot_tree(forest, tree_index=99)
    with pytest.raises(ValueError, match="tree_index=-1"):
        plot_tree(forest, tree_index=-1)


def test_single_tree_rejects_other_tree_index(oblique_digits):
    with pytest.raises(ValueError, match="single tree"):
        plot_tree(oblique_digits, tree_index=1)


# ------------------------------------------------------------------- errors
@pytest.mark.parametrize("model", [TAOClassifier(), TAOForestClassifier()], ids=["tree", "forest"])
def test_unfitted_model_raises(model):
    with pytest.raises(NotFittedError):
        plot_tree(model)


def test_missing_matplotlib_names_the_extra(oblique_digits, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"pip install 'taodist\[plot\]'"):
        plot_tree(oblique_digits)


def test_laptao_classifier_leaves_show_classes(digits):
    from taodist import LapTAOClassifier

    X, y = digits[0][:300], digits[1][:300].copy()
    y[100:] = -1  # unlabelled
    model = LapTAOClassifier(max_depth=2, n_outer=2, random_state=0).fit(X, y)
    tree = model.tree_  # regresses one score per class: leaves still predict classes_[argmax]
    texts = _texts(plot_tree(model))
    leaf_texts = sorted(t for t in texts if t.isdigit())
    assert leaf_texts == sorted(str(model.classes_[np.argmax(tree.value[i])]) for i in np.flatnonzero(tree.is_leaf))
    reached = tree.apply(X)
    for i in np.unique(reached):  # and that is what predict says for the points reaching the leaf
        assert set(model.predict(X[reached == i])) == {model.classes_[np.argmax(tree.value[i])]}


def test_a_model_of_a_billion_features_is_drawn_as_stems_and_refuses_an_image():
    import scipy.sparse as sp

    from taodist.model.tree import complete_tree

    D = 10**12  # a perfect square: drawn as images of 10^6 x 10^6 pixels, it would allocate 8 TB per node
    tree = complete_tree(1, D, 2, "oblique", task="classification", leaf_type="constant")
    tree.weights = sp.csr_matrix(([1.5, -2.0], ([0, 0], [7, D - 1])), shape=(3, D))
    tree.value[1:] = [[1.0, 0.0], [0.0, 1.0]]
    fig = plot_tree(tree)
    assert not _images(fig)  # stems: no dense copy of the weights
    with pytest.raises(ValueError, match="image of 1,000,000,000,000 pixels"):
        plot_tree(tree, image_shape=(10**6, 10**6))
