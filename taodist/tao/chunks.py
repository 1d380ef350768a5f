"""Row chunks of TAO: their state, how they are made and updated, and the passes over all their rows.

TAO's data-parallel work -- routing points, computing each decision node's
care points, pseudolabels and weights, evaluating a candidate node on its
care points, updating margins -- is independent across rows. The pure
functions of this module and of :mod:`taodist.tao.care_points` do it for
one row chunk; the optimiser (:mod:`taodist.tao.optimizer`) runs them on
every chunk through an executor (threads in-process, tasks on Dask workers)
and reduces their small results. Only the care points a node's solver needs
travel to the node's task.

A :class:`Chunk` holds a block of rows of the (scaled) training data and the
margins ``(rows, decision nodes)`` of the current tree at those rows. A
:class:`StreamedChunk` holds only the block's labels, weights and a way to
read its rows (a Dask task reading a Zarr block, say): every chunk function
re-reads, scales and routes the rows when it runs (:func:`rows_of`) and
drops them after, so data larger than the workers' memory never has to be
resident.

The module structure is the following:

* :class:`Chunk`, :class:`StreamedChunk`, :func:`make_chunk`,
  :func:`streamed_chunk`, :func:`rows_of` and :func:`chunk_update`: a
  chunk's state, made from raw rows and updated after a level;
* :func:`chunk_loss`, :func:`chunk_visits` and :func:`chunk_boundaries`:
  passes over every row of a chunk (the objective, pruning counts, points
  on a hyperplane);
* :func:`chunk_leaf_rows`: the rows of every leaf of a depth, for the leaf
  fits.

Its pieces live beside it: the tree snapshot and the walk to a depth in
:mod:`~taodist.tao.routing`, the margin kernels in
:mod:`~taodist.tao.margins`, the leaf losses and their cache in
:mod:`~taodist.tao.leaf_losses`, the rows handed to fits in
:mod:`~taodist.tao.part_rows`, and the decision step's care points in
:mod:`~taodist.tao.care_points`.
"""

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from ..model.kinds import OBLIQUE
from ..utils.rows import as_rows, divide_columns, first_nonfinite_row
from .leaf_losses import LeafLossCache, leaf_loss_budget, row_losses
from .margins import EVAL_BLOCK_ROWS, MarginExtremes, oblique_margins, write_margins
from .part_rows import ChunkRows
from .routing import group_by, nodes_at_depth


@dataclass
class Chunk:
    X: np.ndarray  # float64 rows (NumPy, or a CSR matrix for sparse input), features already scaled
    X_solve: np.ndarray  # float32 copy for solvers that take it, else X
    y: np.ndarray
    sw: np.ndarray
    offset: int  # global index of the first row
    margins: np.ndarray  # (rows, decision nodes) of the current tree, exact in sign only (see write_margins)
    leaf_losses: "LeafLossCache | None" = None  # resident chunks only
    # True where an executor keeps a copy of every chunk's solver rows on each
    # worker (see SolverRows): node parts then name their rows instead of carrying them
    rows_by_reference: bool = False

    def __getstate__(self):
        # a chunk that travels leaves its memos behind (care_points' "_care_memo", leaf_losses'
        # "_product_rows"): the receiver computes them again if it needs them
        state = dict(self.__dict__)
        state.pop("_care_memo", None)
        state.pop("_product_rows", None)
        return state


@dataclass
class StreamedChunk:
    """A chunk whose rows stay in storage; see :func:`rows_of`."""

    load: object  # load() -> the raw X block (e.g. taodist.dask's BlockReader of a Zarr block)
    y: np.ndarray
    sw: np.ndarray
    offset: int
    scale: np.ndarray
    solve_float32: bool


def make_chunk(X, y, sw, offset, routing, scale, solve_float32, rows_by_reference=False):
    """Build a chunk from raw rows (dense or sparse): validate, scale, compute margins.

    ``rows_by_reference``: the executor replicates the solver rows (see
    :class:`~taodist.tao.part_rows.SolverRows`).
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
    # exact in sign, as after an update: the initial tree's every node is one (a deep random tree's
    # many dense hyperplanes would make a float64 product over all nodes a large part of a fit); the
    # values that clear_boundaries reads are recomputed there in float64
    internal = np.asarray(routing.internal, dtype=np.intp)
    write_margins(chunk, routing.tree, internal, chunk.margins, np.asarray(routing.column_of, np.intp)[internal],
                  recheck_entries=True)
    return chunk


def streamed_chunk(load, y, sw, offset, scale, solve_float32):
    """A :class:`StreamedChunk`, checking its rows once for NaN/inf as :func:`make_chunk` does."""
    chunk = StreamedChunk(load, np.asarray(y), np.asarray(sw, dtype=np.float64), int(offset), scale, solve_float32)
    _check_finite(_read(chunk.load), chunk.offset)
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


#: what to do about a non-finite value in rows that reach the chunks (Dask input; in-memory input is encoded first)
_NONFINITE_HINT = ("replace infinities, and impute missing values or fit from memory (a NumPy array or pandas "
                   "DataFrame), where taodist learns where missing values go.")


def _check_finite(X, offset):
    if sp.issparse(X):
        bad = first_nonfinite_row(X)
        if bad is not None:
            raise ValueError(f"Input X contains NaN or infinity (first at row {offset + bad}); {_NONFINITE_HINT}")
        return
    for s in range(0, X.shape[0], EVAL_BLOCK_ROWS):  # blocks: no (rows, features) mask of the whole chunk
        finite = np.isfinite(X[s:s + EVAL_BLOCK_ROWS]).all(axis=1)
        if not finite.all():
            bad = offset + s + int(np.flatnonzero(~finite)[0])
            raise ValueError(f"Input X contains NaN or infinity (first at row {bad}); {_NONFINITE_HINT}")


def chunk_update(chunk, routing, nodes, inplace=False):
    """The chunk with margins recomputed at ``nodes`` after their update.

    Exact in sign, as :func:`~taodist.tao.margins.write_margins` writes them.
    """
    if isinstance(chunk, StreamedChunk):
        return chunk  # its margins are computed from the current tree whenever it is read
    margins = chunk.margins if inplace else chunk.margins.copy()
    nodes = np.asarray(nodes, dtype=np.intp)
    write_margins(chunk, routing.tree, nodes, margins, routing.column_of[nodes])
    return chunk if inplace else replace(chunk, margins=margins)


# ------------------------------------------------------------ passes over every row
def chunk_loss(chunk, routing):
    """Weighted training loss of the chunk's rows under the current tree."""
    chunk = rows_of(chunk, routing)
    n = chunk.X.shape[0]
    t = routing.tree
    leaves = t.descend(chunk.margins, np.zeros(n, np.intp), routing.column_of)
    if t.leaf_model.has_coef and chunk.leaf_losses is not None:  # linear leaves: the root level's losses
        return float(chunk.sw @ chunk.leaf_losses.loss_at(chunk, routing, np.arange(n), leaves))
    return float(chunk.sw @ row_losses(chunk, t, np.arange(n), leaves))


def chunk_visits(chunk, routing):
    """Rows and summed sample weight reaching every node (for pruning).

    Read from the chunk's margins (those of ``routing``'s tree), depth by
    depth, rather than from a decision path of ``X``, which would compute
    every node's margins again (a product with every node's weights).
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
    """``{node: MarginExtremes}``: where the rows reaching each oblique node lie from its hyperplane.

    The routes come from the chunk's margins (exact in sign); the values are
    each node's rows' margins in float64 (as a candidate's are evaluated,
    :func:`~taodist.tao.care_points.chunk_evaluate`), so they do not depend
    on how the chunk's own margins were computed.
    """
    chunk = rows_of(chunk, routing)
    t = routing.tree
    out = {}
    for depth in range(t.max_depth):
        rows, nodes = nodes_at_depth(chunk, routing, depth)
        obl = t.kind[nodes] == OBLIQUE
        for node, r in group_by(nodes[obl], rows[obl]):
            out[node] = MarginExtremes.of(oblique_margins(chunk.X, r, t.weight_row(node), t.bias[node]))
    return out


# --------------------------------------------------------------- leaf step
class LeafRows(NamedTuple):
    """A chunk's points at one leaf: what :func:`chunk_leaf_rows` hands the leaf's fit."""

    rows: np.ndarray  # global row indices
    X: object  # their X rows (array, CSR or ChunkRows), or None when the leaf model reads none
    y: np.ndarray
    sw: np.ndarray


def chunk_leaf_rows(chunk, routing, depth, with_X):
    """``{leaf: LeafRows}`` for the leaves at ``depth``.

    A resident chunk's X rows come as a :class:`~taodist.tao.part_rows.ChunkRows`
    (read them with :func:`~taodist.tao.part_rows.take_rows` or
    :func:`~taodist.tao.part_rows.stack_part_rows`); rows read from storage for
    this task are gathered here, so the block is not kept alive by its leaves.
    """
    chunk = rows_of(chunk, routing)
    rows, nodes = nodes_at_depth(chunk, routing, depth)
    at_leaf = routing.tree.is_leaf[nodes]
    rows, nodes = rows[at_leaf], nodes[at_leaf]
    resident = chunk.leaf_losses is not None
    out = {}
    for leaf, g in group_by(nodes, rows):
        X = None if not with_X else ChunkRows(chunk.X, g) if resident else chunk.X[g]
        out[leaf] = LeafRows(chunk.offset + g, X, chunk.y[g], chunk.sw[g])
    return out
