"""Benchmark data sets from the project's shared folder.

The ``.npz`` files (``X_train``, ``y_train``, ``X_test``, ``y_test``) live in
``../shared/data`` beside the repository; they are never copied into it.
Set ``TAODIST_DATA`` to point elsewhere.
"""

import os
import zipfile
from pathlib import Path

import numpy as np

#: data sets whose pixels are scaled to [0, 1] on load
_PIXEL_SETS = {"mnist", "fashion_mnist"}


def data_dir():
    """The folder holding the benchmark ``.npz`` files, or None if absent."""
    candidates = [os.environ.get("TAODIST_DATA"), Path.cwd() / ".." / "shared" / "data",
                  Path(__file__).resolve().parents[2] / "shared" / "data"]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c).resolve()
    return None


def load_dataset(name):
    """``(X_train, y_train, X_test, y_test)`` as float32 (pixels in [0, 1]).

    Raises
    ------
    FileNotFoundError
        If the data folder or the file is missing (the message says where it looked).
    """
    folder = data_dir()
    if folder is None or not (folder / f"{name}.npz").is_file():
        raise FileNotFoundError(
            f"Data set {name!r} not found: looked for {name}.npz in $TAODIST_DATA and ../shared/data."
        )
    d = np.load(folder / f"{name}.npz", allow_pickle=False)
    Xtr, Xte = d["X_train"].astype(np.float32), d["X_test"].astype(np.float32)
    if name in _PIXEL_SETS:
        Xtr /= 255.0
        Xte /= 255.0
    return Xtr, d["y_train"], Xte, d["y_test"]


def dataset_width(name):
    """Columns of the data set ``name`` (read from its file's header, no rows loaded), or None if it is absent
    or unreadable."""
    folder = data_dir()
    path = None if folder is None else folder / f"{name}.npz"
    if path is None or not path.is_file():
        return None
    try:
        with zipfile.ZipFile(path) as archive, archive.open("X_train.npy") as member:
            major, _ = np.lib.format.read_magic(member)
            read_header = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
            shape, _, _ = read_header(member)
    except (OSError, KeyError, ValueError, zipfile.BadZipFile):
        return None
    return int(shape[1]) if len(shape) == 2 else None
