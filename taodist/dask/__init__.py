"""Dask execution for taodist: TAO on row chunks that live on Dask workers.

The core optimiser (:mod:`taodist.tao.optimizer`) talks to an *executor*; this
package provides two that run chunk functions and node fits on a
``distributed`` cluster -- :class:`ActorExecutor` (each worker's chunks in
one actor that the driver calls directly; resident rows) and
:class:`DaskExecutor` (every step a task; out-of-core rows) -- and the
helpers that turn Dask/Zarr arrays into row blocks and resolve which client
to use, and LapTAO's distributed CG (Laplacian row blocks in actors on the
workers). Nothing here is needed for in-memory NumPy fits.

Note for developers: this layer sits between the optimiser (:mod:`taodist.tao`,
which it imports) and the estimators (which import it, inside functions, only
when a fit needs a cluster: it imports ``distributed``). It never imports an
estimator. The modules:

``_execution``       a fit's row blocks and executor on a cluster (what :mod:`taodist.estimators.execution` calls)
``_actor_executor``  :class:`ActorExecutor`, the driver's side of the actor hosts
``_actor_host``      the actor on each worker that holds its chunks and runs the ops
``_messages``        what the driver and the hosts send each other, pickled once
``_tree_patch``      a tree snapshot sent as the rows changed since one a host holds
``_executor``        :class:`DaskExecutor`: every step a task (out-of-core rows)
``_data``            Dask/Zarr arrays as row blocks; memory plans
``_forest``          forest trees as cluster tasks
``_cg``              LapTAO's label-step CG over Laplacian row blocks on the workers
``_client``          which client a fit uses; starting an embedded cluster, connecting to a scheduler
"""

from ..utils.validation import is_dask_collection
from ._actor_executor import ActorExecutor
from ._cg import DistributedLaplacianCG, call_block
from ._client import SchedulerLostError, resolve_client
from ._data import to_row_blocks
from ._executor import DaskExecutor

__all__ = ["ActorExecutor", "DaskExecutor", "DistributedLaplacianCG", "SchedulerLostError", "call_block",
           "is_dask_collection", "resolve_client", "to_row_blocks"]
