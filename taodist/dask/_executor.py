"""The executor that runs TAO's chunk functions and node fits on Dask workers.

Row chunks are futures on the workers and stay there: every chunk gets a
*home* worker when it is made (where its block already is, unless that
worker already holds its share of the rows) and every task on that chunk is
submitted to its home, so the scheduler never moves a chunk to balance
load. Only small results come back to the driver (losses, node statistics,
candidate losses). A node's fit runs in a group task that receives only its
group's care points, pulled from the chunks' part futures.

Care points are most of what a level ships between workers (a node group's
care points lie on every worker). When the rows fit, the executor keeps a
copy of every chunk's solver rows on each worker (``copy_rows``, decided by
:func:`~taodist.dask._data.plan_row_copies`): the parts then name their rows
(:class:`~taodist.tao.part_rows.SolverRows`, a few integers a row) and a group
task takes them from its worker's copy, so after the copies are made once a
level moves only indices, labels and weights.

What a TAO level costs here beyond its computation is round trips (each
wait for results blocks the driver and idles the workers) and the bytes
sent with tasks. So: the tree snapshot (:class:`~taodist.tao.routing.Routing`)
is sent once per worker per tree state, as a future every task on that
worker takes, rather than inside every task; deferred calls
(``gather=False``) let the driver chain a level's steps on the workers and
wait once; chunk updates happen in place (see the executor contract in
:mod:`taodist.tao.executor`). ``stats`` counts tasks and round trips.
"""

import logging
import uuid

import numpy as np

from ..tao.chunks import make_chunk, streamed_chunk
from ..tao.executor import merge_groups, pack_keys, run_group
from ..tao.part_rows import ChunkRows
from ..tao.routing import Routing
from ..tao.row_buffers import release_row_buffers
from ._client import cluster_workers
from ._data import BlockReader

logger = logging.getLogger(__name__)


async def _release_row_buffers():
    """:func:`~taodist.tao.row_buffers.release_row_buffers` on a worker (a coroutine: ``Client.run`` need not wait)."""
    return release_row_buffers()


def _summary(parts, summary):
    return summary(parts) if summary else None


def _identity(x):
    return x


def _n_rows(X):
    return int(X.shape[0])


def _solver_block(chunk):
    return chunk.offset, chunk.X_solve


class SolverRowCopy:
    """Every chunk's solver rows on one worker, looked up by global row index.

    Built from ``(offset, X_solve)`` of every chunk: blocks already on the
    worker are the chunks' own arrays (no copy), the others are fetched once.
    """

    def __init__(self, *blocks):
        blocks = sorted(blocks, key=lambda b: b[0])
        self.offsets = np.array([b[0] for b in blocks], dtype=np.int64)
        # blocks received from other workers can sit at any byte of a message, and NumPy gathers
        # rows of an unaligned array by first copying all of it (for every node that takes rows
        # from it): aligned once here
        self.blocks = [np.require(b[1], requirements=["C", "A"]) if isinstance(b[1], np.ndarray) else b[1]
                       for b in blocks]

    def take(self, rows):
        """Rows ``rows`` (global indices, ascending) of the solver rows, as the chunks would have cut them.

        A :class:`~taodist.tao.part_rows.ChunkRows`: copied where a node's rows are stacked, once.
        """
        first, last = np.searchsorted(self.offsets, rows[[0, -1]], side="right") - 1  # rows ascend: the ends
        if first == last:  # a part's rows come from one chunk
            return ChunkRows(self.blocks[first], rows - self.offsets[first])
        raise ValueError("SolverRows of one part span several chunks; a part is cut from one chunk.")


def assign_homes(holders, sizes, workers):
    """A home worker per block: one holding it while that worker has less than its share of the rows.

    ``holders[i]`` are the workers holding block ``i`` and ``sizes[i]`` its
    rows. A block whose holders already have their share goes to the least
    loaded worker (its first task moves it there once).
    """
    share = sum(sizes) / max(1, len(workers))
    load = dict.fromkeys(workers, 0)
    homes = []
    for held, size in zip(holders, sizes):
        here = [w for w in workers if w in held]
        home = min(here, key=load.get) if here else None
        if home is None or load[home] >= share:
            home = min(workers, key=load.get)
        load[home] += size
        homes.append(home)
    return homes


class DaskExecutor:
    """Executor over a ``distributed.Client``.

    Parameters
    ----------
    client : distributed.Client
    stream : bool, default=False
        Keep the rows in storage: chunks hold labels and weights and re-read
        their X block in every task (out-of-core fits).
    copy_rows : bool, default=False
        Keep a copy of every chunk's solver rows on each worker, so node
        groups read their care points there instead of receiving them with
        every level (resident rows and more than one worker only).

    Attributes
    ----------
    stats : dict
        Counters since construction: ``"tasks"`` submitted and
        ``"round_trips"``, the calls that wait for results on the cluster
        (what a TAO level's latency is made of; the tests bound them).
    """

    def __init__(self, client, stream=False, copy_rows=False):
        self.client = client
        self.stream = stream
        self.copy_rows = copy_rows and not stream
        self._row_copies = {}  # worker -> future of its SolverRowCopy
        self.run_id = uuid.uuid4().hex[:8]
        self.stats = {"tasks": 0, "round_trips": 0}
        self._workers = None
        self._home = {}  # future key -> worker its tasks are submitted to (chunks and their parts)
        self._shared = (None, {})  # (the last Routing shipped, {worker: its future there})

    def close(self):
        """Let the row copies go, and the workers' kept care-point arrays (:mod:`taodist.tao.row_buffers`)."""
        self._row_copies = {}
        try:  # not waited for: a fit that failed with its cluster must not fail again here
            self.client.run(_release_row_buffers, wait=False)
        except Exception as exc:  # the cluster may be gone; the arrays went with it
            logger.debug("could not release the workers' care-point arrays: %s", exc)

    def _worker_list(self):
        if self._workers is None:
            self._workers = sorted(cluster_workers(self.client))
        return self._workers

    def _share(self, arg, worker):
        """A Routing as a future on ``worker``, submitted once per worker for each routing object."""
        if not isinstance(arg, Routing):
            return arg
        obj, futures = self._shared
        if obj is not arg:
            futures = {}
            self._shared = (arg, futures)
        if worker not in futures:
            futures[worker] = self.submit(_identity, arg, name="routing", worker=worker, share=False)
        return futures[worker]

    def submit(self, fn, *args, name=None, worker=None, share=True, **kwargs):
        """A future of ``fn(*args, **kwargs)``, a task of this fit (counted in ``stats``).

        ``name`` names the task on the dashboard (default: ``fn``'s name);
        ``worker``, if given, becomes the future's home (see :meth:`home_of`);
        ``share`` sends a Routing among ``args`` as the one future of it on
        that worker.
        """
        # pure=False: chunk state changes between passes, so identical-looking
        # arguments must not be deduplicated; the key names read well on the
        # dashboard. A home worker is a loose restriction: were it lost, the
        # task (and the chunk, recomputed from its lineage) runs elsewhere.
        key = f"taodist-{name or fn.__name__}-{self.run_id}-{uuid.uuid4().hex[:8]}"
        self.stats["tasks"] += 1
        if share:
            args = tuple(self._share(a, worker) for a in args)
        where = {} if worker is None else dict(workers=[worker], allow_other_workers=True)
        future = self.client.submit(fn, *args, key=key, pure=False, **where, **kwargs)
        if worker is not None:
            self._home[future.key] = worker
        return future

    def _on_home(self, fn, handle, *args, **kwargs):
        """``fn(handle, *args)`` submitted to the home of ``handle`` (a chunk or a part)."""
        return self.submit(fn, handle, *args, worker=self.home_of(handle), **kwargs)

    def home_of(self, handle):
        """The worker the tasks on ``handle`` (a chunk or a part future) are submitted to; None if it has none."""
        return self._home.get(handle.key)

    def row_copy_on(self, worker):
        """The future of ``worker``'s :class:`SolverRowCopy`; None without row copies."""
        return self._row_copies.get(worker)

    def _gather(self, futures):
        """Results of ``futures`` (one future or nested lists of them): one round trip."""
        self.stats["round_trips"] += 1
        return self.client.gather(futures)

    def gather(self, handles):
        return self._gather(handles)

    def make_chunks(self, blocks, routing, scale, solve_float32):
        workers = self._worker_list()
        if self.stream:  # only labels and weights are held; X blocks are read per task
            labels = self.client.compute([part for b in blocks for part in b[1:3]])
            offsets = [int(b[3]) for b in blocks]
            sizes = [b - a for a, b in zip(offsets, offsets[1:])]
            sizes.append(max(sizes, default=1))  # the last block's rows are not known here: about as many
            homes = assign_homes([()] * len(blocks), sizes, workers)
            return [
                self.submit(streamed_chunk, BlockReader(b[0]), *labels[2 * i:2 * i + 2], b[3], scale,
                            solve_float32, name="chunk", worker=home)
                for i, (b, home) in enumerate(zip(blocks, homes))
            ]
        flat = self.client.compute([part for b in blocks for part in b[:3]])  # read blocks on the workers
        xs = flat[::3]
        # two round trips once per fit: where the blocks were read, and their rows
        sizes = self._gather([self.submit(_n_rows, x, name="rows") for x in xs])
        self.stats["round_trips"] += 1
        where = self.client.who_has(xs)
        homes = assign_homes([where.get(x.key, ()) for x in xs], sizes, workers)
        by_reference = self.copy_rows and len(workers) > 1
        chunks = [
            self.submit(make_chunk, *flat[3 * i:3 * i + 3], b[3], routing, scale, solve_float32, by_reference,
                        name="chunk", worker=home)
            for i, (b, home) in enumerate(zip(blocks, homes))
        ]
        if by_reference:
            solver_blocks = [self._on_home(_solver_block, c, name="solver-rows") for c in chunks]
            self._row_copies = {w: self.submit(SolverRowCopy, *solver_blocks, name="row-copy", worker=w)
                                for w in workers}
        return chunks

    def map_chunks(self, fn, chunks, *args, gather=True):
        futures = [self._on_home(fn, c, *args) for c in chunks]
        return self._gather(futures) if gather else futures

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        """As the local executor's, but a tree of ``combine`` tasks on the workers: one result travels."""
        level = [self._on_home(fn, c, *args) for c in chunks]
        while len(level) > 1:  # neighbours pair up, so the chunk order is kept
            level = [self.submit(combine, a, b, name="combine", **kwargs) for a, b in zip(level[::2], level[1::2])] \
                + level[len(level) - len(level) % 2:]
        return self._gather(level[0])

    def update_chunks(self, fn, chunks, *args):
        new = [self._on_home(fn, c, *args, name="chunk-update", inplace=True) for c in chunks]
        # every part and result of the old chunks has been used (the contract): only the chunks' homes are kept
        self._home = {f.key: self._home[f.key] for f in new if f.key in self._home}
        return new

    def split_chunks_by_key(self, fn, chunks, *args, summary=None):
        # the keys would cost a wait: groups take every part's keys, the summaries travel with a later wait
        parts = [self._on_home(fn, c, *args) for c in chunks]
        return parts, None, [self._on_home(_summary, p, summary) for p in parts]

    def run_key_groups(self, fn, parts, keys, jobs, *, gather=True, n_groups=None, threads_arg=None, **common):
        """Run ``fn`` on one group of keys per worker.

        One task per node would mean one small task per (chunk, node) to
        extract its part, thousands per level for deep trees. Instead keys
        are packed into one group per worker, balanced by their number of
        care points. A group takes the parts of the chunks on its worker as
        they are and, from every other chunk, only that group's keys (one
        small task there cuts them). Results do not depend on the packing.
        ``n_groups`` caps the number of groups (default: one per worker).
        ``threads_arg`` is not passed: a group runs on one worker thread.
        """
        workers = self._worker_list()
        bundles = pack_keys(jobs, len(workers) if n_groups is None else n_groups)
        futures = []
        for j, bundle in enumerate(bundles):
            home, wanted = workers[j % len(workers)], set(bundle)
            pieces = []
            for i, p in enumerate(parts):
                have = bundle if keys is None else sorted(wanted & set(keys[i]))  # keys None: not known here
                if not have:
                    continue
                local = self.home_of(p) == home
                # parts that name their rows are small: a group takes them whole rather than
                # wait for a task that cuts out its keys (a dependent step costs a scheduler round trip)
                whole = local or home in self._row_copies
                pieces.append(p if whole else self._on_home(_select, p, have, name="parts"))
            futures.append(self.submit(run_group, fn, pieces, {k: jobs[k] for k in bundle}, common,
                                       self.row_copy_on(home), name=f"{fn.__name__}-group", worker=home))
        return merge_groups(self._gather(futures)) if gather else futures


def _select(parts, wanted):
    return {k: parts[k] for k in wanted if k in parts}

