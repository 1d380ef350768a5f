"""Distributed preconditioned CG for LapTAO's label step, Laplacian row blocks on Dask workers.

The system is ``(diag(d) + gamma L) Z = B`` with K right-hand sides. The
rows are cut into one contiguous block per worker; each block is a
:class:`taodist.solvers.block_cg.CGRows` living in a Dask *actor* on its worker,
holding its rows of ``gamma L`` and of every CG vector. The iteration is
:func:`taodist.solvers.block_cg.solve_blocks`, the same loop that runs the blocks
on threads in process: per iteration three rounds of actor calls, and only
K-vectors and the halo rows of P travel. Actor calls go from the client to
the worker directly (no scheduler round trip), which keeps the
per-iteration overhead to the messages themselves. Actors are not restarted
when a worker dies: the label step then fails and the fit with it.
"""

import scipy.sparse as sp

from ..solvers.block_cg import CGRows, RowPartition, halo_columns, solve_blocks
from ._client import cluster_workers


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
        futures = []
        for i, (rows, lo, halo, sends) in enumerate(self.partition.blocks(M)):
            where = [workers[i % len(workers)]]
            rows = client.scatter(rows, workers=where, hash=False)  # data, not graph; keys of this solve's own
            futures.append(client.submit(CGRows, rows, lo, halo, sends, actor=True, pure=False, workers=where))
        with client.as_current():  # actor handles bind to the current client (it need not be the default)
            self.blocks = [f.result() for f in futures]
        self._futures = futures  # the actors live as long as these futures

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
        halos = client.gather([client.submit(halo_columns, rows, int(lo), pure=False)
                               for rows, lo in zip(row_blocks, bounds[:-1])])
        self.partition = RowPartition.from_halos(bounds, halos)
        holders = client.who_has(row_blocks)
        futures = []
        for i, rows in enumerate(row_blocks):
            where = sorted(holders.get(rows.key, ()))[:1] or None
            futures.append(client.submit(CGRows, rows, int(bounds[i]), self.partition.halos[i],
                                         self.partition.sends[i], actor=True, pure=False, workers=where))
        with client.as_current():
            self.blocks = [f.result() for f in futures]
        self._futures = futures
        return self

    def _call(self, name, args):
        futures = [getattr(block, name)(*a) for block, a in zip(self.blocks, args)]
        return [f.result() for f in futures]

    def solve(self, diag, B, X0=None, *, tol=1e-6, max_iter=1000):
        """Solve with ``diag`` the diagonal ``J + mu I``; returns ``(Z, LabelStepInfo)``."""
        return solve_blocks(self._call, self.partition, diag, B, X0, tol=tol, max_iter=max_iter,
                            method="distributed-cg")
