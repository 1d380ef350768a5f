"""Saving and loading fitted models without pickle.

File format (``format_version`` 1): one NumPy ``.npz`` archive (a zip file,
read with ``allow_pickle=False``) holding

* ``model.json`` -- a UTF-8 JSON document stored as a ``uint8`` array::

      {"format": "taodist", "format_version": 1, "taodist_version": "...",
       "estimator": "TAOClassifier", "params": {...}, "fitted": {...},
       "trees": [{"prefix": "tree0/", "task": ..., "leaf_type": ...,
                  "n_features": D, "n_outputs": K}, ...]}

* for every tree (one, or a forest's trees), arrays under its prefix: ``children_left``,
  ``children_right``, ``kind``, ``bias``, ``feature``, ``threshold``,
  ``value`` and the CSR parts ``weights_data|indices|indptr`` (and
  ``leaf_coef_*`` for linear leaves), as documented in :mod:`taodist._tree`;
* fitted arrays that are not JSON-friendly (numeric ``classes_``,
  ``history_``) under ``fitted/``.

Files are written to a temporary name in the target folder and renamed, so
a crash never leaves a half-written model behind (:mod:`taodist._files`).
"""

import json
import os

import numpy as np
import scipy.sparse as sp

from ._files import atomic_store, atomic_write

FORMAT_VERSION = 1
_TREE_ARRAYS = ("children_left", "children_right", "kind", "bias", "feature", "threshold", "value")
#: fitted attributes stored in JSON when present
_FITTED_SCALARS = ("n_features_in_", "n_outputs_", "n_classes_", "n_iter_", "_y_1d")


def _estimator_classes():
    from ._estimators import TAOClassifier, TAORegressor
    from ._forest import TAOForestClassifier, TAOForestRegressor
    from .laptao import LapTAOClassifier, LapTAORegressor

    return {cls.__name__: cls for cls in (TAOClassifier, TAORegressor, TAOForestClassifier, TAOForestRegressor,
                                          LapTAOClassifier, LapTAORegressor)}


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
    arrays = {prefix + name: getattr(tree, name) for name in _TREE_ARRAYS}
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
    return meta, arrays


def _read_tree(meta, data):
    from ._tree import Tree

    p = meta["prefix"]
    n_nodes = data[p + "children_left"].shape[0]

    def csr(name, n_rows):
        if p + name + "_data" not in data:
            return None
        return sp.csr_matrix(
            (data[p + name + "_data"], data[p + name + "_indices"], data[p + name + "_indptr"]),
            shape=(n_rows, meta["n_features"]),
        )

    return Tree(
        **{name: data[p + name] for name in _TREE_ARRAYS},
        weights=csr("weights", n_nodes),
        leaf_coef=csr("leaf_coef", n_nodes * meta["n_outputs"]),
        task=meta["task"],
        leaf_type=meta["leaf_type"],
    )


def save(estimator, path, metadata=None):
    """Write a fitted taodist estimator to ``path`` (format: see module docstring).

    Parameters
    ----------
    estimator : fitted taodist estimator (tree, forest or LapTAO)
    path : str or path-like
        Destination file; ``.npz`` is the conventional suffix.
    metadata : dict, optional
        JSON-serialisable facts stored with the model (the job service
        records data fingerprint, metrics and timings); read them back with
        :func:`load_metadata`.
    """
    from ._version import __version__

    name = type(estimator).__name__
    if name not in _estimator_classes():
        raise TypeError(f"save() handles {sorted(_estimator_classes())}; got {name}.")
    forest = hasattr(estimator, "n_estimators")
    if not hasattr(estimator, "estimators_" if forest else "tree_"):
        raise ValueError(f"This {name} is not fitted yet: call fit() before save().")
    trees = [e.tree_ for e in estimator.estimators_] if forest else [estimator.tree_]
    tree_meta, arrays = [], {}
    for i, tree in enumerate(trees):
        meta, arr = _tree_arrays(tree, f"tree{i}/")
        tree_meta.append(meta)
        arrays.update(arr)
    fitted = {k: _plain(getattr(estimator, k)) for k in _FITTED_SCALARS if hasattr(estimator, k)}
    if not forest and isinstance(getattr(estimator, "history_", None), np.ndarray):
        arrays["fitted/history_"] = estimator.history_
    if hasattr(estimator, "classes_"):
        if estimator.classes_.dtype.kind in "iufb":
            arrays["fitted/classes_"] = estimator.classes_
        else:
            fitted["classes_"] = [str(c) for c in estimator.classes_]
    if hasattr(estimator, "feature_names_in_"):
        fitted["feature_names_in_"] = [str(c) for c in estimator.feature_names_in_]
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
    arrays["model.json"] = np.frombuffer(json.dumps(doc).encode("utf-8"), dtype=np.uint8)
    atomic_write(path, lambda fh: np.savez_compressed(fh, **arrays))


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v.item() if isinstance(v, np.generic) else v


def load_metadata(path):
    """The metadata dict stored by :func:`save` (empty if none)."""
    with np.load(os.fspath(path), allow_pickle=False) as data:
        return json.loads(data["model.json"].tobytes().decode("utf-8")).get("metadata", {})


def load(path):
    """Read an estimator written by :func:`save`.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    estimator : TAOClassifier or TAORegressor, fitted.
    """
    try:
        data = dict(np.load(os.fspath(path), allow_pickle=False))
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path!s} is not a readable taodist model file: {exc}") from exc
    if "model.json" not in data:
        raise ValueError(f"{path!s} is an .npz file but not a taodist model (no model.json entry).")
    doc = json.loads(data["model.json"].tobytes().decode("utf-8"))
    if doc.get("format") != "taodist" or doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path!s} has format {doc.get('format')!r} version {doc.get('format_version')!r}; "
            f"this taodist reads format 'taodist' version {FORMAT_VERSION}."
        )
    classes = _estimator_classes()
    if doc["estimator"] not in classes:
        raise ValueError(f"Unknown estimator {doc['estimator']!r} in {path!s}; known: {sorted(classes)}.")
    est = classes[doc["estimator"]](**doc["params"])
    for k, v in doc["fitted"].items():
        setattr(est, k, np.asarray(v) if k in ("classes_", "feature_names_in_") else v)
    for key, v in data.items():
        if key.startswith("fitted/"):
            setattr(est, key[len("fitted/") :], v)
    trees = [_read_tree(meta, data) for meta in doc["trees"]]
    if hasattr(est, "n_estimators"):
        est.estimators_ = [_tree_estimator(est, tree) for tree in trees]
    else:
        est.tree_ = trees[0]
    return est


def _tree_estimator(forest, tree):
    """A forest member as the single-tree estimator the forest predicts with."""
    member = forest._tree_class()
    member.tree_ = tree
    member.n_features_in_ = forest.n_features_in_
    return member


# ---------------------------------------------------------------- Zarr data
def open_zarr(path, component=None):
    """Open a Zarr array (or an array inside a Zarr group) as a row-chunked Dask array.

    Parameters
    ----------
    path : str or path-like
        A Zarr store (folder) or fsspec URL.
    component : str, optional
        Array name inside a group (e.g. ``"X"``).

    Returns
    -------
    dask.array.Array
        Lazily read, one Dask chunk per row block of the store (columns
        merged), ready for ``fit(X, y)``.
    """
    import dask.array as da

    X = da.from_zarr(os.fspath(path), component=component)
    if X.ndim == 2 and len(X.chunks[1]) > 1:
        X = X.rechunk({1: X.shape[1]})
    return X


def to_zarr(data, path, *, rows_per_chunk=None, dtype=np.float32, overwrite=False):
    """Write arrays to a Zarr store in row chunks, atomically.

    The store is marked as written by taodist (a root attribute). An
    existing path is replaced only if it is such a store and ``overwrite``
    is true; any other existing file or folder is never deleted.

    Parameters
    ----------
    data : array-like, dask array, or dict of them
        One array (written as the store itself), or ``{"X": ..., "y": ...}``
        (written as arrays of a group, read back with
        ``open_zarr(path, component="X")``).
    path : str or path-like
    rows_per_chunk : int, optional
        Default: about 64 MiB of the widest array per chunk.
    dtype : numpy dtype, default=float32
        Floating arrays are cast to it; integer arrays (labels) keep theirs.
    overwrite : bool, default=False
        Replace an existing store that taodist wrote.

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    FileExistsError
        If something exists at ``path`` and it is not a store taodist wrote,
        or ``overwrite`` is false, or ``path`` holds the working directory.
    ValueError
        For non-numeric data or rows with NaN/infinity (their indices are
        given). Nothing is left at ``path`` then: the store is written under
        a temporary name and renamed at the end.
    """
    import dask.array as da

    from ._files import check_replaceable

    check_replaceable(path, overwrite)  # before reading any data: a refused write costs nothing

    arrays = data if isinstance(data, dict) else {None: data}
    arrays = {k: v if isinstance(v, da.Array) else da.asarray(np.asarray(v)) for k, v in arrays.items()}
    lengths = {v.shape[0] for v in arrays.values()}
    if len(lengths) != 1:
        raise ValueError(f"All arrays must have the same number of rows; got {sorted(lengths)}.")
    widest = max(int(np.prod(v.shape[1:])) for v in arrays.values())
    rows = rows_per_chunk or max(1, (64 << 20) // (widest * np.dtype(dtype).itemsize))
    prepared = {}
    for name, arr in arrays.items():
        if not np.issubdtype(arr.dtype, np.number):
            raise ValueError(f"Only numeric arrays can be written; {name or 'the array'} has dtype {arr.dtype}.")
        if np.issubdtype(arr.dtype, np.floating):
            arr = arr.astype(dtype)
            bad = np.flatnonzero((~da.isfinite(arr.reshape(arr.shape[0], -1))).any(axis=1).compute())[:5]
            if bad.size:
                raise ValueError(f"{name or 'The array'} has NaN or infinity in rows {bad.tolist()} (first few); "
                                 "clean or drop them before converting.")
        prepared[name] = arr.rechunk((rows,) + arr.shape[1:])

    def write(tmp):
        for name, arr in prepared.items():
            arr.to_zarr(tmp, component=name, overwrite=True)  # ``tmp`` is our own fresh folder

    return atomic_store(path, write, overwrite=overwrite)
