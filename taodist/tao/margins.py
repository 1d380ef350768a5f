"""Margins of a chunk's rows at decision nodes: the compiled kernels, and where points lie from a hyperplane.

Two kinds of margins are computed here. A chunk's own margins
(:func:`write_margins`) route its rows: TAO reads only their signs, so a
chunk with float32 solver rows computes them from a float32 product and
recomputes in float64 only where the sign could differ. A candidate's
margins (:func:`oblique_margins`) decide whether it is accepted and how far
its hyperplane must move off the nearest point: those are float64, each
row's sum taken in column order, whatever the layout of the rows.

:class:`MarginExtremes` summarises where the points reaching a node lie
from its hyperplane; its :meth:`~MarginExtremes.clearing_shift` moves a
hyperplane off a point that lies on it.
"""

from typing import NamedTuple

import numba
import numpy as np
import scipy.sparse as sp

from ..model.kinds import OBLIQUE

#: rows handled at once where a whole chunk would make a large temporary (the
#: NaN check's mask, a candidate hyperplane's gathered columns)
EVAL_BLOCK_ROWS = 65536

#: float32's unit roundoff, for the error bound of float32 margins (see write_margins)
_FLOAT32_ROUNDOFF = 2.0 ** -24

#: rows of a float32 margin product taken at once: its result (rows x nodes) stays in cache while
#: it is written out
_UPDATE_BLOCK_ROWS = 4096


class MarginExtremes(NamedTuple):
    """Where the points reaching a node lie from its hyperplane (the point closest to it on either side).

    Combined over chunks with :meth:`merged`, starting from :data:`NO_MARGINS`.
    """

    max_abs: float  # largest |margin|
    min_pos: float  # smallest margin >= 0 (inf: none)
    max_neg: float  # largest margin < 0 (-inf: none)

    @classmethod
    def of(cls, m):
        """The extremes of margins ``m``."""
        return cls(np.abs(m).max(initial=0.0), m[m >= 0].min(initial=np.inf), m[m < 0].max(initial=-np.inf))

    def merged(self, other):
        """The extremes of both sets of points."""
        return MarginExtremes(max(self.max_abs, other.max_abs), min(self.min_pos, other.min_pos),
                              max(self.max_neg, other.max_neg))

    def clearing_shift(self):
        """Bias shift keeping every point clear of the hyperplane (0.0 when none is close to it).

        A care point with margin ~1e-17 could be routed differently by two
        correct summation orders (the accept test, the batched router, a user's
        own dot product). When one lies that close, move the hyperplane to the
        middle of the gap between the two sides; no decision changes.
        """
        max_abs, min_pos, max_neg = self
        tol = 1e-9 * (1.0 + max_abs)
        if min_pos > tol and max_neg < -tol:
            return 0.0
        if not np.isfinite(max_neg):  # every care point on the right
            return 2 * tol - min_pos
        if not np.isfinite(min_pos):
            return -2 * tol - max_neg
        return -(min_pos + max_neg) / 2


#: the extremes of no points: what :meth:`MarginExtremes.merged` starts from
NO_MARGINS = MarginExtremes(0.0, np.inf, -np.inf)


@numba.njit(nogil=True, cache=True, error_model="numpy")
def row_margins(X, rows, cols, w, b, out):
    """``out[i] = X[rows[i], cols] . w + b``: no gathered copy of the rows, and the GIL released.

    Four rows at a time: each row's sum is still taken in column order from
    0.0 (the same bits as one row at a time), but the four sums are
    independent, so the additions overlap instead of waiting on each other.
    """
    n = rows.size
    quad = n - n % 4
    for i in range(0, quad, 4):
        x0, x1, x2, x3 = X[rows[i]], X[rows[i + 1]], X[rows[i + 2]], X[rows[i + 3]]
        s0 = s1 = s2 = s3 = 0.0
        for k in range(cols.size):
            c, wk = cols[k], w[k]
            s0 += x0[c] * wk
            s1 += x1[c] * wk
            s2 += x2[c] * wk
            s3 += x3[c] * wk
        out[i], out[i + 1], out[i + 2], out[i + 3] = s0 + b, s1 + b, s2 + b, s3 + b
    for i in range(quad, n):
        x = X[rows[i]]
        s = 0.0
        for k in range(cols.size):
            s += x[cols[k]] * w[k]
        out[i] = s + b


def oblique_margins(X, rows, w, b):
    """``X[rows] @ w + b``, reading only w's non-zero columns.

    Dense rows go through a compiled loop that releases the GIL
    (:func:`row_margins`): the gathered ``X[rows][:, nz]`` copy it replaces
    held the GIL for a large part of a TAO level and kept threads from
    scaling.
    """
    if sp.issparse(X):  # sparse rows times a dense vector: no gather, no dense temporary
        return X[rows] @ w + b
    nz = np.flatnonzero(w)
    m = np.empty(rows.size)
    dense = np.asarray(X) if isinstance(X, np.ndarray) else None  # a memory map as a plain array (no copy)
    if dense is not None and dense.dtype in (np.float32, np.float64) and dense.flags.c_contiguous:
        row_margins(dense, np.ascontiguousarray(rows, dtype=np.intp), nz, np.ascontiguousarray(w[nz], np.float64),
                    float(b), m)
        return m
    for s in range(0, rows.size, EVAL_BLOCK_ROWS):  # other arrays (strided views, other dtypes): gathered blocks
        r = rows[s:s + EVAL_BLOCK_ROWS]
        m[s:s + r.size] = X[np.ix_(r, nz)] @ w[nz] + b
    return m


def write_margins(chunk, tree, nodes, dest, cols, recheck_entries=False):
    """``dest[:, cols[j]] =`` the chunk's margins at ``nodes[j]``, with the signs of the float64 margins.

    TAO reads only the signs of a chunk's margins (which way a row goes;
    :func:`~taodist.tao.chunks.chunk_boundaries` computes the values it
    needs). So a chunk with float32 solver rows computes oblique margins as
    a float32 product, which moves half the bytes of the float64 one (the
    update is a pass over all rows), and recomputes in float64 the rows
    whose float32 margin is within its error bound of 0 at some node: there
    the sign could differ. The bound:
    ``|fl32(x.w) - x.w| <= 2 (D + 3) u sum_j max|X_j| |w_j|``
    (``u = 2^-24``; the standard bound for a ``D``-term dot product with
    rounded inputs is ``(D + 2) u (1 + O(u))`` times the same sum, whatever
    the summation order, and the factor 2 is margin). Axis nodes and sparse
    or float64 solver rows take :meth:`~taodist.model.tree.Tree.decision_margins`.

    ``dest`` is the chunk's margins in an update: writing there block by
    block, with the float32 product's bias and bound test in the same pass,
    leaves out four passes over a (rows x nodes) float64 temporary.

    ``recheck_entries``: recompute in float64 only the (row, node) entries
    within the bound, by a compiled dot product over the nodes' columns,
    instead of whole rows by :meth:`~taodist.model.tree.Tree.decision_margins`.
    For the initial margins of a new chunk: every node at once, where a
    random tree's many dense hyperplanes leave most rows near one of them
    but few (row, node) entries near 0. Either order of summation gives a
    float64 margin; the rows clear_boundaries finds on a hyperplane are
    moved off it and their node's margins computed again.
    """
    X, X32 = chunk.X, chunk.X_solve
    obl = tree.kind[nodes] == OBLIQUE
    if sp.issparse(X) or X32.dtype != np.float32 or not obl.any():
        dest[:, cols] = tree.decision_margins(X, nodes)
        return
    if not obl.all():
        dest[:, cols[~obl]] = tree.decision_margins(X, nodes[~obl])
    W = tree.weights[nodes[obl]]
    cols = np.ascontiguousarray(cols[obl], dtype=np.intp)
    used = np.unique(W.indices)
    bias = np.ascontiguousarray(tree.bias[nodes[obl]], dtype=np.float64)
    if used.size == 0:
        dest[:, cols] = bias
        return
    gather = 2 * used.size <= X.shape[1]  # as decision_margins: unless that costs more than it saves
    Wt = (W[:, used] if gather else W).toarray().T.astype(np.float32)
    column_max = chunk.__dict__.get("_column_max")
    if column_max is None:  # per chunk, once: the rows do not change
        column_max = chunk.__dict__["_column_max"] = np.maximum(X.max(axis=0), -X.min(axis=0))  # no |X| copy
    bound = 2.0 * (X.shape[1] + 3) * _FLOAT32_ROUNDOFF * (abs(W) @ column_max)
    if recheck_entries:
        X = np.ascontiguousarray(X)
        W64 = W[:, used].toarray()  # (nodes, used columns), float64: a rechecked entry reads its node's row
    near = np.zeros(X.shape[0], dtype=np.bool_)  # rows to recompute whole (none with recheck_entries)
    for s in range(0, X.shape[0], _UPDATE_BLOCK_ROWS):
        block = X32[s:s + _UPDATE_BLOCK_ROWS]
        with np.errstate(invalid="ignore", over="ignore"):
            # OpenBLAS can raise the invalid flag with no NaN in its result (numpy#24067, seen in CI);
            # a real NaN or overflow is rechecked in float64 below like any entry near 0
            product = (block[:, used] if gather else block) @ Wt
        if recheck_entries:
            store_rechecked_margins(product, bias, bound, s, dest, cols, X, used, W64)
        else:
            store_float32_margins(product, bias, bound, s, dest, cols, near)
    near = np.flatnonzero(near)
    if near.size:
        dest[np.ix_(near, cols)] = tree.decision_margins(X[near], nodes[obl])


@numba.njit(nogil=True, cache=True)
def store_float32_margins(product, bias, bound, first_row, dest, cols, near):
    """``dest[first_row + i, cols[k]] = product[i, k] + bias[k]`` in float64; flags rows within ``bound`` of 0."""
    for i in range(product.shape[0]):
        r = first_row + i
        for k in range(cols.size):
            v = np.float64(product[i, k]) + bias[k]
            dest[r, cols[k]] = v
            if not abs(v) > bound[k]:  # within the bound, or not a number (a float32 overflow)
                near[r] = True


@numba.njit(nogil=True, cache=True)
def store_rechecked_margins(product, bias, bound, first_row, dest, cols, X, used, W64):
    """As :func:`store_float32_margins`, an entry within ``bound`` of 0 recomputed in float64 from ``X`` at once."""
    for i in range(product.shape[0]):
        r = first_row + i
        x = X[r]
        for k in range(cols.size):
            v = np.float64(product[i, k]) + bias[k]
            if not abs(v) > bound[k]:  # within the bound, or not a number
                w = W64[k]
                v = 0.0
                for j in range(used.size):
                    v += x[used[j]] * w[j]
                v += bias[k]
            dest[r, cols[k]] = v
