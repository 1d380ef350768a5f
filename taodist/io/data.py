"""Reading data files: the arrays X (and y) of .npz, .npy, CSV and Parquet files and of Zarr stores.

The one home of the readers behind the command line and the job service:

* :func:`read_features` -- the X to predict on (``taodist predict``,
  ``taodist inspect --data``): an .npz (X, X_test or X_train), an .npy, or
  a Zarr store, read lazily;
* :func:`read_table` -- X and y to convert to a Zarr store (``taodist
  convert``): .npz (also scipy.sparse's), .npy, CSV or Parquet;
* :func:`read_training_data` -- a job's ``(X, y)``: an .npz, a Zarr group
  with arrays X and y, or ``{X, y}`` locations (.npy files or Zarr arrays),
  each a local path or an fsspec URL.

A file that does not hold what is asked for (no array X, a CSV cell that is
not a number, ...) is a :class:`DataFileError` naming the file and what was
found. :func:`read_features` and :func:`read_table` also report a file they
cannot read at all that way ("Could not read ..."); :func:`read_training_data`
lets those errors (OSError, ValueError, KeyError) through, for the job
service to name the job's field and location.
"""

import csv
import os
import warnings
from pathlib import Path

import fsspec
import numpy as np
import scipy.sparse as sp
from fsspec.implementations.local import LocalFileSystem

from ..utils.messages import one_line
from .zarr_store import open_zarr

#: the arrays of scipy.sparse.save_npz's archives
_SPARSE_NPZ = {"data", "indices", "indptr", "format", "shape"}


class DataFileError(ValueError):
    """A data file that cannot be read, or does not hold what is asked for; the message names the file."""


def file_suffix(path):
    """``".npy"`` for ``out/P.NPY`` (lower case; a trailing slash ignored); "" without one."""
    return os.path.splitext(os.path.basename(os.fspath(path).rstrip("/\\")))[1].lower()


# ---------------------------------------------------------------- X to predict on
def read_features(path):
    """The X of a data file: an array from .npz/.npy (in memory), or a lazily read Zarr array.

    Parameters
    ----------
    path : str or path-like
        An .npz file holding ``X``, ``X_test`` or ``X_train`` (the first
        found), an .npy file, or a Zarr store: a group holding ``X``, or one
        array.

    Returns
    -------
    ndarray or dask.array.Array
        2-D, rows by features.

    Raises
    ------
    DataFileError
        If the file cannot be read, holds none of those arrays, or its X is
        not 2-D.
    """
    suffix = file_suffix(path)
    if suffix in (".npz", ".npy"):
        try:
            X = np.load(path, allow_pickle=False)
            if not isinstance(X, np.ndarray):  # an .npz archive
                with X as d:
                    key = next((k for k in ("X", "X_test", "X_train") if k in d.files), None)
                    if key is None:
                        raise DataFileError(f"{path} has no array X, X_test or X_train "
                                            f"(found: {', '.join(d.files) or 'none'}).")
                    X = d[key]
        except DataFileError:
            raise
        except Exception as exc:  # noqa: BLE001 -- numpy/zipfile raise many types for a damaged file
            raise DataFileError(f"Could not read {path} as {suffix}: {one_line(exc)}") from exc
    else:  # a Zarr array, or a group holding X: predicted lazily, chunk by chunk
        try:
            X = open_zarr(path, component="X")
        except Exception:  # noqa: BLE001 -- not a group with X: try the store as one array
            try:
                X = open_zarr(path)
            except Exception as exc:  # noqa: BLE001
                raise DataFileError(f"Could not read {path}: expected .npz, .npy or a Zarr store "
                                    f"({one_line(exc)}).") from exc
    if X.ndim != 2:
        raise DataFileError(f"{path} holds an array of shape {X.shape}; expected rows x features (2-D).")
    return X


# ---------------------------------------------------------------- tables to convert
def read_table(source, target="y", require_target=True):
    """``{"X": ..., "y": ...}`` of a data file, for writing to a Zarr store.

    Parameters
    ----------
    source : str or path-like
        An .npz file with ``X`` (and ``y``) or ``X_train`` (and
        ``y_train``), or written by ``scipy.sparse.save_npz`` (X stays
        sparse); an .npy file (X only); a numeric CSV file with a header
        row; a Parquet file (needs pandas and pyarrow).
    target : str, default="y"
        The CSV/Parquet column holding y; the other columns are X.
    require_target : bool, default=True
        False: a CSV/Parquet table without the ``target`` column is all X.

    Returns
    -------
    dict
        ``X`` (2-D) and, when the file has one, ``y``.

    Raises
    ------
    DataFileError
        Naming the file and the problem: an unsupported suffix, a damaged
        file, a missing array or column, a CSV line or cell at fault.
    """
    arrays = _read_table(source, target, require_target)
    if arrays["X"].ndim != 2:
        raise DataFileError(f"{source}: X has shape {arrays['X'].shape}; expected rows x features (2-D).")
    return arrays


def _read_table(source, target, require_target=True):
    suffix = file_suffix(source)
    if suffix in (".npz", ".npy"):
        try:
            loaded = np.load(source, allow_pickle=False)
            if not isinstance(loaded, np.ndarray):
                with loaded as d:
                    if _SPARSE_NPZ <= set(d.files):
                        return {"X": sp.load_npz(source)}  # scipy.sparse.save_npz: written as a sparse store
                    for xk, yk in (("X", "y"), ("X_train", "y_train")):
                        if xk in d.files:
                            return {"X": d[xk], **({"y": d[yk]} if yk in d.files else {})}
                    raise DataFileError(f"{source} has no array 'X' or 'X_train' "
                                        f"(found: {', '.join(d.files) or 'none'}).")
        except DataFileError:
            raise
        except Exception as exc:  # noqa: BLE001 -- numpy/zipfile raise many types for a damaged file
            raise DataFileError(f"Could not read {source} as {suffix}: {one_line(exc)}") from exc
        return {"X": loaded}
    if suffix == ".csv":
        return _read_csv(source, target, require_target)
    if suffix == ".parquet":
        return _read_parquet(source, target, require_target)
    raise DataFileError(f"Unsupported input {source}: expected .npz, .npy, .csv or .parquet.")


def _read_parquet(source, target, require_target=True):
    try:
        import pandas as pd  # optional: only Parquet input needs it
    except ImportError as exc:
        raise DataFileError(f"Reading Parquet needs pandas and pyarrow ({exc}); pip install pandas pyarrow.") from exc
    try:
        pdf = pd.read_parquet(source)
    except ImportError as exc:
        raise DataFileError(f"Reading Parquet needs pyarrow ({one_line(exc)}); pip install pyarrow.") from exc
    except Exception as exc:  # noqa: BLE001 -- pyarrow's errors for a damaged file have many types
        raise DataFileError(f"Could not read {source} as Parquet: {one_line(exc)}") from exc
    if target not in pdf.columns and not require_target:
        return {"X": pdf.to_numpy()}
    if target not in pdf.columns:
        raise DataFileError(f"{source} has no column {target!r}; columns: {', '.join(map(str, pdf.columns))}.")
    return {"X": pdf.drop(columns=[target]).to_numpy(), "y": pdf[target].to_numpy()}


def _read_csv(source, target, require_target=True):
    """A numeric CSV with a header row: ``y`` is column ``target``, ``X`` the others (NumPy only).

    NumPy's C parser reads the file; if it refuses, the file is scanned again
    with the csv module to name the line and column at fault (a text cell or
    a row with the wrong number of values) in the error.
    """
    try:
        with open(source, newline="", encoding="utf-8-sig") as fh:
            header = next(csv.reader(fh), None)
    except UnicodeDecodeError as exc:
        raise DataFileError(f"{source} is not UTF-8 text ({exc.reason} at byte {exc.start}); "
                            "save it as UTF-8 CSV.") from exc
    names = [h.strip() for h in header or []]
    if not any(names):
        raise DataFileError(f"{source} is empty; expected a header line of column names, then numeric rows.")
    if target not in names and require_target:
        raise DataFileError(f"{source} has no column {target!r}; columns: {', '.join(names)}.")
    try:
        with warnings.catch_warnings():  # "input contained no data": reported below as an error
            warnings.filterwarnings("ignore", message="loadtxt: input contained no data", category=UserWarning)
            table = np.loadtxt(source, delimiter=",", skiprows=1, dtype=np.float64, ndmin=2, comments=None,
                               quotechar='"', encoding="utf-8-sig")
    except ValueError as exc:
        raise DataFileError(_csv_problem(source, names)
                            or f"{source} is not a numeric CSV: {one_line(exc)}") from exc
    if table.shape[0] == 0:
        raise DataFileError(f"{source} has a header but no data rows.")
    if table.shape[1] != len(names):
        raise DataFileError(f"{source}: its rows have {table.shape[1]} values but the header names "
                            f"{len(names)} columns; every row needs one value per column.")
    if target not in names:
        return {"X": table}
    y_col = names.index(target)
    return {"X": np.delete(table, y_col, axis=1), "y": table[:, y_col]}


def _csv_problem(source, names):
    """The first ragged row or non-numeric cell of a CSV, described by line and column (None if none found)."""
    with open(source, newline="", encoding="utf-8-sig") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for row in reader:
            if not row:  # a blank line: skipped by the parser too
                continue
            line = reader.line_num
            if len(row) != len(names):
                return (f"{source} line {line} has {len(row)} values but the header names {len(names)} columns "
                        f"({', '.join(names)}); every row needs one value per column.")
            for name, cell in zip(names, row):
                try:
                    float(cell)
                except ValueError:
                    found = "is empty" if not cell.strip() else f"holds {cell.strip()!r}, which is not a number"
                    return (f"{source} line {line}, column {name!r} {found}; every cell must be a number "
                            "(encode text categories as numbers first).")
    return None


# ---------------------------------------------------------------- training data of a job
def local_path(location):
    """The local path of a location, or None for a remote URL (s3://, gs://, ...).

    Parameters
    ----------
    location : pathlib.Path or str
        A path, or a URL (``file://`` ones are local).

    Returns
    -------
    pathlib.Path or None
    """
    if isinstance(location, Path):
        return location
    if location.startswith("file://"):
        return Path(LocalFileSystem._strip_protocol(location))
    return None if "://" in location else Path(location)


def is_zarr(location):
    """Whether data given as one location names a Zarr group rather than an .npz file.

    Parameters
    ----------
    location : pathlib.Path or str
        A path or URL.

    Returns
    -------
    bool
        True for a name ending in .zarr or an existing local folder; False
        for .npz and .npy names.
    """
    text = str(location).rstrip("/")
    if text.endswith((".npz", ".npy")):
        return False
    local = local_path(location)
    return text.endswith(".zarr") or (local is not None and local.is_dir())


def _open(location):
    """A binary file object of a local path or an fsspec URL."""
    if not isinstance(location, (str, os.PathLike)):  # never open(True) / open(0): file descriptors
        raise TypeError(f"Expected a path or URL to read; got {location!r}.")
    return fsspec.open(str(location), "rb").open() if isinstance(location, str) else open(location, "rb")


def read_training_data(spec, lazy=False, target="y", require_y=True):
    """``(X, y)`` from an .npz file, a CSV or Parquet table, a Zarr group with arrays X and y, or ``{X, y}`` locations.

    Parameters
    ----------
    spec : pathlib.Path, str or dict
        A local path or fsspec URL of an .npz file (arrays ``X`` and ``y``,
        or ``X_train`` and ``y_train``) or of a Zarr group (arrays X and y,
        :func:`is_zarr`); or ``{"X": location, "y": location}`` of .npy
        files or Zarr arrays.
    lazy : bool, default=False
        Return a Zarr X as a lazy, row-chunked Dask array
        (:func:`taodist.io.open_zarr`); otherwise read it into memory. ``y``
        is always read (one value per row).
    target : str, default="y"
        A CSV or Parquet table's column holding y (the other columns are X).
    require_y : bool, default=True
        False: data without y is read too (``y`` is then None): an .npz
        with ``X`` (or ``X_train``) alone, a Zarr group without ``y``,
        ``{X: location}``, a table without the ``target`` column (all its
        columns are X). For a :class:`~taodist.TAOEmbedding`, whose labels
        are optional.

    Returns
    -------
    X, y

    Raises
    ------
    DataFileError
        If an .npz file holds neither pair of arrays (with ``require_y``
        False: no X).
    OSError, ValueError, KeyError
        When a file or store cannot be read (zarr raises KeyError or
        FileNotFoundError for missing arrays).
    """
    if isinstance(spec, dict):
        y = _read_array(spec["y"], False) if "y" in spec or require_y else None
        return _read_array(spec["X"], lazy), y
    if file_suffix(spec) in (".csv", ".parquet"):
        local = local_path(spec)
        if local is None:
            raise DataFileError(f"{spec}: CSV and Parquet tables are read from local paths; convert it to a Zarr "
                                "store (taodist convert) to read it from remote storage.")
        try:
            arrays = read_table(local, target, require_target=require_y)
        except DataFileError as exc:
            if f"no column {target!r}" in str(exc):
                raise DataFileError(f"{exc} Name the target column with the job's `target:` field.") from None
            raise
        if "y" not in arrays and not require_y:
            return arrays["X"], None
        if "y" not in arrays:
            raise DataFileError(f"{spec} has no column {target!r} to learn; name the target column with the job's "
                                "`target:` field.")
        return arrays["X"], arrays["y"]
    if is_zarr(spec):
        X = open_zarr(spec, component="X")
        X = X if lazy else X.compute()
        try:
            return X, open_zarr(spec, component="y").compute()
        except FileNotFoundError:  # zarr's "no array at path y" is one
            if require_y:
                raise
            return X, None
    with _open(spec) as f, np.load(f, allow_pickle=False) as d:
        for xk, yk in (("X", "y"), ("X_train", "y_train")):
            if xk in d and yk in d:
                return d[xk], d[yk]
        if not require_y:
            for xk in ("X", "X_train"):
                if xk in d:
                    return d[xk], None
            raise DataFileError(f"{spec} has no array X or X_train (found {', '.join(d.files)}).")
        raise DataFileError(f"{spec} has no arrays X and y (found {', '.join(d.files)}).")


def _read_array(location, lazy):
    """One array: an .npy file, read into memory, or a Zarr array (lazily if ``lazy``)."""
    if str(location).endswith(".npy"):
        with _open(location) as f:
            return np.load(f, allow_pickle=False)
    X = open_zarr(location)
    return X if lazy else X.compute()
