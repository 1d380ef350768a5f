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
    return diagonal_rows(labelled, mu, ridge(L) if mu == 0 else 0.0)


def ridge(L):
    """The ridge added to the system's diagonal when ``mu = 0``: ``1e-8`` times L's mean degree."""
    return 1e-8 * max(float(L.diagonal().mean()), 1e-12)


def diagonal_rows(labelled, mu, ridge):
    """:func:`system_diagonal` of some rows, with the ridge (used only when ``mu = 0``) given."""
    diag = labelled.astype(np.float64) + mu
    if mu == 0:
        diag = diag + ridge
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


class LabelStepRows(CGRows):
    """A row block of the label step holding its rows of every per-row quantity of LapTAO's augmented Lagrangian.

    The block keeps its rows of the targets Y, the labels Z (the CG's
    solution, kept as the next solve's warm start), the tree's predictions
    T and the multipliers Lambda, and does every row-wise step of the outer
    loop with the same operations, in the same order, as
    :meth:`taodist.laptao.LapTAOClassifier.fit` does on whole arrays: the
    label step's right-hand side and diagonal (:meth:`load_step`), the tree
    step's targets (:meth:`targets`), the multipliers' update, and its
    shares of the outer step's record and of the exact leaves' system. So
    blocks of a Dask cluster hold all of it (:class:`taodist.dask.DistributedLaplacianCG`
    with ``block_type=LabelStepRows``) and the fitting process only sums
    their K-vectors and small matrices.

    Parameters
    ----------
    M_rows, lo, halo_cols, sends
        As for :class:`~taodist.solvers.block_cg.CGRows` (rows of ``gamma L``).
    labelled : bool ndarray of shape (m,)
        Which of these rows are labelled.
    Y_labelled : ndarray of shape (labelled.sum(), K)
        The targets of the labelled rows, in row order.
    """

    #: methods reading other blocks' rows (besides the CG's), and the vector they read
    HALO = {"step_stats": "T", "leaf_system": "leaves"}

    def __init__(self, M_rows, lo, halo_cols, sends, labelled, Y_labelled):
        super().__init__(M_rows, lo, halo_cols, sends)
        self.labelled = np.asarray(labelled, dtype=bool)
        self.Y = np.zeros((self.labelled.size, Y_labelled.shape[1]))
        self.Y[self.labelled] = Y_labelled
        self.Z = self.T = self.Lam = self.leaves = None
        self.d = None

    def load_step(self, mu, ridge):
        """Load the label step ``(J + mu I + M) Z = J Y + mu T + Lambda / 2`` from the previous Z."""
        self.d = diagonal_rows(self.labelled, mu, ridge)
        rhs = np.where(self.labelled[:, None], self.Y, 0.0)
        if self.T is not None:
            rhs = rhs + mu * self.T
        if self.Lam is not None:
            rhs = rhs + self.Lam / 2
        self.load(self.d, rhs, self.Z)

    def keep_solution(self):
        """The solve's X becomes Z; the solve's other vectors go."""
        self.Z = self.X
        self.release()

    def targets(self, mu=None):
        """The tree step's targets: ``Z - Lambda / (2 mu)`` (Z itself for the first tree step)."""
        return self.Z if mu is None else self.Z - self.Lam / (2 * mu)

    def graph_classes(self):
        """The class codes of the first label step's labels: the largest entry of Z; the labelled rows keep theirs."""
        return np.where(self.labelled, self.Y.argmax(axis=1), self.Z.argmax(axis=1))

    def set_predictions(self, T):
        """The tree's predictions of these rows."""
        self.T = np.asarray(T, dtype=np.float64)

    def update_multipliers(self, mu=None):
        """``Lambda <- Lambda - mu (Z - T)`` (zero before the first outer step)."""
        self.Lam = np.zeros_like(self.Z) if mu is None else self.Lam - mu * (self.Z - self.T)

    def step_stats(self, T_halo):
        """These rows' shares of the outer step's record: labelled loss, ``T' M T``, ``|Z - T|^2``."""
        resid = (self.T - self.Y)[self.labelled]
        MT = self._matvec(self.T, T_halo) - self.d[:, None] * self.T  # A holds M + diag(d)
        return (float(np.sum(resid**2)), float(np.einsum("ij,ij->", self.T, MT)),
                float(np.sum((self.Z - self.T) ** 2)))

    def set_leaves(self, leaves):
        """The leaf each of these rows reaches; returns the leaves reached."""
        self.leaves = np.asarray(leaves)
        return np.unique(self.leaves)

    def leaf_system(self, leaves_halo, ids):
        """These rows' shares of the exact leaves' system (eq. 10): ``B'JB + B'MB`` and ``B'JY``.

        ``ids``: the leaves reached by any row (the system's order);
        ``leaves_halo``: the leaves of the other blocks' rows these rows
        link to.
        """
        n_leaves = ids.size
        col = np.searchsorted(ids, self.leaves)
        A = np.zeros((n_leaves, n_leaves))
        np.add.at(A, (col[self.labelled], col[self.labelled]), 1.0)
        own = self.A.tocoo()
        m_data = own.data.copy()
        m_data[self._diag_pos] = self.m_diag  # the stored diagonal holds M's plus d
        np.add.at(A, (col[own.row], col[own.col]), m_data)
        if self.A_halo is not None:
            halo = self.A_halo.tocoo()
            np.add.at(A, (col[self.halo_rows[halo.row]], np.searchsorted(ids, leaves_halo)[halo.col]), halo.data)
        rhs = np.zeros((n_leaves, self.Y.shape[1]))
        np.add.at(rhs, col[self.labelled], self.Y[self.labelled])
        return A, rhs


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
