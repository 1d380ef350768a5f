"""Distributed preconditioned CG for LapTAO's label step, Laplacian row blocks on Dask workers.

The system is ``(diag(d) + gamma L) Z = B`` with K right-hand sides. The
rows are cut into one contiguous block per worker; each block lives in a
Dask *actor* on its worker, holding its rows of ``gamma L`` (split into the
columns it owns and the few *halo* columns owned by other blocks) and its
rows of every CG vector. An iteration is three rounds of calls, all blocks
at once:

1. ``matvec_dot(halo)``: ``AP = A P`` for its rows (own P plus the halo rows
   of neighbours' P), returns its share of ``P . AP`` (K numbers);
2. ``update(alpha)``: X, R, preconditioned residual, returns its share of
   ``R . M^-1 R`` and ``|R|^2``;
3. ``direction(beta)``: new P, returns the rows of P other blocks need.

Only K-vectors and halo rows travel; actor calls go from the client to the
worker directly (no scheduler round trip), which keeps the per-iteration
overhead at a few milliseconds. A graph ordered so that neighbours are near
each other (e.g. reverse Cuthill-McKee) has small halos. Actors are not
restarted when a worker dies: the label step then fails and the fit with it.
"""

import numpy as np
import scipy.sparse as sp


class CGBlock:
    """One row block of the system and of the CG state (a Dask actor)."""

    def __init__(self, gamma_L_rows, lo, hi, halo_cols, sends):
        A = sp.csr_matrix(gamma_L_rows)
        self.lo, self.hi = lo, hi
        self.A_own = A[:, lo:hi].tocsr()
        self.A_halo = A[:, halo_cols].tocsr()
        self.gl_diag = A.diagonal(k=lo)[: hi - lo]  # gamma L's diagonal on these rows
        self.sends = sends  # {other block: local rows of P it needs}

    def reset(self, diag, B, X0, X0_halo):
        """Start a solve: ``diag`` is J + mu I on these rows; returns (rz, |R|^2, halo of P)."""
        self.d = diag
        self.inv_diag = 1.0 / (diag + self.gl_diag)
        self.X = X0.copy()
        self.R = B - self._matvec(X0, X0_halo)
        self.Zp = self.inv_diag[:, None] * self.R
        self.P = self.Zp.copy()
        return np.einsum("ij,ij->j", self.R, self.Zp), np.einsum("ij,ij->j", self.R, self.R), self._halo_out()

    def _matvec(self, V, V_halo):
        return self.d[:, None] * V + self.A_own @ V + self.A_halo @ V_halo

    def _halo_out(self):
        return {j: self.P[rows] for j, rows in self.sends.items()}

    def matvec_dot(self, P_halo):
        self.AP = self._matvec(self.P, P_halo)
        return np.einsum("ij,ij->j", self.P, self.AP)

    def update(self, alpha):
        self.X += alpha * self.P
        self.R -= alpha * self.AP
        self.Zp = self.inv_diag[:, None] * self.R
        return np.einsum("ij,ij->j", self.R, self.Zp), np.einsum("ij,ij->j", self.R, self.R)

    def direction(self, beta):
        self.P = self.Zp + beta * self.P
        return self._halo_out()

    def solution(self):
        return self.X


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
        workers = sorted(client.scheduler_info(n_workers=-1)["workers"])
        n = L.shape[0]
        n_blocks = max(1, min(n_blocks or len(workers), n))
        self.bounds = np.linspace(0, n, n_blocks + 1).astype(np.int64)
        A = (gamma * sp.csr_matrix(L)).tocsr()
        owner = np.repeat(np.arange(n_blocks), np.diff(self.bounds))
        halos, sends = [], [dict() for _ in range(n_blocks)]
        for i in range(n_blocks):
            lo, hi = self.bounds[i], self.bounds[i + 1]
            cols = np.unique(A.indices[A.indptr[lo]:A.indptr[hi]])
            cols = cols[(cols < lo) | (cols >= hi)]  # sorted: grouped by owner, owners ascending
            halos.append(cols)
            for j in np.unique(owner[cols]):
                sends[j][i] = cols[owner[cols] == j] - self.bounds[j]
        self.halos, self.owner = halos, owner
        futures = []
        for i in range(n_blocks):
            where = [workers[i % len(workers)]]
            rows = client.scatter(A[self.bounds[i]:self.bounds[i + 1]], workers=where)  # data, not graph
            futures.append(client.submit(CGBlock, rows, int(self.bounds[i]), int(self.bounds[i + 1]), halos[i],
                                         sends[i], actor=True, pure=False, workers=where))
        with client.as_current():  # actor handles bind to the current client (it need not be the default)
            self.blocks = [f.result() for f in futures]
        self._futures = futures  # the actors live as long as these futures

    def _halo_in(self, outs):
        """Each block's halo rows, concatenated in its halo-column order, from the blocks' sends."""
        K = next((v.shape[1] for out in outs for v in out.values()), 0)
        return [np.concatenate([outs[j][i] for j in np.unique(self.owner[h])]) if h.size
                else np.zeros((0, K)) for i, h in enumerate(self.halos)]

    def solve(self, diag, B, X0=None, *, tol=1e-6, max_iter=1000):
        """Solve with ``diag`` the diagonal ``J + mu I``; returns ``(Z, LabelStepInfo)``."""
        from ..laptao._label_step import LabelStepInfo  # here: taodist.laptao imports taodist.dask

        X0 = np.zeros_like(B) if X0 is None else X0
        b = self.bounds
        x0_halo = [X0[h] for h in self.halos]
        started = [blk.reset(diag[b[i]:b[i + 1]], B[b[i]:b[i + 1]], X0[b[i]:b[i + 1]], x0_halo[i])
                   for i, blk in enumerate(self.blocks)]
        started = [f.result() for f in started]
        rz = sum(s[0] for s in started)
        rr = sum(s[1] for s in started)
        halo = self._halo_in([s[2] for s in started])
        bnorm = np.maximum(np.linalg.norm(B, axis=0), 1e-300)
        it = 0
        for it in range(1, max_iter + 1):
            if np.all(np.sqrt(rr) / bnorm < tol):
                it -= 1
                break
            pap = sum(f.result() for f in [blk.matvec_dot(halo[i]) for i, blk in enumerate(self.blocks)])
            alpha = rz / np.maximum(pap, 1e-300)
            stats = [f.result() for f in [blk.update(alpha) for blk in self.blocks]]
            rz_new, rr = sum(s[0] for s in stats), sum(s[1] for s in stats)
            beta = rz_new / np.maximum(rz, 1e-300)
            rz = rz_new
            halo = self._halo_in([f.result() for f in [blk.direction(beta) for blk in self.blocks]])
        Z = np.concatenate([f.result() for f in [blk.solution() for blk in self.blocks]])
        return Z, LabelStepInfo("distributed-cg", it, float((np.sqrt(rr) / bnorm).max()))
