"""The label step: ``(J + mu I + gamma L) Z = J Y + mu T + Lambda / 2``, K right-hand sides.

Below ``direct_max`` rows the sparse SPD system is factorised (SuperLU);
above it a block Jacobi-preconditioned conjugate gradient runs on all K
columns at once, warm-started from the previous Z. The sparse products are
the only O(N) work; on a cluster the Laplacian's row blocks live on the
workers and CG runs there (:class:`taodist.dask.DistributedLaplacianCG`).

Unlabelled connected components: with ``mu = 0`` (the initial step) the
block of such a component is ``gamma L_c``, singular (constants are in its
null space). A tiny ridge ``eps * I`` (``eps = 1e-8`` times the mean
degree) makes the system SPD and puts those components at ``Z = 0`` (no
label information reaches them), the minimum-norm choice. Every later step
has ``mu > 0`` and is SPD as it stands.
"""

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from ..solvers.block_cg import CGRows, LabelStepInfo, RowPartition, solve_blocks
from ..utils.parallel import effective_n_jobs


def system_diagonal(labelled, L, mu):
    """``J + mu I`` (plus the ridge when ``mu = 0``): the part of A that changes between steps."""
    diag = labelled.astype(np.float64) + mu
    if mu == 0:
        diag = diag + 1e-8 * max(float(L.diagonal().mean()), 1e-12)
    return diag


def system_matrix(labelled, L, gamma, mu):
    """``A = J + mu I + gamma L (+ ridge)`` as CSC."""
    return (sp.diags(system_diagonal(labelled, L, mu)) + gamma * L).tocsc()


def solve_label_step(labelled, Y, L, gamma, mu, T=None, Lam=None, Z0=None, *, direct_max=20000, tol=1e-6,
                     max_iter=1000, cg=None):
    """Solve the label step; returns ``(Z, LabelStepInfo)``.

    Parameters
    ----------
    labelled : bool ndarray (N,)
        J's diagonal.
    Y : ndarray (N, K)
        Targets, zero on unlabelled rows.
    L : sparse (N, N)
        Graph Laplacian.
    gamma, mu : float
    T, Lam : ndarray (N, K), optional
        Tree predictions and multipliers (zero when omitted).
    Z0 : ndarray (N, K), optional
        Warm start for CG.
    cg : LaplacianCG or taodist.dask.DistributedLaplacianCG, optional
        A CG solver built once for this ``L`` and ``gamma`` and reused by every
        step (the distributed one keeps the Laplacian's row blocks on Dask
        workers); default: a :class:`LaplacianCG` built for this call.
    """
    rhs = np.where(labelled[:, None], Y, 0.0)
    if T is not None:
        rhs = rhs + mu * T
    if Lam is not None:
        rhs = rhs + Lam / 2
    if L.shape[0] <= direct_max:
        A = system_matrix(labelled, L, gamma, mu)
        Z = splu(A).solve(rhs)
        return Z, LabelStepInfo("direct", 0, _residual(A, Z, rhs))
    cg = cg or LaplacianCG(L, gamma)
    return cg.solve(system_diagonal(labelled, L, mu), rhs, Z0, tol=tol, max_iter=max_iter)


def _residual(A, Z, rhs):
    return float(np.linalg.norm(A @ Z - rhs) / max(np.linalg.norm(rhs), 1e-300))


class LaplacianCG:
    """Jacobi-preconditioned block CG for ``(diag(d) + gamma L) Z = B`` in this process.

    Built once per Laplacian and reused by every label step (only ``d``,
    ``J + mu I``, changes between steps). With ``n_threads > 1`` the rows
    are cut into that many blocks, each iterated on its own thread (scipy's
    sparse products and numpy's in-place updates release the GIL), so the
    sparse products scale with the threads.

    Parameters
    ----------
    L : sparse (N, N)
        Graph Laplacian.
    gamma : float
    n_threads : int
    """

    def __init__(self, L, gamma, n_threads=1):
        M = gamma * sp.csr_matrix(L)
        self.partition = RowPartition(M, n_threads)
        self.blocks = [CGRows(*args) for args in self.partition.blocks(M)]

    def solve(self, diag, B, X0=None, *, tol=1e-6, max_iter=1000):
        """Solve from ``X0`` (default zero) until every column's relative residual is below ``tol``."""
        with ThreadPoolExecutor(len(self.blocks)) as pool:
            def call(name, args):
                return list(pool.map(lambda b, a: getattr(b, name)(*a), self.blocks, args))

            return solve_blocks(call, self.partition, diag, B, X0, tol=tol, max_iter=max_iter, method="cg")


def block_pcg(A, B, X0=None, *, tol=1e-6, max_iter=1000):
    """Jacobi-preconditioned CG on every column of ``B`` at once for a sparse SPD ``A``."""
    return LaplacianCG(A, 1.0).solve(np.zeros(A.shape[0]), B, X0, tol=tol, max_iter=max_iter)


def laplacian_cg(L, gamma, *, n_jobs=None, client=None):
    """LapTAO's reusable label-step CG solver: threads here, or Laplacian row blocks in Dask actors."""
    if client is not None:
        from ..dask import DistributedLaplacianCG  # imports distributed: only for a fit on a cluster

        return DistributedLaplacianCG(client, L, gamma)
    return LaplacianCG(L, gamma, effective_n_jobs(n_jobs))
