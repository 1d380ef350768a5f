"""Saving and loading fitted models without pickle: :func:`save`, :func:`load`, :func:`load_metadata`.

The file format and its checks are :mod:`taodist.io.format`. Files are
written to a temporary name in the target folder and renamed, so a crash
never leaves a half-written model behind (:mod:`taodist.io.atomic`).

:func:`load` trusts nothing in a file: the header, every array's dtype and
shape, the tree structure and every index are checked
(:mod:`taodist.io.format`, :mod:`taodist.model.checks`) before anything is
built from them, and any problem -- a damaged, truncated, foreign or edited
file -- is a :class:`ValueError` naming the file and the problem.
"""

import json
import os
import zipfile

import numpy as np
import scipy.sparse as sp

from .._version import __version__
from ..embedding import TAOEmbedding
from ..estimators.forest import TAOForestClassifier, TAOForestRegressor
from ..estimators.tabular import TabularEncoder
from ..estimators.tree import TAOClassifier, TAORegressor
from ..laptao import LapTAOClassifier, LapTAORegressor
from ..model.checks import check_csr, check_tree, checked_array
from ..model.tree import Tree
from ..utils.messages import one_line
from .atomic import atomic_write
from .format import (
    EMBEDDING_ARRAYS,
    FITTED_ARRAYS,
    FITTED_NDIM,
    FITTED_SCALARS,
    FORMAT_VERSION,
    OPTIONAL_TREE_ARRAYS,
    TREE_ARRAYS,
    check_estimator,
    check_header,
)


def estimator_classes():
    """``{name: class}`` of every taodist estimator fitted to targets (predictors, scored on their targets)."""
    return {cls.__name__: cls for cls in (TAOClassifier, TAORegressor, TAOForestClassifier, TAOForestRegressor,
                                          LapTAOClassifier, LapTAORegressor)}


def model_classes():
    """``{name: class}`` of every estimator a model file may hold and a job may fit: :func:`estimator_classes`
    and the :class:`~taodist.TAOEmbedding` transformer (whose job needs no targets)."""
    return {**estimator_classes(), TAOEmbedding.__name__: TAOEmbedding}


def _json_params(est):
    """The estimator's parameters that JSON can hold (a warm-start init is dropped)."""
    params = {}
    for k, v in est.get_params(deep=False).items():
        if isinstance(v, np.integer):
            v = int(v)
        elif isinstance(v, np.floating):
            v = float(v)
        if v is None or isinstance(v, (bool, int, float, str)):
            params[k] = v
        elif k == "init":
            params[k] = "random"
    return params


def _tree_arrays(tree, prefix):
    arrays = {prefix + name: getattr(tree, name) for name in TREE_ARRAYS}
    for name in ("weights", "leaf_coef"):
        m = getattr(tree, name)
        if m is not None:
            arrays[f"{prefix}{name}_data"] = m.data
            arrays[f"{prefix}{name}_indices"] = m.indices
            arrays[f"{prefix}{name}_indptr"] = m.indptr
    meta = {
        "prefix": prefix,
        "task": tree.task,
        "leaf_type": tree.leaf_type,
        "n_features": tree.n_features,
        "n_outputs": tree.n_outputs,
    }
    if tree.leaf_classes is not None:  # only then: files of unlimited trees stay as they were
        meta["leaf_classes"] = int(tree.leaf_classes)
    for name in OPTIONAL_TREE_ARRAYS:  # only when present: files of trees without them stay as they were
        if getattr(tree, name) is not None:
            arrays[prefix + name] = getattr(tree, name)
    return meta, arrays


def _read_tree(meta, data, where):
    """The Tree stored under ``meta["prefix"]``, every array checked first."""
    p = meta["prefix"]

    def get(name):
        if p + name not in data:
            raise ValueError(f"{where}: array {p + name!r} is missing; the file is incomplete or was edited.")
        return data[p + name]

    n_nodes = checked_array(get("children_left"), "children_left", "iu", where).shape[0]
    value = checked_array(get("value"), "value", "f", where, ndim=2)
    if value.shape != (n_nodes, meta["n_outputs"]):
        raise ValueError(f"{where}: value has shape {value.shape}; expected (n_nodes, n_outputs) = "
                         f"({n_nodes}, {meta['n_outputs']}).")

    def csr(name, n_rows, required=False):
        keys = [p + name + part for part in ("_data", "_indices", "_indptr")]
        if not required and not any(k in data for k in keys):
            return None  # no linear leaves
        parts = [get(k[len(p):]) for k in keys]
        shape = (n_rows, meta["n_features"])
        check_csr(name, *parts, shape, where)  # before scipy indexes with them
        return sp.csr_matrix(tuple(parts), shape=shape)

    tree = Tree(
        **{name: get(name) for name in TREE_ARRAYS},
        weights=csr("weights", n_nodes, required=True),
        leaf_coef=csr("leaf_coef", n_nodes * meta["n_outputs"]),
        task=meta["task"],
        leaf_type=meta["leaf_type"],
        leaf_classes=meta.get("leaf_classes"),
        **{name: data[p + name] if p + name in data else None for name in OPTIONAL_TREE_ARRAYS},
    )
    check_tree(tree, where)
    return tree


def save(estimator, path, metadata=None, *, check=None):
    """Write a fitted taodist estimator to ``path`` (the format: :mod:`taodist.io.format`).

    Parameters
    ----------
    estimator : fitted taodist estimator (tree, forest, LapTAO or TAOEmbedding)
        A TAOEmbedding is saved as its tree and its nodes' training
        statistics (``node_counts_``, ``node_bounds_``, ``node_centroids_``,
        ``classes_`` and ``node_class_counts_``: what ``explain`` reports):
        a loaded one transforms and explains itself, but has no
        ``embedding_``, ``history_`` or the other training-time
        attributes.
    path : str or path-like
        Destination file; ``.npz`` is the conventional suffix.
    metadata : dict, optional
        JSON-serialisable facts stored with the model (the job service
        records data fingerprint, metrics and timings); read them back with
        :func:`load_metadata`.
    check : callable, optional
        Called with the complete temporary file's path just before it
        replaces ``path``; raise from it to abandon the write (``path`` is
        then left untouched).
    """
    name = type(estimator).__name__
    if name not in model_classes():
        raise TypeError(f"save() handles {sorted(model_classes())}; got {name}.")
    forest = hasattr(estimator, "n_estimators")
    if not hasattr(estimator, "estimators_" if forest else "tree_"):
        raise ValueError(f"This {name} is not fitted yet: call fit() before save().")
    trees = [e.tree_ for e in estimator.estimators_] if forest else [estimator.tree_]
    tree_meta, arrays = [], {}
    for i, tree in enumerate(trees):
        meta, arr = _tree_arrays(tree, f"tree{i}/")
        tree_meta.append(meta)
        arrays.update(arr)
    fitted = {k: _plain(getattr(estimator, k)) for k in FITTED_SCALARS if hasattr(estimator, k)}
    if not forest and isinstance(getattr(estimator, "history_", None), np.ndarray):
        arrays["fitted/history_"] = estimator.history_
    if isinstance(getattr(estimator, "feature_importances_", None), np.ndarray):
        arrays["fitted/feature_importances_"] = estimator.feature_importances_
    for attr in ("clip_bounds_", "penalty_factors_"):
        if isinstance(getattr(estimator, attr, None), np.ndarray):
            arrays[f"fitted/{attr}"] = getattr(estimator, attr)
    if hasattr(estimator, "n_components"):  # a TAOEmbedding: what its tree says about the embedding travels with it
        arrays.update({f"fitted/{a}": getattr(estimator, a) for a in EMBEDDING_ARRAYS if hasattr(estimator, a)})
    if hasattr(estimator, "classes_"):
        if estimator.classes_.dtype.kind in "iufb":
            arrays["fitted/classes_"] = estimator.classes_
        else:
            fitted["classes_"] = [str(c) for c in estimator.classes_]
    if hasattr(estimator, "feature_names_in_"):
        fitted["feature_names_in_"] = [str(c) for c in estimator.feature_names_in_]
    encoder = getattr(estimator, "encoder_", None)
    encoding = None
    if encoder is not None:
        encoding, encoder_arrays = encoder.to_state()
        arrays.update({f"encoder/{k}": v for k, v in encoder_arrays.items()})
    doc = {
        "format": "taodist",
        "format_version": FORMAT_VERSION,
        "taodist_version": __version__,
        "estimator": name,
        "params": _json_params(estimator),
        "fitted": fitted,
        "trees": tree_meta,
        "metadata": metadata or {},
    }
    if encoding is not None:  # only then: files of models fitted before encoders, or on Dask, stay as they were
        doc["encoder"] = encoding
    arrays["model.json"] = np.frombuffer(json.dumps(doc).encode("utf-8"), dtype=np.uint8)
    atomic_write(path, lambda fh: np.savez_compressed(fh, **arrays), check=check)


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if isinstance(v, np.generic) else v


_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a zip's first entry, or an empty zip


def _read_model_file(path, arrays=True):
    """``(doc, arrays)`` of a model file: its parsed header and (with ``arrays``) every array.

    Any failure -- missing, empty, truncated, damaged or foreign file, a
    header that is not JSON -- is a ValueError saying so; nothing else escapes.
    """
    where = os.fspath(path)
    not_ours = f"{where} is not a readable taodist model file"
    try:
        with open(where, "rb") as fh:
            head = fh.read(6)
    except OSError as exc:
        raise ValueError(f"{not_ours}: {exc.strerror or exc}.") from exc
    if not head:
        raise ValueError(f"{not_ours}: it is empty (0 bytes). Save the model again with taodist.save.")
    if head.startswith(b"\x93NUMPY"):
        raise ValueError(f"{not_ours}: it is a single .npy array; a model is the .npz written by taodist.save.")
    if not head.startswith(_ZIP_MAGIC):
        raise ValueError(f"{not_ours}: it is not an .npz (zip) archive; a model is the .npz written by taodist.save.")
    try:
        with zipfile.ZipFile(where) as z:
            names = z.namelist()
    except Exception as exc:  # noqa: BLE001 -- as below: zipfile raises many types for a damaged archive
        raise ValueError(f"{not_ours}: the archive is damaged or truncated ({one_line(exc, with_type=True)}).") from exc
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # np.load would silently read one of them
        raise ValueError(f"{where}: the archive holds {repeated[0]!r} more than once; a model file written by "
                         "taodist.save names every member once (the file was edited).")
    try:
        archive = np.load(where, allow_pickle=False)
    except Exception as exc:  # noqa: BLE001 -- zipfile/zlib/numpy raise many types for a damaged archive
        raise ValueError(f"{not_ours}: the archive is damaged or truncated ({one_line(exc, with_type=True)}).") from exc
    with archive:
        if "model.json" not in archive.files:
            raise ValueError(f"{where} is an .npz file but not a taodist model (no model.json entry).")
        out = {}
        for name in archive.files if arrays else ["model.json"]:
            try:
                out[name] = archive[name]
            except Exception as exc:  # noqa: BLE001 -- as above, for one member of the archive
                raise ValueError(f"{not_ours}: its array {name!r} cannot be read; the file is damaged or "
                                 f"truncated ({one_line(exc, with_type=True)}).") from exc
    header = out.pop("model.json")
    if header.dtype != np.uint8 or header.ndim != 1:
        raise ValueError(f"{where}: model.json is a {header.dtype} array of shape {header.shape}; expected the "
                         "UTF-8 bytes of a JSON document (uint8, 1-D).")
    try:
        doc = json.loads(header.tobytes().decode("utf-8"))
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are both ValueErrors
        raise ValueError(f"{where}: its model.json header is not valid UTF-8 JSON ({exc}).") from exc
    except RecursionError as exc:
        raise ValueError(f"{where}: its model.json header is nested too deeply to be a taodist model "
                         "(the file was edited).") from exc
    return doc, out


def load_metadata(path):
    """The metadata dict stored by :func:`save` (empty if none).

    Raises
    ------
    ValueError
        If ``path`` is not a readable taodist model file.
    """
    doc, _ = _read_model_file(path, arrays=False)
    meta = doc.get("metadata", {}) if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        raise ValueError(f"{os.fspath(path)}: its metadata is not a JSON object.")
    return meta


def load(path):
    """Read an estimator written by :func:`save`, checking everything in the file.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    estimator : TAOClassifier, TAORegressor, TAOForestClassifier, TAOForestRegressor, LapTAOClassifier, \
LapTAORegressor or TAOEmbedding
        The fitted estimator that was saved.

    Raises
    ------
    ValueError
        If the file is missing, empty, truncated, not a taodist model, or
        fails any check (:mod:`taodist.io.format`, :mod:`taodist.model.checks`): the
        message names the file and the problem. A file that loads is safe to
        predict with.
    """
    where = os.fspath(path)
    doc, data = _read_model_file(where)
    classes = model_classes()
    check_header(doc, where, classes)
    trees = [_read_tree(meta, data, f"{where}, tree {i}") for i, meta in enumerate(doc["trees"])]
    name = doc["estimator"]
    params = dict(doc["params"])
    if name == "TAOForestClassifier" and "voting" not in params:
        # written before the voting parameter: such forests voted when their leaves were constant
        params["voting"] = "hard" if params.get("leaf_type") == "constant" else "soft"
    try:
        est = classes[name](**params)
        est._validate_params()  # scikit-learn's parameter constraints; raises a ValueError subclass
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: its parameters are not valid for {name} ({one_line(exc, with_type=True)}).") from exc
    for k, v in doc["fitted"].items():
        setattr(est, k, np.asarray(v) if k in ("classes_", "feature_names_in_") else v)
    est.encoder_ = None
    if "encoder" in doc:
        est.encoder_ = TabularEncoder.from_state(
            doc["encoder"], {k[len("encoder/"):]: v for k, v in data.items() if k.startswith("encoder/")}, where)
    elif any(k.startswith("encoder/") for k in data):
        raise ValueError(f"{where}: holds encoder arrays but model.json has no encoder entry; the file was edited.")
    for key, v in data.items():
        if key.startswith("fitted/"):
            attr = key[len("fitted/"):]
            if attr not in FITTED_ARRAYS:
                raise ValueError(f"{where}: unknown fitted array {key!r}; known: "
                                 f"{sorted('fitted/' + a for a in FITTED_ARRAYS)}.")
            ndim = FITTED_NDIM.get(attr, 1)
            setattr(est, attr, checked_array(v, key, FITTED_ARRAYS[attr], where, ndim=ndim))
    check_estimator(est, trees, where)
    if hasattr(est, "n_estimators"):
        est.estimators_ = [_tree_estimator(est, tree) for tree in trees]
    else:
        est.tree_ = trees[0]
    return est


def _tree_estimator(forest, tree):
    """A forest member as the single-tree estimator the forest predicts with."""
    member = forest._tree_class()
    member.tree_ = tree
    member.n_features_in_ = tree.n_features  # the encoded features the trees were fitted on
    return member
