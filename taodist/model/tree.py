"""The flat-array tree: structure, routing, prediction, counting and pruning.

A :class:`Tree` is a set of parallel arrays indexed by node id, like
scikit-learn's ``Tree`` or pynndescent's ``FlatTree``:

* ``children_left[i]``, ``children_right[i]`` -- child ids, ``-1`` at leaves;
* ``kind[i]`` -- :data:`LEAF`, :data:`OBLIQUE` or :data:`AXIS`;
* ``weights`` -- a CSR matrix ``(n_nodes, n_features)``: row ``i`` holds the
  sparse weight vector of oblique node ``i`` (empty for other nodes);
* ``bias[i]`` -- oblique bias; ``feature[i]``, ``threshold[i]`` -- axis split;
* ``value[i]`` -- leaf output: class distribution (classification) or mean
  vector (regression) for constant leaves, the intercept for linear leaves;
* ``leaf_coef`` -- for linear leaves, a CSR matrix ``(n_nodes * n_outputs,
  n_features)`` whose rows ``i*K .. i*K+K-1`` are leaf ``i``'s coefficients;
* ``leaf_classes`` -- for softmax leaves limited to ``k`` classes, ``k``
  (None: no limit). A class outside a limited leaf has intercept ``-inf``
  (probability exactly 0) and an empty coefficient row.
* ``leaf_range`` -- for linear regression leaves, ``(n_nodes, 2, n_outputs)``:
  the lowest and highest target of the reduced set each leaf was fitted on.
  A linear leaf's output is clipped to them, so it cannot extrapolate past
  what it was fitted to (``-inf``/``+inf``, or None for the whole array: no
  clipping, as in model files written before it existed).
* ``missing_column``, ``missing_right`` -- for axis nodes that learned where
  rows with a missing value go (a default direction, as in XGBoost):
  ``missing_column[i]`` is the column of the indicator of missingness of
  ``feature_i`` (see :mod:`taodist.estimators.tabular`), ``-1`` where a
  missing value counts as its filled value; ``missing_right[i]`` is the
  side those rows take. None for both (as in model files written before
  they existed): no node has a default direction.

Decision rule: oblique node ``i`` sends ``x`` right iff ``w_i . x + b_i >= 0``;
axis node ``i`` sends it right iff ``x[feature_i] >= threshold_i``, or, where
``x[missing_column_i] != 0``, iff ``missing_right_i``.

Everything here is plain numpy/scipy, so trees are cheap to ship to workers.
"""

from dataclasses import dataclass, field, replace

import numba
import numpy as np
import scipy.sparse as sp

from ..utils.rows import as_csr, columns
from .kinds import AXIS, LEAF, OBLIQUE
from .leaves import LEAF_MODELS
from .predict_csr import best_classes_csr
from .route import route

#: Rows routed at once; bounds the ``(rows, decision nodes)`` margin block.
_ROUTE_BLOCK_ROWS = 8192
#: rows per block of :meth:`Tree.decision_margins` (a 784-column block is ~400 MB)
_MARGIN_BLOCK_ROWS = 65536


@numba.njit(nogil=True, cache=True)
def _descend(margins, node, rows, column_of, left, right):
    """:meth:`Tree.descend` in place, compiled (the GIL released for other threads).

    Breadth-first: every entry takes one step before any takes the next, so
    the margin look-ups of different entries are independent and their cache
    misses overlap; a walk per entry waits on each miss in turn, and was
    slower even than the NumPy version this replaces.
    """
    active = np.empty(node.shape[0], dtype=np.intp)
    n_active = 0
    for j in range(node.shape[0]):
        if left[node[j]] >= 0:
            active[n_active] = j
            n_active += 1
    while n_active > 0:
        kept = 0
        for a in range(n_active):
            j = active[a]
            n = node[j]
            n = right[n] if margins[rows[j], column_of[n]] >= 0 else left[n]
            node[j] = n
            if left[n] >= 0:
                active[kept] = j
                kept += 1
        n_active = kept


def canonical_csr(matrix):
    """``matrix`` as CSR with sorted indices and no duplicates (scipy's canonical format).

    A tree keeps its leaf coefficients canonical: the compiled leaf product
    sums each row's terms in feature order, which is then the stored order
    scipy's product uses, so the two agree bit for bit.
    """
    matrix = matrix.tocsr()
    matrix.sum_duplicates()
    return matrix


@dataclass
class Tree:
    """A fitted (or in-training) decision tree stored as flat arrays.

    See the module docstring for the meaning of each array. Build trees with
    :func:`complete_tree` or the optimiser rather than by hand.
    """

    children_left: np.ndarray
    children_right: np.ndarray
    kind: np.ndarray
    weights: sp.csr_matrix
    bias: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    value: np.ndarray
    leaf_coef: sp.csr_matrix | None = None
    task: str = "classification"
    leaf_type: str = "constant"
    leaf_classes: int | None = None
    leaf_range: np.ndarray | None = None
    missing_column: np.ndarray | None = None
    missing_right: np.ndarray | None = None
    _depth_cache: np.ndarray | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ shape
    @property
    def n_nodes(self):
        return self.children_left.shape[0]

    @property
    def n_features(self):
        return self.weights.shape[1]

    @property
    def n_outputs(self):
        return self.value.shape[1]

    @property
    def is_leaf(self):
        return self.children_left < 0

    @property
    def node_depth(self):
        """Depth of every node (root is 0)."""
        if self._depth_cache is None or self._depth_cache.shape[0] != self.n_nodes:
            depth = np.zeros(self.n_nodes, dtype=np.int32)
            for i in range(self.n_nodes):  # parents precede children in our layouts
                for c in (self.children_left[i], self.children_right[i]):
                    if c >= 0:
                        depth[c] = depth[i] + 1
            self._depth_cache = depth
        return self._depth_cache

    @property
    def max_depth(self):
        return int(self.node_depth.max()) if self.n_nodes else 0

    def copy(self):
        return replace(
            self,
            children_left=self.children_left.copy(),
            children_right=self.children_right.copy(),
            kind=self.kind.copy(),
            weights=self.weights.copy(),
            bias=self.bias.copy(),
            feature=self.feature.copy(),
            threshold=self.threshold.copy(),
            value=self.value.copy(),
            leaf_coef=None if self.leaf_coef is None else self.leaf_coef.copy(),
            leaf_range=None if self.leaf_range is None else self.leaf_range.copy(),
            missing_column=None if self.missing_column is None else self.missing_column.copy(),
            missing_right=None if self.missing_right is None else self.missing_right.copy(),
            _depth_cache=None,
        )

    # ---------------------------------------------------------------- routing
    def decision_margins(self, X, nodes=None):
        """Signed margins of rows of ``X`` at decision ``nodes``.

        ``margin >= 0`` means "go right". Returns an array ``(n_rows,
        len(nodes))``. Oblique margins are one dense product over the union of
        the nodes' non-zero features (the matrix form of a tree); for sparse
        (CSR) ``X``, one sparse product with the nodes' weights.
        """
        if nodes is None:
            nodes = np.flatnonzero(~self.is_leaf)
        nodes = np.asarray(nodes, dtype=np.intp)
        out = np.zeros((X.shape[0], nodes.shape[0]), dtype=np.float64)
        if X.shape[0] > _MARGIN_BLOCK_ROWS:  # row blocks bound the gathered-columns temporary
            for s in range(0, X.shape[0], _MARGIN_BLOCK_ROWS):
                out[s:s + _MARGIN_BLOCK_ROWS] = self.decision_margins(X[s:s + _MARGIN_BLOCK_ROWS], nodes)
            return out
        kinds = self.kind[nodes]
        obl = np.flatnonzero(kinds == OBLIQUE)
        if obl.size:
            W = self.weights[nodes[obl]]
            used = np.unique(W.indices)
            if sp.issparse(X):  # sparse times sparse: the product is (rows, nodes), X stays sparse
                out[:, obl] = (X @ W.T).toarray()
            elif 2 * used.size > X.shape[1]:  # gathering columns would cost more than it saves
                out[:, obl] = X @ W.toarray().T
            elif used.size:
                out[:, obl] = X[:, used] @ W[:, used].toarray().T
            out[:, obl] += self.bias[nodes[obl]]
        axs = np.flatnonzero(kinds == AXIS)
        if axs.size:
            f = self.feature[nodes[axs]]
            out[:, axs] = columns(X, f) - self.threshold[nodes[axs]]
            if self.missing_column is not None:
                self._route_missing(X, nodes[axs], out, axs)
        return out

    def _route_missing(self, X, nodes, out, cols):
        """Overwrite ``out[:, cols[j]]`` with +-1 where the row's value at axis node ``nodes[j]`` is missing."""
        has = np.flatnonzero(self.missing_column[nodes] >= 0)
        if has.size == 0:
            return
        missing = columns(X, self.missing_column[nodes[has]]) != 0
        side = np.where(self.missing_right[nodes[has]], 1.0, -1.0)
        block = out[:, cols[has]]
        out[:, cols[has]] = np.where(missing, side, block)

    def set_axis_split(self, node, feature, threshold, missing_column=-1, missing_right=False):
        """Set axis node ``node``'s split, and where its rows with a missing value go (``-1``: their filled value)."""
        self.feature[node], self.threshold[node] = feature, threshold
        if missing_column < 0 and self.missing_column is None:
            return  # no node has a default direction: the arrays stay absent, as in files without them
        if self.missing_column is None:
            self.missing_column = np.full(self.n_nodes, -1, dtype=np.int32)
            self.missing_right = np.zeros(self.n_nodes, dtype=bool)
        self.missing_column[node], self.missing_right[node] = missing_column, bool(missing_right)

    def descend(self, margins, start, column_of, rows=None):
        """Follow decisions from ``start`` nodes down to leaves.

        Entry ``j`` starts at node ``start[j]`` and reads its margins from row
        ``rows[j]`` (default ``j``) of ``margins``, whose column
        ``column_of[node]`` holds the margin at ``node``. Returns the leaf
        reached by every entry.
        """
        node = np.array(start, dtype=np.intp)  # a copy: the walk writes into it
        rows = np.arange(node.shape[0]) if rows is None else np.asarray(rows, dtype=np.intp)
        _descend(margins, node, rows, np.asarray(column_of, dtype=np.intp),
                 self.children_left.astype(np.intp, copy=False), self.children_right.astype(np.intp, copy=False))
        return node

    def decision_columns(self):
        """Decision-node ids, and each node's column in a ``(rows, decision nodes)`` margin array (-1 at leaves)."""
        internal = np.flatnonzero(~self.is_leaf)
        column_of = np.full(self.n_nodes, -1, dtype=np.intp)
        column_of[internal] = np.arange(internal.size)
        return internal, column_of

    def apply(self, X):
        """Index of the leaf each row of ``X`` reaches (compiled per-row walk)."""
        return route(self, X)

    def apply_matrix(self, X):
        """:meth:`apply` by the matrix form: all margins at once, then look-ups (the reference)."""
        internal, column_of = self.decision_columns()
        leaves = np.empty(X.shape[0], dtype=np.intp)
        for s in range(0, X.shape[0], _ROUTE_BLOCK_ROWS):
            Xb = X[s : s + _ROUTE_BLOCK_ROWS]
            margins = self.decision_margins(Xb, internal)
            leaves[s : s + Xb.shape[0]] = self.descend(margins, np.zeros(Xb.shape[0], np.intp), column_of)
        return leaves

    def decision_path(self, X):
        """CSR indicator ``(n_rows, n_nodes)`` of the nodes each row visits."""
        internal, column_of = self.decision_columns()
        margins = self.decision_margins(X, internal)
        n = X.shape[0]
        node = np.zeros(n, dtype=np.intp)
        rows_all, nodes_all = [np.arange(n)], [node.copy()]
        active = np.flatnonzero(~self.is_leaf[node])
        while active.size:
            nd = node[active]
            right = margins[active, column_of[nd]] >= 0
            node[active] = np.where(right, self.children_right[nd], self.children_left[nd])
            rows_all.append(active.copy())
            nodes_all.append(node[active].copy())
            active = active[~self.is_leaf[node[active]]]
        r = np.concatenate(rows_all)
        c = np.concatenate(nodes_all)
        return sp.csr_matrix((np.ones(r.size, dtype=np.int8), (r, c)), shape=(n, self.n_nodes))

    # ------------------------------------------------------------- prediction
    @property
    def leaf_model(self):
        """The :class:`~taodist.model.leaves.LeafModel` of this tree's ``leaf_type`` (and ``leaf_classes``)."""
        return LEAF_MODELS[self.leaf_type].limited_to(self.leaf_classes)

    def leaf_output(self, X, leaves, rows=None):
        """Raw output ``(n, n_outputs)`` of leaf ``leaves[j]`` at row ``rows[j]`` of X.

        ``rows`` defaults to ``arange(len(leaves))``. Constant leaves return
        ``value`` (X is not read); linear leaves return ``coef . x +
        intercept`` (a logit vector for classification).
        """
        rows = np.arange(len(leaves)) if rows is None else rows
        return self.leaf_model.outputs(self, X, leaves, rows)

    def predict(self, X):
        """Class probabilities (classification) or values (regression)."""
        return self.leaf_model.prediction(self.task, self.leaf_output(X, self.apply(X)))

    def best_classes(self, X, n=1):
        """Indices ``(n_rows, n)`` of each row's ``n`` most probable classes, most probable first.

        Equal probabilities go to the lower class. Unlike ``predict``, a
        softmax leaf limited to k classes scores only those k: no
        ``(n_rows, n_outputs)`` array is built. Sparse ``X`` need not be
        canonical (duplicate entries add up).
        """
        if self.task != "classification":
            raise ValueError("best_classes needs a classification tree; this tree does regression.")
        n = min(int(n), self.n_outputs)
        if n == 1 and sp.issparse(X) and self.leaf_type == "linear" and self.missing_column is None:
            # softmax leaves on CSR rows: routed and scored in one compiled pass, the same classes
            return best_classes_csr(self, X)[:, None]
        if sp.issparse(X):
            X = as_csr(X, X.dtype if X.dtype in (np.float32, np.float64) else np.float64)
        leaves = self.apply(X)
        return self.leaf_model.best_classes(self, X, leaves, np.arange(leaves.size), n)

    # --------------------------------------------------------------- counting
    def n_leaves(self):
        return int(self.is_leaf.sum())

    def n_decision_nodes(self):
        return int((~self.is_leaf).sum())

    def n_nonzero_weights(self):
        """Non-zero weights in decision nodes (an axis node counts one)."""
        obl = self.kind == OBLIQUE
        nnz_rows = np.diff(self.weights.indptr)
        return int(nnz_rows[obl].sum() + (self.kind == AXIS).sum())

    def node_parameters(self):
        """Parameters per node, as counted in the thesis (Appendix A).

        Decision node: non-zero weights + bias (2 for an axis node). Leaf: K
        for a constant leaf; for a linear leaf its non-zero coefficients plus
        K intercepts (one vector for binary classification).
        """
        params = np.zeros(self.n_nodes, dtype=np.int64)
        nnz_rows = np.diff(self.weights.indptr)
        obl = self.kind == OBLIQUE
        params[obl] = nnz_rows[obl] + 1
        params[self.kind == AXIS] = 2
        leaves = np.flatnonzero(self.is_leaf)
        params[leaves] = self.leaf_model.n_parameters(self, leaves)
        return params

    def n_parameters(self):
        return int(self.node_parameters().sum())

    def inference_flops(self, X):
        """Mean non-zero parameters met on the root-to-leaf path of rows of X (thesis Appendix A)."""
        path = self.decision_path(X)
        return float(np.asarray(path @ self.node_parameters().astype(np.float64)).mean())

    def classes_scored(self):
        """Per node: the classes a prediction at that leaf gives a non-zero probability (0 at decision nodes).

        For softmax leaves these are the classes whose scores the leaf
        computes: ``leaf_classes`` (or fewer) when limited, all ``K`` when not.
        """
        out = np.zeros(self.n_nodes, dtype=np.int64)
        leaves = np.flatnonzero(self.is_leaf)
        out[leaves] = self.leaf_model.n_classes_scored(self, leaves)
        return out

    def mean_classes_scored(self, X):
        """Mean over rows of X of :meth:`classes_scored` at the leaf each row reaches."""
        return float(self.classes_scored()[self.apply(X)].mean())

    def leaf_path_costs(self):
        """Per leaf (in node order): the FLOPs of a prediction there and its classes scored.

        FLOPs are the non-zero parameters on the root-to-leaf path (thesis
        Appendix A), so ``leaf_path_costs()[0][j]`` is what
        :meth:`inference_flops` counts for a row reaching leaf ``j``. Use it
        for per-model figures when no data is at hand (e.g. their mean over
        leaves); with data, :meth:`inference_flops` weighs leaves by use.
        """
        cost = self.node_parameters().astype(np.float64)
        for i in range(self.n_nodes):  # parents precede children in our layouts
            for c in (self.children_left[i], self.children_right[i]):
                if c >= 0:
                    cost[c] += cost[i]
        leaves = np.flatnonzero(self.is_leaf)
        return cost[leaves], self.classes_scored()[leaves]

    # ---------------------------------------------------------------- editing
    def weight_row(self, node):
        """Oblique node ``node``'s weights as a dense float64 vector (zeros for other nodes).

        Read from the CSR arrays directly: a scipy row slice per node was most
        of a small fit's fixed cost.
        """
        W = self.weights
        if not W.has_canonical_format:  # duplicate entries add up, as in toarray()
            return W[node].toarray().ravel().astype(np.float64)
        w = np.zeros(W.shape[1])
        lo, hi = W.indptr[node], W.indptr[node + 1]
        w[W.indices[lo:hi]] = W.data[lo:hi]
        return w

    def set_decision(self, nodes, W, b):
        """Replace oblique weights (rows of ``W``, dense or scipy.sparse) and biases of ``nodes``."""
        nodes = np.asarray(nodes, dtype=np.intp)
        if nodes.size == 0:
            return
        new = sp.csr_matrix(
            W.astype(np.float64) if sp.issparse(W) else np.asarray(W, dtype=np.float64),
            shape=(nodes.size, self.n_features)
        )
        # row i of the result: row i of the weights, or for a replaced node its row of ``new``; picked by
        # row indexing, in time of the stored entries (a sparse product would take time per feature)
        source = np.arange(self.n_nodes)
        source[nodes] = self.n_nodes + np.arange(nodes.size)
        weights = sp.vstack([sp.csr_matrix(self.weights), new], format="csr")[source]
        weights.eliminate_zeros()
        weights.sort_indices()
        self.weights = weights
        self.bias[nodes] = b

    def set_leaf_coef(self, leaves, coefs):
        """Replace linear-leaf coefficients; ``coefs[j]`` is ``(K, D)``, dense or sparse."""
        leaves = np.asarray(leaves, dtype=np.intp)
        if leaves.size == 0:
            return
        K = self.n_outputs
        rows = (leaves[:, None] * K + np.arange(K)).ravel()
        keep = np.ones(self.n_nodes * K, dtype=bool)
        keep[rows] = False
        old = sp.diags(keep.astype(np.float64)) @ self.leaf_coef
        new = sp.vstack([sp.csr_matrix(c, dtype=np.float64) for c in coefs], format="csr")  # dense or CSR (K, D)
        scatter = sp.csr_matrix(
            (np.ones(rows.size), (rows, np.arange(rows.size))), shape=(self.n_nodes * K, rows.size)
        )
        coef = canonical_csr(old + scatter @ new)
        coef.eliminate_zeros()
        self.leaf_coef = coef

    def set_leaf_range(self, leaves, ranges):
        """Set the output range of linear regression ``leaves``; ``ranges[j]`` is ``(2, n_outputs)``.

        Leaves not set keep theirs (unbounded when the tree had no ranges).
        """
        if len(leaves) == 0:
            return
        if self.leaf_range is None:
            self.leaf_range = np.stack([np.full(self.value.shape, -np.inf), np.full(self.value.shape, np.inf)], axis=1)
        self.leaf_range[np.asarray(leaves, dtype=np.intp)] = ranges

    def scale_features(self, scale):
        """Re-express the tree for inputs ``x * scale`` -> inputs ``x``.

        A tree trained on ``X / s`` becomes the same function of ``X`` after
        ``scale_features(1 / s)``.
        """
        D = sp.diags(np.asarray(scale, dtype=np.float64))
        self.weights = (self.weights @ D).tocsr()
        axis = self.kind == AXIS
        self.threshold[axis] = self.threshold[axis] / np.asarray(scale)[self.feature[axis]]
        if self.leaf_coef is not None:
            self.leaf_coef = canonical_csr(self.leaf_coef @ D)

    def shift_features(self, offset):
        """Re-express the tree for inputs ``x - offset`` -> inputs ``x``.

        A tree trained on ``X - c`` becomes the same function of ``X`` after
        ``shift_features(c)``: each hyperplane's bias and each linear leaf's
        intercept absorb ``-w . c``, each axis threshold moves by ``c``.
        """
        offset = np.asarray(offset, dtype=np.float64)
        self.bias = self.bias - self.weights @ offset
        axis = self.kind == AXIS
        self.threshold[axis] = self.threshold[axis] + offset[self.feature[axis]]
        if self.leaf_coef is not None:
            self.value = self.value - (self.leaf_coef @ offset).reshape(self.value.shape)

    def subtree(self, keep_root, replace_with_leaf=(), return_order=False):
        """A compact copy rooted at ``keep_root`` (breadth-first renumbered).

        Nodes in ``replace_with_leaf`` lose their subtrees and become leaves;
        their ``value`` must already hold the leaf output. With
        ``return_order``, also return the old id of every new node.
        """
        replace_with_leaf = set(int(i) for i in replace_with_leaf)
        order, queue = [], [keep_root]
        while queue:
            i = queue.pop(0)
            order.append(i)
            if self.children_left[i] >= 0 and i not in replace_with_leaf:
                queue += [self.children_left[i], self.children_right[i]]
        order = np.asarray(order, dtype=np.intp)
        new_id = np.full(self.n_nodes, -1, dtype=np.intp)
        new_id[order] = np.arange(order.size)
        cl = self.children_left[order].copy()
        cr = self.children_right[order].copy()
        kind = self.kind[order].copy()
        for j, i in enumerate(order):
            if i in replace_with_leaf:
                cl[j] = cr[j] = -1
                kind[j] = LEAF
        internal = cl >= 0
        cl[internal] = new_id[cl[internal]]
        cr[internal] = new_id[cr[internal]]
        weights = self.weights[order]
        weights = sp.diags((kind == OBLIQUE).astype(np.float64)) @ weights
        leaf_coef = None
        if self.leaf_coef is not None:
            K = self.n_outputs
            rows = (order[:, None] * K + np.arange(K)).ravel()
            leaf_coef = sp.diags(np.repeat(kind == LEAF, K).astype(np.float64)) @ self.leaf_coef[rows]
            leaf_coef = canonical_csr(leaf_coef)
            leaf_coef.eliminate_zeros()
        weights = weights.tocsr()
        weights.eliminate_zeros()
        new = replace(
            self,
            children_left=cl.astype(np.int32),
            children_right=cr.astype(np.int32),
            kind=kind,
            weights=weights,
            bias=np.where(kind == OBLIQUE, self.bias[order], 0.0),
            feature=np.where(kind == AXIS, self.feature[order], -1).astype(np.int32),
            threshold=np.where(kind == AXIS, self.threshold[order], 0.0),
            value=self.value[order].copy(),
            leaf_coef=leaf_coef,
            leaf_range=None if self.leaf_range is None else self.leaf_range[order].copy(),
            missing_column=None if self.missing_column is None else
            np.where(kind == AXIS, self.missing_column[order], -1).astype(np.int32),
            missing_right=None if self.missing_right is None else (kind == AXIS) & self.missing_right[order],
            _depth_cache=None,
        )
        return (new, order) if return_order else new


def complete_tree(depth, n_features, n_outputs, node_type, *, task, leaf_type):
    """A complete binary tree of ``depth`` with zeroed parameters.

    Nodes are numbered breadth-first: children of ``i`` are ``2i+1, 2i+2``.
    """
    n_nodes = 2 ** (depth + 1) - 1
    n_internal = 2**depth - 1
    ids = np.arange(n_nodes)
    internal = ids < n_internal
    cl = np.where(internal, 2 * ids + 1, -1).astype(np.int32)
    cr = np.where(internal, 2 * ids + 2, -1).astype(np.int32)
    kind = np.where(internal, OBLIQUE if node_type == "oblique" else AXIS, LEAF).astype(np.int8)
    return Tree(
        children_left=cl,
        children_right=cr,
        kind=kind,
        weights=sp.csr_matrix((n_nodes, n_features)),
        bias=np.zeros(n_nodes),
        feature=np.where(kind == AXIS, 0, -1).astype(np.int32),
        threshold=np.zeros(n_nodes),
        value=np.zeros((n_nodes, n_outputs)),
        leaf_coef=sp.csr_matrix((n_nodes * n_outputs, n_features)) if LEAF_MODELS[leaf_type].has_coef else None,
        task=task,
        leaf_type=leaf_type,
    )

