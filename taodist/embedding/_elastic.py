"""The elastic embedding (EE): its objective, gradient and a spectral-direction minimiser.

Carreira-Perpinan (ICML 2010); thesis eq. 4.2::

    E(Z) = sum_nm w+_nm ||z_n - z_m||^2 + alpha sum_{n != m} w-_nm exp(-||z_n - z_m||^2)

with ``w+ = P`` (entropic affinities, summing to 1) and ``w- = 1 / (N (N - 1))``
(uniform, also summing to 1), normalised as in the authors' code
(Vladymyrov & Carreira-Perpinan, ICML 2012) so that ``alpha = 100`` means the
same at every N. The gradient is ``4 L Z`` with ``L`` the graph Laplacian of
``w+ - alpha w- exp(-d^2)``. The repulsion is summed over all pairs, exactly:
O(N^2) time per evaluation (in row blocks, so O(N) memory), a few seconds per
Z step at 5,000 points; beyond some 20,000 points it needs a fast multipole
or Barnes-Hut approximation, which is not implemented.

The minimiser is the spectral direction (Vladymyrov & Carreira-Perpinan 2012):
the gradient preconditioned by the attractive term's Hessian ``4 L+`` plus
the quadratic pull's ``mu I`` (one sparse factorisation per Z step), with a
backtracking line search.
"""

import numpy as np
import scipy.sparse as sp
from scipy.sparse.linalg import splu

#: rows of the N x N repulsion kernel computed at once (bounds its memory at about 16 * ROW_BLOCK * N bytes)
ROW_BLOCK = 256
#: Armijo's sufficient-decrease constant and the step shrink factor of the line search
ARMIJO, SHRINK = 1e-4, 0.5
#: the smallest step tried before a Z step gives up (the direction no longer decreases the objective)
MIN_STEP = 1e-10


class ElasticEmbeddingObjective:
    """EE's objective for fixed affinities; ``minimise`` adds the augmented Lagrangian's pull.

    Parameters
    ----------
    P : sparse matrix of shape (n_samples, n_samples)
        Symmetric attractive weights summing to 1.
    repulsion : float, default=100.0
        ``alpha``, the weight of the repulsive term.
    """

    #: any dimension: the objective and its steps are written for Z of any width
    max_components = None

    def __init__(self, P, *, repulsion=100.0):
        self.P = sp.csr_matrix(P)
        self.n = self.P.shape[0]
        self.alpha = float(repulsion)
        degree = np.asarray(self.P.sum(axis=1)).ravel()
        self.L4 = 4.0 * (sp.diags(degree) - self.P).tocsc()
        self.w_minus = 1.0 / (self.n * (self.n - 1))

    def value(self, Z):
        """``E(Z)``."""
        return self._evaluate(Z, gradient=False)[0]

    def value_and_gradient(self, Z):
        """``E(Z)`` and its gradient, an array shaped like ``Z``."""
        return self._evaluate(Z, gradient=True)

    def _evaluate(self, Z, gradient):
        LZ = self.L4 @ Z
        attraction = 0.5 * float(np.sum(Z * LZ))  # sum_nm w_nm ||z_n - z_m||^2 = 2 tr(Z'LZ) = tr(Z' L4 Z) / 2
        KZ, row_sums = np.empty_like(Z) if gradient else None, np.empty(self.n)
        sq = np.einsum("ij,ij->i", Z, Z)
        for start in range(0, self.n, ROW_BLOCK):
            rows = slice(start, min(start + ROW_BLOCK, self.n))
            # ||a - b||^2 = |a|^2 + |b|^2 - 2 a.b: one matrix product per block instead of a (block, N, d) array
            d2 = sq[rows, None] + sq[None, :] - 2.0 * (Z[rows] @ Z.T)
            K = np.exp(-np.maximum(d2, 0.0))
            K[np.arange(K.shape[0]), np.arange(rows.start, rows.stop)] = 0.0  # no self-pairs
            row_sums[rows] = K.sum(axis=1)
            if gradient:
                KZ[rows] = K @ Z
        scale = self.alpha * self.w_minus
        value = attraction + scale * float(row_sums.sum())
        if not gradient:
            return value, None
        # d/dz_n of alpha w- sum_{n != m} exp(-d_nm^2) (both orders of each pair) = -4 alpha w- sum_m K_nm (z_n - z_m)
        return value, LZ - 4.0 * scale * (row_sums[:, None] * Z - KZ)

    def free(self, Z, n_iter):
        """The free embedding: ``E`` minimised from ``Z`` (at most ``n_iter`` steps)."""
        return self.minimise(Z, None, 0.0, n_iter)

    def minimise(self, Z, U, mu, n_iter, tol=1e-4):
        """Minimise ``E(Z) + (mu / 2) ||Z - U||^2`` from ``Z`` by spectral directions.

        Stops after ``n_iter`` steps, when a step moves ``Z`` by less than
        ``tol ||Z||``, or when the line search finds no decrease.
        """
        Z = np.array(Z, dtype=np.float64)
        # the attractive Hessian is singular (translations): a tiny ridge, as in the authors' code, when mu = 0
        ridge = mu + 1e-10 * float(self.L4.diagonal().mean())
        solve = splu((self.L4 + ridge * sp.identity(self.n, format="csc")).tocsc()).solve
        f, G = self._penalised(Z, U, mu, gradient=True)
        for _ in range(n_iter):
            direction = -solve(G)
            slope = float(np.sum(G * direction))
            step = 1.0
            while True:
                candidate = Z + step * direction
                f_new = self._penalised(candidate, U, mu, gradient=False)[0]
                if f_new <= f + ARMIJO * step * slope:
                    break
                step *= SHRINK
                if step < MIN_STEP:
                    return Z
            moved = np.linalg.norm(candidate - Z)
            Z = candidate
            f, G = self._penalised(Z, U, mu, gradient=True)
            if moved <= tol * np.linalg.norm(Z):
                break
        return Z

    def _penalised(self, Z, U, mu, gradient):
        value, G = self._evaluate(Z, gradient)
        if mu == 0 or U is None:
            return value, G
        R = Z - U
        value += 0.5 * mu * float(np.sum(R * R))
        return value, (G + mu * R) if gradient else None
