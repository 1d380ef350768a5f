"""Training jobs described by a YAML file, validated up front.

A job file::

    estimator: TAOForestClassifier        # one of ESTIMATORS
    params: {n_estimators: 30, max_depth: 6}
    train: data/train.npz                 # .npz with X and y (or X_train, y_train)
    #  or: train: data/train.zarr         (a Zarr group with arrays X and y: `taodist convert`)
    #  or: train: {X: data/X.npy, y: data/y.npy}    (.npy files or Zarr arrays)
    #  paths are relative to the job file; fsspec URLs (s3://, gs://, file://) are read as given
    validation: 0.1                       # optional: a fraction of train, or data like train
    output: models/forest.npz
    overwrite: false                      # optional: true lets the model replace a file that is not one

A ``TAOEmbedding`` job learns a tree embedding of X: y is optional (an
.npz with X alone, ``{X: path}``, a table without the ``target`` column) and,
when given, only counts each leaf's classes; its validation rows are scored
by the trustworthiness of their embedding.

Only these keys are allowed, each with its type checked (a YAML ``true``
is not a path, a list is not an estimator name); the estimator must be one
of :data:`ESTIMATORS` and its parameters are checked by scikit-learn's
parameter validation before any data is read. A job may not write its
model over its own data (``output`` equal to, or inside, a ``train`` or
``validation`` file or Zarr store) nor onto an existing directory, and
writes only a new file or over a model file taodist wrote, never over any
other file unless the job says ``overwrite: true``, and never over a
device, FIFO or socket. YAML is
read with ``safe_load`` (no code), and models are written in taodist's
JSON + npz format (no pickle).

Zarr inputs stay on storage: with a Dask client they reach ``fit`` as
lazy, row-chunked Dask arrays (:func:`taodist.io.open_zarr`), so a job can
train on more data than one worker holds, and their fingerprint is taken
from the stores' metadata rather than by reading every byte.
"""

import dataclasses
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import fsspec
import numpy as np
import scipy.sparse as sp
import yaml
from sklearn.base import is_classifier
from sklearn.manifold import trustworthiness
from sklearn.metrics import accuracy_score, r2_score

from ..estimators.compile_ahead import compile_ahead
from ..estimators.tree import TAOClassifier, TAORegressor
from ..io import save
from ..io.data import DataFileError, is_zarr, local_path, read_training_data
from ..io.model_files import load_metadata, model_classes
from ..utils.progress import reporting
from ..utils.rows import has_sparse_chunks

#: what a job may fit: the estimators fitted to targets and the TAOEmbedding transformer
ESTIMATORS = model_classes()
#: estimators whose y is optional (class labels that only annotate the model): their data may be X alone
LABELS_OPTIONAL = {"TAOEmbedding"}
#: the most validation rows an embedding job scores: trustworthiness compares all pairs of them
_TRUSTWORTHINESS_ROWS = 2000
_KEYS = {"estimator", "params", "train", "validation", "output", "overwrite", "target"}
_REQUIRED = {"estimator", "train", "output"}
#: LapTAO builds its kNN graph over all rows in the fitting process: no out-of-core path to hand a lazy X to
_IN_MEMORY_ONLY = {"LapTAOClassifier", "LapTAORegressor", "TAOEmbedding"}
_DATA_EXPECTED = ("a path to an .npz file, a CSV or Parquet table, or a Zarr store (a string), or a mapping "
                  "{X: path, y: path} of .npy files or Zarr arrays")
_ZARR_METADATA = {"zarr.json", ".zarray", ".zgroup", ".zattrs", ".zmetadata"}


class JobError(ValueError):
    """A job file that cannot run; the message names the field and what is allowed."""


#: values (scalars, list items, mapping entries) a job file may stand for, aliases expanded
_MAX_VALUES = 100_000


def _expanded_size(value, _memo=None):
    """How many values ``value`` stands for, each alias counted in full, in time linear in the distinct objects.

    PyYAML shares one object among an anchor's aliases, so counting by object identity never expands them.
    """
    memo = {} if _memo is None else _memo
    key = id(value)
    if key in memo:
        return memo[key]
    memo[key] = 1  # a cycle (a recursive alias) counts once; its size is bounded by the limit anyway
    if isinstance(value, dict):
        size = 1 + sum(_expanded_size(k, memo) + _expanded_size(v, memo) for k, v in value.items())
    elif isinstance(value, (list, tuple)):
        size = 1 + sum(_expanded_size(v, memo) for v in value)
    else:
        size = 1
    memo[key] = size
    return size


class _JobLoader(yaml.SafeLoader):
    """``yaml.safe_load``'s loader, except that a key given twice in one mapping is an error (YAML says keys
    are unique; PyYAML keeps the last, so a second ``estimator:`` would silently switch the estimator)."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                repeated = key in seen
                seen.add(key)
            except TypeError:  # an unhashable key: construct_mapping below reports it
                continue
            if repeated:
                raise yaml.constructor.ConstructorError(
                    None, None, f"the key {key!r} is given twice (line {key_node.start_mark.line + 1}); "
                    "give each key once", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


@dataclass
class Job:
    """A validated training job (made by :func:`load_job`).

    Attributes
    ----------
    estimator : str
        A key of :data:`ESTIMATORS`.
    params : dict
        Its parameters.
    train : pathlib.Path, str or dict
        A local path, an fsspec URL, or ``{"X": ..., "y": ...}`` of those
        (``{"X": ...}`` alone for an estimator of :data:`LABELS_OPTIONAL`).
    validation : None, float or like ``train``
        A fraction in (0, 1) of ``train`` held out, or separate data.
    output : pathlib.Path
        Where the model is written.
    source : pathlib.Path
        The job file.
    overwrite : bool
        Whether the model may replace an existing file that is not a
        taodist model (a model file taodist wrote is always replaceable).
    target : str
        The column of a CSV or Parquet table that holds y (default ``"y"``).
    """

    estimator: str
    params: dict
    train: object
    validation: object
    output: Path
    source: Path
    overwrite: bool = False
    target: str = "y"

    def make_estimator(self):
        """A fresh, unfitted estimator with the job's parameters."""
        return ESTIMATORS[self.estimator](**self.params)


def _given(value):
    """How a YAML value reads in an error message: its YAML spelling and its kind."""
    kind = {bool: "a boolean", list: "a list", dict: "a mapping", type(None): "empty (null)",
            int: "a number", float: "a number", str: "a string"}.get(type(value), type(value).__name__)
    try:
        text = json.dumps(value, default=str)
    except (TypeError, ValueError):
        text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{text} ({kind})"


def load_job(path):
    """Read and validate a job file.

    Parameters
    ----------
    path : str or path-like
        The YAML job file; relative data and output paths are resolved
        against its folder.

    Returns
    -------
    Job

    Raises
    ------
    JobError
        On any problem, naming the field, what was given and what is
        expected. Nothing is read but the job file (and the metadata of the
        paths it names, to refuse an output that would overwrite its inputs).
    """
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise JobError(f"Cannot read job file {path}: {exc.strerror or exc}.") from exc
    except UnicodeDecodeError as exc:
        raise JobError(f"Job file {path} is not UTF-8 text (byte {exc.start} is {exc.object[exc.start:exc.start + 1]!r}); "
                       "a job file is a YAML text file.") from exc
    try:
        doc = yaml.load(text, Loader=_JobLoader)  # safe_load's loader, refusing repeated keys
    except yaml.YAMLError as exc:
        raise JobError(f"Job file {path} is not valid YAML: {' '.join(str(exc).split())}") from exc
    except RecursionError as exc:
        raise JobError(f"Job file {path} is nested too deeply to be a job file.") from exc
    if _expanded_size(doc) > _MAX_VALUES:  # YAML aliases can make a few lines stand for billions of values
        raise JobError(f"Job file {path} stands for more than {_MAX_VALUES:,} values once its YAML aliases are "
                       "expanded; a job file is a few keys and parameters.")
    return job_from_mapping(doc, path)


def job_from_mapping(doc, path, base=None):
    """The job a parsed job file's mapping ``doc`` describes, every field checked as :func:`load_job` does.

    ``path`` names the job in messages and is the job's source; relative
    paths resolve against ``base`` (default: ``path``'s folder). ``taodist fit
    DATA_FILE`` builds its job this way, from the command line.
    """
    path = Path(path)
    if not isinstance(doc, dict):
        raise JobError(f"Job file {path} must be a mapping with keys {sorted(_KEYS)}; got {_given(doc)}.")
    unknown = set(doc) - _KEYS
    if unknown:
        raise JobError(f"Unknown field(s) {sorted(map(str, unknown))} in {path}; allowed fields: {sorted(_KEYS)}.")
    missing = _REQUIRED - set(doc)
    if missing:
        raise JobError(f"Missing field(s) {sorted(missing)} in {path}.")
    name = doc["estimator"]
    if not isinstance(name, str):
        raise JobError(f"estimator: expected the name of an estimator (a string, one of {sorted(ESTIMATORS)}); "
                       f"got {_given(name)}.")
    if name not in ESTIMATORS:
        raise JobError(f"estimator: {name!r} is not known; allowed: {sorted(ESTIMATORS)}.")
    params = doc.get("params")
    if params is None:  # `params:` left empty
        params = {}
    if not isinstance(params, dict):
        raise JobError(f"params: expected a mapping of {name} parameters such as {{max_depth: 6}}; "
                       f"got {_given(params)}.")
    _check_params(name, params)
    output = doc["output"]
    if not isinstance(output, str) or not output.strip():
        raise JobError(f"output: expected the path of the model file to write (a non-empty string such as "
                       f"models/tree.npz); got {_given(output)}.")
    _no_nul(output, "output")
    if "://" in output:
        raise JobError(f"output: {output!r} is a URL; models are written to a path (on storage the workers "
                       "share when the job is submitted), e.g. /store/models/tree.npz.")
    overwrite = doc.get("overwrite", False)
    if not isinstance(overwrite, bool):
        raise JobError(f"overwrite: expected true or false; got {_given(overwrite)}.")
    target = doc.get("target", "y")
    if not isinstance(target, str) or not target:
        raise JobError(f"target: expected the name of a CSV or Parquet table's target column (a string); "
                       f"got {_given(target)}.")
    base = (path.parent if base is None else Path(base)).resolve()  # absolute: a worker finds the same files
    optional = name in LABELS_OPTIONAL
    job = Job(name, params, _resolve(doc["train"], base, "train", optional),
              _validation(doc.get("validation"), base, optional), base / output, path, overwrite, target)
    check_paths(job)
    return job


def _check_params(name, params):
    """Refuse parameters that ``name`` does not have, or values its constraints refuse (a JobError naming them)."""
    est = ESTIMATORS[name]()
    bad = [k for k in params if not isinstance(k, str) or k not in est.get_params()]
    if bad:
        raise JobError(f"params: {sorted(map(str, bad))} are not parameters of {name}; "
                       f"allowed: {sorted(est.get_params())}.")
    try:
        est.set_params(**params)._validate_params()
    except (ValueError, TypeError) as exc:
        raise JobError(f"params: {' '.join(str(exc).split())}") from exc


def with_params(job, overrides):
    """The job with parameters replaced by ``overrides``: ``["max_depth=6", "C=10", ...]``, each value read as
    YAML (``6`` a number, ``null`` None, ``auto`` a string), checked as a job file's are.

    Raises
    ------
    JobError
        For an override that is not ``key=value``, or a parameter or value the estimator refuses.
    """
    params = dict(job.params)
    for item in overrides:
        key, sep, text = item.partition("=")
        if not sep or not key.strip():
            raise JobError(f"--param {item!r}: expected KEY=VALUE, e.g. --param max_depth=6.")
        try:
            params[key.strip()] = yaml.safe_load(text) if text.strip() else None
        except yaml.YAMLError:
            raise JobError(f"--param {item!r}: the value {text!r} is not a YAML scalar such as 6, 0.5, true, "
                           "null or a word.") from None
    _check_params(job.estimator, params)
    return dataclasses.replace(job, params=params)


def _validation(spec, base, labels_optional=False):
    """``None``, a fraction in (0, 1) as a float, or data resolved like ``train``."""
    if spec is None:
        return None
    if isinstance(spec, bool):  # YAML `true`/`false`: a bool is an int, and open(True) would open fd 1
        raise JobError(f"validation: expected a fraction in (0, 1) of train, or {_DATA_EXPECTED}; "
                       f"got {_given(spec)}.")
    if isinstance(spec, (int, float)):
        if not 0 < spec < 1:
            raise JobError(f"validation: a fraction must be in (0, 1); got {spec}.")
        return float(spec)
    return _resolve(spec, base, "validation", labels_optional)


def _resolve(spec, base, field, labels_optional=False):
    if isinstance(spec, str) and spec.strip():
        return _location(_no_nul(spec, field), base, field)
    if (isinstance(spec, dict) and (set(spec) == {"X", "y"} or (labels_optional and set(spec) == {"X"}))
            and all(isinstance(v, str) and v.strip() for v in spec.values())):
        return {k: _location(_no_nul(v, f"{field}.{k}"), base, f"{field}.{k}") for k, v in spec.items()}
    expected = _DATA_EXPECTED + (" (or {X: path} alone: the labels are optional)" if labels_optional else "")
    raise JobError(f"{field}: expected {expected}; got {_given(spec)}.")


def _no_nul(path, field):
    """``path``, unless it holds a NUL character (no file system takes one; os calls raise a bare ValueError)."""
    if "\x00" in path:
        raise JobError(f"{field}: {path!r} holds a NUL character (\\x00), which no path can contain.")
    return path


def _location(spec, base, field):
    """An fsspec URL (``s3://...``, ``file://...``) as given; a path relative to the job file's folder.

    A URL whose protocol fsspec does not know, or whose file system needs packages that are not
    installed, is refused here, naming the field, rather than when the data is read.
    """
    if "://" not in spec:
        return base / spec
    protocol = spec.split("://", 1)[0]
    try:
        fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise JobError(f"{field}: {spec!r} cannot be read here: {' '.join(str(exc).split())} (protocol "
                       f"{protocol!r}); install what it names, or give a local path or another URL.") from exc
    return spec


def _locations(spec):
    """The locations a data spec names (none for a fraction or no validation)."""
    if isinstance(spec, dict):
        return list(spec.values())
    return [spec] if isinstance(spec, (str, Path)) else []


def _store_root(real):
    """The outermost Zarr store folder holding ``real`` (``real`` itself for a plain file)."""
    root = real
    for folder in Path(real).parents:
        if folder.name.endswith(".zarr") or any((folder / m).exists() for m in _ZARR_METADATA):
            root = str(folder)
        else:
            break
    return root


def check_paths(job):
    """Refuse a job whose model would overwrite its own data, an existing directory, or a file it may not replace.

    Compares resolved real paths (symbolic links followed), so ``output``
    cannot reach a ``train`` or ``validation`` file under another name, nor
    a Zarr store (or any file inside it) that an input is read from. Run by
    :func:`load_job` on the submitting machine and again by :func:`run_job`
    where the job runs, as paths may resolve differently there.

    Parameters
    ----------
    job : Job

    Raises
    ------
    JobError
    """
    out = os.path.realpath(job.output)
    for field, spec in (("train", job.train), ("validation", job.validation)):
        for location in _locations(spec):
            local = local_path(location)
            if local is None:
                continue
            real = os.path.realpath(local)
            store = _store_root(real)
            if out in (real, store) or out.startswith(store.rstrip(os.sep) + os.sep):
                raise JobError(f"output: {job.output} would overwrite the job's own {field} data ({location}); "
                               "choose another output path.")
    if os.path.isdir(out):
        raise JobError(f"output: {job.output} is an existing directory; give the path of a model file, "
                       f"e.g. {Path(job.output) / 'model.npz'}.")
    _check_output_writable(job, out)
    _check_output_replaceable(job, out)


def _check_output_writable(job, out):
    """Refuse, before any fit, an output name the file system refuses or a folder nobody may write in."""
    folder, name = os.path.split(out)
    existing = folder
    while not os.path.isdir(existing):  # the folders still to create are created where the nearest one is
        parent = os.path.dirname(existing)
        if parent == existing:
            break
        existing = parent
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    if len(os.fsencode(name)) > name_max:
        raise JobError(f"output: the file name {name[:40]!r}... is {len(os.fsencode(name))} bytes long; the file "
                       f"system of {existing} takes at most {name_max}. Choose a shorter name.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise JobError(f"output: cannot write in {existing} (no permission); choose an output path in a folder "
                       "this job may write to.")


def _check_output_replaceable(job, out):
    """Refuse an existing ``out`` that is not a regular file, or (without ``overwrite``) not a taodist model.

    The file type comes from ``stat`` first: opening a FIFO to read its header would block.
    """
    try:
        mode = os.stat(out).st_mode
    except FileNotFoundError:
        return
    except OSError as exc:
        raise JobError(f"output: {job.output} cannot be examined ({exc.strerror or exc}); choose another "
                       "output path.") from exc
    if not stat.S_ISREG(mode):
        kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "not a regular file")
        raise JobError(f"output: {job.output} exists and is {kind}; a job writes a model file, never over "
                       "anything else. Choose another output path.")
    if job.overwrite:
        return
    try:
        load_metadata(out)  # the header only: a model file taodist wrote may be replaced by a new model
    except ValueError as exc:
        raise JobError(f"output: {job.output} exists and is not a taodist model file; a job replaces only a "
                       "model taodist wrote. Choose another output path, or set `overwrite: true` in the job "
                       "file to replace it.") from exc


def _zarr_parts(spec):
    """``(location, is_zarr)`` for each location of a data spec; ``{X, y}`` parts are Zarr unless .npy."""
    if isinstance(spec, dict):
        return [(loc, not str(loc).endswith(".npy")) for loc in spec.values()]
    return [(loc, is_zarr(loc)) for loc in _locations(spec)]


def read_data(spec, field, lazy=False, target="y", require_y=True):
    """``(X, y)`` from an .npz path, a Zarr group with arrays X and y, or ``{X, y}`` paths (.npy or Zarr).

    Parameters
    ----------
    spec : path, URL or dict
        As in a job's ``train``/``validation`` (read by
        :func:`taodist.io.data.read_training_data`).
    field : str
        Named in error messages.
    lazy : bool, default=False
        Zarr arrays as lazy, row-chunked Dask arrays (:func:`taodist.io.open_zarr`);
        otherwise read into memory. ``y`` is always read (one value per row).
    target : str, default="y"
        A CSV or Parquet table's target column.
    require_y : bool, default=True
        False: data without y is read too, y then None (a TAOEmbedding's
        labels are optional).

    Raises
    ------
    JobError
        When the data cannot be read, naming the field and location.
    """
    keys = ({"X", "y"}, {"X"}) if not require_y else ({"X", "y"},)
    if not (isinstance(spec, (str, os.PathLike)) or (isinstance(spec, dict) and set(spec) in keys)):
        raise JobError(f"{field}: expected {_DATA_EXPECTED}; got {_given(spec)}.")  # e.g. a Job built by hand
    for location in _locations(spec):
        if not isinstance(location, (str, os.PathLike)):  # never open(True) / open(0): file descriptors
            raise JobError(f"Expected a path or URL to read; got {_given(location)}.")
    try:
        return read_training_data(spec, lazy, target, require_y)
    except DataFileError as exc:  # the file was read but lacks the arrays
        raise JobError(f"{field}: {exc}") from exc
    except (OSError, ValueError, KeyError) as exc:  # zarr raises KeyError/FileNotFoundError for missing arrays
        raise JobError(f"{field}: cannot read {spec}: {' '.join(str(exc).split())}") from exc


def fingerprint(X, y):
    """A short content hash of in-memory training data (for the model's metadata); ``y`` may be None."""
    h = hashlib.sha256()
    if sp.issparse(X):  # a sparse X (an embedding job's Zarr store read into memory): its CSR parts
        X = sp.csr_matrix(X)
        parts = [X.data, X.indices, X.indptr, np.asarray(X.shape)]
    else:
        parts = [X]
    for a in [np.ascontiguousarray(p) for p in parts] + ([] if y is None else [np.ascontiguousarray(y)]):
        h.update(str((a.shape, a.dtype)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def store_fingerprint(spec, split=None):
    """A short hash of data on storage, from metadata only when it is in Zarr.

    Zarr stores are described by their metadata documents (``zarr.json`` /
    ``.zarray`` / ``.zattrs``: shape, dtype, chunks, attributes) and by the
    name, size and modification time of every chunk file, listed but never
    read — so a store larger than any machine is fingerprinted in a listing.
    Rewriting a store (``taodist convert``) changes it; an in-place change
    that keeps sizes and modification times would not. Other files in the
    spec (``.npy``, ``.npz``) are hashed by content.

    Parameters
    ----------
    spec : path, URL or dict
        A job's ``train`` data.
    split : float, optional
        The validation fraction held out of it (part of what was trained on).

    Returns
    -------
    str
        16 hexadecimal digits.
    """
    h = hashlib.sha256(repr(split).encode())
    for location, is_zarr in _zarr_parts(spec):
        fs, root = fsspec.core.url_to_fs(str(location))
        if not is_zarr:
            with fs.open(root, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            continue
        entries = fs.find(root, detail=True)
        for name in sorted(entries):
            info, rel = entries[name], name[len(root):]
            h.update(rel.encode())
            if rel.rsplit("/", 1)[-1] in _ZARR_METADATA:
                h.update(fs.cat_file(name))
            else:
                stamp = next((info[k] for k in ("mtime", "LastModified", "last_modified", "updated", "ETag")
                              if k in info), None)
                h.update(f"{info.get('size')}:{stamp}".encode())
    return h.hexdigest()[:16]


def _embedding_metrics(est, X):
    """An embedding's validation metrics: the trustworthiness of the tree's map of (up to 2,000 of) the rows.

    scikit-learn's trustworthiness (1: every point's nearest neighbours in
    the embedding are near it in X too) compares all pairs of rows, so a large
    validation set is scored on a random subset of its rows.
    """
    n = X.shape[0]
    rows = np.arange(n)
    if n > _TRUSTWORTHINESS_ROWS:
        rows = np.sort(np.random.default_rng(0).choice(n, _TRUSTWORTHINESS_ROWS, replace=False))
    k = min(10, (len(rows) - 1) // 2)  # trustworthiness needs n_neighbors < n_samples / 2
    if k < 1:
        return {}
    Xs = X[rows]
    return {"validation_trustworthiness": float(trustworthiness(Xs, est.transform(Xs), n_neighbors=k)),
            "validation_rows_scored": int(len(rows)), "trustworthiness_n_neighbors": int(k)}


def _score(est, X, y):
    """``est.score`` computing a lazy prediction first (one value per row)."""
    pred = est.predict(X)
    pred = np.asarray(pred.compute() if hasattr(pred, "compute") else pred)
    return accuracy_score(y, pred) if is_classifier(est) else r2_score(y, pred)


def run_job(job, client=None, log=print, progress=None, return_metadata=False, job_id=None, checkpoint=None):
    """Fit the job's estimator and write the model with its metadata.

    Parameters
    ----------
    job : Job
    client : distributed.Client, optional
        Fit on this cluster. Zarr data then reaches ``fit`` as lazy Dask
        arrays (read where the fit's tasks run, out of core when large);
        without a client the fit runs in this process and Zarr data is read
        into memory, like .npz/.npy data.
    log : callable
        Receives human-readable lines.
    progress : callable, optional
        ``progress(event, info)`` receives the fit's progress events
        (:mod:`taodist.utils.progress`); raising from it stops the fit.
    return_metadata : bool, default=False
        Return ``(estimator, metadata)``.
    job_id : str, optional
        Recorded in the model's metadata (``job_id``), so ``taodist result``
        can check that the file at ``output`` is this job's model.
    checkpoint : callable, optional
        Called with no argument once the model file is complete, just
        before it replaces ``output``; raising from it stops the job with
        nothing written (the job service checks for a cancel there).

    Returns
    -------
    estimator, or (estimator, dict)

    Notes
    -----
    The model file is written only after a successful fit, atomically, so a
    failed or stopped job never replaces an existing model; a job whose
    output would overwrite its own data is refused before anything is read.
    """
    check_paths(job)  # again, where the job runs: its paths may resolve differently here than where it was loaded
    lazy = client is not None and job.estimator not in _IN_MEMORY_ONLY
    require_y = job.estimator not in LABELS_OPTIONAL
    X, y = read_data(job.train, "train", lazy=lazy, target=job.target, require_y=require_y)
    if y is not None and X.shape[0] != len(y):
        raise JobError(f"train: X has {X.shape[0]} rows but y has {len(y)}; they must match.")
    on_storage = any(is_zarr for _, is_zarr in _zarr_parts(job.train))
    split = job.validation if isinstance(job.validation, float) else None
    Xv = yv = None
    if split is not None:
        rng = np.random.default_rng(0)
        order = rng.permutation(X.shape[0])
        n_val = max(1, int(round(split * X.shape[0])))
        val, fit_rows = np.sort(order[:n_val]), np.sort(order[n_val:])
        X, Xv = X[fit_rows], X[val]  # on a Dask X: lazy row selections
        if y is not None:
            y, yv = y[fit_rows], y[val]
    elif job.validation is not None:
        Xv, yv = read_data(job.validation, "validation", lazy=lazy, target=job.target, require_y=require_y)
    # Zarr: from the stores' metadata, never every byte; in memory: the rows trained on, as before
    data_fingerprint = store_fingerprint(job.train, split) if on_storage else fingerprint(X, y)
    est = job.make_estimator()
    log(f"fitting {job.estimator} on {X.shape[0]} rows x {X.shape[1]} features"
        + (" (lazy Zarr chunks, read where the tasks run)" if lazy and on_storage else "")
        + (" (no labels: the leaves get no class counts)" if y is None else ""))
    if client is not None and isinstance(est, (TAOClassifier, TAORegressor)) and isinstance(
            getattr(X, "dtype", None), np.dtype) and np.issubdtype(X.dtype, np.floating):
        # workers whose numba cache lacks the fit's kernels compile them (in parallel, see compile_ahead)
        # while the rows are scattered and chunked, rather than one by one inside the first iteration
        compile_ahead(client, est, X.shape[1], sparse=sp.issparse(X) or has_sparse_chunks(X), dtype=X.dtype)
    start = time.perf_counter()
    kwargs = {"client": client} if client is not None else {}
    with reporting(progress):
        est.fit(X, y, **kwargs)
    seconds = time.perf_counter() - start
    metrics = {}
    if Xv is not None and not require_y:
        metrics = _embedding_metrics(est, Xv)
    elif Xv is not None:
        metrics["validation_score"] = float(_score(est, Xv, yv))
    metadata = {"estimator": job.estimator, "params": job.params, "data_fingerprint": data_fingerprint,
                "data_fingerprint_of": "zarr store metadata" if on_storage else "training rows",
                "n_train": int(X.shape[0]), "metrics": metrics, "fit_seconds": seconds}
    if job_id is not None:
        metadata["job_id"] = job_id
    job.output.parent.mkdir(parents=True, exist_ok=True)

    def last_checks(tmp):  # the model is written; it replaces the output only if nothing changed meanwhile
        check_paths(job)  # the fit took a while: the output may have become a file the job may not replace
        if checkpoint is not None:
            checkpoint()  # e.g. a cancel that came after the fit's last progress event

    save(est, job.output, metadata=metadata, check=last_checks)
    scored = ("" if not metrics else f", validation score {metrics['validation_score']:.4f}"
              if "validation_score" in metrics else
              f", validation trustworthiness {metrics['validation_trustworthiness']:.4f}")
    log(f"model written to {job.output} ({seconds:.1f}s{scored})")
    return (est, metadata) if return_metadata else est
