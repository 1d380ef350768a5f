"""The Dask branches of :mod:`taodist.estimators.execution`: fits whose rows live on a cluster."""

import contextlib
import functools
import logging

from ..tao.executor import Execution
from ..utils.validation import is_dask_collection
from ._actor_executor import ActorExecutor
from ._client import computing_on, quiet_if_interrupted, resolve_client
from ._data import block_per_thread, entries_per_row, plan_out_of_core, plan_row_copies, scatter_rows, to_row_blocks
from ._executor import DaskExecutor
from ._forest import fit_trees_from_chunks, fit_trees_on_workers

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def cluster_execution(X, y, sample_weight, *, client, streamable, max_care_points):
    """Row blocks of Dask ``X`` and their executor (see :func:`plan_executor`), with Dask computations on that cluster."""
    with resolve_client(client) as c, computing_on(c):
        per_row = functools.cache(lambda: entries_per_row(X))  # both plans share one count (a pass over sparse X)
        stream, cap = plan_out_of_core(c, X, per_row) if streamable else (False, None)
        if stream:
            cap = max_care_points if max_care_points is not None else cap
            logger.info("Out-of-core fit: X (%s) is read from storage in every pass; care points "
                        "per node solve capped at %d", X.shape, cap)
        else:
            cap = max_care_points
        copy_rows = not stream and plan_row_copies(c, X, per_row)
        if plan_executor(stream) == "actors":
            executor = ActorExecutor(c, copy_rows=copy_rows)
        else:
            executor = DaskExecutor(c, stream=stream, copy_rows=copy_rows)
        try:
            yield Execution(to_row_blocks(X, y, sample_weight), executor, cap)
        except KeyboardInterrupt:
            quiet_if_interrupted(c)
            raise
        finally:
            executor.close()  # the actors and their chunks go now, not when the executor is collected


def plan_executor(stream):
    """``"actors"`` or ``"tasks"``: which executor a cluster fit of one tree runs on.

    The Dask config key ``taodist.executor`` is ``"auto"`` (default),
    ``"actors"`` or ``"tasks"``. Auto runs resident rows on
    :class:`ActorExecutor` (one actor per worker holds its chunks; the driver
    calls them directly, without a scheduler round trip per step) and
    out-of-core fits, whose chunks re-read their rows from storage in every
    task, on :class:`DaskExecutor`.
    """
    import dask

    setting = dask.config.get("taodist.executor", "auto")
    if setting not in ("auto", "actors", "tasks"):
        raise ValueError(f"Dask config taodist.executor must be 'auto', 'actors' or 'tasks', got {setting!r}.")
    if stream and setting == "actors":
        raise ValueError("taodist.executor='actors' holds the rows in memory; an out-of-core fit (rows read from "
                         "storage) runs on 'tasks' (set taodist.executor to 'auto' or 'tasks').")
    if setting == "auto":
        return "tasks" if stream else "actors"
    return setting


def scatter_to_workers(X, client):
    """NumPy rows as a Dask array of one block per worker thread, each block already on its worker."""
    homes = block_per_thread(client)
    return scatter_rows(client, X, len(homes), workers=homes)


def cluster_blocks_and_executor(X, y, sample_weight, client, stream=False):
    """TAO row blocks of a Dask ``X`` with targets ``y`` and its executor on ``client``.

    ``stream``: X's blocks are read from storage in every task (:class:`DaskExecutor`), not held.
    """
    if plan_executor(stream) == "actors":
        executor = ActorExecutor(client)
    else:
        executor = DaskExecutor(client, stream=stream)
    return to_row_blocks(X, y, sample_weight), executor


def plan_rows_in_place(X, client, max_care_points):
    """Whether TAO fits on the chunks of Dask ``X`` (left where they are) stream them, and their care-point cap.

    The plan of a single-tree fit of a Zarr-backed X (:func:`plan_out_of_core`):
    resident chunks when they fit in half the workers' memory, else rows
    re-read from storage in every task with a care-point cap (``max_care_points``
    when given).
    """
    stream, cap = plan_out_of_core(client, X)
    if stream:
        cap = max_care_points if max_care_points is not None else cap
        logger.info("Out-of-core tree steps: X (%s) is read from storage in every pass; care points "
                    "per node solve capped at %d", X.shape, cap)
        return True, cap
    return False, max_care_points


def fit_trees_on_cluster(make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap, fit_kwargs, *, client):
    """Forest trees on a cluster: from the chunks of Dask ``X``, or NumPy data scattered once."""
    if is_dask_collection(X):
        with resolve_client(client) as c:
            return fit_trees_from_chunks(c, make_tree, X, y, sample_weight, seeds, n_samples_tree, bootstrap,
                                         fit_kwargs)
    return fit_trees_on_workers(client, make_tree, (X, y, sample_weight), seeds, n_samples_tree, bootstrap,
                                fit_kwargs)
