"""Distributed preconditioned CG for LapTAO's label step, Laplacian row blocks on Dask workers.

The system is ``(diag(d) + gamma L) Z = B`` with K right-hand sides. The
rows are cut into one contiguous block per worker; each block is a
:class:`taodist.solvers.block_cg.CGRows` living in a Dask *actor* on its worker,
holding its rows of ``gamma L`` and of every CG vector. The iteration is
:func:`taodist.solvers.block_cg.solve_blocks`, the same loop that runs the blocks
on threads in process: per iteration three rounds of actor calls, and only
K-vectors and the halo rows of P travel. Actor calls go from the client to
the worker directly (no scheduler round trip), which keeps the
per-iteration overhead to the messages themselves.

A worker lost during a solve takes its actors with it. The solve then starts
new actors on the workers left, from the same rows (Dask recomputes row
blocks built on the workers from their lineage; blocks sent from here are
sent again), and runs again from its start: every block's state is set by
the solve's first call, so the result is the one the solve gives without the
fault.
"""

import logging
import time

import scipy.sparse as sp

from ..solvers.block_cg import CGRows, RowPartition, halo_columns, solve_blocks
from ._client import cluster_workers

logger = logging.getLogger(__name__)

#: restarts one solve may need before the fit gives up (each one a lost worker found)
_MAX_RESTARTS = 4
#: how long a call that could not reach a worker waits for the scheduler to declare the worker lost
_LOST_WORKER_GRACE_SECONDS = 30.0


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
        self.client = client
        # the rows stay here (M was built here): sent again to new actors after a lost worker
        self._sources = [(rows, lo, halo, sends, [workers[i % len(workers)]])
                         for i, (rows, lo, halo, sends) in enumerate(self.partition.blocks(M))]
        self._start()

    @classmethod
    def from_row_blocks(cls, client, row_blocks, bounds):
        """The solver over row blocks of ``gamma L`` already on the workers; nothing of L comes here.

        Each block's halo columns are found where the block is and sent
        here (the rows of other blocks it reads: what the iteration's halo
        exchange needs); each actor is started on the worker holding its
        block, from the block's future.

        Parameters
        ----------
        client : distributed.Client
        row_blocks : list of distributed.Future
            Rows ``[bounds[i], bounds[i + 1])`` of ``gamma L``, sparse with
            global column numbers.
        bounds : int array-like of shape (len(row_blocks) + 1,)
            The blocks' first rows, then N.

        Returns
        -------
        DistributedLaplacianCG
        """
        self = cls.__new__(cls)
        self.client = client
        halos = client.gather([client.submit(halo_columns, rows, int(lo), pure=False)
                               for rows, lo in zip(row_blocks, bounds[:-1])])
        self.partition = RowPartition.from_halos(bounds, halos)
        holders = client.who_has(row_blocks)
        # the futures keep the blocks' lineage: Dask recomputes a block lost with its worker
        self._sources = [(rows, int(bounds[i]), self.partition.halos[i], self.partition.sends[i],
                          sorted(holders.get(rows.key, ()))[:1] or None) for i, rows in enumerate(row_blocks)]
        self._start()
        return self

    def _start(self):
        """One actor per block, on the worker preferred for it where it is still there (else anywhere)."""
        client, futures = self.client, []
        alive = set(cluster_workers(client))
        for rows, lo, halo, sends, where in self._sources:
            where = [w for w in where or () if w in alive] or None
            if not hasattr(rows, "key"):  # rows held here: data, not graph; keys of this solve's own
                rows = client.scatter(rows, workers=where, hash=False)
            placement = {} if where is None else {"workers": where, "allow_other_workers": True}
            futures.append(client.submit(CGRows, rows, lo, halo, sends, actor=True, pure=False, **placement))
        with client.as_current():  # actor handles bind to the current client (it need not be the default)
            self.blocks = [f.result() for f in futures]
        self._futures = futures  # the actors live as long as these futures
        self._workers = {w for held in client.who_has(futures).values() for w in held}

    def _lost_a_worker(self, failure):
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
        futures = [getattr(block, name)(*a) for block, a in zip(self.blocks, args)]
        return [f.result() for f in futures]

    def solve(self, diag, B, X0=None, *, tol=1e-6, max_iter=1000):
        """Solve with ``diag`` the diagonal ``J + mu I``; returns ``(Z, LabelStepInfo)``.

        A worker lost meanwhile restarts the solve on new actors, up to
        :data:`_MAX_RESTARTS` times; any other failure is raised.
        """
        for restart in range(_MAX_RESTARTS + 1):
            try:
                return solve_blocks(self._call, self.partition, diag, B, X0, tol=tol, max_iter=max_iter,
                                    method="distributed-cg")
            except Exception as exc:  # noqa: BLE001 -- raised unless a worker was lost (_lost_a_worker)
                if restart == _MAX_RESTARTS or not self._lost_a_worker(exc):
                    raise
                logger.warning("A worker holding LapTAO's Laplacian rows was lost: restarting the label step's CG")
                self._start()
