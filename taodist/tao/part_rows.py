"""The X rows of a node's or a leaf's part, as they travel from a chunk to the fit that reads them.

A chunk hands each node (:func:`taodist.tao.care_points.chunk_node_parts`)
and each leaf (:func:`taodist.tao.chunks.chunk_leaf_rows`) of a level the
rows of its points there. Those rows are copied at most once, where the fit
stacks them (:func:`stack_part_rows`): a resident chunk hands a
:class:`ChunkRows` (its array and the row indices, gathered only when a fit
reads them), and a chunk whose executor replicates the solver rows on every
worker hands a :class:`SolverRows` (the global row indices only), which the
worker swaps for its own copy's rows (:func:`resolve_rows`).
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from ..utils.rows import stack_rows


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
    """``part`` with every :class:`SolverRows` in it (at any depth of nested tuples) replaced by ``take(rows)``.

    A named tuple (a :class:`~taodist.tao.care_points.CareSample`) stays one.
    """
    if isinstance(part, SolverRows):
        return take(part.rows)
    if isinstance(part, tuple):
        values = [resolve_rows(v, take) for v in part]
        return part._make(values) if hasattr(part, "_make") else tuple(values)
    return part


class ChunkRows:
    """Rows ``rows`` of a resident chunk's array ``X``, copied only when a fit reads them.

    A leaf step hands every leaf of a depth its rows, and most leaf fits
    late in a fit are skipped (their rows are those of their last fit, see
    ``taodist.tao.optimizer.REFIT_LEAVES``): the rows of a skipped leaf are
    never gathered. A decision node's care points come from every chunk and
    are stacked for its solver: gathered as they are stacked
    (:func:`stack_part_rows`), each row is copied once, not twice.
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
    first copied them twice into two. (Fresh memory is not free: the kernel
    zeroes each new page before the copy writes it.) Without ``out`` a
    single piece is gathered, or used as it is. ``out``: a C-contiguous
    array of the result's shape and dtype (:func:`part_rows_layout`) to
    write into, dense pieces only.
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
