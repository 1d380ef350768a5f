"""Files of taodist: fitted models, data in Zarr stores, and safe writes.

* :mod:`~taodist.io.model_files` -- :func:`save`, :func:`load` and
  :func:`load_metadata` of fitted models (no pickle), in the file format of
  :mod:`~taodist.io.format` (``FORMAT_VERSION``, the checks of a file);
* :mod:`~taodist.io.zarr_store` -- :func:`to_zarr` and :func:`open_zarr`:
  data in row-chunked Zarr stores, sparse matrices as CSR groups
  (:mod:`~taodist.io.sparse_store`);
* :mod:`~taodist.io.data` -- the readers of data files (.npz, .npy, CSV,
  Parquet, Zarr) behind the command line and the job service;
* :mod:`~taodist.io.atomic` -- atomic writes, and never deleting what
  taodist did not write.
"""

from .format import FORMAT_VERSION
from .model_files import estimator_classes, load, load_metadata, save
from .zarr_store import open_zarr, to_zarr

__all__ = ["FORMAT_VERSION", "estimator_classes", "load", "load_metadata", "open_zarr", "save", "to_zarr"]
