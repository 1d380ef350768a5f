"""Dask execution for taodist: TAO on row chunks that live on Dask workers.

The core optimiser (:mod:`taodist.tao.optimizer`) talks to an *executor*; this
package provides two that run chunk functions and node fits on a
``distributed`` cluster -- :class:`ActorExecutor` (each worker's chunks in
one actor that the driver calls directly; resident rows) and
:class:`DaskExecutor` (every step a task; out-of-core rows) -- and the
helpers that turn Dask/Zarr arrays into row blocks and resolve which client
to use, and LapTAO's distributed CG (Laplacian row blocks in actors on the
workers). Nothing here is needed for in-memory NumPy fits.
"""

from ._actor_executor import ActorExecutor
from ._cg import DistributedLaplacianCG
from ._client import resolve_client
from ._data import is_dask_collection, to_row_blocks
from ._executor import DaskExecutor

__all__ = ["ActorExecutor", "DaskExecutor", "DistributedLaplacianCG", "is_dask_collection", "resolve_client", "to_row_blocks"]
