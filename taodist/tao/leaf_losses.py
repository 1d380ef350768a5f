"""Each row's loss at a leaf, and the per-chunk cache that keeps those losses between levels.

A decision node's pseudolabels compare a row's loss at the leaf its left
subtree sends it to with its loss at the leaf its right subtree does
(:mod:`taodist.tao.care_points`); the objective reads the loss at the leaf
each row reaches (:func:`taodist.tao.chunks.chunk_loss`). With linear
leaves each loss is a product with the row, so a resident chunk keeps the
losses it computed (:class:`LeafLossCache`) and, for mostly-zero dense rows,
a CSR copy of its rows for the products.
"""

import numpy as np
import scipy.sparse as sp

from ..model.leaves import pointwise_loss

#: bytes a chunk's :class:`LeafLossCache` keeps at most: this fraction of the chunk's rows' bytes (a
#: cache dearer than the rows it saves reading is not worth it) within a floor and a cap; past it the
#: least recently read leaves go
LEAF_LOSS_CACHE_FRACTION = 0.25
LEAF_LOSS_CACHE_MIN_BYTES = 4 << 20
LEAF_LOSS_CACHE_BYTES = 64 << 20

#: dense rows with at most this fraction of non-zero entries get a CSR copy for linear-leaf products
#: (at most 3 bytes per entry against the float64 rows' 8: 12 bytes per non-zero entry)
SPARSE_PRODUCT_DENSITY = 0.25


def row_losses(chunk, tree, rows, leaves):
    """The loss of each row ``rows[j]`` of the chunk at leaf ``leaves[j]`` of ``tree`` (computed now)."""
    X = _product_rows(chunk) if tree.leaf_model.has_coef else chunk.X  # constant leaves do not read the rows
    return pointwise_loss(tree.task, tree.leaf_output(X, leaves, rows), chunk.y[rows])


def _product_rows(chunk):
    """The chunk's rows for linear-leaf products: a CSR copy of dense rows that are mostly zero, kept.

    The compiled product reads only a row's non-zero entries either way
    (the same sums bit for bit); from CSR rows it does not scan the zeros.
    The copy costs 12 bytes per non-zero entry, is made once per resident
    chunk, and only for leaves that read the rows.
    """
    kept = chunk.__dict__.get("_product_rows")
    if kept is not None:
        return kept
    X = chunk.X
    if chunk.leaf_losses is None:  # rows read from storage for one task: a copy would not be used again
        return X
    if not sp.issparse(X) and np.count_nonzero(X) <= SPARSE_PRODUCT_DENSITY * X.size:
        X = sp.csr_matrix(X)
    chunk.__dict__["_product_rows"] = X
    return X


class LeafLossCache:
    """Each row's loss at every leaf it was evaluated at, one column per leaf, tagged with the leaf's digest.

    A decision level evaluates every row reaching it at two leaves: where
    its left subtree sends it and where its right one does. One of the two is
    the leaf the row reaches now, which the level below evaluated already;
    the other is where the row would go instead, which the level evaluated in
    the previous iteration too unless the routing below changed. A leaf
    refitted since has another digest, which empties its column; a leaf fit
    that was refused (common late in a fit) leaves it as it was. With
    linear leaves (a product with the row per evaluation) most of an
    iteration's evaluations are then look-ups. A loss is computed row by
    row, so a kept value is the value a fresh evaluation would give: 0/1
    losses are kept as int8, other losses as float64. The cache starts over
    when the chunk's labels change, and a pickled chunk carries it empty.
    ``max_bytes``: its budget (see :func:`leaf_loss_budget`).
    """

    def __init__(self, max_bytes=None):
        self.max_bytes = LEAF_LOSS_CACHE_BYTES if max_bytes is None else max_bytes
        self.labels, self.columns = None, {}

    def __getstate__(self):
        return {"max_bytes": self.max_bytes, "labels": None, "columns": {}}

    def losses(self, chunk, routing, rows, left, right):
        """``(loss at left[j], loss at right[j])`` of rows ``rows`` of the chunk."""
        return [self.loss_at(chunk, routing, rows, leaves) for leaves in (left, right)]

    def loss_at(self, chunk, routing, rows, leaves):
        """Loss of rows ``rows`` at ``leaves``: kept values where their leaf is unchanged, the rest computed and kept."""
        self._start_for(chunk, routing.tree)
        digests = routing.leaf_digests()
        order = np.argsort(leaves, kind="stable")
        ends = np.flatnonzero(np.diff(leaves[order])) + 1
        groups = [(int(leaves[g[0]]), g) for g in np.split(order, ends) if g.size]
        values = np.empty(rows.size)
        stored = []
        for leaf, at in groups:
            column = self._column(leaf, digests[leaf], chunk.y.shape[0])
            values[at] = column[rows[at]]
            stored.append(column)
        missing = np.flatnonzero(values == self.unknown) if self.unknown == -1 else np.flatnonzero(np.isnan(values))
        if missing.size:
            values[missing] = row_losses(chunk, routing.tree, rows[missing], leaves[missing])
            for (leaf, at), column in zip(groups, stored):
                column[rows[at]] = values[at]
        return values

    def _column(self, leaf, digest, n):
        """The kept losses at ``leaf`` (unknown where not computed), emptied if the leaf has another digest."""
        entry = self.columns.pop(leaf, None)  # re-inserted last: the dict's order is the order of use
        if entry is None or entry[0] != digest:
            entry = (digest, np.full(n, self.unknown, dtype=self.dtype))
            while self.columns and (len(self.columns) + 1) * entry[1].nbytes > self.max_bytes:
                del self.columns[next(iter(self.columns))]
        self.columns[leaf] = entry
        return entry[1]

    def _start_for(self, chunk, tree):
        """Empty columns, unless they are those of the chunk's current labels."""
        if self.labels is not chunk.y:
            self.labels, self.columns = chunk.y, {}
            zero_one = tree.task == "classification"  # 0/1 losses (see pointwise_loss)
            self.dtype, self.unknown = (np.int8, -1) if zero_one else (np.float64, np.nan)


def leaf_loss_budget(X):
    """Bytes a chunk of rows ``X`` gives its :class:`LeafLossCache`: a share of the rows' own bytes.

    At least :data:`LEAF_LOSS_CACHE_MIN_BYTES` (a small chunk keeps its
    leaves' losses whole), at most :data:`LEAF_LOSS_CACHE_BYTES`: a shallow
    tree's leaves fit well within the share, a deep regression tree's
    leaves (float64 losses, a column each) would not, and then the least
    recently read leaves go.
    """
    nbytes = X.data.nbytes + X.indices.nbytes if sp.issparse(X) else X.nbytes
    return min(LEAF_LOSS_CACHE_BYTES, max(LEAF_LOSS_CACHE_MIN_BYTES, int(LEAF_LOSS_CACHE_FRACTION * nbytes)))
