"""Dask execution for taodist: TAO on row chunks that live on Dask workers.

The core optimiser (:mod:`taodist._tao`) talks to an *executor*; this
package provides the one that runs chunk functions and node fits as tasks on
a ``distributed`` cluster, and the helpers that turn Dask/Zarr arrays into
row blocks and resolve which client to use, and LapTAO's distributed CG
(Laplacian row blocks in actors on the workers). Nothing here is needed for
in-memory NumPy fits.
"""

from ._actors import ActorExecutor
from ._cg import DistributedLaplacianCG
from ._client import resolve_client
from ._data import is_dask_collection, to_row_blocks
from ._executor import DaskExecutor

__all__ = ["ActorExecutor", "DaskExecutor", "DistributedLaplacianCG", "is_dask_collection", "resolve_client", "to_row_blocks"]
