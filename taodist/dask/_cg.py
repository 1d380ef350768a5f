"""Distributed preconditioned CG for LapTAO's label step, Laplacian row blocks on Dask workers.

The system is ``(diag(d) + gamma L) Z = B`` with K right-hand sides. The
rows are cut into one contiguous block per worker; each block is a
:class:`taodist.solvers.block_cg.CGRows` (or a subclass holding more per-row
state, as LapTAO's label step does) inside a :class:`CGBlockHost` actor on
its worker, holding its rows of ``gamma L`` and of every CG vector. The
iteration is :func:`taodist.solvers.block_cg.solve_resident`: per iteration
three rounds of actor calls from the driver, each sending and returning
K-vectors only; the halo rows of P (and of X0 when a solve starts) go from
block to block directly, each host fetching its halo from the hosts that own
it. Actor calls go from the client to the worker directly (no scheduler
round trip), which keeps the per-iteration overhead to the messages
themselves. So the driver holds no vector of the solve: B and X0 are loaded
into the blocks (:meth:`DistributedLaplacianCG.solve` sends them one block
at a time; a caller whose blocks build them in place sends nothing), and the
solution is fetched only where it is wanted.

A worker lost during :meth:`DistributedLaplacianCG.solve` takes its actors
with it. The solve then starts new actors on the workers left, from the same
rows (Dask recomputes row blocks built on the workers from their lineage;
blocks sent from here are sent again), and runs again from its start: every
block's state is set by the solve's first call, so the result is the one
the solve gives without the fault. A caller keeping its own state in the
blocks across solves (:meth:`DistributedLaplacianCG.each`) restarts them
itself (:meth:`DistributedLaplacianCG.restart`).
"""

import asyncio
import logging
import time

import numpy as np
import scipy.sparse as sp

from ..solvers.block_cg import CGRows, RowPartition, halo_columns, sends_of, solve_resident, split_halo
from ._client import cluster_workers

logger = logging.getLogger(__name__)

#: restarts one solve may need before the fit gives up (each one a lost worker found)
_MAX_RESTARTS = 4
#: how long a call that could not reach a worker waits for the scheduler to declare the worker lost
_LOST_WORKER_GRACE_SECONDS = 30.0


async def _actor_call(worker, address, key, function, *args):
    """``function(*args)`` of actor ``key`` on the worker at ``address``, from ``worker``, straight there."""
    from distributed.protocol import to_serialize

    reply = await worker.rpc(address).actor_execute(actor=key, function=function,
                                                    args=[to_serialize(a) for a in args], kwargs={})
    if reply["status"] != "OK":
        raise reply["exception"]
    return reply["result"]


def call_block(address, key, name, *args):
    """Method ``name`` of the block held by the :class:`CGBlockHost` ``key`` on ``address``, from a task.

    What a task on a worker uses to read a block's per-row state (a tree
    step's targets) or to hand it rows computed where X is (a tree's
    predictions), worker to worker, never through the driver.
    """
    from distributed import get_worker
    from distributed.utils import sync

    worker = get_worker()
    return sync(worker.loop, _actor_call, worker, address, key, "call", name, *args)


def _owners(split):
    """The blocks a block reads from, ascending (its :func:`split_halo`'s keys)."""
    return sorted(split)


class CGBlockHost:
    """A Dask actor holding one row block of the CG (``block_type(*args)``), reading halo rows from the others.

    :meth:`call` runs a method of the block on a thread; for the methods in
    :attr:`HALO` the rows of the named vector that the block reads from
    other blocks are first fetched from the hosts owning them
    (:meth:`rows_for`, a coroutine: it answers while this host's own
    method runs), in the order of the block's halo columns.
    """

    #: methods that read other blocks' rows: the attribute (a vector) they read
    HALO = {"start": "X", "matvec_dot": "P"}

    def __init__(self, block_type, *args):
        from distributed import get_worker

        self._worker = get_worker()
        self.rows = block_type(*args)
        self.halo_of = {**self.HALO, **getattr(block_type, "HALO", {})}
        self.me, self._peers, self._sources = None, [], []

    def meet(self, me, peers, sources):
        """This block's index, every block's ``(worker address, actor key)``, the blocks whose rows it reads."""
        self.me, self._peers, self._sources = me, list(peers), [int(j) for j in sources]

    async def rows_for(self, block, name):
        """The rows of vector ``name`` that block ``block`` reads."""
        return self.rows.rows_for(block, name)

    async def call(self, name, *args):
        """``block.name(halo, *args)`` for the methods that read a halo, else ``block.name(*args)``."""
        loop = asyncio.get_running_loop()
        fn = getattr(self.rows, name)
        if name in self.halo_of:
            halo = None
            if self._sources:
                parts = await asyncio.gather(*(
                    _actor_call(self._worker, *self._peers[j], "rows_for", self.me, self.halo_of[name])
                    for j in self._sources))
                halo = np.concatenate(parts)
            args = (halo, *args)
        return await loop.run_in_executor(None, fn, *args)


class DistributedLaplacianCG:
    """Jacobi-preconditioned block CG for ``(diag(d) + gamma L) Z = B`` over Dask workers.

    Parameters
    ----------
    client : distributed.Client
    L : sparse (N, N)
        Graph Laplacian; ``gamma L`` is shipped to the workers once.
    gamma : float
    n_blocks : int, optional
        Row blocks (actors); default one per worker.
    """

    def __init__(self, client, L, gamma, n_blocks=None):
        workers = sorted(cluster_workers(client))
        M = gamma * sp.csr_matrix(L)
        self.partition = RowPartition(M, n_blocks or len(workers))
        self.bounds = self.partition.bounds
        self.client, self.block_type = client, CGRows
        owner = self.partition.owner
        # the rows stay here (M was built here): sent again to new actors after a lost worker
        self._sources = [((rows, lo, halo, sends), [workers[i % len(workers)]], np.unique(owner[halo]))
                         for i, (rows, lo, halo, sends) in enumerate(self.partition.blocks(M))]
        self._start()

    @classmethod
    def from_row_blocks(cls, client, row_blocks, bounds, *, block_type=CGRows, block_args=None):
        """The solver over row blocks of ``gamma L`` already on the workers; nothing of L comes here.

        Each block's halo columns (the rows of other blocks it reads) are
        found where the block is, and cut there into what each other block
        sends it; only the list of blocks each block reads from comes here.
        Each actor is started on the worker holding its block, from the
        block's future.

        Parameters
        ----------
        client : distributed.Client
        row_blocks : list of distributed.Future
            Rows ``[bounds[i], bounds[i + 1])`` of ``gamma L``, sparse with
            global column numbers.
        bounds : int array-like of shape (len(row_blocks) + 1,)
            The blocks' first rows, then N.
        block_type : type, default=CGRows
            The blocks: :class:`~taodist.solvers.block_cg.CGRows` or a
            subclass, made as ``block_type(rows, lo, halo, sends, *block_args[i])``.
        block_args : list of tuple, optional
            Each block's further arguments (kept here: sent again to new
            actors after a lost worker).

        Returns
        -------
        DistributedLaplacianCG
        """
        self = cls.__new__(cls)
        self.client, self.block_type, self.partition = client, block_type, None
        self.bounds = bounds = np.asarray(bounds, dtype=np.int64)
        halos = [client.submit(halo_columns, rows, int(lo), pure=False) for rows, lo in zip(row_blocks, bounds[:-1])]
        splits = [client.submit(split_halo, h, bounds, pure=False) for h in halos]
        sends = [client.submit(sends_of, j, *splits, pure=False) for j in range(len(row_blocks))]
        reads = client.gather([client.submit(_owners, s, pure=False) for s in splits])
        holders = client.who_has(row_blocks)
        block_args = block_args or [()] * len(row_blocks)
        # the futures keep the blocks' lineage: Dask recomputes a block lost with its worker
        self._sources = [((rows, int(bounds[i]), halos[i], sends[i], *block_args[i]),
                          sorted(holders.get(rows.key, ()))[:1] or None, reads[i]) for i, rows in enumerate(row_blocks)]
        self._start()
        return self

    def _start(self):
        """One actor per block, on the worker preferred for it where it is still there (else anywhere)."""
        client, futures = self.client, []
        alive = set(cluster_workers(client))
        for (rows, *args), where, _ in self._sources:
            where = [w for w in where or () if w in alive] or None
            if not hasattr(rows, "key"):  # rows held here: data, not graph; keys of this solve's own
                rows = client.scatter(rows, workers=where, hash=False)
            placement = {} if where is None else {"workers": where, "allow_other_workers": True}
            futures.append(client.submit(CGBlockHost, self.block_type, rows, *args, actor=True, pure=False,
                                         **placement))
        with client.as_current():  # actor handles bind to the current client (it need not be the default)
            self.blocks = [f.result() for f in futures]
        self._futures = futures  # the actors live as long as these futures
        held = client.who_has(futures)
        self.addresses = [next(iter(held.get(f.key) or ()), None) for f in futures]
        self._workers = {w for w in self.addresses if w is not None}
        peers = self.peers
        for f in [block.meet(i, peers, source[2]) for i, (block, source) in enumerate(zip(self.blocks, self._sources))]:
            f.result()

    @property
    def peers(self):
        """Every block's ``(worker address, actor key)``: what :func:`call_block` reaches a block by."""
        return list(zip(self.addresses, [f.key for f in self._futures]))

    def restart(self):
        """New actors for every block, from their rows and arguments (after a lost worker)."""
        self._start()

    def lost_a_worker(self, failure):
        """Whether a worker holding one of the actors has left the cluster (and one is left).

        A call can find a killed worker unreachable (``OSError``) before the
        scheduler has removed it: the scheduler is then asked again for up to
        :data:`_LOST_WORKER_GRACE_SECONDS`. Any other failure counts only if
        the worker is already gone (a handle whose actor the scheduler started
        again elsewhere reaches a block that never started this solve).
        """
        deadline = time.monotonic() + (_LOST_WORKER_GRACE_SECONDS if isinstance(failure, OSError) else 0.0)
        while True:
            alive = set(cluster_workers(self.client))
            if self._workers - alive:
                return bool(alive)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)

    def _call(self, name, args):
        futures = [block.call(name, *a) for block, a in zip(self.blocks, args)]
        return [f.result() for f in futures]

    def _chain(self, i, name, *args):
        return self.blocks[i].call(name, *args).result()

    def each(self, name, args=None):
        """Method ``name`` of every block (``args[i]`` for block i; none if None); their results in block order.

        No restart here: a caller keeping state in the blocks handles a lost
        worker (:meth:`lost_a_worker`, :meth:`restart`).
        """
        return self._call(name, args if args is not None else [()] * len(self.blocks))

    def iterate(self, *, tol=1e-6, max_iter=1000, method="distributed-cg"):
        """CG on the loaded blocks (:meth:`CGRows.load`) until every column's relative residual is below ``tol``.

        The solution stays on the blocks (their ``X``); returns the
        :class:`~taodist.solvers.block_cg.LabelStepInfo`.
        """
        return solve_resident(self._call, self._chain, len(self.blocks), tol=tol, max_iter=max_iter, method=method)

    def solve(self, diag, B, X0=None, *, tol=1e-6, max_iter=1000):
        """Solve with ``diag`` the diagonal ``J + mu I``; returns ``(Z, LabelStepInfo)``.

        B and X0 go to the blocks one block at a time and the iteration
        runs there (:meth:`iterate`); the solution comes back. A worker lost
        meanwhile restarts the solve on new actors, up to
        :data:`_MAX_RESTARTS` times; any other failure is raised.
        """
        parts = [slice(int(a), int(b)) for a, b in zip(self.bounds[:-1], self.bounds[1:])]
        for restart in range(_MAX_RESTARTS + 1):
            try:
                self._call("load", [(diag[r], B[r], None if X0 is None else X0[r]) for r in parts])
                info = self.iterate(tol=tol, max_iter=max_iter)
                return np.concatenate(self._call("solution", [()] * len(parts))), info
            except Exception as exc:  # noqa: BLE001 -- raised unless a worker was lost (lost_a_worker)
                if restart == _MAX_RESTARTS or not self.lost_a_worker(exc):
                    raise
                logger.warning("A worker holding LapTAO's Laplacian rows was lost: restarting the label step's CG")
                self._start()
