"""Jacobi-preconditioned block conjugate gradients over row blocks.

The system is ``(diag(d) + M) X = B`` with K right-hand sides (LapTAO's
label step: ``M = gamma L``, ``d = J + mu I``). The rows are cut into
contiguous blocks; each block (:class:`CGRows`) holds its rows of ``M`` and
of every CG vector and does the row-local work of an iteration, and
:func:`solve_blocks` runs the iteration over all blocks at once, summing the
K-vectors they return. Three rounds of calls per iteration:

1. ``matvec_dot(halo)``: ``AP = A P`` for its rows (own P plus the *halo*
   rows of other blocks' P), returns its share of ``P . AP``;
2. ``update(alpha)``: X, R, preconditioned residual, returns its shares of
   ``R . M^-1 R`` and ``|R|^2``;
3. ``direction(beta)``: new P, returns the rows of P other blocks need.

Only K-vectors and halo rows travel between blocks: the loop runs the
blocks on threads of this process (:class:`taodist.laptao._label_step.LaplacianCG`:
scipy's sparse products release the GIL), relaying the halo rows. A graph
ordered so that neighbours are near each other (reverse Cuthill-McKee) has
small halos.

:func:`solve_resident` is the same iteration, step for step and bit for
bit, for blocks that fetch their halo rows from each other (as actors on
Dask workers do, :class:`taodist.dask.DistributedLaplacianCG`): the caller
then handles K-vectors only, and every vector of the solve, B and X0
included, stays with its block (:meth:`CGRows.load` sets them there).
"""

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp


@dataclass
class LabelStepInfo:
    method: str
    iterations: int
    residual: float


class CGRows:
    """Rows ``[lo, lo + m)`` of the system and of the CG state.

    Each of the K columns is its own CG run (own step sizes); they share
    the sparse products, one SpMM per iteration. Two things keep an
    iteration at the cost of that SpMM: the diagonal of ``M`` is stored in
    every row, so a new ``d`` (every LapTAO step changes ``mu``) is written
    into the matrix's data and ``A @ P`` is one sparse product; and the
    dense updates run in place (at a million rows by 10 columns each
    allocated temporary cost about a third of the SpMM).

    Parameters
    ----------
    M_rows : sparse (m, N)
        These rows of ``M``, global column numbers.
    lo : int
        First row of the block.
    halo_cols : int ndarray, optional
        Sorted columns outside ``[lo, lo + m)`` with entries in these rows.
    sends : dict, optional
        ``{other block: local rows of P it reads}``.
    """

    def __init__(self, M_rows, lo=0, halo_cols=None, sends=None):
        M = sp.csr_matrix(M_rows)
        m = M.shape[0]
        own = (M[:, lo:lo + m] + sp.eye(m, format="csr")).tocsr()  # a stored diagonal in every row
        own.sum_duplicates()
        own.sort_indices()
        self._diag_pos = np.flatnonzero(own.indices == np.repeat(np.arange(m), np.diff(own.indptr)))
        self.m_diag = own.data[self._diag_pos] - 1.0
        self.A = own
        self.halo_rows = self.A_halo = None
        if halo_cols is not None and len(halo_cols):
            H = M[:, halo_cols].tocsr()
            self.halo_rows = np.flatnonzero(np.diff(H.indptr))  # only the rows that read a halo
            self.A_halo = H[self.halo_rows]
        self.sends = sends or {}

    def _matvec(self, V, V_halo):
        out = self.A @ V
        if self.A_halo is not None:
            out[self.halo_rows] += self.A_halo @ V_halo
        return out

    def _halo_out(self):
        return {j: self.P[rows] for j, rows in self.sends.items()}

    def _dots(self):
        return np.einsum("ij,ij->j", self.R, self.Zp), np.einsum("ij,ij->j", self.R, self.R)

    def reset(self, d, B, X0, X0_halo=None):
        """Start a solve of ``(diag(d) + M) X = B`` from ``X0``; returns ``(R.Z, R.R, halo of P)``."""
        self.load(d, B, X0)
        started = self.start(X0_halo)
        self.B = None  # the caller's (a view of its B): not kept alive by the blocks
        return (*started, self._halo_out())

    def load(self, d, B, X0=None):
        """Set the diagonal ``d``, the right-hand side ``B`` and the start ``X0`` (zero if None) of a solve."""
        self.A.data[self._diag_pos] = self.m_diag + d
        self.inv_diag = 1.0 / (self.m_diag + d)
        self.B = np.asarray(B, dtype=np.float64)
        self.X = np.zeros_like(self.B) if X0 is None else np.array(X0, dtype=np.float64)

    def b_square_sums(self, before=None):
        """The column sums of ``B**2`` over the rows up to this block's last, ``before`` those of the rows before it.

        Called block after block, this adds the squares in the order
        ``np.linalg.norm(B, axis=0)`` adds them over the whole of B (row
        after row), so the norms are the same bits.
        """
        squares = self.B * self.B
        if before is None:
            return np.add.reduce(squares, axis=0)
        if not len(squares):
            return before
        squares[0] += before
        return np.add.reduce(squares, axis=0)

    def start(self, X_halo=None):
        """The loaded solve's first residual and direction (``X_halo``: the other blocks' rows of X0 it reads);
        returns ``(R.Z, R.R)``."""
        self.R = self.B - self._matvec(self.X, X_halo)
        self.Zp = self.inv_diag[:, None] * self.R
        self.P = self.Zp.copy()
        self._tmp = np.empty_like(self.R)
        return self._dots()

    def rows_for(self, block, name):
        """The rows of vector ``name`` (an attribute: ``"P"``, ``"X"``) that block ``block`` reads."""
        return getattr(self, name)[self.sends[block]]

    def matvec_dot(self, P_halo=None):
        """``AP = A P`` on these rows; returns this block's ``P . AP``."""
        self.AP = self._matvec(self.P, P_halo)
        return np.einsum("ij,ij->j", self.P, self.AP)

    def update(self, alpha):
        """``X += alpha P``, ``R -= alpha AP``, preconditioned residual; returns ``(R.Z, R.R)``."""
        np.multiply(self.P, alpha, out=self._tmp)
        self.X += self._tmp
        np.multiply(self.AP, alpha, out=self._tmp)
        self.R -= self._tmp
        np.multiply(self.R, self.inv_diag[:, None], out=self.Zp)
        self.AP = None
        return self._dots()

    def direction(self, beta):
        """``P = Z + beta P``; returns the rows of P other blocks read."""
        self.advance(beta)
        return self._halo_out()

    def advance(self, beta):
        """``P = Z + beta P``, the other blocks reading their rows of it from here (:meth:`rows_for`)."""
        self.P *= beta
        self.P += self.Zp

    def solution(self):
        return self.X

    def release(self):
        """Drop the solve's vectors (X stays: the solution)."""
        self.B = self.R = self.Zp = self.P = self.AP = self._tmp = None


class RowPartition:
    """Contiguous row blocks of a sparse ``M`` and the halo rows each block reads from the others.

    Parameters
    ----------
    M : sparse (N, N)
    n_blocks : int
    """

    def __init__(self, M, n_blocks):
        M = sp.csr_matrix(M)
        n = M.shape[0]
        n_blocks = max(1, min(n_blocks, n))
        bounds = np.linspace(0, n, n_blocks + 1).astype(np.int64)
        self._set(bounds, [halo_columns(M[bounds[i]:bounds[i + 1]], bounds[i]) for i in range(n_blocks)])

    @classmethod
    def from_halos(cls, bounds, halos):
        """The partition of blocks whose rows are already cut, from their :func:`halo_columns`.

        Parameters
        ----------
        bounds : int array-like of shape (n_blocks + 1,)
            First row of every block, then N (e.g. a Dask array's row chunks).
        halos : list of int ndarray
            Each block's :func:`halo_columns`, computed where its rows are.
        """
        self = cls.__new__(cls)
        self._set(np.asarray(bounds, dtype=np.int64), [np.asarray(h, dtype=np.int64) for h in halos])
        return self

    def _set(self, bounds, halos):
        n_blocks = len(bounds) - 1
        self.bounds = bounds
        self.owner = np.repeat(np.arange(n_blocks), np.diff(self.bounds))
        self.halos, self.sends = halos, [dict() for _ in range(n_blocks)]
        for i, cols in enumerate(halos):
            for j, rows in split_halo(cols, self.bounds).items():
                self.sends[j][i] = rows

    def __len__(self):
        return len(self.halos)

    def rows(self, i):
        return slice(int(self.bounds[i]), int(self.bounds[i + 1]))

    def blocks(self, M):
        """The arguments of :class:`CGRows` for every block: ``(M rows, lo, halo columns, sends)``."""
        M = sp.csr_matrix(M)
        return [(M[self.rows(i)], int(self.bounds[i]), self.halos[i], self.sends[i]) for i in range(len(self))]

    def halo_in(self, outs):
        """Each block's halo rows, concatenated in its halo-column order, from the blocks' sends."""
        K = next((v.shape[1] for out in outs for v in out.values()), 0)
        return [np.concatenate([outs[j][i] for j in np.unique(self.owner[h])]) if h.size
                else np.zeros((0, K)) for i, h in enumerate(self.halos)]


def halo_columns(M_rows, lo):
    """Sorted columns outside ``[lo, lo + m)`` with entries in these ``m`` rows of a CSR matrix.

    Parameters
    ----------
    M_rows : sparse matrix of shape (m, N)
        A block's rows, global column numbers.
    lo : int
        The block's first row.

    Returns
    -------
    cols : int64 ndarray
        The rows of other blocks that this block's products read.
    """
    M_rows = sp.csr_matrix(M_rows)
    cols = np.unique(M_rows.indices).astype(np.int64)
    return cols[(cols < lo) | (cols >= lo + M_rows.shape[0])]


def split_halo(cols, bounds):
    """A block's halo columns cut by the blocks owning them: ``{owner: its local rows}``, owners ascending.

    Parameters
    ----------
    cols : sorted int ndarray
        The block's :func:`halo_columns`.
    bounds : int ndarray of shape (n_blocks + 1,)
        First row of every block, then N.
    """
    owner = np.searchsorted(bounds, cols, side="right") - 1
    return {int(j): cols[owner == j] - bounds[j] for j in np.unique(owner)}


def sends_of(block, *splits):
    """What ``block`` sends to each other block: ``{i: splits[i][block]}`` from every block's :func:`split_halo`."""
    return {i: split[block] for i, split in enumerate(splits) if block in split}


def solve_blocks(call, partition, diag, B, X0, *, tol, max_iter, method):
    """Block PCG over ``partition``'s blocks until every column's relative residual is below ``tol``.

    ``call(name, args)`` calls method ``name`` of every block ``i`` with
    ``args[i]`` (all blocks at once: threads, Dask actors) and returns the
    results in block order. Returns ``(X, LabelStepInfo)``.
    """
    X0 = np.zeros_like(B, dtype=np.float64) if X0 is None else X0
    parts = [partition.rows(i) for i in range(len(partition))]
    started = call("reset", [(diag[r], B[r], X0[r], X0[h]) for r, h in zip(parts, partition.halos)])
    rz, rr = sum(s[0] for s in started), sum(s[1] for s in started)
    halo = partition.halo_in([s[2] for s in started])
    bnorm = np.maximum(np.linalg.norm(B, axis=0), 1e-300)
    it = 0
    for it in range(1, max_iter + 1):
        if np.all(np.sqrt(rr) / bnorm < tol):
            it -= 1
            break
        alpha = rz / np.maximum(sum(call("matvec_dot", [(h,) for h in halo])), 1e-300)
        stats = call("update", [(alpha,)] * len(parts))
        rz_new, rr = sum(s[0] for s in stats), sum(s[1] for s in stats)
        halo = partition.halo_in(call("direction", [(rz_new / np.maximum(rz, 1e-300),)] * len(parts)))
        rz = rz_new
    X = np.concatenate(call("solution", [()] * len(parts)))
    return X, LabelStepInfo(method, it, float((np.sqrt(rr) / bnorm).max()))


def solve_resident(call, chain, n_blocks, *, tol, max_iter, method):
    """:func:`solve_blocks`'s iteration on blocks already loaded (:meth:`CGRows.load`) that read their halo rows
    from each other.

    ``call(name, args)`` calls method ``name`` of every block ``i`` with
    ``args[i]``, the blocks fetching the halo rows their ``start`` (rows of
    X) and ``matvec_dot`` (rows of P) read from the other blocks;
    ``chain(i, name, arg)`` calls one block. The caller sees K-vectors only.
    The same K-vectors are summed in the same order as in
    :func:`solve_blocks`, and B's norms are added block after block in
    ``np.linalg.norm``'s order, so from the same blocks, B and X0 both give
    the same solution bit for bit. Returns the :class:`LabelStepInfo`; the
    solution stays on the blocks (``X``).
    """
    squares = None
    for i in range(n_blocks):
        squares = chain(i, "b_square_sums", squares)
    bnorm = np.maximum(np.sqrt(squares), 1e-300)
    started = call("start", [()] * n_blocks)
    rz, rr = sum(s[0] for s in started), sum(s[1] for s in started)
    it = 0
    for it in range(1, max_iter + 1):
        if np.all(np.sqrt(rr) / bnorm < tol):
            it -= 1
            break
        alpha = rz / np.maximum(sum(call("matvec_dot", [()] * n_blocks)), 1e-300)
        stats = call("update", [(alpha,)] * n_blocks)
        rz_new, rr = sum(s[0] for s in stats), sum(s[1] for s in stats)
        call("advance", [(rz_new / np.maximum(rz, 1e-300),)] * n_blocks)
        rz = rz_new
    return LabelStepInfo(method, it, float((np.sqrt(rr) / bnorm).max()))
