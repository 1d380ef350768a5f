"""Level-wide l1-regularised logistic regression for TAO decision nodes.

At a decision node TAO solves the surrogate

    min_{w, b}  sum_n c_n log(1 + exp(-s_n (w . x_n + b)))  +  alpha ||w||_1

(``s_n = +1`` where the care point should go right, ``-1`` otherwise; the bias
is not penalised). All decision nodes of one depth are independent, so
:func:`solve_l1_logistic_level` takes the care points of a whole level,
stacked node after node, and solves every node at once.

Method: FISTA (accelerated proximal gradient, soft-thresholding on ``w``),
warm-started from the node's current parameters, with

* preconditioning by an exact change of variables: the rows are centred on
  their weighted mean (``b' = b + mu . w``; the bias is unpenalised, so the
  minimiser is the same) and the steps are taken in the diagonal (Jacobi)
  metric of ``[X - mu, 1]^T C [X - mu, 1]``. The proximal step stays a
  soft-threshold per coordinate (threshold ``alpha / (L d_i)``), so zero
  weights are exact zeros;
* a per-node step constant ``L_j``: a few power iterations give a lower
  estimate of the Lipschitz constant of the smooth part in that metric,
  ``0.25 lambda_max``; before every step ``L_j`` is multiplied by ``shrink``
  (< 1, so the step can grow to the local curvature, which for logistic
  losses is often far below the global bound), then doubled until the
  sufficient-decrease test holds (backtracking). Each of the two, the
  metric and ``shrink``, brings the objective closer to the optimum in a
  given number of iterations, and together they do best;
* monotone steps with adaptive restart (O'Donoghue & Candes, 2015): a step
  that would raise the objective is rejected and the momentum reset (a plain
  proximal-gradient step from the current point then decreases it), and the
  momentum is also reset when it points against the last step (the gradient
  scheme). The returned objective is therefore never above the warm start's;
* per-node stopping: a node stops when the relative change of ``(w, b')`` or
  the relative decrease of its objective in one step drops below ``tol``, or
  after ``max_iter`` iterations.

The rows are read through the compiled kernels of
:mod:`taodist.solvers.row_kernels` (dense or CSR) and the scalar steps are
those of :mod:`taodist.solvers.fista`, both shared with the softmax leaves'
solver. The margins of the extrapolated point are a linear combination of
the margins of the last two iterates, so an iteration reads the node's rows
twice (one pass for the gradient, one for the new margins), plus once per
backtracking step.

Why compiled loops rather than a level-wide numpy iteration: the nodes are
solved one after another ("node-major"), each running all of its iterations
while its rows are still in cache (a node below the root holds a fraction of
the training set), and the nodes of a level are dealt to the threads,
largest first. The alternative, one numpy iteration over all nodes at a time
(a GEMV pair per node per iteration), streams the level from memory twice
per iteration and pays Python overhead per node and iteration: this solver,
line search and objectives included, takes less time than those bare GEMV
pairs.

float32 ``X`` is read as is (half the bytes to stream): margins are dot
products accumulated in float32, as float32 BLAS would; gradients,
objectives and parameters are float64. Memory: ``X`` is not copied (unless
it has another dtype or is not C-contiguous); each thread uses five float64
vectors of length N and a few of length D.

A node whose targets are all on one side has no minimiser (the bias runs
off to infinity, the weights stay 0): it runs ``max_iter`` iterations,
its objective falling towards 0.
"""

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np
import scipy.sparse as sp

from ..utils.parallel import run_parallel
from ..utils.rows import as_csr
from .fista import LIPSCHITZ_SAFETY, N_POWER, momentum, soft_threshold, sufficient_decrease
from .row_kernels import (
    BLOCK_ROWS,
    INNER,
    JIT,
    CSRRows,
    lipschitz_estimate,
    margins_any,
    n_blocks,
    n_cols,
    n_rows,
    rows_metric,
    xt_dot,
)

# --- the loss over a block of rows, over a node's blocks on numba's threads, and either of the two
# (``par`` None or True, as in :func:`taodist.solvers.row_kernels.margins_any`): the same block sums
# added in the same order


@numba.njit(**INNER)
def _loss(z, t, c, lo, hi):
    """``sum c_n log(1 + exp(-s_n z_n))`` over ``lo:hi`` (stable)."""
    f = 0.0
    for n in range(lo, hi):
        zn = z[n]
        m = -zn if t[n] else zn
        f += c[n] * (max(m, 0.0) + math.log1p(math.exp(-abs(zn))))
    return f


@numba.njit(**INNER)
def _loss_and_residual(z, t, c, lo, hi, r):
    """Like :func:`_loss`; also ``r_n = c_n (sigmoid(z_n) - t_n)``, the loss's derivative in ``z_n``."""
    f = 0.0
    for n in range(lo, hi):
        zn = z[n]
        e = math.exp(-abs(zn))
        sig = 1.0 / (1.0 + e) if zn >= 0 else e / (1.0 + e)
        if t[n]:
            f += c[n] * (max(-zn, 0.0) + math.log1p(e))
            r[n] = c[n] * (sig - 1.0)
        else:
            f += c[n] * (max(zn, 0.0) + math.log1p(e))
            r[n] = c[n] * sig
    return f


@numba.njit(parallel=True, **INNER)
def _loss_par(z, t, c, lo, hi, fbuf, r, with_residual):
    for k in numba.prange(n_blocks(hi - lo)):
        a = lo + k * BLOCK_ROWS
        if with_residual:
            fbuf[k] = _loss_and_residual(z, t, c, a, min(a + BLOCK_ROWS, hi), r)
        else:
            fbuf[k] = _loss(z, t, c, a, min(a + BLOCK_ROWS, hi))


@numba.njit(**INNER)
def _loss_sum(z, t, c, lo, hi, fbuf, r, with_residual, par):
    """Loss over ``lo:hi`` as a sum of block sums (and the residuals ``r`` if asked)."""
    f = 0.0
    if par is None:
        for a in range(lo, hi, BLOCK_ROWS):
            if with_residual:
                f += _loss_and_residual(z, t, c, a, min(a + BLOCK_ROWS, hi), r)
            else:
                f += _loss(z, t, c, a, min(a + BLOCK_ROWS, hi))
    else:
        _loss_par(z, t, c, lo, hi, fbuf, r, with_residual)
        for k in range(n_blocks(hi - lo)):
            f += fbuf[k]
    return f


@numba.njit(**INNER)
def _l1(w):
    s = 0.0
    for d in range(w.shape[0]):
        s += abs(w[d])
    return s


# Inlined into its one caller, _solve_nodes, by numba: as a function of its own it was compiled twice
# over in a first run (numba optimises and generates machine code for a function together with every
# function it calls, so this, the solver's bulk, once for itself and once inside _solve_nodes).
# Inlining moves no floating-point operation (both have the same JIT options).
@numba.njit(inline="always", **INNER)
def _solve_node(X, lo, hi, t, c, alpha, w, b0, L0, max_iter, tol, slack, shrink, precondition, zero,
                zx, zxp, zy, zn, r, buf, fbuf, par):
    """FISTA with backtracking and restart on rows ``lo:hi``; ``w`` is updated in place.

    Works on ``(w, b')`` with ``b' = b + mu . w`` (centred rows; the bias is
    unpenalised, so this is an exact change of variables) in the metric
    ``diag(dw, db)`` (see :func:`~taodist.solvers.row_kernels.rows_metric`): the proximal step is a
    soft-threshold per coordinate, ``alpha / (L dw_d)``.
    ``zx, zxp, zy, zn, r`` are length-N scratch arrays (only ``lo:hi`` used).
    Returns ``(b, n_iter, F0, F, L, n_restarts, n_backtracks, converged)``.
    """
    D = n_cols(X)
    mu = np.empty(D)
    dw = np.empty(D)
    db = rows_metric(X, lo, hi, c, precondition, mu, dw)
    xw = w.copy()
    xb = b0
    for d in range(D):
        xb += mu[d] * xw[d]
    xpw = xw.copy()
    yw = xw.copy()
    yb = xb
    nw = np.empty(D)
    gw = np.empty(D)
    cast = np.full(D, zero)  # parameters in X's dtype, for the margins

    shift = 0.0
    for d in range(D):
        cast[d] = xw[d]
        shift += mu[d] * xw[d]
    margins_any(X, lo, hi, cast, xb - shift, zero, zx, par)
    Fx = _loss_sum(zx, t, c, lo, hi, fbuf, r, False, par) + alpha * _l1(xw)
    F0 = Fx
    for i in range(lo, hi):
        zxp[i] = zx[i]
        zy[i] = zx[i]

    if L0 > 0.0:
        L = L0
    else:
        for d in range(D):
            nw[d] = 1.0 / math.sqrt(dw[d]) if dw[d] > 0.0 else 0.0
        L = LIPSCHITZ_SAFETY * lipschitz_estimate(X, lo, hi, c, mu, nw, 1.0 / math.sqrt(db), zero, N_POWER, gw, xpw,
                                                    cast, zn, buf, par)
        for d in range(D):
            xpw[d] = xw[d]
        if not L > 0.0:  # all-zero rows: any step is safe
            L = 1e-12 * (1.0 + abs(Fx))
    # shrinking stops here (a vanishing curvature, e.g. a node with a single class)
    L_min = 1e-10 * L
    tk = 1.0
    n_iter = n_restarts = n_backtracks = 0
    converged = False
    at_x = True  # y == x (no momentum): a rejected step from here means no progress is possible
    while n_iter < max_iter:
        n_iter += 1
        fy = _loss_sum(zy, t, c, lo, hi, fbuf, r, True, par)
        gb = xt_dot(X, lo, hi, r, gw, buf, par)
        for d in range(D):
            gw[d] -= mu[d] * gb
        L = max(L * shrink, L_min)
        while True:  # backtracking on L
            nb = yb - gb / (L * db)
            shift = l1 = 0.0
            lin = (nb - yb) * gb
            sq = db * (nb - yb) * (nb - yb)
            for d in range(D):
                if dw[d] > 0.0:
                    step_d = 1.0 / (L * dw[d])
                    nwd = soft_threshold(yw[d] - gw[d] * step_d, alpha * step_d)
                else:  # constant column
                    nwd = 0.0
                nw[d] = nwd
                cast[d] = nwd
                shift += mu[d] * nwd
                l1 += abs(nwd)
                dd = nwd - yw[d]
                lin += dd * gw[d]
                sq += dw[d] * dd * dd
            margins_any(X, lo, hi, cast, nb - shift, zero, zn, par)
            fn = _loss_sum(zn, t, c, lo, hi, fbuf, r, False, par)
            if sufficient_decrease(fn, fy, lin, sq, L, slack):
                break
            L *= 2.0
            n_backtracks += 1
        Fn = fn + alpha * l1

        if not Fn <= Fx:  # reject: restart the momentum from x
            if at_x:
                converged = True  # a plain prox-gradient step cannot improve (rounding level)
                break
            n_restarts += 1
            tk = 1.0
            yb = xb
            for d in range(D):
                yw[d] = xw[d]
            for i in range(lo, hi):
                zy[i] = zx[i]
            at_x = True
            continue

        # accept
        step = (nb - xb) * (nb - xb)
        norm = nb * nb
        mom = db * (yb - nb) * (nb - xb)  # momentum against the step: restart
        for d in range(D):
            step += (nw[d] - xw[d]) ** 2
            norm += nw[d] * nw[d]
            mom += dw[d] * (yw[d] - nw[d]) * (nw[d] - xw[d])
        done, restart, beta, tk = momentum(step, norm, mom, Fx - Fn, Fn, tol, tk)
        Fx = Fn
        if restart:
            n_restarts += 1
        # x_prev <- x <- new; y <- new + beta (new - x); the margins likewise
        yb = nb + beta * (nb - xb)
        xb = nb
        for d in range(D):
            xpw[d] = xw[d]
            xw[d] = nw[d]
            yw[d] = nw[d] + beta * (nw[d] - xpw[d])
        for i in range(lo, hi):
            zxp[i] = zx[i]
            zx[i] = zn[i]
            zy[i] = zn[i] + beta * (zn[i] - zxp[i])
        if done:
            converged = True
            break
        at_x = beta == 0.0

    shift = 0.0
    for d in range(D):
        w[d] = xw[d]
        shift += mu[d] * xw[d]
    return xb - shift, n_iter, F0, Fx, L, n_restarts, n_backtracks, converged


@numba.njit(**JIT)
def _solve_nodes(X, bounds, t, c, alpha, W, b, L0, max_iter, tol, slack, shrink, precondition, zero, nodes, par,
                 n_iter, F0, F, L, n_restarts, n_backtracks, converged):
    """Solve ``nodes`` one after the other, results in place.

    Either one thread's share of a level (``par`` None), or, with ``par``
    True, every node in turn with its row blocks spread over numba's threads.
    """
    N = n_rows(X)
    nb = 1
    if par is not None:
        for j in nodes:
            nb = max(nb, n_blocks(bounds[j + 1] - bounds[j]))
    buf = np.empty((nb, n_cols(X) + 1))
    fbuf = np.empty(nb)
    zx = np.empty(N)
    zxp = np.empty(N)
    zy = np.empty(N)
    zn = np.empty(N)
    r = np.empty(N)
    for j in nodes:
        res = _solve_node(X, bounds[j], bounds[j + 1], t, c, alpha[j], W[j], b[j], L0[j], max_iter, tol, slack,
                          shrink, precondition, zero, zx, zxp, zy, zn, r, buf, fbuf, par)
        b[j], n_iter[j], F0[j], F[j], L[j], n_restarts[j], n_backtracks[j], converged[j] = res


def _balanced_groups(sizes, n_groups):
    """Non-empty nodes dealt, largest first, to the least-loaded of ``n_groups`` groups."""
    nodes = np.flatnonzero(sizes > 0)
    nodes = nodes[np.argsort(-sizes[nodes], kind="stable")]
    load = np.zeros(max(1, min(n_groups, nodes.size)))
    members = [[] for _ in load]
    for j in nodes:
        g = int(np.argmin(load))
        members[g].append(j)
        load[g] += sizes[j]
    return [np.array(m, dtype=np.int64) for m in members if m]


def checked_level(N, bounds, target, weight, alpha):
    """A level's ``bounds``, ``target``, ``weight`` and per-node ``alpha`` as the solvers take them, checked."""
    bounds = np.asarray(bounds, dtype=np.int64)
    if bounds.ndim != 1 or bounds.size < 1 or bounds[0] != 0 or bounds[-1] != N or np.any(np.diff(bounds) < 0):
        raise ValueError("bounds must be non-decreasing from 0 to X.shape[0]")
    target = np.ascontiguousarray(target, dtype=np.bool_)
    weight = np.ascontiguousarray(weight, dtype=np.float64)
    if target.shape != (N,) or weight.shape != (N,):
        raise ValueError("target and weight must have shape (X.shape[0],)")
    alpha = np.broadcast_to(np.asarray(alpha, dtype=np.float64), (bounds.size - 1,)).copy()
    return bounds, target, weight, alpha


def solve_l1_logistic_level(X, bounds, target, weight, alpha, W0, b0, *, max_iter=100, tol=1e-4, lipschitz=None,
                            n_threads=None, shrink=0.8, precondition=True, row_parallel=False):
    """Solve the l1 logistic surrogate of every decision node of a level.

    Node ``j`` minimises, over ``w`` and an unpenalised bias ``b``,
    ``sum_n c_n log(1 + exp(-s_n (w . x_n + b))) + alpha_j ||w||_1`` over its
    rows ``X[bounds[j]:bounds[j + 1]]``, with ``s_n = +1`` where
    ``target[n]`` and ``-1`` elsewhere, by FISTA warm-started at
    ``(W0[j], b0[j])`` (see the module docstring).

    Parameters
    ----------
    X : ndarray of shape (N, D), float32 or float64
        Care points of all nodes, node after node. Other dtypes and
        non-contiguous arrays are converted (one copy).
    bounds : array-like of int, shape (n_nodes + 1,)
        Non-decreasing row offsets, ``bounds[0] == 0`` and
        ``bounds[-1] == N``.
    target : ndarray of bool, shape (N,)
        True where the point should go right.
    weight : ndarray of shape (N,)
        Positive weights ``c_n``.
    alpha : float or ndarray of shape (n_nodes,)
        Per-node l1 penalty.
    W0 : ndarray of shape (n_nodes, D)
        Warm start (the nodes' current weights).
    b0 : ndarray of shape (n_nodes,)
        Warm-start biases.
    max_iter : int, default=100
        Iterations per node (proximal steps, accepted or rejected).
    tol : float, default=1e-4
        A node stops when ``||(w, b) - (w', b')|| <= tol ||(w, b)||`` or its
        objective decreases by at most ``tol`` times its value in one step.
    lipschitz : ndarray of shape (n_nodes,), optional
        Initial step constants ``L_j`` in the solver's metric (e.g.
        ``info["lipschitz"]`` of an earlier solve of the same rows with the
        same ``precondition``); estimated when missing or ``<= 0``. Too small
        a value is corrected by backtracking.
    n_threads : int, optional
        Threads; default ``numba.get_num_threads()``. Nodes are dealt to
        groups, largest first, and the groups solved in parallel on Python
        threads (the compiled kernel releases the GIL), each node by one
        thread -- unless ``row_parallel``.
    shrink : float, default=0.8
        ``L_j`` is multiplied by this before every step (then backtracked):
        1 gives classical monotone-``L`` FISTA.
    precondition : bool, default=True
        Centre and scale as described in the module docstring; False gives
        plain FISTA in the original variables.
    row_parallel : bool, default=False
        Solve the nodes one at a time, each one's blocks of 512 rows spread
        over ``n_threads`` numba threads: for levels with fewer nodes than
        threads (the root). It synchronises the threads several times per
        iteration, so it only pays on otherwise idle cores: faster than one
        thread when the cores are free, slower when other processes keep
        them busy. Results are the same bits either way
        (and for any ``n_threads``): sums over rows are taken block by
        block, in block order.

    Returns
    -------
    W : ndarray of shape (n_nodes, D), float64
    b : ndarray of shape (n_nodes,), float64
    info : dict of ndarrays of shape (n_nodes,)
        ``n_iter`` (iterations run; 0 for an empty node), ``objective0``
        (surrogate at the warm start), ``objective`` (at the answer; never
        above ``objective0``), ``lipschitz`` (final ``L_j``), ``n_restarts``,
        ``n_backtracks``, ``converged`` (stopped by ``tol``, or by a step
        that could not decrease the objective, rather than by ``max_iter``).
        Empty nodes return their warm start, objective 0, ``converged``.
    """
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    if sp.issparse(X):  # CSR kernels: the rows are never densified (nor centred)
        X = as_csr(X, dtype)
        N, D = X.shape
        X = CSRRows(X.indptr, X.indices, X.data, N, D)
    else:
        X = np.ascontiguousarray(X, dtype=dtype)
        N, D = X.shape
    bounds, target, weight, alpha = checked_level(N, bounds, target, weight, alpha)
    n_nodes = bounds.size - 1
    W = np.array(W0, dtype=np.float64, order="C", copy=True).reshape(n_nodes, D)
    b = np.array(b0, dtype=np.float64, copy=True).reshape(n_nodes)
    L0 = np.zeros(n_nodes) if lipschitz is None else np.array(lipschitz, dtype=np.float64).reshape(n_nodes)
    sizes = np.diff(bounds)
    n_threads = numba.get_num_threads() if n_threads is None else max(1, int(n_threads))
    groups = _balanced_groups(sizes, 1 if row_parallel else n_threads)
    # rounding allowance in the sufficient-decrease test (margins are in X's precision)
    slack = 1e-6 if dtype == np.float32 else 1e-13
    info = {
        "n_iter": np.zeros(n_nodes, dtype=np.int64),
        "objective0": np.zeros(n_nodes),
        "objective": np.zeros(n_nodes),
        "lipschitz": L0.copy(),
        "n_restarts": np.zeros(n_nodes, dtype=np.int64),
        "n_backtracks": np.zeros(n_nodes, dtype=np.int64),
        "converged": sizes == 0,
    }
    outputs = [info[k] for k in ("n_iter", "objective0", "objective", "lipschitz", "n_restarts", "n_backtracks",
                                 "converged")]

    def run(nodes, par=None):
        _solve_nodes(X, bounds, target, weight, alpha, W, b, L0, int(max_iter), float(tol), slack, float(shrink),
                     bool(precondition), dtype.type(0), nodes, par, *outputs)

    if row_parallel and groups:
        previous = numba.get_num_threads()
        numba.set_num_threads(min(n_threads, numba.config.NUMBA_NUM_THREADS))
        try:
            run_parallel(run, groups[0], True)
        finally:
            numba.set_num_threads(previous)
    elif len(groups) == 1:
        run(groups[0])
    elif groups:  # the kernel releases the GIL; nodes are disjoint, so are the outputs
        with ThreadPoolExecutor(len(groups)) as pool:
            list(pool.map(run, groups))
    return W, b, info


def solve_l1_logistic(X, target, weight, alpha, w0=None, b0=None, *, max_iter=100, tol=1e-4):
    """One decision node: :func:`solve_l1_logistic_level` with a single node.

    Same call and return convention as :func:`taodist.tao.node_solvers.solve_oblique_saga`
    (``w0``/``b0`` default to zero), so it can serve as a per-node solver.

    Returns
    -------
    w : ndarray of shape (n_features,)
    b : float
    """
    X = X if sp.issparse(X) else np.asarray(X)
    D = X.shape[1]
    w0 = np.zeros(D) if w0 is None else np.asarray(w0, dtype=np.float64).reshape(1, D)
    b0 = 0.0 if b0 is None else float(b0)
    W, b, _ = solve_l1_logistic_level(X, [0, X.shape[0]], target, weight, [alpha], w0.reshape(1, D), [b0],
                                      max_iter=max_iter, tol=tol)
    return W[0], float(b[0])


def first_run_compiles():
    """Whether this solver's compiled code is missing from numba's cache (the first fit then compiles it).

    Reads numba's cache index of :func:`_solve_nodes` (``cache=True``), where
    numba keeps it for this installation (or ``NUMBA_CACHE_DIR``). Numba's
    cache layout is not public API: if it cannot be read, the answer is False
    (a missing notice rather than a wrong one).
    """
    try:
        return not os.path.exists(_solve_nodes._cache._cache_file._index_path)
    except Exception:  # noqa: BLE001 -- any change in numba's internals: no notice
        return False


def numba_cache_location():
    """The folder where numba caches this solver's compiled code (``NUMBA_CACHE_DIR`` or beside the source).

    Read from numba's cache of :func:`_solve_nodes`, not public API: None
    when it cannot be read.
    """
    try:
        return os.path.dirname(_solve_nodes._cache._cache_file._index_path)
    except Exception:  # noqa: BLE001 -- any change in numba's internals: say nothing rather than something wrong
        return None
