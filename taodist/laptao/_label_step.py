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

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu


@dataclass
class LabelStepInfo:
    method: str
    iterations: int
    residual: float


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
    cg : taodist.dask.DistributedLaplacianCG, optional
        Runs CG with the Laplacian's row blocks on Dask workers (built for
        this ``L`` and ``gamma``); default: CG in this process.
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
    d = system_diagonal(labelled, L, mu)
    if cg is not None:
        return cg.solve(d, rhs, Z0, tol=tol, max_iter=max_iter)
    # A = diag(d) + gamma L applied as is: building A as a new sparse matrix every step (format
    # conversions of a 1M-row Laplacian) cost seconds per label step
    GL = sp.csr_matrix(L) * gamma
    return block_pcg(None, rhs, Z0, tol=tol, max_iter=max_iter, matvec=lambda V: d[:, None] * V + GL @ V,
                     diagonal=d + GL.diagonal())


def _residual(A, Z, rhs):
    return float(np.linalg.norm(A @ Z - rhs) / max(np.linalg.norm(rhs), 1e-300))


def block_pcg(A, B, X0=None, *, tol=1e-6, max_iter=1000, matvec=None, diagonal=None):
    """Jacobi-preconditioned CG on every column of ``B`` at once.

    Each column is its own CG run (own step sizes); they share the sparse
    products, one SpMM per iteration. ``matvec`` and ``diagonal`` (default
    ``A @`` and ``A.diagonal()``) let a caller apply A without forming it.
    Stops when every column's relative residual is below ``tol``.
    """
    matvec = matvec or (lambda V: A @ V)
    inv_diag = 1.0 / (A.diagonal() if diagonal is None else diagonal)
    X = np.zeros_like(B) if X0 is None else X0.copy()
    R = B - matvec(X)
    Zp = inv_diag[:, None] * R
    P = Zp.copy()
    rz = np.einsum("ij,ij->j", R, Zp)
    bnorm = np.maximum(np.linalg.norm(B, axis=0), 1e-300)
    it = 0
    for it in range(1, max_iter + 1):
        if np.all(np.linalg.norm(R, axis=0) / bnorm < tol):
            it -= 1
            break
        AP = matvec(P)
        alpha = rz / np.maximum(np.einsum("ij,ij->j", P, AP), 1e-300)
        X += alpha * P
        R -= alpha * AP
        Zp = inv_diag[:, None] * R
        rz_new = np.einsum("ij,ij->j", R, Zp)
        P = Zp + (rz_new / np.maximum(rz, 1e-300)) * P
        rz = rz_new
    res = float((np.linalg.norm(R, axis=0) / bnorm).max())
    return X, LabelStepInfo("cg", it, res)
