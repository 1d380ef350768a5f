"""Compiled prediction of softmax trees on CSR rows: route and score in one kernel (numba).

The reference path (:meth:`taodist.model.tree.Tree.best_classes`) routes every
row (:func:`taodist.model.route.route`), then scores each leaf's rows with a
sparse product per leaf, a Python loop over the leaves: on a many-class
bag-of-words tree, scoring then costs about as much as routing.

Here one kernel does both, and reads only compact arrays:

* Every feature the tree uses (node weights, axis features, the scored
  classes' leaf coefficients) gets a compact index through ``colmap``.
  A row's entries are listed with their compact indices, which index the
  dense node rows and the leaves' maps.
* Dense node rows are float32 (half the memory traffic, which is what
  routing costs). Their margin comes with an error bound; a margin within
  it of 0 is recomputed from the float64 weights, so every routing
  decision is that of the float64 margin.
* A leaf scores only its scored classes (finite intercept), in class order,
  each ``intercept + sum_j x[f_j] w_j``. A leaf's coefficients are a dense
  float32 block (features x classes) where dense enough, found through a
  per-leaf map from compact index to block row; the sums are float64, and
  when another class comes within the float32 error bound of the best one,
  all are summed again from the float64 coefficients. So the classes are
  the reference's, unless two classes' float64 scores are equal to
  rounding; exact ties go to the lower class, as in the reference.
* A thread routes a block of rows, then scores them leaf by leaf, so that a
  leaf's map and block stay in cache for its rows.
* Arrays are read through views and unsigned indices (the column indices
  are checked first): NumPy's wrap-around of negative indices kept numba's
  loops scalar.

Everything but the rows is a *plan* built from the tree alone (checked
routing arrays, compact columns, leaf blocks and maps): a cost per call that
is a fair part of the work of a large call, and paid again by every chunk
of a Dask prediction. The plans of the last few trees
are kept, each under a digest of the tree's arrays: a tree edited in place
gets a new digest, so a new plan, checked again.

The reference stays: it serves dense X, top-n predictions, and the tests,
which check that both give the same classes.
"""

import collections
import threading
import weakref
import zlib

import numba
import numpy as np
import scipy.sparse as sp

from ..utils.parallel import run_parallel
from ..utils.rows import check_sparse_structure, unsigned_indices
from .checks import check_csr
from .kinds import OBLIQUE
from .route import CSR_BLOCK_ROWS, routing_arrays

#: a float32 margin is trusted when it exceeds this many times its error bound's unit
#: (|w32 - w| <= 2^-24 |w|: 2^-22 leaves a factor 4 for the float64 sums' own rounding)
_F32_REL_ERROR = 2.0 ** -22

#: float32 dense node rows and leaf blocks hold weights up to this magnitude (far from float32's overflow at 3.4e38)
_F32_MAX_WEIGHT = 1e30

#: rows a thread routes and scores together at most: larger blocks reuse the nodes' rows and leaves' blocks
#: more, smaller ones keep their own rows in cache (a broad optimum: much larger blocks were slower)
_BLOCK_ROWS = 2048

#: bytes of float32 dense node rows a plan may hold (given to the shallowest nodes first)
_DENSE_ROW_BYTES = 32 << 20

#: out[r] of a row whose walk went round a cycle (the kernel's guard; route's checks reject such trees)
_NO_LEAF = -2


@numba.njit(cache=True, nogil=True)
def _best_scored_class(buf, row_ind, row_cols, row_vals, n_row, slot, class_ptr, classes, intercept,
                       feat_ptr, feats, block_ptr, block, block_absmax, map_ptr, leaf_map, map_width, coef_ptr,
                       coef_index, coef_data, scores, hit_at, hit_val):
    # Scores are float64 sums of the leaf's terms; a mapped leaf adds them in the row's order, the
    # others in feature order, as the reference does. Sums in another order differ from the
    # reference's only by rounding, so the arg-max can differ only between two classes whose
    # scores are equal to rounding (an exact tie, equal terms, stays a tie: the lower class).
    # (Putting the hits in feature order first, an insertion sort, cost too much on unsorted rows.)
    # A block holds float32 coefficients (half the memory the leaf's rows pull in); the scores it
    # gives are within 2^-24 sum |x| max |w| of the float64 ones, and when another class comes that
    # close to the best, all are summed again from the float64 coefficients.
    # Arrays are read through slices (views) indexed from 0 or by unsigned indices: an element
    # read by a signed index carries NumPy's negative-index wrap-around, which kept these loops
    # scalar (the leaf's sums ran much slower). A mapped leaf reads only ``row_cols`` and
    # ``row_vals``; the row is scattered into ``buf`` (all zeros, and left so) by feature only for
    # a leaf without a map or a re-sum.
    c0 = class_ptr[slot]
    n = class_ptr[slot + 1] - c0
    sc = scores[:n]
    for q in range(n):
        sc[q] = 0.0
    x_abs = 0.0  # sum |x| over the terms taken from the float32 block
    mapped = block_ptr[slot] >= 0 and map_ptr[slot] >= 0
    scattered = not mapped
    if scattered:
        _scatter(buf, row_ind, row_vals)
    if mapped:
        # the row's entries found in the leaf's features through its map, then a row of the block
        # each; every entry adds its own value, so duplicate entries of a row add up. The hits are
        # listed first without a branch: whether an entry is in the leaf is a coin toss the branch
        # predictor loses
        lmap = leaf_map[map_ptr[slot]:map_ptr[slot] + map_width]
        n_hits = 0
        for i in range(n_row):
            p = lmap[row_cols[i]]
            x = row_vals[i]
            hit_at[n_hits] = p
            hit_val[n_hits] = x
            n_hits += (p >= 0) & (x != 0.0)
        b0 = block_ptr[slot]
        for i in range(n_hits):
            x = hit_val[i]
            x_abs += abs(x)
            row = b0 + hit_at[i] * n
            coef = block[row:row + n]
            for q in range(n):
                sc[q] += x * coef[q]
    elif block_ptr[slot] >= 0:
        # no map (it would be too large): one look-up per feature of the leaf
        f0 = feat_ptr[slot]
        for i in range(f0, feat_ptr[slot + 1]):
            x = buf[feats[i]]
            if x != 0.0:
                x_abs += abs(x)
                row = block_ptr[slot] + (i - f0) * n
                coef = block[row:row + n]
                for q in range(n):
                    sc[q] += x * coef[q]
    else:
        _exact_scores(buf, coef_ptr, coef_index, coef_data, c0, sc)
    best, best_q = _arg_max(intercept[c0:c0 + n], sc, classes[c0:c0 + n])
    if x_abs > 0.0:
        tol = 2.0 * _F32_REL_ERROR * x_abs * block_absmax[slot]
        best_score = intercept[c0 + best_q] + sc[best_q]
        for q in range(n):
            if q != best_q and intercept[c0 + q] + sc[q] >= best_score - tol:
                if not scattered:
                    _scatter(buf, row_ind, row_vals)
                    scattered = True
                _exact_scores(buf, coef_ptr, coef_index, coef_data, c0, sc)
                best, best_q = _arg_max(intercept[c0:c0 + n], sc, classes[c0:c0 + n])
                break
    if scattered:
        _clear(buf, row_ind)
    return best


@numba.njit(cache=True, nogil=True)
def _scatter(buf, ind, val):
    """A row into the zero buffer by feature; ``+=``: duplicate entries of a non-canonical row add up."""
    for k in range(ind.shape[0]):
        buf[ind[k]] += val[k]


@numba.njit(cache=True, nogil=True)
def _clear(buf, ind):
    """The buffer back to zeros after :func:`_scatter`."""
    for k in range(ind.shape[0]):
        buf[ind[k]] = 0.0


@numba.njit(cache=True, nogil=True)
def _exact_scores(buf, coef_ptr, coef_index, coef_data, c0, sc):
    """``sc[q]`` = the float64 sum over class ``c0 + q``'s coefficient row, in feature order (the reference's)."""
    for q in range(sc.shape[0]):
        s = 0.0
        for e in range(coef_ptr[c0 + q], coef_ptr[c0 + q + 1]):
            s += buf[coef_index[e]] * coef_data[e]
        sc[q] = s


@numba.njit(cache=True, nogil=True)
def _arg_max(intercept, sc, classes):
    """The class of the best ``intercept + sc`` and its position: np.argmax's (the first maximum, the first NaN)."""
    best = -1
    best_q = 0
    best_score = 0.0
    for q in range(sc.shape[0]):
        s = intercept[q] + sc[q]
        if best < 0 or s > best_score or (s != s and best_score == best_score):
            best = classes[q]
            best_q = q
            best_score = s
    return best, best_q


@numba.njit(parallel=True, fastmath=True, cache=True, nogil=True)
def _predict_csr(Xptr, Xind, Xdat, n_features, colmap, n_node_cols, max_row_nnz, max_classes, dense_slot, Wd, indptr,
                 indices, data, bias, kind, feature, threshold, left, right, leaf_slot, class_ptr, classes, intercept,
                 feat_ptr, feats, block_ptr, block, block_absmax, map_ptr, leaf_map, map_width, coef_ptr, coef_index,
                 coef_data, block_rows, out):
    # route() and then the reached leaf's best class, for a block of rows at a time, level by level:
    # every row of the block takes one step before any takes the next, the rows at one node one
    # after another (a counting sort by node), and then the rows are scored leaf by leaf. A node's
    # dense weight row and a leaf's map and block so stay in cache while its rows use them; walking
    # each row to its leaf in turn cost more on a many-class tree, whose node rows, maps and blocks
    # do not all fit in cache. A row's entries get their compact indices once (``row_cols``, unsigned:
    # see _best_scored_class); they index the dense node rows (node features first, every other
    # feature reads the zero column n_node_cols) and the leaves' maps. A row is scattered into
    # the buffer of n_features only for a node or leaf that reads it by feature (a sparse weight
    # row, an axis split, a float32 margin too close to 0, a leaf without a map). Xind and indices
    # are unsigned views of column indices best_classes_csr checked.
    n_nodes = left.shape[0]
    n_rows = Xptr.shape[0] - 1
    n_leaves = class_ptr.shape[0] - 1
    n_blocks = (n_rows + block_rows - 1) // block_rows
    for b in numba.prange(n_blocks):
        buf = np.zeros(n_features)
        scores = np.empty(max_classes)
        hit_at = np.empty(max_row_nnz, dtype=np.int64)
        hit_val = np.empty(max_row_nnz)
        r0, r1 = b * block_rows, min(n_rows, (b + 1) * block_rows)
        n_block, e0 = r1 - r0, Xptr[r0]
        row_cols = np.empty(Xptr[r1] - e0, dtype=colmap.dtype)
        for e in range(Xptr[r1] - e0):
            row_cols[e] = colmap[Xind[e0 + e]]
        at = np.zeros(n_block, dtype=np.int64)  # each row's node; -1: its walk went round a cycle
        active = np.arange(n_block)  # rows not at a leaf yet
        n_active = n_block
        by_node = np.empty(n_block, dtype=np.int64)
        start = np.empty(n_nodes + 1, dtype=np.int64)
        steps = 0
        while n_active > 0:
            kept = 0
            for a in range(n_active):
                if left[at[active[a]]] >= 0:
                    active[kept] = active[a]
                    kept += 1
            n_active = kept
            steps += 1
            if n_active and steps > n_nodes:  # a walk longer than the tree is going round a cycle
                for a in range(n_active):
                    at[active[a]] = -1
                break
            start[:] = 0
            for a in range(n_active):
                start[at[active[a]] + 1] += 1
            for s in range(n_nodes):
                start[s + 1] += start[s]
            for a in range(n_active):
                i = active[a]
                by_node[start[at[i]]] = i
                start[at[i]] += 1
            for a in range(n_active):
                i = by_node[a]
                active[a] = i
                node = at[i]
                lo, hi = Xptr[r0 + i], Xptr[r0 + i + 1]
                val = Xdat[lo:hi]
                m = 0.0
                exact = kind[node] != OBLIQUE or dense_slot[node] < 0
                if not exact:
                    w = Wd[dense_slot[node]]
                    cols = row_cols[lo - e0:hi - e0]
                    bound = 0.0
                    for k in range(hi - lo):
                        t = val[k] * w[min(cols[k], n_node_cols)]
                        m += t
                        bound += abs(t)
                    m += bias[node]
                    exact = abs(m) <= _F32_REL_ERROR * bound  # too close to 0 to trust its sign
                if exact:  # the row by feature
                    ind = Xind[lo:hi]
                    _scatter(buf, ind, val)
                    if kind[node] == OBLIQUE:
                        m = 0.0
                        node_ind = indices[indptr[node]:indptr[node + 1]]
                        node_dat = data[indptr[node]:indptr[node + 1]]
                        for j in range(node_ind.shape[0]):
                            m += buf[node_ind[j]] * node_dat[j]
                        m += bias[node]
                    else:
                        m = buf[feature[node]] - threshold[node]
                    _clear(buf, ind)
                at[i] = right[node] if m >= 0 else left[node]
        # the leaves: rows in leaf order (a counting sort; the walks that did not end last)
        row_leaf = np.empty(n_block, dtype=np.int64)
        leaf_start = np.zeros(n_leaves + 2, dtype=np.int64)
        for i in range(n_block):
            row_leaf[i] = n_leaves if at[i] < 0 else leaf_slot[at[i]]
            leaf_start[row_leaf[i] + 1] += 1
        for s in range(n_leaves + 1):
            leaf_start[s + 1] += leaf_start[s]
        for i in range(n_block):
            by_node[leaf_start[row_leaf[i]]] = i
            leaf_start[row_leaf[i]] += 1
        for a in range(n_block):
            i = by_node[a]
            slot = row_leaf[i]
            if slot == n_leaves:
                out[r0 + i] = _NO_LEAF
                continue
            lo, hi = Xptr[r0 + i], Xptr[r0 + i + 1]
            out[r0 + i] = _best_scored_class(buf, Xind[lo:hi], row_cols[lo - e0:hi - e0], Xdat[lo:hi], hi - lo, slot,
                                             class_ptr, classes, intercept, feat_ptr, feats, block_ptr, block,
                                             block_absmax, map_ptr, leaf_map, map_width, coef_ptr, coef_index,
                                             coef_data, scores, hit_at, hit_val)


def _scored_class_rows(tree, leaves):
    """The scored classes of ``leaves`` and their coefficient rows, leaf by leaf, classes in order.

    Returns
    -------
    class_ptr : ndarray of int64, shape (len(leaves) + 1,)
        Leaf ``i``'s scored classes are ``classes[class_ptr[i]:class_ptr[i + 1]]``.
    classes : ndarray of int64
    intercept : ndarray of float64
        ``tree.value[leaf, class]`` of each scored class.
    coef : csr_matrix
        One row per scored class: its coefficients, entries in feature order
        (duplicates, if any, kept in their stored order, as scipy's product
        adds them).
    """
    # the kernel reads these through the scored rows' indices: checked first, as route() checks the nodes'
    value = np.asarray(tree.value, dtype=np.float64)
    n_nodes, K = tree.n_nodes, tree.n_outputs
    C = tree.leaf_coef
    if value.shape != (n_nodes, K) or not (sp.issparse(C) and C.format == "csr") or C.shape != (n_nodes * K,
                                                                                               tree.n_features):
        raise ValueError(f"best_classes_csr(): value {value.shape} or leaf_coef {getattr(C, 'shape', None)} do not "
                         f"fit {n_nodes} nodes, {K} outputs and {tree.n_features} features; the tree is corrupt.")
    check_csr("leaf_coef", C.data, C.indices, C.indptr, C.shape, "best_classes_csr()")
    scored = np.isfinite(value[leaves])  # a class outside a limited leaf has logit -inf
    leaf_of, classes = np.nonzero(scored)  # row-major: leaf by leaf, classes ascending
    class_ptr = np.concatenate([[0], np.cumsum(scored.sum(axis=1))]).astype(np.int64)
    coef = tree.leaf_coef[leaves[leaf_of] * K + classes]
    row_of = np.repeat(np.arange(coef.shape[0]), np.diff(coef.indptr))
    order = np.lexsort((coef.indices, row_of))  # stable: sorts each row by feature, keeping duplicates' order
    coef = sp.csr_matrix((coef.data[order].astype(np.float64), coef.indices[order], coef.indptr), shape=coef.shape)
    return class_ptr, classes.astype(np.int64), value[leaves[leaf_of], classes], coef


def _compact_columns(n_features, first, rest):
    """Compact indices of the features the tree uses, those in ``first`` before the others.

    Returns
    -------
    colmap : ndarray of uint32 (uint64 past 2^32 - 1 features), shape (n_features,)
        Compact index of each feature; ``n_used`` for features nothing uses.
        Unsigned for the kernel (see _best_scored_class), and 32-bit: the
        kernel looks up every stored entry in it, so half the bytes make a
        prediction faster.
    n_first, n_used : int
        ``first``'s features are ``0 .. n_first - 1``; all of them ``0 .. n_used - 1``.
    """
    first = np.unique(np.asarray(first, dtype=np.int64))
    rest = np.setdiff1d(np.asarray(rest, dtype=np.int64), first)
    dtype = np.uint32 if n_features < 2 ** 32 else np.uint64
    colmap = np.full(n_features, first.size + rest.size, dtype=dtype)
    colmap[first] = np.arange(first.size)
    colmap[rest] = np.arange(first.size, first.size + rest.size)
    return colmap, first.size, first.size + rest.size


#: a leaf's coefficients become a dense (features x classes) block when at least this fraction of it is
#: non-zero: low enough that the leaves of many-class trees get blocks, since scoring their weights one
#: by one cost more than the rest of the prediction
_BLOCK_DENSITY = 1 / 64
#: bytes of leaf blocks (float32), given to leaves in order
_BLOCK_BYTES = 32 << 20


def _leaf_blocks(class_ptr, coef):
    """Per leaf, its features (compact, ascending) and, where dense enough, a (features x classes) block.

    Parameters
    ----------
    class_ptr : ndarray of int64
        As returned by :func:`_scored_class_rows`.
    coef : csr_matrix
        The scored classes' coefficient rows.

    Returns
    -------
    feat_ptr, feats : ndarray of int64
        Leaf ``i``'s features are ``feats[feat_ptr[i]:feat_ptr[i + 1]]``, in
        feature order.
    block_ptr : ndarray of int64
        Offset of leaf ``i``'s row-major block in ``block``, or -1: the
        leaf's sums are taken over its sparse rows (a block would be mostly
        zeros, or the rows store a feature twice, which one block entry
        cannot hold).
    block : ndarray of float32
    block_absmax : ndarray of float64
        The largest ``|coefficient|`` of each block leaf (0 for the others),
        for the error bound of sums over the float32 block.
    """
    n_leaves = class_ptr.size - 1
    row = np.repeat(np.arange(coef.shape[0]), np.diff(coef.indptr))
    leaf = np.searchsorted(class_ptr, row, side="right") - 1
    col = coef.indices.astype(np.int64)  # ascending within each row
    keys, where = np.unique(leaf * (col.max(initial=0) + 1) + col, return_inverse=True)
    feat_leaf = keys // (col.max(initial=0) + 1)
    feat_ptr = np.searchsorted(feat_leaf, np.arange(n_leaves + 1)).astype(np.int64)
    feats = keys % (col.max(initial=0) + 1)
    n_feat, n_cls = np.diff(feat_ptr), np.diff(class_ptr)
    duplicate = np.zeros(n_leaves, dtype=bool)
    repeated = (np.diff(row) == 0) & (np.diff(col) == 0)  # within a row, entries are in feature order
    duplicate[leaf[1:][repeated]] = True
    absmax = np.zeros(n_leaves)
    np.maximum.at(absmax, leaf, np.abs(coef.data))
    dense = ~duplicate & (n_feat * n_cls * _BLOCK_DENSITY <= np.bincount(leaf, minlength=n_leaves))
    dense &= absmax <= _F32_MAX_WEIGHT  # float32 holds the coefficients (far from its overflow)
    dense &= np.cumsum(np.where(dense, n_feat * n_cls, 0)) <= _BLOCK_BYTES // 4
    size = np.where(dense, n_feat * n_cls, 0)
    block_ptr = np.where(dense, np.cumsum(size) - size, -1).astype(np.int64)
    block = np.zeros(size.sum(), dtype=np.float32)
    on = dense[leaf]
    at = block_ptr[leaf] + (where - feat_ptr[leaf]) * n_cls[leaf] + (row - class_ptr[leaf])
    block[at[on]] = coef.data[on]
    return feat_ptr, feats.astype(np.int64), block_ptr, block, np.where(dense, absmax, 0.0)


#: bytes of per-leaf feature maps (int16 or int32 per leaf and used feature) the kernel may build
_LEAF_MAP_BYTES = 16 << 20


def _leaf_maps(feat_ptr, feats, block_ptr, colmap, n_used):
    """Per block leaf, the position of each compact feature in its feature list (-1: not there).

    With a map a row finds its entries in the leaf's block in one look-up
    each, instead of looking up each of the leaf's features in the row (a
    bag-of-words row has far fewer entries than a many-class leaf has
    features). Leaves are
    mapped in order within :data:`_LEAF_MAP_BYTES`; the others scan.

    Returns
    -------
    map_ptr : ndarray of int64
        Offset of leaf ``i``'s map in ``leaf_map``, or -1.
    leaf_map : ndarray of int16 (int32 for a leaf of more than 32,767 features)
    """
    n_feat = np.diff(feat_ptr)
    dtype = np.int16 if n_feat.max(initial=0) <= np.iinfo(np.int16).max else np.int32
    width = n_used + 1  # compact features, and n_used for the others
    mapped = np.flatnonzero(block_ptr >= 0)[:_LEAF_MAP_BYTES // (width * np.dtype(dtype).itemsize)]
    map_ptr = np.full(n_feat.size, -1, dtype=np.int64)
    map_ptr[mapped] = np.arange(mapped.size) * width
    leaf_map = np.full(max(mapped.size * width, 1), -1, dtype=dtype)
    for leaf in mapped:
        lo, hi = feat_ptr[leaf], feat_ptr[leaf + 1]
        leaf_map[map_ptr[leaf] + colmap[feats[lo:hi]]] = np.arange(hi - lo)
    return map_ptr, leaf_map


def best_classes_csr(tree, X):
    """Most probable class of every CSR row of ``X`` for a softmax tree (linear classification leaves).

    The classes of ``tree.best_classes(X, 1)[:, 0]`` (ties: the lower
    class; scores equal to rounding may break either way), in one compiled
    pass; see the module docstring.

    Parameters
    ----------
    tree : Tree
        ``task="classification"``, ``leaf_type="linear"``, any ``leaf_classes``.
    X : scipy.sparse matrix of shape (n_rows, tree.n_features), float32 or float64
        Indices need not be sorted; duplicate entries add up.

    Returns
    -------
    classes : ndarray of intp, shape (n_rows,)

    Raises
    ------
    ValueError
        As :func:`taodist.model.route.route` for a corrupt tree or the wrong
        number of columns, if a reached leaf scores no class, or if ``X``
        is malformed (:func:`taodist.utils.rows.check_sparse_structure`).
    """
    dtype = X.dtype if X.dtype in (np.float32, np.float64) else np.float64
    check_sparse_structure(X)  # before scipy converts it, and the kernel reads the indices unsigned and unchecked
    if not isinstance(X, sp.csr_matrix) or X.dtype != dtype:
        X = sp.csr_matrix(X, dtype=dtype)
    p = _plan(tree, X.shape[1])
    r = p["routing"]
    max_row_nnz = int(np.diff(X.indptr).max(initial=0))
    # a block per thread, within _BLOCK_ROWS (a block keeps its entries' compact indices)
    block_rows = max(CSR_BLOCK_ROWS, min(_BLOCK_ROWS, -(-X.shape[0] // numba.get_num_threads())))
    out = np.empty(X.shape[0], dtype=np.int64)
    run_parallel(_predict_csr, X.indptr, unsigned_indices(X.indices), X.data, X.shape[1], p["colmap"],
                  p["n_node_cols"], max_row_nnz, p["max_classes"], p["dense_slot"], p["Wd"], r["indptr"],
                  p["node_indices"], r["data"], r["bias"], r["kind"], r["feature"], r["threshold"], r["left"],
                  r["right"], p["leaf_slot"], p["class_ptr"], p["classes"], p["intercept"], p["feat_ptr"], p["feats"],
                  p["block_ptr"], p["block"], p["block_absmax"], p["map_ptr"], p["leaf_map"], p["map_width"],
                  p["coef_ptr"], p["coef_index"], p["coef_data"], block_rows, out)
    if out.size and out.min() < 0:
        if (out == _NO_LEAF).any():
            raise ValueError("best_classes_csr(): a walk from the root did not reach a leaf within n_nodes steps "
                             "(a cycle in children_left/children_right); the tree is corrupt.")
        raise ValueError("best_classes_csr(): a row reached a leaf that scores no class (every intercept -inf); "
                         "the tree is corrupt.")
    return out.astype(np.intp)


#: plans kept (the last trees predicted with); a large tree's plan holds up to
#: _BLOCK_BYTES + _LEAF_MAP_BYTES, so only a few
_PLANS_KEPT = 4
_plans = collections.OrderedDict()  # id(tree) -> (weak reference to the tree, key, plan), oldest first
_plans_lock = threading.Lock()


def _plan(tree, n_columns):
    """The tree's prediction plan for rows of ``n_columns`` features: built and checked, or kept from before.

    A kept plan is used only for the same tree object whose arrays have the
    same digest (and under the same module settings); anything else builds
    a new one, which checks the tree again.
    """
    digest = _tree_digest(tree)
    if digest is None:  # arrays of unexpected types: not kept; building checks them and says what is wrong
        return _build_plan(tree, n_columns)
    key = (digest, int(n_columns), _BLOCK_DENSITY, _BLOCK_BYTES, _LEAF_MAP_BYTES, _DENSE_ROW_BYTES)
    with _plans_lock:
        kept = _plans.get(id(tree))
        if kept is not None and kept[0]() is tree and kept[1] == key:
            _plans.move_to_end(id(tree))
            return kept[2]
    plan = _build_plan(tree, n_columns)
    with _plans_lock:
        _plans[id(tree)] = (weakref.ref(tree), key, plan)
        _plans.move_to_end(id(tree))
        while len(_plans) > _PLANS_KEPT:
            _plans.popitem(last=False)
    return plan


def _tree_digest(tree):
    """A fingerprint of every array the plan is built from: each array's dtype, shape and CRC-32; None if one
    of them is not a numeric NumPy array or CSR matrix.

    It tells an unchanged tree from one edited in place (any change within
    a 4-byte word changes its array's CRC; other edits go unnoticed with
    probability 2^-32). CRC-32 rather than a cryptographic hash: it is paid
    on every call, where a cryptographic hash cost a noticeable part of a
    prediction; a plan is only ever reused for the same tree object, so
    nothing outside the process can aim at a collision.
    """
    arrays = [getattr(tree, name, None) for name in ("children_left", "children_right", "kind", "bias", "feature",
                                                      "threshold", "value")]
    shapes = []
    for name in ("weights", "leaf_coef"):
        M = getattr(tree, name, None)
        if not (sp.issparse(M) and M.format == "csr"):
            return None
        shapes.append(M.shape)
        arrays += [M.data, M.indices, M.indptr]
    parts = [tuple(shapes)]
    for a in arrays:
        if not isinstance(a, np.ndarray) or a.dtype.kind not in "biuf":
            return None
        parts.append((a.dtype.str, a.shape, zlib.crc32(np.ascontiguousarray(a).data)))
    return tuple(parts)


def _build_plan(tree, n_columns):
    """Everything the kernel reads but the rows, from the tree's arrays (checked as route() checks them)."""
    r = routing_arrays(tree, n_columns)
    left, kind, indptr = r["left"], r["kind"], r["indptr"]
    leaves = np.flatnonzero(left < 0)
    class_ptr, classes, intercept, coef = _scored_class_rows(tree, leaves)
    axis = (left >= 0) & (kind != OBLIQUE)
    # node weights (route() checked the indices up to indptr[-1]) and axis features first
    node_features = np.concatenate([r["indices"][:indptr[-1]], r["feature"][axis]])
    colmap, n_node_cols, n_used = _compact_columns(n_columns, node_features, coef.indices)
    feat_ptr, feats, block_ptr, block, block_absmax = _leaf_blocks(class_ptr, coef)
    map_ptr, leaf_map = _leaf_maps(feat_ptr, feats, block_ptr, colmap, n_used)
    leaf_slot = np.full(left.shape[0], -1, dtype=np.int64)
    leaf_slot[leaves] = np.arange(leaves.size)
    dense_slot, Wd = _dense_node_rows(r, colmap, n_node_cols, np.asarray(tree.node_depth))
    return dict(routing=r, dense_slot=dense_slot, Wd=Wd, colmap=colmap, n_node_cols=n_node_cols,
                leaf_slot=leaf_slot, class_ptr=class_ptr, classes=classes, intercept=intercept,
                max_classes=int(np.diff(class_ptr).max(initial=0)), feat_ptr=feat_ptr, feats=feats,
                block_ptr=block_ptr, block=block, block_absmax=block_absmax, map_ptr=map_ptr, leaf_map=leaf_map,
                map_width=n_used + 1,
                node_indices=unsigned_indices(r["indices"]),  # routing_arrays checked them (0 .. n_columns - 1)
                coef_ptr=coef.indptr.astype(np.int64), coef_index=coef.indices.astype(np.int64),
                coef_data=coef.data)


def _dense_node_rows(r, colmap, n_node_cols, node_depth):
    """``dense_slot`` (per node, -1: sparse) and the float32 dense weight rows over the node features.

    The rows have ``n_node_cols + 1`` columns: the last, zero, is read for
    the features no node uses. Every oblique node gets one, shallowest first
    within :data:`_DENSE_ROW_BYTES`: the kernel reads a node's row for the
    block's rows at that node one after another, so a dense row costs a
    cached look-up per entry of the input row, and a sparse one a scatter of
    the row and a look-up per weight.
    """
    left, kind, indptr, data = r["left"], r["kind"], r["indptr"], r["data"]
    big = data.size and np.abs(data[:indptr[-1]]).max() > _F32_MAX_WEIGHT
    dtype = np.float64 if big else np.float32
    nodes = np.flatnonzero((left >= 0) & (kind == OBLIQUE))
    nodes = nodes[np.argsort(node_depth[nodes], kind="stable")]
    nodes = nodes[:_DENSE_ROW_BYTES // ((n_node_cols + 1) * np.dtype(dtype).itemsize)]
    dense_slot = np.full(left.shape[0], -1, dtype=np.int64)
    dense_slot[nodes] = np.arange(nodes.size)
    Wd = np.zeros((max(nodes.size, 1), n_node_cols + 1), dtype=dtype)
    for slot, node in enumerate(nodes):
        lo, hi = indptr[node], indptr[node + 1]
        np.add.at(Wd[slot], colmap[r["indices"][lo:hi]], data[lo:hi])  # add.at: duplicate weights add up, as in route()
    return dense_slot, Wd
