"""Structural checks of a tree's arrays: for trees read from files and trees handed to the router.

A model file is data from outside: an edited or damaged file must give a
clear :class:`ValueError`, never a crash, an endless loop or silent garbage.
The compiled router (:mod:`taodist.model.route`) and scipy's sparse kernels index
arrays without bounds checks, so every index a tree supplies is checked here
before any of them runs:

* :func:`check_csr` -- the parts of a CSR matrix, before scipy sees them;
* :func:`check_structure` -- children arrays that form one binary tree;
* :func:`check_tree` -- a whole :class:`~taodist.model.tree.Tree` (shapes,
  dtypes, a proper binary tree reachable from the root, kinds, feature
  ranges, finite parameters, leaf models);
* :func:`check_routing_arrays` -- the cheap subset the router needs, run on
  every :func:`~taodist.model.route.route` call.

The checks of a model file around its trees (its JSON header, the estimator
rebuilt from it) are the file format's: :mod:`taodist.io.format`.

Every message names the place (``where``: the file and tree) and says what
was found and what is expected.
"""

import numbers

import numpy as np
import scipy.sparse as sp

from .kinds import AXIS, LEAF, OBLIQUE
from .leaves import LEAF_MODELS

TASKS = ("classification", "regression")
#: the registry's live view: a registered leaf model's files load too
LEAF_TYPES = LEAF_MODELS.keys()
_KIND_NAMES = {LEAF: "leaf", OBLIQUE: "oblique", AXIS: "axis"}
_DTYPE_WORDS = {"iu": "an integer dtype", "f": "float32 or float64", "iufb": "a numeric dtype", "b": "bool"}
#: the floating dtypes a model's arrays may have: scipy's sparse indexing and the compiled routing and
#: leaf kernels take no float16 (nor extended precision), which a file could otherwise hand them
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def is_integer(v):
    """Whether ``v`` is an integer (a JSON or NumPy one), not a bool."""
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def _first(mask):
    return int(np.flatnonzero(mask)[0])


def checked_array(arr, name, kinds, where, ndim=1, length=None):
    """``arr`` if it is a numpy array of the right kind, rank and length; else ValueError.

    Parameters
    ----------
    arr : object
        What a file or a tree holds under ``name``.
    name : str
        The array's name, for messages.
    kinds : {"iu", "f", "iufb", "b"}
        The dtype kinds allowed: integers, float32/float64, any number, or bool.
    where : str
        Where the array comes from (file and tree), for messages.
    ndim : int, default=1
    length : int, optional
        The number of entries (rows) expected.

    Returns
    -------
    ndarray
        ``arr`` itself.

    Raises
    ------
    ValueError
        Saying what was found and what is expected.
    """
    if not isinstance(arr, np.ndarray):
        raise ValueError(f"{where}: {name} is missing or not an array (got {type(arr).__name__}).")
    if arr.dtype.kind not in kinds or (kinds == "f" and arr.dtype not in _FLOATS):
        raise ValueError(f"{where}: {name} has dtype {arr.dtype}; expected {_DTYPE_WORDS[kinds]}.")
    if arr.ndim != ndim:
        raise ValueError(f"{where}: {name} has shape {arr.shape}; expected a {ndim}-D array.")
    if length is not None and arr.shape[0] != length:
        raise ValueError(f"{where}: {name} has {arr.shape[0]} entries; expected {length} (one per node).")
    return arr


# ----------------------------------------------------------------- arrays
def check_csr(name, data, indices, indptr, shape, where):
    """Check the parts of a CSR matrix of ``shape`` before scipy or the router index with them.

    Parameters
    ----------
    name : str
        ``"weights"`` or ``"leaf_coef"``, for messages.
    data, indices, indptr : ndarray
    shape : (int, int)
    where : str

    Raises
    ------
    ValueError
        If a part has the wrong dtype or length, ``indptr`` does not start
        at 0 or decreases, or a stored column index or value is out of range
        or not finite.
    """
    n_rows, n_cols = shape
    checked_array(data, f"{name}_data", "f", where)
    checked_array(indices, f"{name}_indices", "iu", where)
    checked_array(indptr, f"{name}_indptr", "iu", where)
    if indptr.shape[0] != n_rows + 1:
        raise ValueError(f"{where}: {name}_indptr has {indptr.shape[0]} entries; expected {n_rows + 1} "
                         f"(rows + 1 for {n_rows} rows).")
    if indices.shape[0] != data.shape[0]:
        raise ValueError(f"{where}: {name}_indices has {indices.shape[0]} entries but {name}_data has "
                         f"{data.shape[0]}; they must match.")
    ptr = indptr.astype(np.int64)  # an unsigned 2**64-1 wraps negative here and is caught below
    if ptr[0] != 0:
        raise ValueError(f"{where}: {name}_indptr starts at {ptr[0]}; it must start at 0.")
    drops = np.diff(ptr) < 0
    if drops.any():
        r = _first(drops)
        raise ValueError(f"{where}: {name}_indptr decreases at row {r} ({ptr[r]} -> {ptr[r + 1]}); it must be non-decreasing.")
    end = int(ptr[-1])
    if end > indices.shape[0]:
        raise ValueError(f"{where}: {name}_indptr ends at {end} but only {indices.shape[0]} entries are stored.")
    cols = indices[:end].astype(np.int64)
    bad = (cols < 0) | (cols >= n_cols)
    if bad.any():
        j = _first(bad)
        row = int(np.searchsorted(ptr, j, side="right") - 1)
        raise ValueError(f"{where}: {name} row {row} refers to feature {cols[j]}; feature indices must be in "
                         f"0..{n_cols - 1} (n_features = {n_cols}).")
    if not np.isfinite(data[:end]).all():
        j = _first(~np.isfinite(data[:end]))
        row = int(np.searchsorted(ptr, j, side="right") - 1)
        raise ValueError(f"{where}: {name} row {row} holds {data[j]}; stored values must be finite.")


def check_structure(left, right, where):
    """Check that ``left``/``right`` form one binary tree rooted at node 0.

    Every child id is -1 (leaf) or a node id, a node has two children or
    none, and walking from the root meets every node exactly once (so there
    is no cycle, no shared child, and no unreachable node).

    Parameters
    ----------
    left, right : ndarray of int, shape (n_nodes,)
    where : str

    Raises
    ------
    ValueError
    """
    n = left.shape[0]
    for name, child in (("children_left", left), ("children_right", right)):
        bad = (child < -1) | (child >= n)
        if bad.any():
            i = _first(bad)
            raise ValueError(f"{where}: {name}[{i}] = {child[i]} is out of range; a child id is -1 (leaf) "
                             f"or a node id 0..{n - 1}.")
    half = (left < 0) != (right < 0)
    if half.any():
        i = _first(half)
        raise ValueError(f"{where}: node {i} has children ({left[i]}, {right[i]}); a node has two children "
                         "or none (both -1).")
    # level by level from the root: a node met twice means a cycle or a shared child
    seen = np.zeros(n, dtype=bool)
    seen[0] = True
    frontier = np.zeros(1, dtype=np.int64)
    while frontier.size:
        inner = frontier[left[frontier] >= 0]
        nxt = np.concatenate([left[inner], right[inner]]).astype(np.int64)
        ids, counts = np.unique(nxt, return_counts=True)
        again = ids[(counts > 1) | seen[ids]]
        if again.size:
            raise ValueError(f"{where}: node {again[0]} is reached more than once from the root (a cycle or a "
                             "shared child); every node must have exactly one parent.")
        seen[nxt] = True
        frontier = nxt
    if not seen.all():
        lost = np.flatnonzero(~seen)
        raise ValueError(f"{where}: nodes {lost[:5].tolist()}{' ...' if lost.size > 5 else ''} cannot be reached "
                         "from the root (node 0); every node must be.")


def check_tree(tree, where):
    """Check every structural invariant of a :class:`~taodist.model.tree.Tree`.

    Parameters
    ----------
    tree : Tree
    where : str
        Where the tree comes from (file and tree number), for messages.

    Raises
    ------
    ValueError
        Naming the first problem: task or leaf type unknown; an array
        missing, of the wrong dtype, rank or length; not a binary tree
        reachable from the root; a kind that contradicts leaf/decision; an
        axis feature outside ``[0, n_features)``; a threshold, bias, leaf
        value or stored weight that is not finite; a CSR matrix of the wrong
        shape or with out-of-range indices; ``leaf_coef`` missing for linear
        leaves (or present for constant ones).
    """
    if tree.task not in TASKS:
        raise ValueError(f"{where}: task {tree.task!r}; expected one of {list(TASKS)}.")
    if tree.leaf_type not in LEAF_TYPES:
        raise ValueError(f"{where}: leaf_type {tree.leaf_type!r}; expected one of {list(LEAF_TYPES)}.")
    left = checked_array(tree.children_left, "children_left", "iu", where)
    n = left.shape[0]
    if n == 0:
        raise ValueError(f"{where}: the tree has no nodes; it needs at least a root.")
    right = checked_array(tree.children_right, "children_right", "iu", where, length=n)
    kind = checked_array(tree.kind, "kind", "iu", where, length=n)
    feature = checked_array(tree.feature, "feature", "iu", where, length=n)
    bias = checked_array(tree.bias, "bias", "f", where, length=n)
    threshold = checked_array(tree.threshold, "threshold", "f", where, length=n)
    value = checked_array(tree.value, "value", "f", where, ndim=2, length=n)
    if value.shape[1] < 1:
        raise ValueError(f"{where}: value has shape {value.shape}; expected (n_nodes, n_outputs) with n_outputs >= 1.")
    W = tree.weights
    if not (sp.issparse(W) and W.format == "csr"):
        raise ValueError(f"{where}: weights is a {type(W).__name__}; expected a CSR matrix.")
    n_features = W.shape[1]
    if W.shape[0] != n or n_features < 1:
        raise ValueError(f"{where}: weights has shape {W.shape}; expected ({n}, n_features) with n_features >= 1.")
    check_csr("weights", W.data, W.indices, W.indptr, W.shape, where)

    left, right, kind = left.astype(np.int64), right.astype(np.int64), kind.astype(np.int64)
    check_structure(left, right, where)
    unknown = ~np.isin(kind, list(_KIND_NAMES))
    if unknown.any():
        i = _first(unknown)
        raise ValueError(f"{where}: node {i} has kind {kind[i]}; expected 0 (leaf), 1 (oblique) or 2 (axis).")
    leaf = left < 0
    wrong = leaf != (kind == LEAF)
    if wrong.any():
        i = _first(wrong)
        raise ValueError(f"{where}: node {i} is a {'leaf' if leaf[i] else 'decision node'} but has kind "
                         f"{kind[i]} ({_KIND_NAMES[int(kind[i])]}); kind 0 must mark exactly the leaves.")
    axis = kind == AXIS
    f = feature.astype(np.int64)
    bad = axis & ((f < 0) | (f >= n_features))
    if bad.any():
        i = _first(bad)
        raise ValueError(f"{where}: axis node {i} splits on feature {f[i]}; expected 0..{n_features - 1} "
                         f"(n_features = {n_features}).")
    for name, values, nodes in (("threshold", threshold, axis), ("bias", bias, kind == OBLIQUE)):
        bad = nodes & ~np.isfinite(values)
        if bad.any():
            i = _first(bad)
            raise ValueError(f"{where}: node {i} has {name} {values[i]}; it must be finite.")
    K = value.shape[1]
    if tree.leaf_classes is None:
        bad = leaf & ~np.isfinite(value).all(axis=1)
        if bad.any():
            raise ValueError(f"{where}: leaf {_first(bad)} has a value that is not finite; leaf outputs must be finite.")
    else:
        _check_limited_leaves(tree, leaf, value, where)
    if tree.task == "classification" and not LEAF_MODELS[tree.leaf_type].has_coef:
        _check_class_distributions(leaf, value, where)
    if LEAF_MODELS[tree.leaf_type].has_coef:
        C = tree.leaf_coef
        if not (sp.issparse(C) and C.format == "csr"):
            raise ValueError(f"{where}: leaf_type is {tree.leaf_type!r} but leaf_coef is {type(C).__name__}; "
                             "expected a CSR matrix (arrays leaf_coef_data, _indices, _indptr).")
        if C.shape != (n * K, n_features):
            raise ValueError(f"{where}: leaf_coef has shape {C.shape}; expected (n_nodes * n_outputs, n_features) "
                             f"= ({n * K}, {n_features}).")
        check_csr("leaf_coef", C.data, C.indices, C.indptr, C.shape, where)
        if tree.leaf_classes is not None:
            outside = (leaf[:, None] & np.isneginf(value)).ravel()  # row i*K + c: class c at node i
            stored = np.diff(C.indptr.astype(np.int64)) > 0
            if (outside & stored).any():
                row = _first(outside & stored)
                raise ValueError(f"{where}: leaf {row // K} has weights for class {row % K}, which is outside it "
                                 "(logit -inf); that coefficient row must be empty.")
    elif tree.leaf_coef is not None:
        raise ValueError(f"{where}: leaf_coef is present but leaf_type is {tree.leaf_type!r}, whose leaves have "
                         "no coefficients.")
    if tree.leaf_range is not None:
        _check_leaf_range(tree, n, K, where)
    _check_missing_routes(tree, n, axis, n_features, where)


def _check_missing_routes(tree, n, axis, n_features, where):
    """Default directions of axis nodes: both arrays or neither, an indicator column in range at axis nodes only."""
    if tree.missing_column is None and tree.missing_right is None:
        return
    if tree.missing_column is None or tree.missing_right is None:
        raise ValueError(f"{where}: only one of missing_column and missing_right is present; an axis node's default "
                         "direction needs both (or neither: missing values count as their filled value).")
    column = checked_array(tree.missing_column, "missing_column", "iu", where, length=n).astype(np.int64)
    checked_array(tree.missing_right, "missing_right", "b", where, length=n)
    bad = (column < -1) | (column >= n_features) | (~axis & (column != -1))
    if bad.any():
        i = _first(bad)
        raise ValueError(f"{where}: node {i} has missing_column {column[i]}; expected -1 (no default direction) or, "
                         f"at an axis node, an indicator column in 0..{n_features - 1}.")


def _check_leaf_range(tree, n, K, where):
    """Output ranges of linear regression leaves: ``(n_nodes, 2, K)``, never NaN, low <= high."""
    if tree.task != "regression" or not LEAF_MODELS[tree.leaf_type].has_coef:
        raise ValueError(f"{where}: leaf_range is present but the tree has {tree.task} {tree.leaf_type!r} leaves; "
                         "only linear regression leaves clip their outputs to a range.")
    r = checked_array(tree.leaf_range, "leaf_range", "f", where, ndim=3, length=n)
    if r.shape != (n, 2, K):
        raise ValueError(f"{where}: leaf_range has shape {r.shape}; expected (n_nodes, 2, n_outputs) = ({n}, 2, {K}).")
    bad = np.isnan(r).any(axis=(1, 2)) | (r[:, 0] > r[:, 1]).any(axis=1)
    if bad.any():
        raise ValueError(f"{where}: node {_first(bad)} has leaf_range {r[_first(bad)].tolist()}; each output's "
                         "range is [low, high] with low <= high and no NaN (+-inf: unbounded).")


def _check_class_distributions(leaf, value, where):
    """A constant classification leaf's value is its class distribution: shares in [0, 1] summing to 1
    (or all 0: a leaf no training row reached, kept when pruning is off or before any leaf step)."""
    shares = value[leaf]
    total = shares.sum(axis=1)
    bad = (shares < 0).any(axis=1) | (shares > 1).any(axis=1) | ((np.abs(total - 1.0) > 1e-6) & (total != 0))
    if bad.any():
        i = np.flatnonzero(leaf)[_first(bad)]
        raise ValueError(f"{where}: leaf {i} has class shares {value[i].tolist()!r} (sum {value[i].sum():.6g}); a "
                         "constant classification leaf holds its class distribution: shares in [0, 1] summing to 1 (or all 0).")


def _check_limited_leaves(tree, leaf, value, where):
    """Softmax leaves limited to ``k`` classes: a class is in a leaf (finite logit) or out of it (``-inf``)."""
    k, K = tree.leaf_classes, value.shape[1]
    if not (is_integer(k) and 1 <= k <= K):
        raise ValueError(f"{where}: leaf_classes is {k!r}; expected None or an integer in 1..{K} (n_outputs).")
    if tree.task != "classification" or not LEAF_MODELS[tree.leaf_type].has_coef:
        raise ValueError(f"{where}: leaf_classes={k} limits softmax leaves, but the tree has {tree.task} "
                         f"{tree.leaf_type!r} leaves; it needs linear classification leaves.")
    bad = leaf & (np.isnan(value) | np.isposinf(value)).any(axis=1)
    if bad.any():
        raise ValueError(f"{where}: leaf {_first(bad)} has a NaN or +inf logit; a logit is finite, or -inf for a "
                         "class outside the leaf.")
    empty = leaf & ~np.isfinite(value).any(axis=1)
    if empty.any():
        raise ValueError(f"{where}: leaf {_first(empty)} has no class (every logit is -inf); a leaf keeps at least one.")
    kept = np.isfinite(value).sum(axis=1)
    over = leaf & (kept > k)
    if over.any():
        i = _first(over)
        raise ValueError(f"{where}: leaf {i} has {kept[i]} classes (finite logits) but leaf_classes is {k}; the "
                         "classes outside a leaf have logit -inf.")


# ----------------------------------------------------------------- router
def check_routing_arrays(left, right, kind, feature, bias, threshold, indptr, indices, data, n_features, n_columns,
                         missing_column, missing_right):
    """The checks that make the compiled router's every read in bounds.

    Cheap (vectorised, linear in nodes and stored weights); run by
    :func:`taodist.model.route.route` on the exact int64/float64 arrays the
    kernel receives, whatever built the tree.

    Raises
    ------
    ValueError
    """
    where = "route()"
    n = left.shape[0]
    if n == 0:
        raise ValueError(f"{where}: the tree has no nodes.")
    for name, arr in (("children_right", right), ("kind", kind), ("feature", feature), ("bias", bias),
                      ("threshold", threshold), ("missing_column", missing_column), ("missing_right", missing_right)):
        if arr.ndim != 1 or arr.shape[0] != n:
            raise ValueError(f"{where}: {name} has shape {arr.shape}; expected ({n},) like children_left.")
    if n_columns != n_features:
        raise ValueError(f"{where}: X has {n_columns} columns but the tree has {n_features} features.")
    for name, child in (("children_left", left), ("children_right", right)):
        if ((child < -1) | (child >= n)).any():
            raise ValueError(f"{where}: {name} holds ids outside -1..{n - 1}; the tree is corrupt.")
    decision = left >= 0
    if (decision != (right >= 0)).any():
        raise ValueError(f"{where}: a node has exactly one child; the tree is corrupt.")
    # one parent per node and none for the root: then walks from the root cannot cycle
    parents = np.bincount(np.concatenate([left[decision], right[decision]]), minlength=n)
    if parents[0] or parents.max(initial=0) > 1:
        raise ValueError(f"{where}: a node has more than one parent (or the root has one); the tree is corrupt.")
    split_on_feature = decision & (kind != OBLIQUE)  # what the kernel does for any non-oblique decision node
    if ((feature[split_on_feature] < 0) | (feature[split_on_feature] >= n_features)).any():
        raise ValueError(f"{where}: an axis node's feature is outside 0..{n_features - 1}; the tree is corrupt.")
    if ((missing_column < -1) | (missing_column >= n_features)).any():
        raise ValueError(f"{where}: an axis node's missing_column is outside -1..{n_features - 1}; the tree is corrupt.")
    if indptr.shape[0] != n + 1 or indptr[0] != 0 or (np.diff(indptr) < 0).any():
        raise ValueError(f"{where}: the weights' indptr is not a valid CSR index for {n} rows; the tree is corrupt.")
    end = indptr[-1]
    if end > indices.shape[0] or end > data.shape[0]:
        raise ValueError(f"{where}: the weights' indptr points past the stored weights; the tree is corrupt.")
    used = indices[:end]
    if used.size and (used.min() < 0 or used.max() >= n_features):
        raise ValueError(f"{where}: a weight refers to a feature outside 0..{n_features - 1}; the tree is corrupt.")
