"""The steps of FISTA that the l1 logistic solvers share, apart from their rows.

The binary solver of decision nodes (:mod:`taodist.solvers.l1_logistic`, and
its PyTorch port :mod:`taodist.solvers.l1_logistic_torch`) and the
multinomial solver of linear leaves (:mod:`taodist.solvers.softmax`) run the
same FISTA: a first step constant from power iterations, a proximal step
(soft-thresholding in a diagonal metric), backtracking until sufficient
decrease, monotone steps with adaptive restart. Their parameters differ in
shape (a vector and a bias, or a ``(D, k)`` matrix and ``k`` biases), so
each solver keeps its own loops over them; the scalar decisions are here,
compiled (numba inlines them into the solvers' loops, with the same
floating-point operations in the same order).
"""

import math

import numba

from .row_kernels import INNER

#: power iterations for the initial Lipschitz estimate of each node or leaf
N_POWER = 4
#: the power-iteration estimate is a lower bound; start slightly above it
LIPSCHITZ_SAFETY = 1.1


@numba.njit(**INNER)
def soft_threshold(v, thr):
    """The proximal step of ``thr |w|`` at ``v``: ``sign(v) max(|v| - thr, 0)``."""
    return v - thr if v > thr else (v + thr if v < -thr else 0.0)


#: a step constant past which a step is taken whatever the test says: it is too short to change anything
L_MAX = 1e300


@numba.njit(**INNER)
def sufficient_decrease(fn, fy, lin, sq, L, slack):
    """Whether a step from ``y`` may be taken with step constant ``L`` (else ``L`` is doubled).

    The smooth part at the new point, ``fn``, must lie under its quadratic
    model at ``y``: ``fy`` plus ``lin`` (the gradient's inner product with the
    step) plus ``L / 2`` times ``sq`` (the step's squared norm in the metric).
    ``slack * |fy|`` allows for rounding in the losses (margins are in the
    rows' precision). Past :data:`L_MAX` the step is taken anyway: with
    float32 rows, rounding in the margins of a node of nearly equal rows can
    keep every step, however short, from passing the test, and doubling ``L``
    would never end (``L`` reaches infinity and the test compares NaN).
    """
    return fn <= fy + lin + 0.5 * L * sq + slack * abs(fy) or L > L_MAX


@numba.njit(**INNER)
def momentum(step, norm, against, decrease, Fn, tol, tk):
    """After an accepted step: whether to stop, whether the momentum restarts, and the next ``beta`` and ``t``.

    ``step`` and ``norm`` are the squared norms of the step and of the new
    point, ``against`` the step's inner product (in the metric) with the
    momentum it overshot (positive: the momentum points against the step),
    ``decrease`` the objective's decrease to ``Fn``. The solver stops when the
    relative step or the relative decrease is at most ``tol``; it restarts the
    momentum (``beta = 0``, ``t = 1``) when it points against the step
    (O'Donoghue & Candes, 2015, the gradient scheme); otherwise ``t`` follows
    FISTA's sequence and ``beta = (t_k - 1) / t_{k+1}``.

    Returns
    -------
    done : bool
    restart : bool
    beta : float
    tk : float
    """
    if math.sqrt(step) <= tol * math.sqrt(norm) or decrease <= tol * abs(Fn):
        return True, False, 0.0, tk
    if against > 0.0:
        return False, True, 0.0, 1.0
    tk1 = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * tk * tk))
    return False, False, (tk - 1.0) / tk1, tk1
