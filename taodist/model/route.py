"""Compiled per-row routing for prediction (numba).

The matrix form in :meth:`taodist.model.tree.Tree.apply_matrix` computes every
decision node's margin for every row -- one dense product, but most of it
wasted on deep trees, since a row only visits one node per depth: on a
deep tree, prediction took several times the work on the root-to-leaf
paths (thesis "inference FLOPs"). Here each row walks its own
path, rows in parallel. A node with many non-zero weights is evaluated as a
dense, vectorised dot product over a copy of its row (contiguous loads beat
indexed ones); a sparse node touches only its non-zeros. The matrix form
stays the reference: tests check both agree.
"""

import numba
import numpy as np
import scipy.sparse as sp

from ..utils.parallel import run_parallel
from ..utils.rows import as_csr
from .checks import check_routing_arrays
from .kinds import OBLIQUE

#: a node is evaluated densely when more than 1/8 of its weights are non-zero
_DENSE_FRACTION = 1 / 8


@numba.njit(fastmath=True, cache=True, nogil=True)
def _route_row(X, r, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold, missing_column,
               missing_right, left, right):
    """The leaf that row ``r`` of dense ``X`` reaches (-1: a cycle), for :func:`_route` and :func:`_route_serial`."""
    # A root-to-leaf walk visits at most n_nodes nodes; a longer one is going round a cycle and is
    # stopped (-1) rather than left to spin. route() rejects such trees first; this bound keeps the
    # kernel safe whatever it is called with.
    max_steps = left.shape[0]
    node = 0
    steps = 0
    while left[node] >= 0:
        steps += 1
        if steps > max_steps:
            return -1
        if kind[node] == OBLIQUE:
            m = 0.0
            slot = dense_slot[node]
            if slot >= 0:
                for j in range(X.shape[1]):
                    m += X[r, j] * Wd[slot, j]
            else:
                for j in range(indptr[node], indptr[node + 1]):
                    m += X[r, indices[j]] * data[j]
            m += bias[node]
        elif missing_column[node] >= 0 and X[r, missing_column[node]] != 0:
            m = 1.0 if missing_right[node] else -1.0
        else:
            m = X[r, feature[node]] - threshold[node]
        node = right[node] if m >= 0 else left[node]
    return node


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _route(X, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold, missing_column, missing_right,
           left, right, out):
    for r in numba.prange(X.shape[0]):
        out[r] = _route_row(X, r, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold,
                            missing_column, missing_right, left, right)


@numba.njit(fastmath=True, cache=True, nogil=True)
def _route_serial(X, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold, missing_column,
                  missing_right, left, right, out):
    # _route on one thread, for few rows: a parallel kernel takes several times longer to compile
    # (a first run's small prediction would wait for it) and gains nothing on a few rows. Both walk
    # each row with the same compiled _route_row, so they give the same leaves.
    for r in range(X.shape[0]):
        out[r] = _route_row(X, r, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold,
                            missing_column, missing_right, left, right)


#: dense rows below this many are routed on one thread (:func:`_route_serial`)
SERIAL_ROUTE_ROWS = 2048


#: rows a thread routes with one scatter buffer (see _route_csr)
CSR_BLOCK_ROWS = 256


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _route_csr(Xptr, Xind, Xdat, n_features, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold,
               missing_column, missing_right, left, right, out):
    # _route over CSR rows. Each thread scatters its row into a dense buffer (cleared again after
    # the walk), so a sparse node costs its non-zeros, each one look-up, and a dense node reads its
    # weight row at the row's non-zeros: a step costs O(min) of the two, never O(D). (Merging the
    # two sorted index lists cost O(nnz(x) + nnz(w)) with a branch per element, and took most of a
    # prediction on many-class bag-of-words trees.)
    max_steps = left.shape[0]
    n_rows = Xptr.shape[0] - 1
    n_blocks = (n_rows + CSR_BLOCK_ROWS - 1) // CSR_BLOCK_ROWS
    for b in numba.prange(n_blocks):
        buf = np.zeros(n_features)
        for r in range(b * CSR_BLOCK_ROWS, min(n_rows, (b + 1) * CSR_BLOCK_ROWS)):
            lo, hi = Xptr[r], Xptr[r + 1]
            for k in range(lo, hi):
                buf[Xind[k]] += Xdat[k]  # += : duplicate entries of a non-canonical row add up
            node = 0
            steps = 0
            while left[node] >= 0:
                steps += 1
                if steps > max_steps:
                    node = -1
                    break
                if kind[node] == OBLIQUE:
                    m = 0.0
                    slot = dense_slot[node]
                    if slot >= 0:
                        for k in range(lo, hi):
                            m += Xdat[k] * Wd[slot, Xind[k]]
                    else:
                        for j in range(indptr[node], indptr[node + 1]):
                            m += buf[indices[j]] * data[j]
                    m += bias[node]
                elif missing_column[node] >= 0 and buf[missing_column[node]] != 0:
                    m = 1.0 if missing_right[node] else -1.0
                else:
                    m = buf[feature[node]] - threshold[node]
                node = right[node] if m >= 0 else left[node]
            out[r] = node
            for k in range(lo, hi):
                buf[Xind[k]] = 0.0


#: bytes of dense weight rows the CSR walk may build (float64)
_CSR_DENSE_BYTES = 32 << 20


def _csr_dense_nodes(kind, left, nnz, depth, n_rows, row_nnz, n_features, dense_nodes):
    """Oblique nodes the CSR walk reads through a dense copy of their weight row.

    A dense row costs one look-up per non-zero of the input row, a sparse
    node one per non-zero weight (in the row's scatter buffer), and building
    the dense row costs ``n_features``. A node goes dense when the look-ups
    it saves on the rows expected to visit it (half as many per level) pay
    for building it; shallowest first (every row visits the root), within
    :data:`_CSR_DENSE_BYTES`. Bag-of-words trees, whose nodes hold many
    more weights than a document has words, route much faster.
    """
    visits = n_rows * 0.5 ** depth.astype(np.float64)
    saved = visits * (nnz - row_nnz)
    candidates = np.flatnonzero((kind == OBLIQUE) & (left >= 0) & (nnz > 2 * row_nnz) & (saved > n_features))
    candidates = candidates[np.argsort(depth[candidates], kind="stable")]
    candidates = candidates[~np.isin(candidates, dense_nodes)]  # already dense by the dense-X rule
    budget = max(_CSR_DENSE_BYTES // (8 * max(n_features, 1)) - dense_nodes.size, 0)
    return np.union1d(dense_nodes, candidates[:budget])


def routing_arrays(tree, n_columns, sorted_indices=False):
    """The tree's routing arrays as a compiled walk reads them, checked first.

    Parameters
    ----------
    tree : Tree
    n_columns : int
        Columns of the X to route.
    sorted_indices : bool, default=False
        Sort each node's weight indices (a product like ``scale_features``'
        may leave them unsorted).

    Returns
    -------
    dict
        ``indptr``, ``indices`` (int64), ``data`` (float64) of the weights;
        ``bias``, ``threshold`` (float64), ``kind`` (int8), ``feature``,
        ``left``, ``right``, ``missing_column`` (int64; -1 everywhere for a
        tree without default directions) and ``missing_right`` (bool).

    Raises
    ------
    ValueError
        As :func:`taodist.model.checks.check_routing_arrays`.
    """
    W = tree.weights
    if sorted_indices and not W.has_sorted_indices:
        W = W.sorted_indices()
    r = dict(indptr=W.indptr.astype(np.int64), indices=W.indices.astype(np.int64), data=W.data.astype(np.float64),
             bias=tree.bias.astype(np.float64), kind=tree.kind.astype(np.int8), feature=tree.feature.astype(np.int64),
             threshold=tree.threshold.astype(np.float64), left=tree.children_left.astype(np.int64),
             right=tree.children_right.astype(np.int64))
    n = tree.n_nodes
    r["missing_column"] = (np.full(n, -1, np.int64) if tree.missing_column is None
                           else tree.missing_column.astype(np.int64))
    r["missing_right"] = np.zeros(n, bool) if tree.missing_right is None else tree.missing_right.astype(bool)
    check_routing_arrays(r["left"], r["right"], r["kind"], r["feature"], r["bias"], r["threshold"], r["indptr"],
                         r["indices"], r["data"], W.shape[1], n_columns, r["missing_column"], r["missing_right"])
    return r


def route(tree, X):
    """Leaf reached by every row of ``X`` (float32 or float64; sums in float64).

    Parameters
    ----------
    tree : Tree
    X : ndarray or scipy.sparse matrix of shape (n_rows, tree.n_features)
        Sparse rows are walked as CSR, never densified.

    Returns
    -------
    leaves : ndarray of intp, shape (n_rows,)

    Raises
    ------
    ValueError
        If ``X`` has the wrong number of columns, or the tree's arrays would
        make the compiled walk read outside them (child ids, axis features or
        sparse indices out of range, a node with two parents). These checks
        are linear in the tree's size, not in ``X``.
    """
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    X = as_csr(X, dtype) if sp.issparse(X) else np.ascontiguousarray(X, dtype=dtype)
    if X.ndim != 2:
        raise ValueError(f"route(): X must be 2-D (rows x features); got shape {X.shape}.")
    r = routing_arrays(tree, X.shape[1], sorted_indices=sp.issparse(X))
    indptr, indices, data, bias, kind = r["indptr"], r["indices"], r["data"], r["bias"], r["kind"]
    feature, threshold, left, right = r["feature"], r["threshold"], r["left"], r["right"]
    missing = r["missing_column"], r["missing_right"]
    W = tree.weights
    nnz = np.diff(indptr)
    dense_nodes = np.flatnonzero((kind == OBLIQUE) & (left >= 0) & (nnz > _DENSE_FRACTION * max(W.shape[1], 1)))
    if sp.issparse(X) and X.shape[0]:
        dense_nodes = _csr_dense_nodes(kind, left, nnz, tree.node_depth, X.shape[0], X.nnz / X.shape[0], W.shape[1],
                                       dense_nodes)
    dense_slot = np.full(left.shape[0], -1, dtype=np.int64)
    dense_slot[dense_nodes] = np.arange(dense_nodes.size)
    Wd = W[dense_nodes].toarray() if dense_nodes.size else np.zeros((1, W.shape[1]))
    out = np.empty(X.shape[0], dtype=np.int64)
    if sp.issparse(X):
        run_parallel(_route_csr, X.indptr, X.indices, X.data, X.shape[1], dense_slot, Wd, indptr, indices, data,
                     bias, kind, feature, threshold, *missing, left, right, out)
    elif X.shape[0] < SERIAL_ROUTE_ROWS:
        _route_serial(X, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold, *missing, left, right,
                      out)
    else:
        run_parallel(_route, X, dense_slot, Wd, indptr, indices, data, bias, kind, feature, threshold, *missing,
                     left, right, out)
    if out.size and out.min() < 0:
        raise ValueError("route(): a walk from the root did not reach a leaf within n_nodes steps (a cycle in "
                         "children_left/children_right); the tree is corrupt.")
    return out.astype(np.intp)
