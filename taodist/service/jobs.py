"""Training jobs described by a YAML file, validated up front.

A job file::

    estimator: TAOForestClassifier        # one of ESTIMATORS
    params: {n_estimators: 30, max_depth: 6}
    train: data/train.npz                 # .npz with X and y (or X_train, y_train)
    #  or: train: {X: data/X.npy, y: data/y.npy}    (.npy files or Zarr stores)
    #  paths are relative to the job file; fsspec URLs (s3://, gs://, file://) are read as given
    validation: 0.1                       # optional: a fraction of train, or data like train
    output: models/forest.npz

Only these keys are allowed; the estimator must be one of :data:`ESTIMATORS`
and its parameters are checked by scikit-learn's parameter validation
before any data is read. YAML is read with ``safe_load`` (no code), and
models are written in taodist's JSON + npz format (no pickle).
"""

import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import LapTAOClassifier, LapTAORegressor, TAOClassifier, TAOForestClassifier, TAOForestRegressor, TAORegressor
from .._progress import reporting
from ..io import save

ESTIMATORS = {cls.__name__: cls for cls in (
    TAOClassifier, TAORegressor, TAOForestClassifier, TAOForestRegressor, LapTAOClassifier, LapTAORegressor)}
_KEYS = {"estimator", "params", "train", "validation", "output"}
_REQUIRED = {"estimator", "train", "output"}


class JobError(ValueError):
    """A job file that cannot run; the message names the field and what is allowed."""


@dataclass
class Job:
    estimator: str
    params: dict
    train: object
    validation: object
    output: Path
    source: Path

    def make_estimator(self):
        return ESTIMATORS[self.estimator](**self.params)


def load_job(path):
    """Read and validate a job file; raises :class:`JobError` on any problem."""
    import yaml

    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as exc:
        raise JobError(f"Cannot read job file {path}: {exc.strerror or exc}.") from exc
    except yaml.YAMLError as exc:
        raise JobError(f"Job file {path} is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise JobError(f"Job file {path} must be a mapping with keys {sorted(_KEYS)}; got {type(doc).__name__}.")
    unknown = set(doc) - _KEYS
    if unknown:
        raise JobError(f"Unknown field(s) {sorted(unknown)} in {path}; allowed fields: {sorted(_KEYS)}.")
    missing = _REQUIRED - set(doc)
    if missing:
        raise JobError(f"Missing field(s) {sorted(missing)} in {path}.")
    if doc["estimator"] not in ESTIMATORS:
        raise JobError(f"estimator: {doc['estimator']!r} is not known; allowed: {sorted(ESTIMATORS)}.")
    params = doc.get("params") or {}
    if not isinstance(params, dict):
        raise JobError("params: must be a mapping of estimator parameters.")
    est = ESTIMATORS[doc["estimator"]]()
    bad = set(params) - set(est.get_params())
    if bad:
        raise JobError(f"params: {sorted(bad)} are not parameters of {doc['estimator']}; "
                       f"allowed: {sorted(est.get_params())}.")
    try:
        est.set_params(**params)._validate_params()
    except (ValueError, TypeError) as exc:
        raise JobError(f"params: {exc}") from exc
    validation = doc.get("validation")
    if isinstance(validation, (int, float)) and not isinstance(validation, bool) and not 0 < validation < 1:
        raise JobError(f"validation: a fraction must be in (0, 1); got {validation}.")
    base = path.parent.resolve()  # absolute, so a worker opening the paths finds the same files
    return Job(doc["estimator"], params, _resolve(doc["train"], base, "train"),
               _resolve(validation, base, "validation") if not isinstance(validation, (int, float)) else validation,
               base / doc["output"], path)


def _resolve(spec, base, field):
    if spec is None:
        return None
    if isinstance(spec, str):
        return _location(spec, base)
    if isinstance(spec, dict) and set(spec) == {"X", "y"} and all(isinstance(v, str) for v in spec.values()):
        return {k: _location(v, base) for k, v in spec.items()}
    raise JobError(f"{field}: expected a path to an .npz file or a mapping {{X: path, y: path}}; got {spec!r}.")


def _location(spec, base):
    """An fsspec URL (``s3://...``, ``file://...``) as given; a path relative to the job file's folder."""
    return spec if "://" in spec else base / spec


def _open(location):
    import fsspec

    return fsspec.open(str(location), "rb").open() if isinstance(location, str) else open(location, "rb")


def read_data(spec, field):
    """``(X, y)`` from an .npz path or ``{X, y}`` paths (.npy or Zarr)."""
    try:
        if isinstance(spec, dict):
            return tuple(_read_array(spec[k]) for k in ("X", "y"))
        with _open(spec) as f, np.load(f, allow_pickle=False) as d:
            for xk, yk in (("X", "y"), ("X_train", "y_train")):
                if xk in d and yk in d:
                    return d[xk], d[yk]
            raise JobError(f"{field}: {spec} has no arrays X and y (found {', '.join(d.files)}).")
    except (OSError, ValueError) as exc:
        if isinstance(exc, JobError):
            raise
        raise JobError(f"{field}: cannot read {spec}: {exc}") from exc


def _read_array(location):
    if str(location).endswith(".npy"):
        with _open(location) as f:
            return np.load(f, allow_pickle=False)
    from ..io import open_zarr

    return open_zarr(location).compute()


def fingerprint(X, y):
    """A short content hash of the training data (for the model's metadata)."""
    h = hashlib.sha256()
    for a in (np.ascontiguousarray(X), np.ascontiguousarray(y)):
        h.update(str((a.shape, a.dtype)).encode())
        h.update(a.tobytes())
    return h.hexdigest()[:16]


def run_job(job, client=None, log=print, progress=None, return_metadata=False):
    """Fit the job's estimator and write the model with its metadata; returns the estimator.

    ``progress(event, info)`` receives the fit's progress events
    (:mod:`taodist._progress`); raising from it stops the fit. The model file
    is written only after a successful fit, atomically, so a failed or
    stopped job never replaces an existing model. With ``return_metadata``
    returns ``(estimator, metadata)``.
    """
    X, y = read_data(job.train, "train")
    if len(X) != len(y):
        raise JobError(f"train: X has {len(X)} rows but y has {len(y)}; they must match.")
    Xv = yv = None
    if isinstance(job.validation, float):
        rng = np.random.default_rng(0)
        order = rng.permutation(len(y))
        n_val = max(1, int(round(job.validation * len(y))))
        val, fit_rows = np.sort(order[:n_val]), np.sort(order[n_val:])
        X, Xv, y, yv = X[fit_rows], X[val], y[fit_rows], y[val]
    elif job.validation is not None:
        Xv, yv = read_data(job.validation, "validation")
    est = job.make_estimator()
    log(f"fitting {job.estimator} on {X.shape[0]} rows x {X.shape[1]} features")
    start = time.perf_counter()
    kwargs = {"client": client} if client is not None else {}
    with reporting(progress):
        est.fit(X, y, **kwargs)
    seconds = time.perf_counter() - start
    metrics = {}
    if Xv is not None:
        metrics["validation_score"] = float(est.score(Xv, yv))
    metadata = {"estimator": job.estimator, "params": job.params, "data_fingerprint": fingerprint(X, y),
                "n_train": int(X.shape[0]), "metrics": metrics, "fit_seconds": seconds}
    job.output.parent.mkdir(parents=True, exist_ok=True)
    save(est, job.output, metadata=metadata)
    log(f"model written to {job.output} ({seconds:.1f}s{', validation score %.4f' % metrics['validation_score'] if metrics else ''})")
    return (est, metadata) if return_metadata else est
