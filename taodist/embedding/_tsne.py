"""t-SNE's objective and its minimisers, on openTSNE's gradients and optimiser.

Thesis eq. 4.1: ``E(Z) = KL(P || Q(Z))`` with Student-t similarities ``Q``.
openTSNE (an optional dependency, imported when a t-SNE is built) computes
the gradient (Barnes-Hut; exact with ``theta = 0``) and runs its gradient
descent with momentum and gains. The augmented Lagrangian's pull
``(mu / 2) ||Z - U||^2`` is added to openTSNE's objective function, so the
Z step is openTSNE's own optimiser on the penalised objective.

openTSNE's gradient is a quarter of the KL divergence's (its learning rates
are set for that; a test checks it against the exact one), so the
pull enters in the same units: ``mu / 4 (Z - U)``.

The objective the estimator reports and selects its tree by (``value``) is
computed here, exactly, over all pairs: openTSNE's Barnes-Hut sum, even with
``theta = 0``, is wrong when points coincide, as they do in a tree's
embedding wherever a leaf maps to a constant.
"""

import numpy as np
import scipy.sparse as sp

#: openTSNE's usual schedule for a free embedding: early exaggeration on a third of the iterations
EXAGGERATION = 12.0
#: Barnes-Hut accuracy of the optimisers' gradients (openTSNE's default); the reported objective is exact
THETA = 0.5
#: rows of the N x N Student-t kernel computed at once by the exact objective (about 8 * ROW_BLOCK * N bytes)
ROW_BLOCK = 256

_INSTALL = "t-SNE needs openTSNE: pip install 'taodist[embedding]' (or pip install openTSNE), or use method='ee'."


def _opentsne():
    try:
        from openTSNE import tsne
    except ImportError as exc:
        raise ImportError(_INSTALL) from exc
    return tsne


class TSNEObjective:
    """t-SNE's objective for fixed joint affinities ``P``; ``minimise`` adds the augmented Lagrangian's pull.

    Parameters
    ----------
    P : sparse matrix of shape (n_samples, n_samples)
        Symmetric joint probabilities summing to 1.
    n_jobs : int, default=1
        openTSNE's threads.
    """

    #: openTSNE's Barnes-Hut gradient is for 1 to 3 dimensions (its FFT one for 1 or 2)
    max_components = 3

    def __init__(self, P, *, n_jobs=1):
        self._tsne = _opentsne()
        P = sp.csr_matrix(P, dtype=np.float64)
        # openTSNE's compiled kernels read C ints
        self.P = sp.csr_matrix((P.data, P.indices.astype(np.int32), P.indptr.astype(np.int32)), shape=P.shape)
        self.n = P.shape[0]
        self.n_jobs = n_jobs

    def value(self, Z):
        """``KL(P || Q(Z))``, exact: every pair, coincident points included."""
        return self._evaluate(Z, gradient=False)[0]

    def value_and_gradient(self, Z):
        """``KL(P || Q(Z))`` and its gradient, both exact."""
        return self._evaluate(Z, gradient=True)

    def _evaluate(self, Z, gradient):
        """The exact KL divergence (and gradient) over all pairs, in row blocks: O(N^2) time, O(N) memory.

        Not openTSNE's Barnes-Hut sum with ``theta = 0``: its quad tree leaves
        coincident points out of each other's normaliser ``sum_{n != m} w_nm``
        (all points at one place gave a KL of -45 where the true value is
        +3.4), and a tree's embedding ``F(X)`` has coincident points whenever
        a leaf's linear map is constant. With ``w_nm = 1 / (1 + ||z_n - z_m||^2)``
        and ``S = sum_{n != m} w_nm``::

            KL = sum p log p - sum p_nm log w_nm + log S
            grad_n = 4 sum_m (p_nm - w_nm / S) w_nm (z_n - z_m)
        """
        Z = np.asarray(Z, dtype=np.float64)
        P = self.P
        rows = np.repeat(np.arange(self.n), np.diff(P.indptr))
        diff = Z[rows] - Z[P.indices]
        w_attr = 1.0 / (1.0 + np.einsum("ij,ij->i", diff, diff))
        p = P.data
        positive = p > 0
        value = float(np.sum(p[positive] * np.log(p[positive])) - np.sum(p * np.log(w_attr)))
        sq = np.einsum("ij,ij->i", Z, Z)
        total = 0.0
        if gradient:
            w2_rows, w2_Z = np.empty(self.n), np.empty_like(Z)
        for start in range(0, self.n, ROW_BLOCK):
            block = slice(start, min(start + ROW_BLOCK, self.n))
            d2 = np.maximum(sq[block, None] + sq[None, :] - 2.0 * (Z[block] @ Z.T), 0.0)
            W = 1.0 / (1.0 + d2)
            W[np.arange(W.shape[0]), np.arange(block.start, block.stop)] = 0.0  # no self-pairs
            total += float(W.sum())
            if gradient:
                W *= W
                w2_rows[block] = W.sum(axis=1)
                w2_Z[block] = W @ Z
        value += float(np.log(total))
        if not gradient:
            return value, None
        # attraction: 4 sum_m p_nm w_nm (z_n - z_m), over P's non-zeros; repulsion: -(4 / S) sum_m w_nm^2 (z_n - z_m)
        attraction = np.zeros_like(Z)
        np.add.at(attraction, rows, (p * w_attr)[:, None] * diff)
        repulsion = (w2_rows[:, None] * Z - w2_Z) / total
        return value, 4.0 * (attraction - repulsion)

    def free(self, Z, n_iter):
        """The free embedding: openTSNE's schedule from ``Z``, early exaggeration first."""
        Z = _c_array(Z)
        early = n_iter // 3
        P = self.P.copy()  # the optimiser exaggerates P in place
        self._descend(Z, P, early, self._tsne.kl_divergence_bh, momentum=0.5, exaggeration=EXAGGERATION,
                      learning_rate=self.n / EXAGGERATION)
        self._descend(Z, P, n_iter - early, self._tsne.kl_divergence_bh, momentum=0.8, learning_rate=self.n)
        return Z

    def minimise(self, Z, U, mu, n_iter):
        """Approximately minimise ``KL(P || Q(Z)) + (mu / 2) ||Z - U||^2``: ``n_iter`` openTSNE steps from ``Z``.

        openTSNE centres the embedding after every step. ``KL`` does not
        change under translation, so the problem is solved in the frame
        where ``U`` has mean zero, where the minimiser has mean zero too.
        """
        shift = U.mean(axis=0)
        Z = _c_array(Z - shift)
        objective = pulled(self._tsne.kl_divergence_bh, U - shift, mu)
        # a step of learning_rate * mu / 4 on the pull alone must not overshoot U
        learning_rate = min(self.n, 4.0 / mu) if mu > 0 else self.n
        self._descend(Z, self.P, n_iter, objective, momentum=0.8, learning_rate=learning_rate)
        return Z + shift

    def _descend(self, Z, P, n_iter, objective, **params):
        if n_iter > 0:
            self._tsne.gradient_descent()(Z, P, n_iter, objective, theta=THETA, n_jobs=self.n_jobs, **params)


def pulled(objective_function, U, mu):
    """openTSNE's ``objective_function`` plus ``(mu / 2) ||Z - U||^2``, as openTSNE's optimiser calls it.

    The value is in the objective's units, the gradient in openTSNE's (a
    quarter of the true one, for both terms). With ``mu = 0`` the function
    returns exactly what ``objective_function`` returns.
    """

    def objective(embedding, P, should_eval_error=False, **params):
        value, grad = objective_function(embedding, P, should_eval_error=should_eval_error, **params)
        if mu == 0:
            return value, grad
        R = embedding - U
        grad += (mu / 4.0) * R
        return (value + 0.5 * mu * float(np.sum(R * R)) if should_eval_error else value), grad

    return objective


def _c_array(Z):
    """A C-ordered float64 copy: openTSNE's quad tree reads rows as contiguous memory (a Fortran-ordered
    embedding crashed it)."""
    return np.array(Z, dtype=np.float64, order="C")
