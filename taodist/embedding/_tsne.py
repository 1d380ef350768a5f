"""t-SNE's objective and its minimisers, on openTSNE's gradients and optimiser.

Thesis eq. 4.1: ``E(Z) = KL(P || Q(Z))`` with Student-t similarities ``Q``.
openTSNE (an optional dependency, imported when a t-SNE is built) computes
the gradient (Barnes-Hut; exact with ``theta = 0``) and runs its gradient
descent with momentum and gains. The augmented Lagrangian's pull
``(mu / 2) ||Z - U||^2`` is added to openTSNE's objective function, so the
Z step is openTSNE's own optimiser on the penalised objective.

openTSNE's gradient is a quarter of the KL divergence's (its learning rates
are set for that; a test checks it against scikit-learn's exact one), so the
pull enters in the same units: ``mu / 4 (Z - U)``.
"""

import numpy as np
import scipy.sparse as sp

#: openTSNE's usual schedule for a free embedding: early exaggeration on a third of the iterations
EXAGGERATION = 12.0
#: Barnes-Hut accuracy of the optimisers' gradients (openTSNE's default); the reported objective is exact
THETA = 0.5

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
        """``KL(P || Q(Z))``, exact (Barnes-Hut with ``theta = 0``)."""
        return self.value_and_gradient(Z)[0]

    def value_and_gradient(self, Z):
        """``KL(P || Q(Z))`` and its gradient, both exact."""
        value, grad = self._tsne.kl_divergence_bh(_c_array(Z), self.P, dof=1,
                                                  bh_params={"theta": 0.0}, should_eval_error=True,
                                                  n_jobs=self.n_jobs)
        return float(value), 4.0 * grad

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
