"""Compiled row kernels shared by the FISTA solvers (numba): dense rows and CSR rows alike.

Both FISTA solvers (:mod:`taodist.solvers.l1_logistic` for decision nodes,
:mod:`taodist.solvers.softmax` for linear leaves) read their rows only
through the kernels here:

* :func:`margins_any` and :func:`xt_dot`: one weight vector's margins
  ``X[lo:hi] @ w + b`` and the gradient product ``X[lo:hi].T @ r``, serially
  or with the rows' blocks spread over numba's threads; sums over rows are
  taken per block of :data:`BLOCK_ROWS` rows and the block sums added in
  order, so both give the same bits;
* :func:`rows_metric`: a node's weighted column mean (the centring) and the
  diagonal (Jacobi) metric of its centred rows;
* :func:`lipschitz_estimate`: a power-iteration estimate of the smooth part's
  Lipschitz constant in that metric (the solvers' first step constant);
* :func:`mc_margins` and :func:`mc_xt_dot`: the products for ``k`` weight
  vectors at once (the multinomial solver).

``X`` is a C-contiguous 2-D array or :class:`CSRRows`. Each kernel has a
dense and a CSR twin, whose loops differ (a dense row is read contiguously,
a CSR row through its column indices); a dispatcher -- a plain function
with a numba overload -- picks the twin by the type of ``X`` when numba
compiles the caller, so each solver is written once for both layouts.
"""

import math
from collections import namedtuple

import numba
import numpy as np
from numba import types
from numba.extending import overload

# Reassociation lets LLVM vectorise the dot-product reduction; nothing else
# in these kernels assumes finite math.
_FASTMATH = {"reassoc", "contract"}
# Float division by zero gives inf/nan, as in numpy, rather than raising
# (and no zero-divisor checks in the loops).
JIT = dict(cache=True, nogil=True, error_model="numpy")
#: For functions that only compiled code calls: numba then builds no Python-callable (nor C-callable)
#: wrapper for them, part of what a first run spends compiling (a wrapper per function and signature).
NO_WRAPPERS = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True)
INNER = dict(JIT, **NO_WRAPPERS)


#: Rows per block. Sums over rows (gradients, losses) are formed per block
#: and the block sums added in order, so a node gives the same bits whether
#: its blocks run on one thread or on many (``row_parallel``).
BLOCK_ROWS = 512


@numba.njit(**INNER)
def n_blocks(n):
    """Blocks of :data:`BLOCK_ROWS` rows that cover ``n`` rows."""
    return (n + BLOCK_ROWS - 1) // BLOCK_ROWS


#: Sparse rows as the kernels take them: a scipy CSR matrix's arrays and its shape. The kernels
#: below dispatch on the type of ``X`` (a 2-D array or this tuple) when numba compiles them.
#: (Flat fields: numba's parallel loops do not take a tuple nested in a tuple.)
CSRRows = namedtuple("CSRRows", "indptr indices data n_rows n_cols")


# --- one weight vector's margins and gradient product: dense and CSR twins, and their dispatchers


@numba.njit(fastmath=_FASTMATH, **JIT)
def _margins(X, lo, hi, w, b, zero, out):
    """``out[lo:hi] = X[lo:hi] @ w + b``, dot products in ``w``'s dtype."""
    D = X.shape[1]
    for n in range(lo, hi):
        acc = zero
        for d in range(D):
            acc += X[n, d] * w[d]
        out[n] = acc + b


@numba.njit(fastmath=_FASTMATH, **JIT)
def _xt_dot_block(X, lo, hi, r, acc):
    """``acc[:D] = X[lo:hi].T @ r[lo:hi]``, ``acc[D] = sum(r[lo:hi])`` (float64)."""
    D = X.shape[1]
    for d in range(D + 1):
        acc[d] = 0.0
    for n in range(lo, hi):
        rn = r[n]
        acc[D] += rn
        for d in range(D):
            acc[d] += rn * X[n, d]


@numba.njit(fastmath=_FASTMATH, **JIT)
def _margins_csr(X, lo, hi, w, b, zero, out):
    """:func:`_margins` of :class:`CSRRows`: each dot product runs over the row's stored entries."""
    indptr, indices, data = X.indptr, X.indices, X.data
    for n in range(lo, hi):
        acc = zero
        for k in range(indptr[n], indptr[n + 1]):
            acc += data[k] * w[indices[k]]
        out[n] = acc + b


@numba.njit(fastmath=_FASTMATH, **JIT)
def _xt_dot_block_csr(X, lo, hi, r, acc):
    """:func:`_xt_dot_block` of :class:`CSRRows` (a scatter-add of the stored entries)."""
    D = X.n_cols
    indptr, indices, data = X.indptr, X.indices, X.data
    for d in range(D + 1):
        acc[d] = 0.0
    for n in range(lo, hi):
        rn = r[n]
        acc[D] += rn
        for k in range(indptr[n], indptr[n + 1]):
            acc[indices[k]] += rn * data[k]


def rows_margins(X, lo, hi, w, b, zero, out):
    """:func:`_margins` or :func:`_margins_csr`, chosen by the type of ``X`` (compiled code: its overload)."""
    kernel = _margins if isinstance(X, np.ndarray) else _margins_csr
    return kernel(X, lo, hi, w, b, zero, out)


def _rows_xt_dot(X, lo, hi, r, acc):
    """:func:`_xt_dot_block` or :func:`_xt_dot_block_csr` (compiled code: its overload)."""
    kernel = _xt_dot_block if isinstance(X, np.ndarray) else _xt_dot_block_csr
    return kernel(X, lo, hi, r, acc)


def rows_metric(X, lo, hi, c, precondition, mu, dw):
    """:func:`_metric` or :func:`_metric_csr` (compiled code: its overload)."""
    kernel = _metric if isinstance(X, np.ndarray) else _metric_csr
    return kernel(X, lo, hi, c, precondition, mu, dw)


def n_cols(X):
    """Columns of dense rows or :class:`CSRRows` (compiled code: its overload)."""
    return X.shape[1] if isinstance(X, np.ndarray) else X.n_cols


def n_rows(X):
    """Rows of dense rows or :class:`CSRRows` (compiled code: its overload)."""
    return X.shape[0] if isinstance(X, np.ndarray) else X.n_rows


@overload(n_cols, jit_options=NO_WRAPPERS)
def _overload_n_cols(X):
    return (lambda X: X.shape[1]) if isinstance(X, types.Array) else (lambda X: X.n_cols)


@overload(n_rows, jit_options=NO_WRAPPERS)
def _overload_n_rows(X):
    return (lambda X: X.shape[0]) if isinstance(X, types.Array) else (lambda X: X.n_rows)


@overload(rows_margins, jit_options=NO_WRAPPERS)
def _overload_rows_margins(X, lo, hi, w, b, zero, out):
    kernel = _margins if isinstance(X, types.Array) else _margins_csr
    return lambda X, lo, hi, w, b, zero, out: kernel(X, lo, hi, w, b, zero, out)


@overload(_rows_xt_dot, jit_options=NO_WRAPPERS)
def _overload_rows_xt_dot(X, lo, hi, r, acc):
    kernel = _xt_dot_block if isinstance(X, types.Array) else _xt_dot_block_csr
    return lambda X, lo, hi, r, acc: kernel(X, lo, hi, r, acc)


# --- the same, block by block, on numba's threads (for nodes larger than a thread's share)
@numba.njit(parallel=True, **INNER)
def _margins_par(X, lo, hi, w, b, zero, out):
    for k in numba.prange(n_blocks(hi - lo)):
        a = lo + k * BLOCK_ROWS
        rows_margins(X, a, min(a + BLOCK_ROWS, hi), w, b, zero, out)


@numba.njit(parallel=True, **INNER)
def _xt_dot_par(X, lo, hi, r, buf):
    for k in numba.prange(n_blocks(hi - lo)):
        a = lo + k * BLOCK_ROWS
        _rows_xt_dot(X, a, min(a + BLOCK_ROWS, hi), r, buf[k])


# --- dispatch: serial (``par is None``) or block-parallel (``par`` True),
# the same block sums added in the same order. The test is on ``None`` so
# that numba prunes the other branch at compile time: the serial solver
# does not compile (or load) the parallel kernels.
@numba.njit(**INNER)
def margins_any(X, lo, hi, w, b, zero, out, par):
    """``out[lo:hi] = X[lo:hi] @ w + b``, dot products in ``w``'s dtype (``zero``: a 0 of that dtype)."""
    if par is None:
        rows_margins(X, lo, hi, w, b, zero, out)
    else:
        _margins_par(X, lo, hi, w, b, zero, out)


@numba.njit(**INNER)
def _add_block(g, acc, D):
    for d in range(D):
        g[d] += acc[d]
    return acc[D]


@numba.njit(**INNER)
def xt_dot(X, lo, hi, r, g, buf, par):
    """``g = X[lo:hi].T @ r[lo:hi]`` in float64; returns ``sum(r[lo:hi])``. ``buf``: (blocks, D + 1) scratch."""
    D = n_cols(X)
    for d in range(D):
        g[d] = 0.0
    s = 0.0
    if par is None:
        for a in range(lo, hi, BLOCK_ROWS):
            _rows_xt_dot(X, a, min(a + BLOCK_ROWS, hi), r, buf[0])
            s += _add_block(g, buf[0], D)
    else:
        _xt_dot_par(X, lo, hi, r, buf)
        for k in range(n_blocks(hi - lo)):
            s += _add_block(g, buf[k], D)
    return s


# --- a node's metric and first step constant


@numba.njit(**INNER)
def lipschitz_estimate(X, lo, hi, c, mu, sw, sb, zero, n_power, v, g, p, u, buf, par):
    """Power-iteration (Rayleigh) estimate of the smooth part's Lipschitz constant in the scaled variables.

    That is ``0.25 lambda_max(S [Xc, 1]^T C [Xc, 1] S)`` with ``Xc = X - mu`` and
    ``S = diag(sw, sb)``, a lower bound approached from below.
    """
    D = n_cols(X)
    for d in range(D):
        v[d] = 1.0
    vb = 1.0
    lam = 0.0
    for _ in range(n_power):
        norm = vb * vb
        for d in range(D):
            norm += v[d] * v[d]
        norm = math.sqrt(norm)
        if norm == 0.0:
            break
        shift = 0.0
        for d in range(D):
            v[d] /= norm
            p[d] = sw[d] * v[d]
            shift += mu[d] * p[d]
        vb /= norm
        margins_any(X, lo, hi, p, sb * vb - shift, zero, u, par)
        for i in range(lo, hi):
            u[i] *= c[i]
        gb = xt_dot(X, lo, hi, u, g, buf, par)
        lam = vb * sb * gb
        for d in range(D):
            g[d] = sw[d] * (g[d] - mu[d] * gb)
            lam += v[d] * g[d]
            v[d] = g[d]
        vb = sb * gb
    return 0.25 * lam


@numba.njit(**JIT)
def _metric(X, lo, hi, c, precondition, mu, dw):
    """Centre ``mu`` and diagonal metric ``(dw, db)`` of a node; returns ``db``.

    With ``precondition``: ``mu`` is the weighted column mean and the metric the
    diagonal of ``[Xc, 1]^T C [Xc, 1]`` (Jacobi). A column whose entry is below
    ``1e-12`` times the largest is constant on the node: its entry is set to 0,
    which marks its weight as fixed at 0 (the centred bias absorbs it, so the
    margins do not change and the penalty drops). Otherwise ``mu = 0`` and the
    metric is the identity (plain FISTA).
    """
    D = X.shape[1]
    for d in range(D):
        mu[d] = 0.0
        dw[d] = 1.0
    if not precondition:
        return 1.0
    csum = 0.0
    for d in range(D):
        dw[d] = 0.0
    for i in range(lo, hi):
        csum += c[i]
        for d in range(D):
            mu[d] += c[i] * X[i, d]
    for d in range(D):
        mu[d] /= max(csum, 1e-300)
    for i in range(lo, hi):
        for d in range(D):
            e = X[i, d] - mu[d]
            dw[d] += c[i] * e * e
    return _finish_metric(csum, mu, dw)


@numba.njit(**JIT)
def _metric_csr(X, lo, hi, c, precondition, mu, dw):
    """:func:`_metric` of :class:`CSRRows`.

    The centring is never applied to the rows (they would become dense):
    a column's implicit zeros add ``(0 - mu)^2`` per unit of their weight.
    """
    D = X.n_cols
    for d in range(D):
        mu[d] = 0.0
        dw[d] = 1.0
    if not precondition:
        return 1.0
    indptr, indices, data = X.indptr, X.indices, X.data
    stored = np.zeros(D)  # weight of the rows where column d has a stored entry
    csum = 0.0
    for d in range(D):
        dw[d] = 0.0
    for i in range(lo, hi):
        csum += c[i]
        for k in range(indptr[i], indptr[i + 1]):
            mu[indices[k]] += c[i] * data[k]
    for d in range(D):
        mu[d] /= max(csum, 1e-300)
    for i in range(lo, hi):
        for k in range(indptr[i], indptr[i + 1]):
            j = indices[k]
            e = data[k] - mu[j]
            dw[j] += c[i] * e * e
            stored[j] += c[i]
    for d in range(D):
        dw[d] += max(csum - stored[d], 0.0) * mu[d] * mu[d]
    return _finish_metric(csum, mu, dw)


@numba.njit(**INNER)
def _finish_metric(csum, mu, dw):
    """The end of :func:`_metric`: no weight means no scaling; near-constant columns are fixed at 0."""
    D = mu.shape[0]
    if not csum > 0.0:  # no weight: nothing to scale by
        for d in range(D):
            mu[d] = 0.0
            dw[d] = 1.0
        return 1.0
    top = csum
    for d in range(D):
        top = max(top, dw[d])
    for d in range(D):
        if dw[d] < 1e-12 * top:
            dw[d] = 0.0
    return csum


@overload(rows_metric, jit_options=NO_WRAPPERS)
def _overload_rows_metric(X, lo, hi, c, precondition, mu, dw):
    kernel = _metric if isinstance(X, types.Array) else _metric_csr
    return lambda X, lo, hi, c, precondition, mu, dw: kernel(X, lo, hi, c, precondition, mu, dw)


# --- the products for k weight vectors at once (the multinomial solver), float64 sums


@numba.njit(fastmath=_FASTMATH, **JIT)
def _mc_margins_dense(X, WT, cb, Z):
    """``Z = X @ WT + cb`` for dense rows (``WT`` is ``(D, k)``), accumulated in float64."""
    N, D = X.shape
    k = WT.shape[1]
    for n in range(N):
        for j in range(k):
            Z[n, j] = cb[j]
        for d in range(D):
            x = np.float64(X[n, d])
            if x != 0.0:
                for j in range(k):
                    Z[n, j] += x * WT[d, j]


@numba.njit(fastmath=_FASTMATH, **JIT)
def _mc_margins_csr(X, WT, cb, Z):
    """:func:`_mc_margins_dense` of :class:`CSRRows`: each row's stored entries only."""
    indptr, indices, data = X.indptr, X.indices, X.data
    k = WT.shape[1]
    for n in range(X.n_rows):
        for j in range(k):
            Z[n, j] = cb[j]
        for p in range(indptr[n], indptr[n + 1]):
            x = np.float64(data[p])
            d = indices[p]
            for j in range(k):
                Z[n, j] += x * WT[d, j]


@numba.njit(fastmath=_FASTMATH, **JIT)
def _mc_xt_dot_dense(X, R, G):
    """``G = X.T @ R`` (``(D, k)``, float64) for dense rows."""
    N, D = X.shape
    k = R.shape[1]
    G[:, :] = 0.0
    for n in range(N):
        for d in range(D):
            x = np.float64(X[n, d])
            if x != 0.0:
                for j in range(k):
                    G[d, j] += x * R[n, j]


@numba.njit(fastmath=_FASTMATH, **JIT)
def _mc_xt_dot_csr(X, R, G):
    """:func:`_mc_xt_dot_dense` of :class:`CSRRows` (a scatter-add of the stored entries)."""
    indptr, indices, data = X.indptr, X.indices, X.data
    k = R.shape[1]
    G[:, :] = 0.0
    for n in range(X.n_rows):
        for p in range(indptr[n], indptr[n + 1]):
            x = np.float64(data[p])
            d = indices[p]
            for j in range(k):
                G[d, j] += x * R[n, j]


def mc_margins(X, WT, cb, Z):
    """``Z = X @ WT + cb`` for ``k`` weight vectors ``WT`` (D, k), accumulated in float64.

    Dense or CSR kernel, chosen by the type of ``X`` (compiled code: its overload).
    """
    kernel = _mc_margins_dense if isinstance(X, np.ndarray) else _mc_margins_csr
    return kernel(X, WT, cb, Z)


def mc_xt_dot(X, R, G):
    """``G = X.T @ R`` (D, k) in float64, dense or CSR by the type of ``X`` (compiled code: its overload)."""
    kernel = _mc_xt_dot_dense if isinstance(X, np.ndarray) else _mc_xt_dot_csr
    return kernel(X, R, G)


@overload(mc_margins, jit_options=NO_WRAPPERS)
def _overload_mc_margins(X, WT, cb, Z):
    kernel = _mc_margins_dense if isinstance(X, types.Array) else _mc_margins_csr
    return lambda X, WT, cb, Z: kernel(X, WT, cb, Z)


@overload(mc_xt_dot, jit_options=NO_WRAPPERS)
def _overload_mc_xt_dot(X, R, G):
    kernel = _mc_xt_dot_dense if isinstance(X, types.Array) else _mc_xt_dot_csr
    return lambda X, R, G: kernel(X, R, G)

