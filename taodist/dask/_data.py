"""Dask and Zarr inputs as row blocks for the chunked TAO engine."""

import functools
import uuid

import numpy as np

from ..utils.rows import has_sparse_chunks
from ..utils.validation import check_dask_X
from ._client import cluster_workers


def to_row_blocks(X, *columns):
    """Row blocks ``(X_block, col_block, ..., offset)`` as Dask delayed objects.

    ``columns`` (y, sample weights) are NumPy or Dask arrays with X's rows;
    they are cut to X's row chunks so block ``i`` of each lines up.
    """
    import dask.array as da

    check_dask_X(X)
    row_chunks = X.chunks[0]
    blocks = [X.to_delayed().ravel()]
    for col in columns:
        col = da.asarray(col)
        if col.shape[0] != X.shape[0]:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: [{X.shape[0]}, {col.shape[0]}].")
        col = col.rechunk((row_chunks,) + col.shape[1:])
        blocks.append(col.to_delayed().ravel())
    offsets = np.r_[0, np.cumsum(row_chunks)[:-1]]
    return [(*parts, int(off)) for *parts, off in zip(*blocks, offsets)]


def scatter_rows(client, X, n_blocks, workers=None):
    """A NumPy array (or CSR matrix) as a row-chunked Dask array whose blocks are already on the workers.

    Scattering the blocks first keeps the data out of the task graph (which
    ``da.from_array`` would embed and ship with every graph). ``workers``
    (one address per block) places each block; by default Dask spreads them.
    """
    import dask.array as da
    from dask.highlevelgraph import HighLevelGraph

    bounds = np.linspace(0, X.shape[0], max(1, min(n_blocks, X.shape[0])) + 1).astype(int)
    parts = [X[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    # hash=False: keys of their own. Scattering equal rows again (a second fit of the same data)
    # would otherwise get the keys of the first fit's blocks, which the scheduler may then free
    # as that fit's futures are released: the second fit failed with "lost dependencies".
    if workers is None:
        futures = client.scatter(parts, hash=False)
    else:
        futures = [client.scatter(p, workers=[w], hash=False) for p, w in zip(parts, workers)]
    # One graph layer whose blocks are the futures, under a name of this call's own. (Blocks joined
    # by da.concatenate were aliases that the feature scaling's optimised graph and the row
    # blocks' graph defined differently: Dask's "Detected different run_spec".)
    name = f"taodist-rows-{uuid.uuid4().hex[:8]}"
    graph = HighLevelGraph.from_collections(name, {(name, i, 0): f for i, f in enumerate(futures)}, dependencies=())
    return da.Array(graph, name, chunks=(tuple(p.shape[0] for p in parts), (X.shape[1],)), meta=parts[0][:0])


def block_per_thread(client):
    """One worker address per worker thread, each worker's addresses together (sorted by address).

    Rows scattered one block per thread keep every thread busy in every pass
    with one task per thread, not two: on a TAO level a worker runs its
    chunks' tasks of a step one after another, and every step waits on the
    scheduler, so fewer tasks a step means fewer waits.
    """
    workers = cluster_workers(client)
    return [w for w in sorted(workers) for _ in range(max(1, int(workers[w].get("nthreads") or 1)))]


class BlockReader:
    """Reads one block of a Dask array when called, inside the task that calls it.

    Wrapping the block's ``Delayed`` in a plain object keeps ``client.submit``
    from treating it as a dependency to compute and hold in memory: the
    block is read (e.g. from Zarr) each time a streamed chunk is used.
    """

    def __init__(self, block):
        self.block = block

    def __call__(self):
        return self.block.compute(scheduler="sync")


def worker_memory_limits(client):
    """Each worker's memory limit in bytes (0 where unlimited)."""
    return [w.get("memory_limit") or 0 for w in cluster_workers(client).values()]


def entries_per_row(X):
    """Mean stored entries per row: the columns for dense X; counted for scipy.sparse chunks.

    Counting reads every block once (a task per block returns its number of
    stored entries).
    """
    n, d = X.shape
    if not has_sparse_chunks(X):
        return float(d)
    nnz = int(X.map_blocks(_stored_entries, chunks=((1,) * X.numblocks[0], (1,)), dtype=np.int64,
                           meta=np.empty((0, 0), np.int64)).sum().compute())
    return nnz / max(n, 1)


def row_bytes(X, per_row):
    """Bytes a resident row takes: float64 entries plus the solvers' float32 copy.

    Dense: 12 bytes per entry. Sparse: 12 bytes per stored entry plus two
    int32 index arrays (8 more per entry, 16 per row).
    """
    return per_row * 20 + 16 if has_sparse_chunks(X) else per_row * 12


def care_point_bytes(X, per_row):
    """Bytes one care point takes in a node solver's sample: a float32 row (CSR for sparse X) plus its labels."""
    return per_row * 8 + 32 if has_sparse_chunks(X) else per_row * 4 + 32


def resident_bytes(X):
    """Bytes the resident chunks of X take (:func:`row_bytes` per row)."""
    return X.shape[0] * row_bytes(X, entries_per_row(X))


def _stored_entries(block):
    return np.array([[block.nnz]], dtype=np.int64)


def plan_out_of_core(client, X, per_row=None):
    """Whether to stream X's rows from storage instead of holding them, and the care-point cap then.

    The Dask config key ``taodist.out-of-core`` is ``"auto"`` (default),
    True or False. Auto streams when the resident chunks (float64 rows plus
    a float32 copy for the solver) would exceed half of the workers' total
    memory limit (:func:`resident_bytes`). A streamed fit caps the care points a node's solver
    gathers so that one sample uses at most 1/16 of the smallest worker's
    memory (docs/guide/dask.md, "Out-of-core fits"). Sparse rows are counted by their
    stored entries, not their width: ``per_row()`` (default: a new
    :func:`entries_per_row` count, a pass over sparse X), so that two plans
    can share one count.
    """
    import dask

    per_row = per_row or functools.cache(lambda: entries_per_row(X))
    setting = dask.config.get("taodist.out-of-core", "auto")
    limits = worker_memory_limits(client)
    n = X.shape[0]
    smallest = min((m for m in limits if m > 0), default=0)
    if setting == "auto":
        if not (limits and min(limits) > 0):
            return False, None  # unlimited workers: nothing to plan (and no pass over sparse data to count)
        stream = n * row_bytes(X, per_row()) > 0.5 * sum(limits)
    else:
        stream = bool(setting)
    if not stream:
        return False, None
    return True, (max(1000, int(smallest / 16 / care_point_bytes(X, per_row()))) if smallest else 10**6)


def plan_row_copies(client, X, per_row=None):
    """Whether a fit of resident X keeps a copy of all its solver rows on every worker.

    The copies spare every TAO level the care points a node group would
    otherwise receive from the other workers' chunks (see
    :class:`~taodist.dask._executor.DaskExecutor`). The Dask config key
    ``taodist.copy-rows`` is ``"auto"`` (default), True or False. Auto copies
    when there are at least two workers, each with a memory limit, and one
    copy takes at most a quarter of the smallest worker's limit, counted as
    float64 rows (solvers that take float32 rows need half of that; sparse
    rows by their stored entries, with their column indices; ``per_row`` as
    in :func:`plan_out_of_core`).
    """
    import dask

    setting = dask.config.get("taodist.copy-rows", "auto")
    if setting != "auto":
        return bool(setting)
    limits = worker_memory_limits(client)
    if len(limits) < 2 or min(limits) <= 0:
        return False
    entries = per_row() if per_row else entries_per_row(X)
    copy_bytes = X.shape[0] * (entries * 12 + 8 if has_sparse_chunks(X) else entries * 8)
    return copy_bytes <= 0.25 * min(limits)
