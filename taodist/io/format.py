"""The model file format: its version, what a file may hold, and the checks of what it holds.

File format (``format_version`` 1): one NumPy ``.npz`` archive (a zip file,
read with ``allow_pickle=False``) holding

* ``model.json`` -- a UTF-8 JSON document stored as a ``uint8`` array::

      {"format": "taodist", "format_version": 1, "taodist_version": "...",
       "estimator": "TAOClassifier", "params": {...}, "fitted": {...},
       "trees": [{"prefix": "tree0/", "task": ..., "leaf_type": ...,
                  "n_features": D, "n_outputs": K}, ...]}

  A tree whose softmax leaves are limited to ``k`` classes also records
  ``"leaf_classes": k`` (absent: no limit), and its ``value`` holds ``-inf``
  for the classes outside each leaf.

* for every tree (one, or a forest's trees), arrays under its prefix: ``children_left``,
  ``children_right``, ``kind``, ``bias``, ``feature``, ``threshold``,
  ``value`` and the CSR parts ``weights_data|indices|indptr`` (and
  ``leaf_coef_*`` for linear leaves, and ``leaf_range``, ``(n_nodes, 2,
  n_outputs)``, for linear regression leaves fitted since output clipping
  exists: absent, the leaves are not clipped; and ``missing_column``,
  ``missing_right`` for axis nodes that learned where missing values go:
  absent, none did), as documented in :mod:`taodist.model.tree`;
* fitted arrays that are not JSON-friendly (numeric ``classes_``,
  ``history_``) under ``fitted/``; for a TAOEmbedding, its nodes' training
  statistics (``node_counts_``, ``node_bounds_``, ``node_centroids_`` and,
  when fitted with labels, ``node_class_counts_``: absent in files written
  before they existed);
* for a model fitted on a table whose columns were encoded (missing values,
  categorical columns: :mod:`taodist.estimators.tabular`), an ``"encoder"``
  entry in ``model.json`` and its arrays under ``encoder/`` (absent for
  models fitted before encoders existed, or on Dask input, which take
  numeric, complete columns).

A file is data from outside, so everything in it is checked before anything
is built from it: :func:`check_header` (the JSON header), the trees' arrays
(:mod:`taodist.model.checks`), then :func:`check_estimator` (the estimator
rebuilt around its trees). Every message names the place (``where``: the
file and tree) and says what was found and what is expected. Reading and
writing the files is :mod:`taodist.io.model_files`.
"""

import numpy as np
from sklearn.base import is_classifier

from ..model.checks import LEAF_TYPES, TASKS, is_integer

FORMAT_VERSION = 1
#: the most features or outputs a model file may declare: what int32 sparse indices reach
MAX_DIMENSION = 2**31 - 1
#: a tree's arrays stored under its prefix (besides the CSR parts of its weights and leaf coefficients)
TREE_ARRAYS = ("children_left", "children_right", "kind", "bias", "feature", "threshold", "value")
#: a tree's arrays stored only when it has them (absent: the tree does without)
OPTIONAL_TREE_ARRAYS = ("leaf_range", "missing_column", "missing_right")
#: fitted attributes stored in JSON when present
FITTED_SCALARS = ("n_features_in_", "n_outputs_", "n_classes_", "n_iter_", "_y_1d", "n_estimators_")
#: JSON ``fitted`` entries a taodist file may hold, with a check and the expected form
_FITTED_JSON = {
    "n_features_in_": (lambda v: is_integer(v) and 1 <= v <= MAX_DIMENSION, "a positive integer of at most 2**31 - 1"),
    "n_outputs_": (lambda v: is_integer(v) and v >= 1, "a positive integer"),
    "n_classes_": (lambda v: is_integer(v) and v >= 1, "a positive integer"),
    "n_iter_": (lambda v: (is_integer(v) and v >= 0) or (isinstance(v, list) and all(is_integer(i) and i >= 0 for i in v)),
                "a non-negative integer or a list of them"),
    "_y_1d": (lambda v: isinstance(v, bool), "true or false"),
    "n_estimators_": (lambda v: is_integer(v) and v >= 1, "a positive integer"),
    "classes_": (lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v), "a list of strings"),
    "feature_names_in_": (lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v), "a list of strings"),
}
#: fitted arrays a taodist file may hold (``fitted/<name>``), with their dtype kinds
FITTED_ARRAYS = {"history_": "f", "classes_": "iufb", "feature_importances_": "f", "node_counts_": "iu",
                 "node_bounds_": "f", "node_centroids_": "f", "node_class_counts_": "iu", "clip_bounds_": "f",
                 "penalty_factors_": "f"}
#: the rank of a fitted array that is not 1-D
FITTED_NDIM = {"node_bounds_": 3, "node_centroids_": 2, "node_class_counts_": 2, "clip_bounds_": 2}
#: a TAOEmbedding's per-node statistics of its training points (what ``explain`` reports), stored with it
EMBEDDING_ARRAYS = ("node_counts_", "node_bounds_", "node_centroids_", "node_class_counts_")


def check_header(doc, where, known_estimators):
    """Check the JSON header of a model file.

    Parameters
    ----------
    doc : object
        The parsed ``model.json``.
    where : str
        The file, for messages.
    known_estimators : collection of str
        Estimator class names this taodist can rebuild.

    Raises
    ------
    ValueError
        Naming the first problem found.
    """
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: model.json holds a {type(doc).__name__}; expected a JSON object.")
    if doc.get("format") != "taodist" or doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{where} has format {doc.get('format')!r} version {doc.get('format_version')!r}; "
            f"this taodist reads format 'taodist' version {FORMAT_VERSION}."
        )
    name = doc.get("estimator")
    # (a JSON list or object is unhashable: checked as a string first, so the error is this ValueError)
    if not isinstance(name, str) or name not in known_estimators:
        raise ValueError(f"{where}: unknown estimator {name!r}; known: {sorted(known_estimators)}.")
    for key, kind in (("params", dict), ("fitted", dict), ("trees", list), ("metadata", dict)):
        if key in doc and not isinstance(doc[key], kind):
            raise ValueError(f"{where}: model.json entry {key!r} is a {type(doc[key]).__name__}; "
                             f"expected a JSON {'object' if kind is dict else 'list'}.")
    for key in ("params", "fitted", "trees"):
        if key not in doc:
            raise ValueError(f"{where}: model.json has no {key!r} entry; the file was not written by taodist.save.")
    for key, value in doc["fitted"].items():
        if key not in _FITTED_JSON:
            raise ValueError(f"{where}: unknown fitted attribute {key!r} in model.json; known: {sorted(_FITTED_JSON)}.")
        ok, expected = _FITTED_JSON[key]
        if not ok(value):
            raise ValueError(f"{where}: fitted attribute {key} is {value!r}; expected {expected}.")
    if not doc["trees"]:
        raise ValueError(f"{where}: model.json lists no trees; a fitted model has at least one.")
    prefixes = set()
    for i, meta in enumerate(doc["trees"]):
        if not isinstance(meta, dict):
            raise ValueError(f"{where}: model.json tree entry {i} is a {type(meta).__name__}; expected a JSON object.")
        prefix = meta.get("prefix")
        if not isinstance(prefix, str) or prefix in prefixes:
            raise ValueError(f"{where}: tree entry {i} has prefix {prefix!r}; expected a distinct string like 'tree{i}/'.")
        prefixes.add(prefix)
        if not isinstance(meta.get("task"), str) or meta["task"] not in TASKS:
            raise ValueError(f"{where}: tree {i} has task {meta.get('task')!r}; expected one of {list(TASKS)}.")
        if not isinstance(meta.get("leaf_type"), str) or meta["leaf_type"] not in LEAF_TYPES:
            raise ValueError(f"{where}: tree {i} has leaf_type {meta.get('leaf_type')!r}; expected one of {list(LEAF_TYPES)}.")
        for key in ("n_features", "n_outputs"):
            if not (is_integer(meta.get(key)) and 1 <= meta[key] <= MAX_DIMENSION):
                shown = meta.get(key) if not is_integer(meta.get(key)) or meta[key] < 10**30 else "a number of more than 30 digits"
                raise ValueError(f"{where}: tree {i} has {key} {shown!r}; expected a positive integer of at most "
                                 f"{MAX_DIMENSION:,} (2**31 - 1).")
        k = meta.get("leaf_classes")
        if k is not None and not (is_integer(k) and 1 <= k <= meta["n_outputs"]):
            raise ValueError(f"{where}: tree {i} has leaf_classes {k!r}; expected null or an integer in "
                             f"1..{meta['n_outputs']} (n_outputs).")


def check_estimator(est, trees, where):
    """Check that a rebuilt estimator and its (already checked) trees agree.

    Parameters
    ----------
    est : taodist estimator, its fitted attributes set from the file
    trees : list of Tree
    where : str

    Raises
    ------
    ValueError
        If the number of trees differs from ``n_estimators`` (one for a
        single-tree estimator); a tree's features differ from
        ``n_features_in_`` or its outputs from the other trees', the
        classes or ``_y_1d``; a tree's task does not suit the estimator.
    """
    name = type(est).__name__
    expected = getattr(est, "n_estimators_", est.n_estimators) if hasattr(est, "n_estimators") else 1
    if hasattr(est, "n_estimators") and expected > est.n_estimators:
        raise ValueError(f"{where}: n_estimators_ = {expected} trees kept, more than n_estimators = "
                         f"{est.n_estimators}; the file was edited.")
    if len(trees) != expected:
        raise ValueError(f"{where}: holds {len(trees)} tree(s) but a {name} with these parameters has {expected}; "
                         "the file is incomplete or was edited.")
    D = getattr(est, "n_features_in_", None)
    if D is None:
        raise ValueError(f"{where}: model.json does not record n_features_in_; the file was not written by taodist.save.")
    encoder = getattr(est, "encoder_", None)
    if encoder is not None and encoder.n_features_in_ != D:
        raise ValueError(f"{where}: the column encoding covers {encoder.n_features_in_} columns but the model was "
                         f"fitted on n_features_in_ = {D}; they must match.")
    D_trees = D if encoder is None else encoder.n_columns_out  # the trees see the encoded columns
    K = trees[0].n_outputs
    task = "classification" if name in ("TAOClassifier", "TAOForestClassifier") else "regression"
    for i, tree in enumerate(trees):
        if tree.n_features != D_trees:
            fitted_on = (f"n_features_in_ = {D}" if D_trees == D else
                         f"{D_trees} encoded columns (n_features_in_ = {D})")
            raise ValueError(f"{where}: tree {i} has {tree.n_features} features but the model was fitted on "
                             f"{fitted_on}; they must match.")
        if tree.n_outputs != K:
            raise ValueError(f"{where}: tree {i} has {tree.n_outputs} outputs but tree 0 has {K}; all trees must match.")
        if tree.task != task:
            raise ValueError(f"{where}: tree {i} has task {tree.task!r}; a {name} uses {task!r} trees.")
        if tree.leaf_classes != getattr(est, "leaf_classes", None):
            raise ValueError(f"{where}: tree {i} has leaf_classes {tree.leaf_classes!r} but the model's parameter "
                             f"is {getattr(est, 'leaf_classes', None)!r}; they must match.")
    bounds = getattr(est, "clip_bounds_", None)
    if bounds is not None and (bounds.shape != (2, D_trees) or np.isnan(bounds).any()
                               or not (bounds[0] <= bounds[1]).all()):
        raise ValueError(f"{where}: clip_bounds_ must hold a lower and an upper bound (lower <= upper, not NaN) for "
                         f"each of the {D_trees} features of the trees; found shape {bounds.shape}. The file was "
                         "edited.")
    factors = getattr(est, "penalty_factors_", None)
    if factors is not None and (factors.shape != (D_trees,) or not (factors >= 1).all()
                                or not np.isfinite(factors).all()):
        raise ValueError(f"{where}: penalty_factors_ must hold a finite factor of at least 1 for each of the "
                         f"{D_trees} features of the trees; found shape {factors.shape}. The file was edited.")
    importances = getattr(est, "feature_importances_", None)
    if importances is not None and (len(importances) != D or not np.isfinite(importances).all()
                                    or (importances < 0).any()):
        raise ValueError(f"{where}: feature_importances_ must hold {D} finite non-negative values (one per input "
                         "column); the file was edited.")
    if not hasattr(est, "n_components"):
        foreign = [a for a in EMBEDDING_ARRAYS if hasattr(est, a)]
        if foreign:
            raise ValueError(f"{where}: a {name} holds no {foreign[0]} (a TAOEmbedding's); the file was edited.")
    names = getattr(est, "feature_names_in_", None)
    if names is not None and len(names) != D:
        raise ValueError(f"{where}: {len(names)} feature names for n_features_in_ = {D}; they must match.")
    if is_classifier(est):
        classes = getattr(est, "classes_", None)
        if classes is None or np.ndim(classes) != 1 or len(classes) < 2:
            raise ValueError(f"{where}: a {name} needs classes_ (at least 2 class labels); found {classes!r}.")
        if len(classes) != K:
            raise ValueError(f"{where}: {len(classes)} classes but the trees have {K} outputs; they must match.")
        if getattr(est, "n_classes_", len(classes)) != len(classes):
            raise ValueError(f"{where}: n_classes_ = {est.n_classes_} but there are {len(classes)} classes.")
    elif hasattr(est, "n_components"):  # a TAOEmbedding: one output per embedding dimension
        if K != est.n_components:
            raise ValueError(f"{where}: the tree has {K} outputs but n_components = {est.n_components}; they must "
                             "match.")
        _check_node_statistics(est, trees[0], where)
    else:
        if not isinstance(getattr(est, "_y_1d", None), bool):
            raise ValueError(f"{where}: a {name} needs _y_1d (true or false) in model.json's fitted entries.")
        if est._y_1d and K != 1:
            raise ValueError(f"{where}: _y_1d is true (one target) but the trees have {K} outputs.")
        if getattr(est, "n_outputs_", K) != K:
            raise ValueError(f"{where}: n_outputs_ = {est.n_outputs_} but the trees have {K} outputs.")


def _check_node_statistics(est, tree, where):
    """A TAOEmbedding's node statistics: all or none, one row per node, and agreeing with the tree and each other.

    The counts must add up the way the tree routes points (a decision node
    counts its children's points), the boxes hold their centroids (NaN
    exactly where no point arrives), and each node's class counts sum to its
    count: what ``explain`` prints can then be trusted as the fit recorded it.
    """
    present = [a for a in EMBEDDING_ARRAYS[:3] if hasattr(est, a)]
    if not present:
        if hasattr(est, "node_class_counts_"):
            raise ValueError(f"{where}: node_class_counts_ without node_counts_; the file was edited.")
        return
    if len(present) < 3:
        missing = sorted(set(EMBEDDING_ARRAYS[:3]) - set(present))
        raise ValueError(f"{where}: holds {present[0]} but not {missing[0]}; the file is incomplete or was edited.")
    n, K = tree.n_nodes, tree.n_outputs
    counts, bounds, centroids = est.node_counts_, est.node_bounds_, est.node_centroids_
    for attr, value, shape in (("node_counts_", counts, (n,)), ("node_bounds_", bounds, (n, 2, K)),
                               ("node_centroids_", centroids, (n, K))):
        if value.shape != shape:
            raise ValueError(f"{where}: {attr} has shape {value.shape}; expected {shape} for a tree of {n} nodes "
                             f"and {K} outputs.")
    if (counts < 0).any():
        raise ValueError(f"{where}: node_counts_ holds negative counts; the file was edited.")
    inner = np.flatnonzero(tree.children_left >= 0)
    if (counts[inner] != counts[tree.children_left[inner]] + counts[tree.children_right[inner]]).any():
        raise ValueError(f"{where}: node_counts_ does not add up: a decision node must count its two children's "
                         "points; the file was edited.")
    reached = counts > 0
    lo, hi = bounds[:, 0], bounds[:, 1]
    with np.errstate(invalid="ignore"):
        ok = (np.isfinite(bounds[reached]).all() and np.isfinite(centroids[reached]).all()
              and np.isnan(bounds[~reached]).all() and np.isnan(centroids[~reached]).all()
              and (lo[reached] <= centroids[reached]).all() and (centroids[reached] <= hi[reached]).all())
    if not ok:
        raise ValueError(f"{where}: node_bounds_ and node_centroids_ must be finite boxes holding their centroids "
                         "for the nodes training points reach, NaN for the others; the file was edited.")
    class_counts = getattr(est, "node_class_counts_", None)
    classes = getattr(est, "classes_", None)
    if (class_counts is None) != (classes is None):
        raise ValueError(f"{where}: a TAOEmbedding holds classes_ and node_class_counts_ together or neither; "
                         "the file was edited.")
    if class_counts is None:
        return
    if np.ndim(classes) != 1 or len(classes) < 1 or class_counts.shape != (n, len(classes)):
        raise ValueError(f"{where}: node_class_counts_ has shape {class_counts.shape}; expected (n_nodes, "
                         f"n_classes) = ({n}, {len(classes) if np.ndim(classes) == 1 else '?'}).")
    if (class_counts < 0).any() or (class_counts.sum(axis=1) != counts).any():
        raise ValueError(f"{where}: node_class_counts_ must be non-negative and sum to node_counts_ on every node; "
                         "the file was edited.")
