"""Row-chunk operations of TAO: everything that touches the rows of X.

TAO's data-parallel work -- routing points, computing each decision node's
care points, pseudolabels and weights, evaluating a candidate node on its
care points, updating margins -- is independent across rows. These pure
functions do it for one row chunk; the optimiser (:mod:`taodist.tao.optimizer`) runs
them on every chunk through an executor (threads in-process, tasks on Dask
workers) and reduces their small results. Only the care points a node's
solver needs travel to the node's task.

A :class:`Chunk` holds a block of rows of the (scaled) training data and the
margins ``(rows, decision nodes)`` of the current tree at those rows. A
:class:`StreamedChunk` holds only the block's labels, weights and a way to
read its rows (a Dask task reading a Zarr block, say): every function below
re-reads, scales and routes the rows when it runs and drops them after, so
data larger than the workers' memory never has to be resident.
"""

import hashlib
import weakref
from dataclasses import dataclass, replace

import numba
import numpy as np
import scipy.sparse as sp

from ..model.kinds import OBLIQUE
from ..model.leaves import pointwise_loss
from ..utils.rows import as_rows, columns, divide_columns, first_nonfinite_row, stack_rows

#: multiplier of the splitmix64 hash used for sampling priorities
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


#: rows handled at once where a whole chunk would make a large temporary (the
#: NaN check's mask, a candidate hyperplane's gathered columns)
_EVAL_BLOCK_ROWS = 65536


@dataclass
class Chunk:
    X: np.ndarray  # float64 rows (NumPy, or a CSR matrix for sparse input), features already scaled
    X_solve: np.ndarray  # float32 copy for solvers that take it, else X
    y: np.ndarray
    sw: np.ndarray
    offset: int  # global index of the first row
    margins: np.ndarray  # (rows, decision nodes) of the current tree, exact in sign only (see _write_margins)
    leaf_losses: "LeafLossCache | None" = None  # resident chunks only
    # True where an executor keeps a copy of every chunk's solver rows on each
    # worker (see SolverRows): node parts then name their rows instead of carrying them
    rows_by_reference: bool = False

    def __getstate__(self):  # a chunk that travels leaves its memos (see _care, _product_rows) behind
        state = dict(self.__dict__)
        state.pop("_care_memo", None)
        state.pop("_product_rows", None)
        return state


@dataclass(frozen=True)
class SolverRows:
    """Stands for ``X_solve`` rows of a node part, by their global indices.

    An executor that replicates the solver rows on every worker (the Dask
    executor, when they fit) makes its chunks emit this instead of the rows,
    and swaps it for the rows from the worker's own copy before the node fit
    runs: a part then crosses the network as a few integers per row, and the
    fit sees the same rows in the same order (:func:`resolve_rows`).
    """

    rows: np.ndarray


def resolve_rows(part, take):
    """``part`` with every :class:`SolverRows` in it (at any depth of nested tuples) replaced by ``take(rows)``."""
    if isinstance(part, SolverRows):
        return take(part.rows)
    if isinstance(part, tuple):
        return tuple(resolve_rows(v, take) for v in part)
    return part


#: bytes a chunk's :class:`LeafLossCache` keeps at most: this fraction of the chunk's rows' bytes (a
#: cache dearer than the rows it saves reading is not worth it) within a floor and a cap; past it the
#: least recently read leaves go
LEAF_LOSS_CACHE_FRACTION = 0.25
LEAF_LOSS_CACHE_MIN_BYTES = 4 << 20
LEAF_LOSS_CACHE_BYTES = 64 << 20


class LeafLossCache:
    """Each row's loss at every leaf it was evaluated at, one column per leaf, tagged with the leaf's digest.

    A decision level evaluates every row reaching it at two leaves: where
    its left subtree sends it and where its right one does. One of the two is
    the leaf the row reaches now, which the level below evaluated already;
    the other is where the row would go instead, which the level evaluated in
    the previous iteration too unless the routing below changed. A leaf
    refitted since has another digest, which empties its column; a leaf fit
    that was refused (common late in a fit) leaves it as it was. With
    linear leaves (a product with the row per evaluation) this saves about
    three quarters of an iteration's evaluations on MNIST (one forest tree:
    2.4 of 9.2 million evaluated, where keeping each row's last two leaves
    evaluated 4.6). A loss is computed row by row, so a kept value is the
    value a fresh evaluation would give: 0/1 losses are kept as int8, other
    losses as float64. The cache starts over when the chunk's labels change,
    and a pickled chunk carries it empty. ``max_bytes``: its budget (see
    :func:`leaf_loss_budget`).
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
            values[missing] = _losses(chunk, routing.tree, rows[missing], leaves[missing])
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


@dataclass
class StreamedChunk:
    """A chunk whose rows stay in storage; see :func:`rows_of`."""

    load: object  # load() -> the raw X block (e.g. taodist.dask's BlockReader of a Zarr block)
    y: np.ndarray
    sw: np.ndarray
    offset: int
    scale: np.ndarray
    solve_float32: bool


@dataclass
class Routing:
    """The tree plus its decision-node column map: shipped with every chunk task."""

    tree: object
    internal: np.ndarray
    column_of: np.ndarray

    @classmethod
    def of(cls, tree, since=None, changed=()):
        """The snapshot of ``tree``; ``since``: an earlier snapshot whose tree differs from ``tree`` only at
        ``changed`` nodes' rows of ``weights`` and ``leaf_coef`` (the per-node arrays may differ anywhere).

        An executor that already sent ``since`` to a worker may then send the
        rows that changed rather than the whole tree
        (:class:`taodist.dask._tree_patch.RoutingPatch`). Only a weak reference
        is kept: snapshots do not hold their history alive.
        """
        routing = cls(tree, *tree.decision_columns())
        if since is not None:
            routing.__dict__["_since"] = (weakref.ref(since), np.array(sorted(changed), dtype=np.intp))
        return routing

    def since(self):
        """``(earlier snapshot, changed nodes)`` as given to :meth:`of`, or None (none given, or it is gone)."""
        link = self.__dict__.get("_since")
        if link is None or link[0]() is None:
            return None
        return link[0](), link[1]

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_since", None)  # a weak reference: the snapshot travels without its history
        return state

    def leaf_digests(self):
        """A 64-bit digest of every leaf's parameters (0 for decision nodes), computed once per routing.

        Equal digests mean equal outputs: :class:`LeafLossCache` reuses a
        loss only at a leaf whose digest has not changed.
        """
        digests = self.__dict__.get("_leaf_digests")
        if digests is None:
            t = self.tree
            K = t.n_outputs
            digests = np.zeros(t.n_nodes, dtype=np.uint64)
            for leaf in np.flatnonzero(t.is_leaf):
                h = hashlib.blake2b(t.value[leaf].tobytes(), digest_size=8)
                if t.leaf_coef is not None:
                    rows = t.leaf_coef[leaf * K:(leaf + 1) * K]
                    for part in (rows.indptr, rows.indices, rows.data):
                        h.update(np.ascontiguousarray(part).tobytes())
                if t.leaf_range is not None:  # a new range changes the clipped outputs
                    h.update(np.ascontiguousarray(t.leaf_range[leaf]).tobytes())
                digests[leaf] = np.frombuffer(h.digest(), dtype=np.uint64)[0] | np.uint64(1)  # never 0
            self.__dict__["_leaf_digests"] = digests
        return digests

    def keep_leaf_digests(self, previous):
        """Take ``previous``'s leaf digests, if computed: the caller vouches that no leaf changed since.

        A decision level's update changes only decision nodes; hashing every
        leaf again was 2% of a linear-leaf forest tree (64 leaves of 10 x 784
        weights, once per level).
        """
        digests = previous.__dict__.get("_leaf_digests")
        if digests is not None:
            self.__dict__["_leaf_digests"] = digests


def leaf_loss_budget(X):
    """Bytes a chunk of rows ``X`` gives its :class:`LeafLossCache`: a share of the rows' own bytes.

    At least :data:`LEAF_LOSS_CACHE_MIN_BYTES` (a small chunk keeps its
    leaves' losses whole), at most :data:`LEAF_LOSS_CACHE_BYTES`. MNIST,
    27,000 rows: 42 MB, where a depth-6 tree's 64 leaves need 1.7 MB (0/1
    losses); a depth-10 regression tree's 1,024 leaves would want 220 MB.
    """
    nbytes = X.data.nbytes + X.indices.nbytes if sp.issparse(X) else X.nbytes
    return min(LEAF_LOSS_CACHE_BYTES, max(LEAF_LOSS_CACHE_MIN_BYTES, int(LEAF_LOSS_CACHE_FRACTION * nbytes)))


def make_chunk(X, y, sw, offset, routing, scale, solve_float32, rows_by_reference=False):
    """Build a chunk from raw rows (dense or sparse): validate, scale, compute margins.

    ``rows_by_reference``: the executor replicates the solver rows (see :class:`SolverRows`).
    """
    scaled = np.any(scale != 1)  # rows already in solver units (LapTAO's) are used as they are, not copied
    if scaled and not sp.issparse(X):
        # one float64 pass over the raw rows (float32 MNIST, say): the same bits as converting them
        # first, without a float64 copy of the unscaled rows
        X = np.asarray(X)
        _check_finite(X, offset)
        X = np.divide(X, scale, dtype=np.float64)
    else:
        X = as_rows(X)
        _check_finite(X, offset)
        if scaled:
            X = divide_columns(X, scale)
    chunk = Chunk(
        X=X,
        X_solve=X.astype(np.float32) if solve_float32 else X,
        y=np.asarray(y),
        sw=np.asarray(sw, dtype=np.float64),
        offset=int(offset),
        margins=np.empty((X.shape[0], routing.internal.size)),
        leaf_losses=LeafLossCache(leaf_loss_budget(X)),
        rows_by_reference=rows_by_reference,
    )
    # exact in sign, as after an update: the initial tree's every node is one (a depth-10 tree's
    # 1,023 dense random hyperplanes were a float64 GEMM, 15% of a forest tree's fit); the values
    # that clear_boundaries reads are recomputed there in float64
    internal = np.asarray(routing.internal, dtype=np.intp)
    _write_margins(chunk, routing.tree, internal, chunk.margins, np.asarray(routing.column_of, np.intp)[internal],
                   recheck_entries=True)
    return chunk


def streamed_chunk(load, y, sw, offset, scale, solve_float32):
    """A :class:`StreamedChunk`, checking its rows once for NaN/inf as :func:`make_chunk` does."""
    chunk = StreamedChunk(load, np.asarray(y), np.asarray(sw, dtype=np.float64), int(offset), scale, solve_float32)
    _check_finite(_read(load), chunk.offset)
    return chunk


def _read(load):
    X = load()
    return X if sp.issparse(X) else np.asarray(X)


def rows_of(chunk, routing):
    """The chunk with its rows in memory: itself, or a streamed chunk read and routed now."""
    if not isinstance(chunk, StreamedChunk):
        return chunk
    X = divide_columns(as_rows(_read(chunk.load)), chunk.scale)
    return Chunk(X=X, X_solve=X.astype(np.float32) if chunk.solve_float32 else X, y=chunk.y, sw=chunk.sw,
                 offset=chunk.offset, margins=routing.tree.decision_margins(X, routing.internal))


def _check_finite(X, offset):
    if sp.issparse(X):
        bad = first_nonfinite_row(X)
        if bad is not None:
            raise ValueError(f"Input X contains NaN or infinity (first at row {offset + bad}); clean or impute it "
                             "before fitting.")
        return
    for s in range(0, X.shape[0], _EVAL_BLOCK_ROWS):  # blocks: no (rows, features) mask of the whole chunk
        finite = np.isfinite(X[s:s + _EVAL_BLOCK_ROWS]).all(axis=1)
        if not finite.all():
            bad = offset + s + int(np.flatnonzero(~finite)[0])
            raise ValueError(f"Input X contains NaN or infinity (first at row {bad}); clean or impute it before fitting.")


# ------------------------------------------------------------------ routing
def nodes_at_depth(chunk, routing, depth):
    """``(rows, nodes)``: the rows that reach ``depth`` and the node they reach."""
    t = routing.tree
    rows = np.empty(chunk.X.shape[0], dtype=np.intp)
    nodes = np.empty_like(rows)
    n = _walk_to_depth(chunk.margins, np.asarray(routing.column_of, dtype=np.intp),
                       t.children_left.astype(np.intp, copy=False), t.children_right.astype(np.intp, copy=False),
                       depth, rows, nodes)
    return rows[:n], nodes[:n]


@numba.njit(nogil=True, cache=True)
def _walk_to_depth(margins, column_of, left, right, depth, rows, nodes):
    """Rows (in order) that reach ``depth`` without meeting a leaf above it, and the node they reach there.

    Breadth-first, one depth at a time over the remaining rows (independent
    look-ups, as in :func:`taodist.model.tree._descend`).
    """
    count = margins.shape[0]
    for i in range(count):
        rows[i] = i
        nodes[i] = 0
    for _ in range(depth):
        kept = 0
        for a in range(count):
            n = nodes[a]
            if left[n] < 0:  # a leaf above ``depth``: the row stops here
                continue
            rows[kept] = rows[a]
            nodes[kept] = right[n] if margins[rows[a], column_of[n]] >= 0 else left[n]
            kept += 1
        count = kept
    return count


#: dense rows with at most this fraction of non-zero entries get a CSR copy for linear-leaf products
#: (at most 3 bytes per entry against the float64 rows' 8: 12 bytes per non-zero entry)
SPARSE_PRODUCT_DENSITY = 0.25


def _losses(chunk, tree, rows, leaves):
    X = _product_rows(chunk) if tree.leaf_model.has_coef else chunk.X  # constant leaves do not read the rows
    return pointwise_loss(tree.task, tree.leaf_output(X, leaves, rows), chunk.y[rows])


def _product_rows(chunk):
    """The chunk's rows for linear-leaf products: a CSR copy of dense rows that are mostly zero, kept.

    The compiled product reads only a row's non-zero entries either way
    (the same sums bit for bit); from CSR rows it does not scan the zeros:
    on MNIST (a fifth of the pixels non-zero) 4.2 ms against 7.8 ms for
    5,000 rows at a 10-class leaf, for a copy of 12 bytes per non-zero entry
    (on MNIST 30% of the float64 rows' memory), made once per resident chunk, and only
    for leaves that read the rows.
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


def chunk_loss(chunk, routing):
    """Weighted training loss of the chunk's rows under the current tree."""
    chunk = rows_of(chunk, routing)
    n = chunk.X.shape[0]
    t = routing.tree
    leaves = t.descend(chunk.margins, np.zeros(n, np.intp), routing.column_of)
    if t.leaf_model.has_coef and chunk.leaf_losses is not None:  # linear leaves: the root level's losses
        return float(chunk.sw @ chunk.leaf_losses.loss_at(chunk, routing, np.arange(n), leaves))
    return float(chunk.sw @ _losses(chunk, t, np.arange(n), leaves))


def chunk_visits(chunk, routing):
    """Rows and summed sample weight reaching every node (for pruning).

    Read from the chunk's margins (those of ``routing``'s tree), depth by
    depth, rather than from a decision path of ``X``, which would compute
    every node's margins again (a GEMM over all nodes: 3.6 of a depth-10
    MNIST tree's 42 s).
    """
    chunk = rows_of(chunk, routing)
    t = routing.tree
    visits = np.zeros(t.n_nodes, dtype=np.int64)
    reach = np.zeros(t.n_nodes, dtype=np.float64)
    for depth in range(t.max_depth + 1):
        rows, nodes = nodes_at_depth(chunk, routing, depth)
        visits += np.bincount(nodes, minlength=t.n_nodes)
        reach += np.bincount(nodes, weights=chunk.sw[rows], minlength=t.n_nodes)  # each node at one depth only
    return visits, reach


def chunk_boundaries(chunk, routing):
    """``{node: [max |margin|, smallest margin >= 0, largest margin < 0]}`` over the rows reaching each oblique node.

    The routes come from the chunk's margins (exact in sign); the values are
    each node's rows' margins in float64 (as a candidate's are evaluated,
    :func:`chunk_evaluate`), so they do not depend on how the chunk's own
    margins were computed.
    """
    chunk = rows_of(chunk, routing)
    t = routing.tree
    out = {}
    for depth in range(t.max_depth):
        rows, nodes = nodes_at_depth(chunk, routing, depth)
        obl = t.kind[nodes] == OBLIQUE
        for node, r in groups(nodes[obl], rows[obl]):
            m = _oblique_margins(chunk.X, r, t.weights[node].toarray().ravel(), t.bias[node])
            out[node] = np.array([np.abs(m).max(initial=0.0), m[m >= 0].min(initial=np.inf),
                                  m[m < 0].max(initial=-np.inf)])
    return out


# ------------------------------------------- rows of a resident chunk, copied once
class ChunkRows:
    """Rows ``rows`` of a resident chunk's array ``X``, copied only when a fit reads them.

    A leaf step hands every leaf of a depth its rows, and most leaf fits
    late in a fit are skipped (their rows are those of their last fit, see
    ``taodist.tao.optimizer.REFIT_LEAVES``): gathering the rows of every leaf was
    5% of a linear-leaf forest tree. A decision node's care points come
    from every chunk and are stacked for its solver: gathered as they are
    stacked (:func:`stack_part_rows`), each row is copied once, not twice.
    Pickled (a part shipped to another process), it is the gathered rows
    themselves, never the whole ``X``.
    """

    __slots__ = ("X", "rows")

    def __init__(self, X, rows):
        self.X, self.rows = X, rows

    def take(self):
        return self.X[self.rows]

    def __reduce__(self):
        return _gathered, (self.take(),)


def _gathered(rows):
    return rows


def take_rows(part_X):
    """A part's X rows as an array (a :class:`ChunkRows` gathered), or as they are (an array, or None)."""
    return part_X.take() if isinstance(part_X, ChunkRows) else part_X


def part_rows_layout(pieces):
    """``(rows, columns, dtype)`` of :func:`stack_part_rows` of ``pieces``, or None if any piece is sparse (or none is given)."""
    sources = [p.X if isinstance(p, ChunkRows) else p for p in pieces]
    if not sources or any(sp.issparse(src) for src in sources):
        return None
    n = sum(len(p.rows) if isinstance(p, ChunkRows) else p.shape[0] for p in pieces)
    return n, sources[0].shape[1], np.result_type(*sources)


def stack_part_rows(pieces, out=None):
    """Row blocks (arrays, CSR matrices or :class:`ChunkRows`) one after another, as one array.

    The same array as ``stack_rows([take_rows(p) for p in pieces])``, but
    dense pieces are gathered straight into their slice of the result: the
    rows are copied once and one new array is touched, where gathering
    first copied them twice into two. (Fresh memory is not free: on these
    2-core machines zeroing a node's new pages took as long as the copy.)
    Without ``out`` a single piece is gathered, or used as it is. ``out``:
    a C-contiguous array of the result's shape and dtype
    (:func:`part_rows_layout`) to write into, dense pieces only.
    """
    if out is None and len(pieces) == 1:
        return take_rows(pieces[0])
    layout = part_rows_layout(pieces)
    if layout is None:
        if out is not None:
            raise ValueError("out takes dense rows only; these pieces hold sparse rows")
        return stack_rows([take_rows(p) for p in pieces])
    n, d, dtype = layout
    if out is None:
        out = np.empty((n, d), dtype=dtype)
    elif out.shape != (n, d) or out.dtype != dtype or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {dtype} array of shape {(n, d)}; got {out.dtype} {out.shape}")
    start = 0
    for piece in pieces:
        if isinstance(piece, ChunkRows):
            stop = start + len(piece.rows)
            if piece.X.flags.aligned and piece.X.flags.c_contiguous:
                # "clip" writes straight into out ("raise" would buffer a copy); the rows are a chunk's own
                np.take(piece.X, piece.rows, axis=0, out=out[start:stop], mode="clip")
            else:  # np.take would first copy all of X into an aligned array (rows received off the wire)
                out[start:stop] = piece.X[piece.rows]
        else:
            stop = start + piece.shape[0]
            out[start:stop] = piece
        start = stop
    return out


# --------------------------------------------------------------- leaf step
def chunk_leaf_rows(chunk, routing, depth, with_X):
    """``{leaf: (global rows, X rows or None, y rows, sw rows)}`` for leaves at ``depth``.

    A resident chunk's X rows come as a :class:`ChunkRows` (read them with
    :func:`take_rows` or :func:`stack_part_rows`); rows read from storage for
    this task are gathered here, so the block is not kept alive by its leaves.
    """
    chunk = rows_of(chunk, routing)
    rows, nodes = nodes_at_depth(chunk, routing, depth)
    at_leaf = routing.tree.is_leaf[nodes]
    rows, nodes = rows[at_leaf], nodes[at_leaf]
    resident = chunk.leaf_losses is not None
    out = {}
    for leaf, g in groups(nodes, rows):
        X = None if not with_X else ChunkRows(chunk.X, g) if resident else chunk.X[g]
        out[leaf] = (chunk.offset + g, X, chunk.y[g], chunk.sw[g])
    return out


# ----------------------------------------------------------- decision step
def _care(chunk, routing, depth):
    """Rows at decision nodes of ``depth`` with their pseudolabel and weight.

    Kept on the chunk for its routing and depth: a level reads them when it
    cuts the care points and again when it evaluates the candidates, and
    nothing changes the chunk's margins in between (a new tree is a new
    :class:`Routing`). The second read was about half of the evaluation's
    time (a depth-10 MNIST tree).
    """
    memo = chunk.__dict__.get("_care_memo")
    if memo is not None and memo[0] is routing and memo[1] == depth:
        return memo[2]
    result = _care_points(chunk, routing, depth)
    chunk.__dict__["_care_memo"] = (routing, depth, result)
    return result


def _care_points(chunk, routing, depth):
    t = routing.tree
    rows, nodes = nodes_at_depth(chunk, routing, depth)
    dec = ~t.is_leaf[nodes]
    rows, nodes = rows[dec], nodes[dec]
    left = t.descend(chunk.margins, t.children_left[nodes], routing.column_of, rows)
    right = t.descend(chunk.margins, t.children_right[nodes], routing.column_of, rows)
    if t.leaf_model.has_coef and chunk.leaf_losses is not None:  # constant leaves: a look-up, nothing to save
        loss_left, loss_right = chunk.leaf_losses.losses(chunk, routing, rows, left, right)
    else:
        loss_left, loss_right = _losses(chunk, t, rows, left), _losses(chunk, t, rows, right)
    gain = loss_left - loss_right  # > 0: right is better
    return rows, nodes, gain > 0, chunk.sw[rows] * np.abs(gain)


def sampling_priority(seed, iteration, node, global_rows):
    """Deterministic pseudo-random priority of each row (splitmix64 hash).

    A node's solver sample is the ``k`` care points of smallest priority:
    every chunk proposes its own ``k`` smallest and the node keeps the ``k``
    smallest overall, which is the same sample however the rows are chunked.
    """
    with np.errstate(over="ignore"):
        z = (np.uint64(seed) * _GOLDEN + np.uint64(iteration) * np.uint64(0xBF58476D1CE4E5B9)
             + np.uint64(node) * np.uint64(0x94D049BB133111EB))
        z = global_rows.astype(np.uint64) * _GOLDEN + z
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def chunk_node_parts(chunk, routing, depth, max_care_points, seed, iteration, thresholds=None,
                     priorities_only=False):
    """Per decision node of ``depth``: small statistics and the solver's rows.

    Returns ``{node: (stats, sample)}``. ``stats`` is the array ``[care
    weight wanting right, care weight wanting left, current 0/1 loss on care
    points, sample weight currently going right, ... going left, number of
    care points]``. ``sample`` is ``(priority, global rows, X_solve rows
    (or a :class:`SolverRows` naming them), target, weight)`` for this
    chunk's care points (its ``max_care_points`` lowest priorities when a
    cap is set, and only those with priority <=
    ``thresholds[node]`` when thresholds are given), or None if it has none.
    With ``priorities_only`` the sample is just the priorities, so a first
    pass can find each node's ``max_care_points``-th lowest priority overall.
    """
    chunk = rows_of(chunk, routing)
    rows, nodes, target, weight = _care(chunk, routing, depth)
    out = {}
    for node, idx in groups(nodes, np.arange(rows.size)):
        r, tg, w = rows[idx], target[idx], weight[idx]
        current = chunk.margins[r, routing.column_of[node]] >= 0
        sw = chunk.sw[r]
        care = w > 0
        stats = np.array([w @ tg, w @ ~tg, w @ (current != tg), sw @ current, sw @ ~current, care.sum()])
        r, tg, w = r[care], tg[care], w[care]
        sample = None
        if r.size:
            prio = sampling_priority(seed, iteration, node, chunk.offset + r)
            if thresholds is not None:
                keep = np.flatnonzero(prio <= thresholds.get(node, prio.max()))
                r, tg, w, prio = r[keep], tg[keep], w[keep], prio[keep]
            if max_care_points is not None and r.size > max_care_points:
                keep = np.sort(np.argpartition(prio, max_care_points - 1)[:max_care_points])
                r, tg, w, prio = r[keep], tg[keep], w[keep], prio[keep]
            if priorities_only:
                sample = prio
            elif r.size:
                g = chunk.offset + r
                if chunk.rows_by_reference:
                    X = SolverRows(g)
                elif chunk.leaf_losses is not None:  # resident: copied once, where the node's rows are stacked
                    X = ChunkRows(chunk.X_solve, r)
                else:  # read from storage for this task: gathered now, so the block is not kept alive
                    X = chunk.X_solve[r]
                sample = (prio, g, X, tg, w)
        out[node] = (stats, sample)
    return out


def chunk_node_priorities(chunk, routing, depth, k, seed, iteration):
    """First pass of capped sampling: ``([{node: stats}], {node: the chunk's k lowest priorities})``.

    Results of several chunks combine with :func:`merge_priorities` (on the
    workers), so only k priorities per node ever reach the driver.
    """
    parts = chunk_node_parts(chunk, routing, depth, k, seed, iteration, priorities_only=True)
    return [node_stats(parts)], {node: p for node, (_, p) in parts.items() if p is not None}


def merge_priorities(a, b, k):
    """Combine two :func:`chunk_node_priorities` results: stats kept in chunk order, k lowest priorities."""
    prios = dict(a[1])
    for node, p in b[1].items():
        if node in prios:
            p = np.concatenate([prios[node], p])
            if p.size > k:
                p = np.partition(p, k - 1)[:k]
        prios[node] = p
    return a[0] + b[0], prios


def priority_thresholds(lowest, k):
    """``{node: k-th lowest priority}`` from each node's k lowest (all points when it has fewer)."""
    return {node: p.max() if p.size >= k else np.iinfo(np.uint64).max for node, p in lowest.items()}


def node_stats(parts):
    """Only the statistics of :func:`chunk_node_parts` (what the driver needs)."""
    return {node: stats for node, (stats, _) in parts.items()}


@numba.njit(nogil=True, cache=True, error_model="numpy")
def _row_margins(X, rows, cols, w, b, out):
    """``out[i] = X[rows[i], cols] . w + b``: no gathered copy of the rows, and the GIL released.

    Four rows at a time: each row's sum is still taken in column order from
    0.0 (the same bits as one row at a time), but the four sums are
    independent, so the additions overlap instead of waiting on each other
    (a depth-10 MNIST tree: 5.6 -> 2.9 s).
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


def _oblique_margins(X, rows, w, b):
    """``X[rows] @ w + b``, reading only w's non-zero columns.

    Dense rows go through a compiled loop that releases the GIL: the gathered
    ``X[rows][:, nz]`` copy it replaces held the GIL, and was most of a TAO
    level's time (MNIST depth 8: 15 of 40 s on one thread) and what kept
    threads from scaling.
    """
    if sp.issparse(X):  # sparse rows times a dense vector: no gather, no dense temporary
        return X[rows] @ w + b
    nz = np.flatnonzero(w)
    m = np.empty(rows.size)
    dense = np.asarray(X) if isinstance(X, np.ndarray) else None  # a memory map as a plain array (no copy)
    if dense is not None and dense.dtype in (np.float32, np.float64) and dense.flags.c_contiguous:
        _row_margins(dense, np.ascontiguousarray(rows, dtype=np.intp), nz, np.ascontiguousarray(w[nz], np.float64),
                     float(b), m)
        return m
    for s in range(0, rows.size, _EVAL_BLOCK_ROWS):  # other arrays (strided views, other dtypes): gathered blocks
        r = rows[s:s + _EVAL_BLOCK_ROWS]
        m[s:s + r.size] = X[np.ix_(r, nz)] @ w[nz] + b
    return m


def chunk_evaluate(chunk, routing, depth, candidates):
    """Evaluate candidate parameters of nodes of ``depth`` on the chunk's points at them.

    ``candidates[node]`` is ``("oblique", w, b)`` or ``("axis", feature,
    threshold)``. Returns ``{node: [weighted 0/1 loss, max |margin|, smallest
    margin >= 0, largest margin < 0]}`` (the margin entries locate the care
    point closest to an oblique hyperplane, see ``_tao.clear_boundary``).
    """
    chunk = rows_of(chunk, routing)
    rows, nodes, target, weight = _care(chunk, routing, depth)
    out = {}
    for node, idx in groups(nodes, np.arange(rows.size)):
        if node not in candidates:
            continue
        care = weight[idx] > 0
        r, tg, w = rows[idx], target[idx][care], weight[idx][care]
        kind, a, b = candidates[node]
        if kind == "axis":
            m = columns(chunk.X, [a], r)[:, 0] - b
        else:
            m = _oblique_margins(chunk.X, r, a, b)
        # the margin extremes cover every point reaching the node: a point that
        # does not care now still feeds the leaf refits after this step
        pos, neg = m[m >= 0], m[m < 0]
        out[node] = np.array([
            w @ ((m[care] >= 0) != tg),
            np.abs(m).max(initial=0.0),
            pos.min(initial=np.inf),
            neg.max(initial=-np.inf),
        ])
    return out


def chunk_update(chunk, routing, nodes, inplace=False):
    """The chunk with margins recomputed at ``nodes`` (after their update), see :func:`_write_margins`."""
    if isinstance(chunk, StreamedChunk):
        return chunk  # its margins are computed from the current tree whenever it is read
    margins = chunk.margins if inplace else chunk.margins.copy()
    nodes = np.asarray(nodes, dtype=np.intp)
    _write_margins(chunk, routing.tree, nodes, margins, routing.column_of[nodes])
    return chunk if inplace else replace(chunk, margins=margins)


#: float32's unit roundoff, for the error bound of float32 margins (see _write_margins)
_FLOAT32_ROUNDOFF = 2.0 ** -24

#: rows of a float32 margin product taken at once: its result (rows x nodes) stays in cache while
#: it is written out
_UPDATE_BLOCK_ROWS = 4096


def _write_margins(chunk, tree, nodes, dest, cols, recheck_entries=False):
    """``dest[:, cols[j]] =`` the chunk's margins at ``nodes[j]``, with the signs of the float64 margins.

    TAO reads only the signs of a chunk's margins (which way a row goes;
    :func:`chunk_boundaries` computes the values it needs). So a chunk with
    float32 solver rows computes oblique margins as a float32 product, which
    moves half the bytes of the float64 one (the update is a pass over all
    rows: 13 of a depth-10 MNIST tree's 38 s), and recomputes in float64 the
    rows whose float32 margin is within its error bound of 0 at some node:
    there the sign could differ. The
    bound: ``|fl32(x.w) - x.w| <= 2 (D + 3) u sum_j max|X_j| |w_j|``
    (``u = 2^-24``; the standard bound for a ``D``-term dot product with
    rounded inputs is ``(D + 2) u (1 + O(u))`` times the same sum, whatever
    the summation order, and the factor 2 is margin). Axis nodes and sparse
    or float64 solver rows take :meth:`~taodist.model.tree.Tree.decision_margins`.

    ``dest`` is the chunk's margins in an update: writing there block by
    block, with the float32 product's bias and bound test in the same pass,
    leaves out four passes over a (rows x nodes) float64 temporary (a
    depth-10 MNIST tree: the updates 8.0 -> 4.8 s).

    ``recheck_entries``: recompute in float64 only the (row, node) entries
    within the bound, by a compiled dot product over the nodes' columns,
    instead of whole rows by :meth:`~taodist.model.tree.Tree.decision_margins`.
    For the initial margins of a new chunk: every node at once, and a
    random tree's 1,023 dense hyperplanes (depth 10) left 99% of MNIST's
    rows near one of them but only 0.5% of the entries. Either order of
    summation gives a float64 margin; the rows clear_boundaries finds on a
    hyperplane are moved off it and their node's margins computed again.
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
            _store_rechecked_margins(product, bias, bound, s, dest, cols, X, used, W64)
        else:
            _store_float32_margins(product, bias, bound, s, dest, cols, near)
    near = np.flatnonzero(near)
    if near.size:
        dest[np.ix_(near, cols)] = tree.decision_margins(X[near], nodes[obl])


@numba.njit(nogil=True, cache=True)
def _store_float32_margins(product, bias, bound, first_row, dest, cols, near):
    """``dest[first_row + i, cols[k]] = product[i, k] + bias[k]`` in float64; flags rows within ``bound`` of 0."""
    for i in range(product.shape[0]):
        r = first_row + i
        for k in range(cols.size):
            v = np.float64(product[i, k]) + bias[k]
            dest[r, cols[k]] = v
            if not abs(v) > bound[k]:  # within the bound, or not a number (a float32 overflow)
                near[r] = True


@numba.njit(nogil=True, cache=True)
def _store_rechecked_margins(product, bias, bound, first_row, dest, cols, X, used, W64):
    """As :func:`_store_float32_margins`, an entry within ``bound`` of 0 recomputed in float64 from ``X`` at once."""
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


def groups(keys, values):
    """Yield ``(key, values with that key)`` for the distinct keys, in key order."""
    if keys.size == 0:
        return
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    bounds = np.flatnonzero(np.diff(sk)) + 1
    for start, idx in zip(np.r_[0, bounds], np.split(values[order], bounds)):
        yield int(sk[start]), idx
