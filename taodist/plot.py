"""Draw a fitted tree as a picture, in the style of the TAO papers' figures.

Decision nodes of image data (MNIST, digits) show their sparse weight vector
as a small image, positive and negative weights in two colours; other oblique
nodes show a stem plot of their non-zero weights, axis-aligned nodes their
test ``x[f] >= t``, and leaves their class or value.

:func:`plot_embedding_tree` draws a :class:`~taodist.TAOEmbedding` as the
thesis' Figures 4.2-4.3 do: the tree, each decision node with its top
positive and negative features and each leaf in its own colour with the
class histogram of its training points, beside the embedding coloured by
leaf, each leaf's region outlined.

matplotlib is an optional dependency (``pip install 'taodist[plot]'``); it is
imported only when a plot function is called, and only through its
object-oriented API with the Agg canvas, so no pyplot state is touched.
"""

import math

import numpy as np
from sklearn.utils.validation import check_array, check_is_fitted

from .embedding import TAOEmbedding
from .io.atomic import atomic_write
from .model.export import missing_route
from .model.kinds import AXIS, OBLIQUE
from .model.tree import Tree
from .utils.rows import ACCEPT_SPARSE, as_rows

__all__ = ["plot_tree", "plot_embedding_tree"]

#: Smallest side of a square feature count drawn as an image without ``image_shape``.
_MIN_AUTO_SIDE = 8
#: Data units: one leaf slot is 1 wide, one level is _LEVEL high, a node box _BOX wide.
_LEVEL = 1.6
_BOX = 0.8
#: Inches per data unit of our own figures, and the pixel cap of a PNG side.
_INCH_PER_UNIT = 1.25
_MAX_PIXELS = 30000
_CMAP = "RdBu_r"
#: the most pixels a node's weight image may have: an image is drawn from a dense copy of the node's weights,
#: and a few hundred pixels across already fill a node's box (a wider model draws its nodes as stems)
_MAX_IMAGE_PIXELS = 1 << 20


def plot_tree(model, path=None, *, tree_index=0, image_shape=None, feature_names=None, max_depth=None, ax=None):
    """Draw a fitted TAO tree: weight images at decision nodes, classes at leaves.

    Leaves are spread evenly along the bottom and every parent is centred
    over its children; the left edge of a decision node is "no" and the
    right edge "yes" (an oblique node goes right iff ``w . x + b >= 0``, an
    axis node iff ``x[f] >= t``).

    * An oblique node is drawn as its weight vector reshaped to
      ``image_shape`` (diverging colormap ``RdBu_r``, symmetric around 0:
      red positive, blue negative, white zero) when ``image_shape`` is given
      or the number of features is a perfect square of side 8 or more (64
      -> 8x8, 784 -> 28x28); otherwise as a stem plot of its non-zero
      weights over the feature indices. Either way it is annotated with its
      number of non-zero weights.
    * An axis-aligned node shows ``x[f] >= t`` (or ``name >= t``).
    * A leaf shows its predicted class (classifiers) or value (regressors);
      linear leaves, whose output depends on ``x``, say "linear".

    Parameters
    ----------
    model : fitted estimator or Tree
        A fitted :class:`~taodist.TAOClassifier`, :class:`~taodist.TAORegressor`,
        :class:`~taodist.LapTAOClassifier` or :class:`~taodist.LapTAORegressor`
        (anything with a ``tree_``), a fitted forest
        (:class:`~taodist.TAOForestClassifier`,
        :class:`~taodist.TAOForestRegressor`: its tree ``tree_index`` is drawn),
        or a bare :class:`~taodist.Tree`.
    path : str or os.PathLike, optional
        Write the picture there as PNG (whatever the extension), atomically:
        it is saved to a temporary file in the same directory, then moved
        over ``path``. Without ``path`` the figure is returned.
    tree_index : int, default=0
        Which tree of a forest to draw; must be 0 for a single tree.
    image_shape : tuple of int, optional
        ``(height, width)`` of the weight images; ``height * width`` must
        equal the number of features. Default: square images when the
        number of features is a perfect square of side >= 8, else stem plots.
    feature_names : sequence of str, optional
        Names used in the text of axis-aligned nodes (default ``x[f]``).
    max_depth : int, optional
        Draw only the nodes down to this depth (the root is depth 0); a
        decision node cut off there is drawn as a box with its subtree's size.
    ax : matplotlib.axes.Axes, optional
        Draw into these axes (their figure is returned or saved). Default: a
        new figure sized to the tree.

    Returns
    -------
    str or os.PathLike or matplotlib.figure.Figure
        ``path`` when given, else the figure holding the drawing.

    Raises
    ------
    sklearn.exceptions.NotFittedError
        If the model is not fitted.
    ValueError
        If ``tree_index``, ``image_shape``, ``feature_names`` or
        ``max_depth`` do not fit the model.
    ImportError
        If matplotlib is not installed.
    """
    return _plot_tree(model, path, tree_index=tree_index, image_shape=image_shape, feature_names=feature_names,
                      max_depth=max_depth, ax=ax)


def _plot_tree(model, path=None, *, tree_index=0, image_shape=None, feature_names=None, max_depth=None, ax=None,
               leaf_style=None, notes=None):
    """:func:`plot_tree`, with a tree embedding's extras: ``leaf_style`` ``{leaf: (colour, label)}`` replaces a
    leaf's colour and text, ``notes`` ``{decision node: text}`` is written under a decision node."""
    tree, classes, title = _resolve_tree(model, tree_index)
    shape = _image_shape(tree, image_shape)
    encoder = getattr(model, "encoder_", None)
    if feature_names is None and encoder is not None and (encoder.input_names_ is not None or not encoder.is_identity):
        feature_names = encoder.feature_names_out_  # the encoded columns: "age", "age is missing", "colour=red"
    names = _feature_names(tree, feature_names)
    if max_depth is not None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, (int, np.integer)) or max_depth < 0:
            raise ValueError(f"max_depth must be None or an integer >= 0; got {max_depth!r}.")
        max_depth = int(max_depth)

    try:
        import matplotlib  # noqa: F401  (a hidden matplotlib must fail here, not in a submodule import)
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError("plot_tree needs matplotlib: pip install 'taodist[plot]'") from exc

    layout = _layout(tree, max_depth)
    if layout.cut and title:
        title += f", drawn to depth {max_depth}"
    n_slots = max(1, len(layout.leaves))
    n_levels = layout.depth + 1
    if ax is None:
        width = max(4.0, _INCH_PER_UNIT * n_slots)
        height = max(2.5, _INCH_PER_UNIT * (_LEVEL * (n_levels - 1) + 1.6))
        fig = Figure(figsize=(width, height))
        FigureCanvasAgg(fig)
        ax = fig.add_axes((0.01, 0.01, 0.98, 0.92 if title else 0.98))
        own = True
    else:
        fig = ax.figure
        own = False

    _draw(ax, tree, layout, shape, names, classes, leaf_style or {}, notes or {})
    ax.set_xlim(-0.6, n_slots - 0.4)
    ax.set_ylim(-_LEVEL * (n_levels - 1) - 0.85, 0.75)
    ax.set_aspect("equal" if own else "auto")
    ax.set_axis_off()
    if title and own:
        ax.set_title(title, fontsize=10)

    if path is None:
        return fig
    dpi = min(100.0, _MAX_PIXELS / max(fig.get_size_inches()))
    # PNG to a temporary file beside ``path``, then renamed over it (mode 0o666 & ~umask)
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=dpi))
    return path


def plot_embedding_tree(model, X=None, path=None, *, n_top=3, feature_names=None, image_shape=None, max_depth=None,
                        fig=None):
    """Draw a fitted :class:`~taodist.TAOEmbedding`: its tree beside the embedding coloured by leaf.

    As the thesis' Figures 4.2-4.3 show a tree embedding. Left, the tree
    (as :func:`plot_tree` draws it): under each decision node its ``n_top``
    largest positive (``+``: towards "yes") and negative (``-``: towards
    "no") features; each leaf in its own colour, numbered from left to
    right, with how many training points reach it and, when ``fit`` was given
    labels, the histogram of their classes under it. Right, the embedding:
    with ``X``, its rows' coordinates (``transform(X)``) coloured by the
    leaf each reaches, each leaf's region outlined by the convex hull of its
    points; without ``X``, each leaf's region as recorded at fit time, the
    box of its training points' coordinates (``node_bounds_``), with their
    centroid.

    Parameters
    ----------
    model : fitted TAOEmbedding
        With at least 2 components (the first two are drawn).
    X : {array-like, sparse matrix} of shape (n_samples, n_features), optional
        Rows to draw in the embedding, e.g. the training rows or new ones.
        Needed for a model loaded from a file written before the regions
        were recorded.
    path : str or os.PathLike, optional
        Write the picture there as PNG, atomically (as :func:`plot_tree`);
        without it the figure is returned.
    n_top : int, default=3
        Features of each sign named under a decision node (0: none).
    feature_names : sequence of str, optional
        Default: ``feature_names_in_`` when fitted on a DataFrame, else
        ``x0, x1, ...``.
    image_shape : tuple of int, optional
        As for :func:`plot_tree`: decision nodes' weights drawn as images.
    max_depth : int, optional
        As for :func:`plot_tree`: the tree drawn to this depth. The
        embedding still shows every leaf.
    fig : matplotlib.figure.Figure, optional
        Draw into this empty figure (e.g. ``plt.figure()``, to show it with
        pyplot), resized to the drawing. Default: a new figure of matplotlib's
        object-oriented API, outside pyplot.

    Returns
    -------
    str or os.PathLike or matplotlib.figure.Figure
        ``path`` when given, else the figure.

    Raises
    ------
    TypeError
        If ``model`` is not a TAOEmbedding.
    sklearn.exceptions.NotFittedError
        If it is not fitted.
    ValueError
        If it has one component, if ``X`` does not have its features, or if
        there is nothing to draw the regions from (no ``X`` and no recorded
        regions); and as :func:`plot_tree` for the other arguments.
    ImportError
        If matplotlib is not installed.
    """
    if not isinstance(model, TAOEmbedding):
        raise TypeError(f"plot_embedding_tree draws a TAOEmbedding; got {type(model).__name__} (use plot_tree).")
    check_is_fitted(model, "tree_")
    tree = model.tree_
    if tree.n_outputs < 2:
        raise ValueError(f"plot_embedding_tree draws a 2-D embedding; this TAOEmbedding has n_components = "
                         f"{tree.n_outputs}.")
    info = model.explain(n_top=n_top, feature_names=feature_names)
    points = leaf_of = None
    if X is not None:
        X = as_rows(check_array(X, accept_sparse=ACCEPT_SPARSE, dtype=np.float64))
        if X.shape[1] != tree.n_features:
            raise ValueError(f"X has {X.shape[1]} features; the model was fitted on {tree.n_features}.")
        points, leaf_of = tree.predict(X)[:, :2], tree.apply(X)
    elif info["leaves"][0]["n_train"] is None:
        raise ValueError("This TAOEmbedding has no recorded leaf regions (its file predates them): pass the rows "
                         "X to draw.")
    try:
        from matplotlib import colormaps
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.patches import Polygon, Rectangle
    except ImportError as exc:
        raise ImportError("plot_embedding_tree needs matplotlib: pip install 'taodist[plot]'") from exc

    leaves = info["leaves"]
    cmap = colormaps["tab10" if len(leaves) <= 10 else "tab20"]
    colour = {leaf["node"]: cmap(k % cmap.N) for k, leaf in enumerate(leaves)}
    style = {}
    for leaf in leaves:
        label = f"#{leaf['leaf']}" + (f"\nn={leaf['n_train']}" if leaf["n_train"] is not None else "")
        style[leaf["node"]] = ((*colour[leaf["node"]][:3], 0.45), label)
    notes = {}
    for node in info["decision_nodes"]:
        lines = []
        if node["top_positive"]:
            lines.append("+ " + ", ".join(t["feature"] for t in node["top_positive"]))
        if node["top_negative"]:
            lines.append("- " + ", ".join(t["feature"] for t in node["top_negative"]))
        if lines:
            notes[node["node"]] = "\n".join(lines)

    n_slots = max(1, len(_layout(tree, max_depth).leaves))
    tree_width = max(4.0, _INCH_PER_UNIT * n_slots)
    depth = min(tree.max_depth, max_depth) if max_depth is not None else tree.max_depth
    height = max(4.5, _INCH_PER_UNIT * (_LEVEL * depth + 2.6))
    if fig is None:
        fig = Figure(figsize=(tree_width + height, height))
        FigureCanvasAgg(fig)
    else:
        fig.set_size_inches(tree_width + height, height)
    split = tree_width / (tree_width + height)
    ax_tree = fig.add_axes((0.005, 0.02, split - 0.01, 0.9))
    ax_emb = fig.add_axes((split + 0.04, 0.08, 1 - split - 0.06, 0.82))
    _plot_tree(model, ax=ax_tree, image_shape=image_shape, feature_names=_info_names(model, feature_names),
               max_depth=max_depth, leaf_style=style, notes=notes)
    if info["classes"] is not None:
        _class_histograms(ax_tree, tree, leaves, max_depth, Rectangle)
    ax_tree.set_title(f"TAOEmbedding tree: {tree.n_leaves()} leaves, depth {tree.max_depth}", fontsize=10)

    for leaf in leaves:
        node, c = leaf["node"], colour[leaf["node"]]
        if points is not None:
            mine = points[leaf_of == node]
            if len(mine) == 0:
                continue
            ax_emb.scatter(mine[:, 0], mine[:, 1], s=9, color=c, linewidths=0, zorder=2)
            hull = _hull(mine)
            if hull is not None:
                ax_emb.add_patch(Polygon(hull, closed=True, fill=False, edgecolor=c, linewidth=0.8, alpha=0.7,
                                         zorder=1))
            centre = mine.mean(axis=0)
        else:
            if leaf["box"] is None:
                continue
            (x0, y0), (x1, y1) = np.asarray(leaf["box"])[:, :2]
            ax_emb.add_patch(Rectangle((x0, y0), x1 - x0, y1 - y0, facecolor=(*c[:3], 0.12), edgecolor=c,
                                       linewidth=1.0, zorder=1))
            centre = np.asarray(leaf["centroid"][:2])
            ax_emb.scatter([centre[0]], [centre[1]], s=18, color=c, zorder=2)
        ax_emb.annotate(f"#{leaf['leaf']}", centre, fontsize=8, ha="center", va="center", zorder=3,
                        bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "edgecolor": c, "alpha": 0.8})
    if points is None:
        ax_emb.autoscale_view()
    ax_emb.set_aspect("equal", adjustable="datalim")  # distances in the embedding are what it preserves
    ax_emb.set_title("the embedding, coloured by leaf" + ("" if points is not None else
                                                          " (leaf regions: training points' boxes)"), fontsize=10)
    ax_emb.set_xlabel("component 0")
    ax_emb.set_ylabel("component 1")
    if path is None:
        return fig
    dpi = min(100.0, _MAX_PIXELS / max(fig.get_size_inches()))
    atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=dpi))
    return path


def _info_names(model, feature_names):
    """The names the tree drawing uses: the given ones, else a DataFrame's columns (``feature_names_in_``)."""
    if feature_names is not None:
        return feature_names
    names = getattr(model, "feature_names_in_", None)
    return None if names is None else [str(n) for n in names]


def _hull(points):
    """The convex hull of 2-D points as a polygon's vertices, or None when they span no area."""
    from scipy.spatial import ConvexHull, QhullError

    if len(points) < 3:
        return None
    try:
        hull = ConvexHull(points)
    except QhullError:  # collinear or coincident points (a constant leaf maps all its points to one place)
        return None
    return points[hull.vertices]


def _class_histograms(ax, tree, leaves, max_depth, Rectangle):
    """Bars of each leaf's class counts under its box in the tree drawing (leaves drawn at full depth only)."""
    layout = _layout(tree, max_depth)
    bottom = min(y for _, y in layout.pos.values()) - _BOX / 2 - 0.15
    height = 0.6
    for leaf in leaves:
        if leaf["node"] not in layout.pos or leaf["node"] in layout.cut or not leaf["n_train"]:
            continue
        x, _ = layout.pos[leaf["node"]]
        counts = np.asarray(leaf["class_counts"], dtype=np.float64)
        width = _BOX / len(counts)
        top = counts.max() or 1.0
        for k, n in enumerate(counts):
            if n:
                ax.add_patch(Rectangle((x - _BOX / 2 + k * width, bottom - height), width * 0.9, height * n / top,
                                       facecolor="0.35", edgecolor="none", zorder=2))
        ax.add_patch(Rectangle((x - _BOX / 2, bottom - height), _BOX, height, fill=False, edgecolor="0.6",
                               linewidth=0.5, zorder=1))
    lo, hi = ax.get_ylim()
    ax.set_ylim(min(lo, bottom - height - 0.3), hi)
    ax.text(-0.55, bottom - height / 2, "classes", fontsize=6, ha="right", va="center", rotation=90)


# --------------------------------------------------------------- validation
def _resolve_tree(model, tree_index):
    """``(tree, class labels or None, title)`` of the tree to draw, after checks."""
    if isinstance(tree_index, bool) or not isinstance(tree_index, (int, np.integer)):
        raise ValueError(f"tree_index must be an integer; got {tree_index!r}.")
    tree_index = int(tree_index)
    if isinstance(model, Tree):
        if tree_index != 0:
            raise ValueError(f"tree_index={tree_index} but the model is a single tree: tree_index must be 0.")
        return model, None, ""
    name = type(model).__name__
    if hasattr(model, "n_estimators") or hasattr(model, "estimators_"):  # a forest
        check_is_fitted(model, "estimators_")
        n = len(model.estimators_)
        if not 0 <= tree_index < n:
            raise ValueError(f"tree_index={tree_index} is out of range: {name} has {n} trees (0 to {n - 1}).")
        est = model.estimators_[tree_index]
        tree = est.tree_
        title = f"{name}: tree {tree_index} of {n}"
    else:
        check_is_fitted(model, "tree_")
        if tree_index != 0:
            raise ValueError(f"tree_index={tree_index} but {name} is a single tree: tree_index must be 0.")
        tree = model.tree_
        title = name
    # A forest's trees hold class codes; the forest holds the labels. A
    # LapTAOClassifier's tree regresses one score per class (task
    # "regression"): its leaves, too, predict classes_[argmax].
    # (a TAOEmbedding's classes_ are the labels it counted, not what its leaves predict)
    classes = None if isinstance(model, TAOEmbedding) else getattr(model, "classes_", None)
    if classes is not None and len(classes) != tree.n_outputs:
        classes = None
    title += f" (depth {tree.max_depth}, {tree.n_decision_nodes()} decision nodes, {tree.n_leaves()} leaves)"
    return tree, classes, title


def _image_shape(tree, image_shape):
    D = tree.n_features
    if image_shape is None:
        side = math.isqrt(D)
        return (side, side) if side * side == D and side >= _MIN_AUTO_SIDE and D <= _MAX_IMAGE_PIXELS else None
    try:
        shape = tuple(int(s) for s in image_shape)
    except (TypeError, ValueError):
        raise ValueError(f"image_shape must be a pair of positive integers (height, width); got {image_shape!r}.") from None
    if len(shape) != 2 or min(shape) < 1:
        raise ValueError(f"image_shape must be a pair of positive integers (height, width); got {image_shape!r}.")
    if shape[0] * shape[1] != D:
        raise ValueError(
            f"image_shape {shape} has {shape[0] * shape[1]} pixels but the tree has {D} features; "
            "their numbers must be equal."
        )
    if D > _MAX_IMAGE_PIXELS:
        raise ValueError(f"image_shape {shape} would draw every node as an image of {D:,} pixels (at most "
                         f"{_MAX_IMAGE_PIXELS:,}); leave image_shape out to draw the nodes' non-zero weights as stems.")
    return shape


def _feature_names(tree, feature_names):
    if feature_names is None:
        return None
    names = [str(n) for n in feature_names]
    if len(names) != tree.n_features:
        raise ValueError(f"feature_names has {len(names)} names but the tree has {tree.n_features} features.")
    return names


# ------------------------------------------------------------------- layout
class _Layout:
    """Positions of the drawn nodes: ``pos[node] = (x, y)``; ``cut`` are truncated subtrees."""

    def __init__(self):
        self.pos = {}
        self.leaves = []
        self.cut = set()
        self.edges = []  # (parent, child, "no"/"yes")
        self.depth = 0


def _layout(tree, max_depth):
    """Leaves (or cut nodes) at x = 0, 1, 2, ... left to right; parents centred over children."""
    out = _Layout()
    cl, cr = tree.children_left, tree.children_right

    def place(node, depth):
        out.depth = max(out.depth, depth)
        y = -_LEVEL * depth
        if cl[node] < 0 or (max_depth is not None and depth >= max_depth):
            if cl[node] >= 0:
                out.cut.add(node)
            x = float(len(out.leaves))
            out.leaves.append(node)
        else:
            xl = place(cl[node], depth + 1)
            xr = place(cr[node], depth + 1)
            out.edges += [(node, cl[node], "no"), (node, cr[node], "yes")]
            x = 0.5 * (xl + xr)
        out.pos[node] = (x, y)
        return x

    place(0, 0)  # recursion depth is the tree depth (at most ~20 for our estimators)
    return out


def _subtree_size(tree, node):
    stack, n = [node], 0
    while stack:
        i = stack.pop()
        n += 1
        if tree.children_left[i] >= 0:
            stack += [tree.children_left[i], tree.children_right[i]]
    return n


# ------------------------------------------------------------------ drawing
def _draw(ax, tree, layout, shape, names, classes, leaf_style, notes):
    from matplotlib.collections import LineCollection
    from matplotlib.patches import Rectangle

    h = _BOX / 2
    # edges: from the bottom of the parent's box to the top of the child's
    segs = []
    for parent, child, label in layout.edges:
        (px, py), (cx, cy) = layout.pos[parent], layout.pos[child]
        segs.append([(px, py - h - 0.12), (cx, cy + h)])
        mx, my = 0.5 * (px + cx), 0.5 * (py - h - 0.12 + cy + h)
        ax.text(mx, my, label, fontsize=7, color="0.35", ha="right" if label == "no" else "left", va="center")
    if segs:
        ax.add_collection(LineCollection(segs, colors="0.5", linewidths=0.8, zorder=1))

    cmap_cls = _class_colours(tree, classes)
    for node, (x, y) in layout.pos.items():
        if node in layout.cut:
            n = _subtree_size(tree, node)
            _text_box(ax, x, y, f"...\n({n} nodes)", "0.92", Rectangle)
        elif tree.children_left[node] < 0 and node in leaf_style:
            colour, label = leaf_style[node]
            _text_box(ax, x, y, label, colour, Rectangle, fontsize=8)
        elif tree.children_left[node] < 0:
            label = _leaf_label(tree, node, classes)
            colour = cmap_cls(int(np.argmax(tree.value[node]))) if cmap_cls is not None else "0.9"
            _text_box(ax, x, y, label, colour, Rectangle, fontsize=9)
        elif tree.kind[node] == AXIS:
            f = int(tree.feature[node])
            lhs = names[f] if names is not None else f"x[{f}]"
            route = missing_route(tree, node).strip()
            _text_box(ax, x, y, f"{lhs} >=\n{tree.threshold[node]:.4g}" + (f"\n{route}" if route else ""), "white",
                      Rectangle, fontsize=8)
        elif tree.kind[node] == OBLIQUE:
            row = tree.weights[node]
            if shape is not None:
                _weight_image(ax, x, y, row, shape, Rectangle)
            else:
                _weight_stems(ax, x, y, row, tree.n_features, Rectangle, LineCollection)
            ax.text(x, y - h - 0.04, f"#{node}: {row.nnz}/{tree.n_features} nnz", fontsize=7, ha="center", va="top")
        if node in notes and node not in layout.cut:
            ax.text(x, y - h - 0.22, notes[node], fontsize=6, ha="center", va="top", zorder=4)


def _is_classifier(tree, classes):
    return tree.task == "classification" or classes is not None


def _class_colours(tree, classes):
    if not _is_classifier(tree, classes) or tree.leaf_model.has_coef:  # a leaf's class depends on x
        return None
    from matplotlib import colormaps

    cmap = colormaps["tab10" if tree.n_outputs <= 10 else "tab20"]
    return lambda k: (*cmap(k % cmap.N)[:3], 0.35)


def _leaf_label(tree, node, classes):
    label = tree.leaf_model.label(tree, node, classes)
    if label is not None:
        return label
    if _is_classifier(tree, classes):
        k = int(np.argmax(tree.value[node]))
        return str(classes[k]) if classes is not None else f"class {k}"
    vals = tree.value[node]
    text = ", ".join(f"{v:.3g}" for v in vals[:3]) + (", ..." if vals.size > 3 else "")
    return text if vals.size == 1 else f"[{text}]"


def _text_box(ax, x, y, text, facecolour, Rectangle, fontsize=7):
    h = _BOX / 2
    ax.add_patch(Rectangle((x - h, y - h), _BOX, _BOX, facecolor=facecolour, edgecolor="0.3", linewidth=0.8, zorder=2))
    ax.text(x, y, text, fontsize=fontsize, ha="center", va="center", zorder=3)


def _weight_image(ax, x, y, row, shape, Rectangle):
    w = np.asarray(row.toarray(), dtype=np.float64).reshape(shape)
    vmax = float(np.abs(w).max()) or 1.0
    hgt, wid = shape
    # fit the image in the node box, keeping square pixels
    s = _BOX / max(hgt, wid)
    ex, ey = 0.5 * s * wid, 0.5 * s * hgt
    extent = (x - ex, x + ex, y - ey, y + ey)
    ax.imshow(w, cmap=_CMAP, vmin=-vmax, vmax=vmax, extent=extent, interpolation="nearest", origin="upper", zorder=2)
    ax.add_patch(Rectangle((x - ex, y - ey), 2 * ex, 2 * ey, fill=False, edgecolor="0.3", linewidth=0.8, zorder=3))


def _weight_stems(ax, x, y, row, n_features, Rectangle, LineCollection):
    """Stem plot: feature index along the box, weight / max|w| up (red, > 0) or down (blue, < 0)."""
    from matplotlib import colormaps

    h = _BOX / 2
    ax.add_patch(Rectangle((x - h, y - h), _BOX, _BOX, facecolor="white", edgecolor="0.3", linewidth=0.8, zorder=2))
    ax.plot([x - h, x + h], [y, y], color="0.6", linewidth=0.5, zorder=3)
    if row.nnz == 0:
        return
    vmax = float(np.abs(row.data).max()) or 1.0
    xs = x - h + _BOX * (row.indices + 0.5) / n_features
    tops = y + 0.9 * h * row.data / vmax
    cmap = colormaps[_CMAP]
    colours = np.where((row.data >= 0)[:, None], cmap(0.85), cmap(0.15))  # the image colours, full strength
    segs = [[(xi, y), (xi, ti)] for xi, ti in zip(xs, tops)]
    ax.add_collection(LineCollection(segs, colors=colours, linewidths=1.2, zorder=4))
    ax.scatter(xs, tops, s=4, c=colours, zorder=5, linewidths=0)
