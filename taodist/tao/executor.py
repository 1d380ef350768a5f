"""The executor contract between TAO's driver and where the rows live.

The optimiser (:mod:`taodist.tao.optimizer`) never touches rows itself: it asks an
*executor* to run the row-chunk functions (:mod:`taodist.tao.chunks`,
:mod:`taodist.tao.care_points`, :mod:`taodist.tao.node_tasks`) on every
chunk and to run the node and leaf fits. :class:`LocalExecutor` (here) runs
them in this process on threads; ``taodist.dask.DaskExecutor`` runs them as
tasks on the Dask workers that hold the chunks. Both satisfy
:class:`Executor`, and the test suite runs its parity tests on each.

Guarantees every executor gives (the driver relies on them):

* **Chunk order.** Results of :meth:`Executor.map_chunks` and of
  :meth:`Executor.split_chunks_by_key` come back in the order of the chunks,
  and :meth:`Executor.reduce_chunks` combines neighbours only, so a
  non-commutative ``combine`` sees the chunks in order. The fitted tree is
  therefore the same whatever the executor and however many workers.
* **State.** A chunk handle passed to :meth:`Executor.update_chunks` must not
  be used again, and every task reading it must have finished (its result
  gathered): both executors update the chunk object in place where it lives
  (the Dask executor returns new futures for it), so nothing copies the
  margins.
* **Independence.** The keyed fits in :meth:`Executor.run_key_groups` are
  independent; how keys are grouped into tasks never changes a result.
* **Deferred results.** With ``gather=False``, :meth:`Executor.map_chunks`
  and :meth:`Executor.run_key_groups` (and :meth:`Executor.split_chunks_by_key`
  always, for its summaries) return *handles* to their results,
  kept where they were computed; handles (also inside lists) may be passed
  as arguments to further calls, and :meth:`Executor.gather` brings any
  nested list of them back at once. In this process a handle is the value
  itself; on Dask it is a future, and one ``gather`` is one round trip, so
  the driver chains a level's steps -- care points, solves, evaluations --
  and waits once (see ``taodist.dask.DaskExecutor``).
"""

import functools
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np
from threadpoolctl import threadpool_limits

from .chunks import make_chunk
from .part_rows import resolve_rows
from .row_buffers import release_row_buffers

#: rows below which a block is not split further across threads (thread overhead would dominate)
_MIN_CHUNK_ROWS = 2048


@runtime_checkable
class Executor(Protocol):
    """What TAO's driver needs from the place its row chunks live."""

    def make_chunks(self, blocks, routing, scale, solve_float32):
        """Chunks from row blocks ``(X, y, sample_weight, offset)``: validated, scaled, routed."""

    def map_chunks(self, fn, chunks, *args, gather=True):
        """``[fn(chunk, *args) for chunk in chunks]``: small results, in chunk order (handles without ``gather``)."""

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        """``combine(a, b, **kwargs)`` folded over ``fn(chunk, *args)`` of every chunk, in chunk order."""

    def update_chunks(self, fn, chunks, *args):
        """New chunk handles ``fn(chunk, *args, inplace=True)``; the old handles must not be used again."""

    def split_chunks_by_key(self, fn, chunks, *args, summary=None):
        """Keyed parts ``fn(chunk, *args) -> {key: part}``, kept where they are made; nothing is waited for.

        Returns ``(parts, keys, summaries)``: a handle to every chunk's parts,
        every chunk's keys (None where they are not known without a wait:
        groups then take every part), and handles to ``summary(parts)`` of
        every chunk (None without ``summary``) for :meth:`gather`, all in
        chunk order. A driver collects the summaries with later results in
        one wait.
        """

    def run_key_groups(self, fn, parts, keys, jobs, *, gather=True, n_groups=None, threads_arg=None, **common):
        """Run ``fn({key: (pieces, jobs[key]), ...}, **common) -> {key: result}`` over groups of keys.

        ``pieces`` are ``part[key]`` of every chunk that has ``key``, in chunk
        order; a job is any object (sized by :func:`job_size`). Keys are
        grouped into a few tasks (a level-wide solver sees a whole group at
        once); returns ``{key: result}`` for every key of
        ``jobs`` that some chunk has. ``keys`` (every chunk's keys) may be
        None when they are not known (``parts`` are handles of
        ``map_chunks(..., gather=False)``): every chunk then offers its part
        to every group. Without ``gather``: handles to the groups' result
        dicts, in no particular order. ``n_groups`` caps the number of groups
        (1: every key in one call, for a solver that wants the whole level,
        e.g. on one GPU); default: the executor's parallelism.
        ``threads_arg``: a keyword of ``fn`` through which an executor with
        threads that would idle (more threads than groups: a root level in
        process; one group on a cluster, which its machine's workers' threads
        may run) may pass how many threads each group can use; otherwise it
        is not passed.
        """

    def gather(self, handles):
        """The values of ``handles`` (nested lists of handles), all at once."""

    def close(self):
        """Release threads or other resources."""


def job_size(job):
    """How much work a keyed job is, to balance groups: its ``n_care`` (care points to solve), else 1.

    A :class:`~taodist.tao.node_tasks.NodeJob` has one; a
    :class:`~taodist.tao.leaf_tasks.LeafJob` does not (leaves weigh the same).
    """
    return getattr(job, "n_care", 1)


def pack_keys(jobs, n_groups):
    """Greedy longest-first packing of keys into at most ``n_groups`` groups of similar size.

    A job's size is :func:`job_size`. Keys within a group keep ascending order.
    """
    sizes = {k: job_size(job) for k, job in jobs.items()}
    groups = [[] for _ in range(max(1, min(n_groups, len(jobs))))]
    load = [0] * len(groups)
    for key in sorted(jobs, key=lambda k: (-sizes[k], k)):
        i = load.index(min(load))
        groups[i].append(key)
        load[i] += sizes[key]
    return [sorted(g) for g in groups if g]


class LocalExecutor:
    """Runs chunk functions and keyed fits in this process, on ``n_threads`` threads.

    Chunks are plain :class:`~taodist.tao.chunks.Chunk` objects, updated in
    place. NumPy, BLAS and the scikit-learn solvers release the GIL, so the
    chunks of a pass and the groups of independent nodes run in parallel.
    """

    def __init__(self, n_threads=1):
        self.n_threads = n_threads
        self._pool = ThreadPoolExecutor(max_workers=n_threads) if n_threads > 1 else None
        # Each of the threads runs its own BLAS products (margins, leaf fits); a BLAS library
        # starting all cores in each of them oversubscribes the machine (threads x cores BLAS
        # threads), which makes a fit slower the more cores there are. One BLAS thread per
        # executor thread for the fit (as Dask's workers and scikit-learn's KMeans do).
        self._blas = threadpool_limits(limits=1, user_api="blas") if n_threads > 1 else None

    def close(self):
        if self._pool is not None:
            self._pool.shutdown()
        release_row_buffers()  # the fit is over: its care-point arrays need not be kept
        if self._blas is not None:
            self._blas.restore_original_limits()
            self._blas = None

    def _map(self, fn, items):
        if self._pool is not None and len(items) > 1:
            return list(self._pool.map(fn, items))
        return [fn(item) for item in items]

    def make_chunks(self, blocks, routing, scale, solve_float32):
        # at least one chunk per thread, so every pass over the rows keeps every thread busy
        # (the model does not depend on the chunking: the parity tests check it)
        per_block = -(-self.n_threads // max(1, len(blocks)))
        pieces = []
        for X, y, sw, off in blocks:
            n = X.shape[0]
            k = max(1, min(per_block, n // _MIN_CHUNK_ROWS))
            bounds = np.linspace(0, n, k + 1).astype(int)
            pieces += [(X[a:b], y[a:b], sw[a:b], off + int(a)) for a, b in zip(bounds[:-1], bounds[1:])]
        return self._map(lambda p: make_chunk(*p, routing, scale, solve_float32), pieces)

    def map_chunks(self, fn, chunks, *args, gather=True):
        return self._map(lambda c: fn(c, *args), chunks)

    def gather(self, handles):
        return handles

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        return functools.reduce(lambda a, b: combine(a, b, **kwargs), self.map_chunks(fn, chunks, *args))

    def update_chunks(self, fn, chunks, *args):
        return self._map(lambda c: fn(c, *args, inplace=True), chunks)

    def split_chunks_by_key(self, fn, chunks, *args, summary=None):
        parts = self.map_chunks(fn, chunks, *args)
        return parts, [list(p) for p in parts], [summary(p) if summary else None for p in parts]

    def run_key_groups(self, fn, parts, keys, jobs, *, gather=True, n_groups=None, threads_arg=None, **common):
        present = set().union(*parts)
        jobs = {k: job for k, job in jobs.items() if k in present}
        # two groups per thread: node sizes vary, so a little slack balances the load
        if n_groups is None:
            n_groups = 2 * self.n_threads if self._pool is not None else 1
        groups = pack_keys(jobs, n_groups)
        if threads_arg is not None and 0 < len(groups) < self.n_threads:
            # fewer groups than threads (the root: one node): the others would idle, so a group may use them
            common = {**common, threads_arg: self.n_threads // len(groups)}
        done = self._map(lambda group: run_group(fn, parts, {k: jobs[k] for k in group}, common), groups)
        return merge_groups(done) if gather else done


def run_group(fn, pieces, jobs, common, row_copy=None):
    """``fn({key: (its pieces, jobs[key])}, **common)`` for the keys of ``jobs`` that some piece has.

    Parameters
    ----------
    fn : callable
        The node fit of the group, ``fn(group, **common) -> {key: result}``.
    pieces : list of dict
        Parts of the chunks (``{key: part}``), in chunk order.
    jobs : dict
        Each key's job (its node's solver arguments).
    common : dict
        Keyword arguments every group gets.
    row_copy : object with a ``take(rows)`` method, optional
        A copy of every chunk's solver rows where the group runs (a Dask
        worker's, :class:`taodist.dask._executor.SolverRowCopy`): parts that
        name their rows (:class:`~taodist.tao.part_rows.SolverRows`) take
        them from it.

    Returns
    -------
    dict
        ``{key: result}`` of ``fn``.
    """
    group = {key: [p[key] for p in pieces if key in p] for key in jobs}
    if row_copy is not None:  # parts that name their rows (SolverRows) get them from this worker's copy
        group = {key: [resolve_rows(p, row_copy.take) for p in ps] for key, ps in group.items()}
    return fn({key: (group[key], job) for key, job in jobs.items() if group[key]}, **common)


def merge_groups(results):
    """One ``{key: result}`` of the groups' result dicts (every key is in one group only)."""
    merged = {}
    for done in results:
        merged.update(done)
    return merged


@dataclass
class Execution:
    """What :func:`execution` yields: TAO's row blocks, the executor that holds them, the care-point cap."""

    blocks: list
    executor: object
    max_care_points: int | None
