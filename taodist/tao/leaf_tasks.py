"""The leaf step's task: refitting a group of leaves on their reduced sets.

The driver (:mod:`taodist.tao.optimizer`) sends every leaf of a depth to a
few groups, each leaf with its :class:`LeafJob` and the chunks'
:class:`~taodist.tao.chunks.LeafRows` at it. :func:`fit_leaves_task` fits
the leaves of a group at once with the tree's leaf model and returns, per
leaf, a :class:`LeafFit` or a :class:`LeafKept`, each tagged with a digest
of the leaf's rows (:func:`rows_digest`) so that the driver can skip a fit
that would repeat the last one (``refit_leaves``, see
:data:`taodist.tao.optimizer.REFIT_LEAVES`).
"""

import hashlib
from dataclasses import dataclass

import numpy as np

from ..model.leaves import LEAF_MODELS
from ..utils.rows import stack_rows
from .part_rows import stack_part_rows


@dataclass(frozen=True)
class LeafJob:
    """What a leaf's fit needs besides its rows: its current parameters, and when not to fit it."""

    value: np.ndarray  # the leaf's current output values
    coef: object = None  # its (K, D) coefficients (dense, or CSR when large), or None for constant leaves
    output_range: np.ndarray | None = None  # (2, K) range its outputs are clipped to, or None
    skip_rows: str | None = None  # digest of the rows at which not to fit the leaf (see REFIT_LEAVES)


def fit_leaves_task(group, *, task, leaf_type, n_outputs, alpha, leaf_classes=None, leaf_max_iter=None,
                    leaf_warm_start="coef"):
    """New parameters ``{leaf: LeafFit, LeafKept or None}`` for a group of leaves.

    ``leaf_classes`` limits softmax leaves to their most populous classes
    (:meth:`~taodist.model.leaves.LeafModel.limited_to`); ``leaf_max_iter`` sets
    an iterative leaf solver's iterations (:meth:`~taodist.model.leaves.LeafModel.with_max_iter`) and
    ``leaf_warm_start`` what it starts from (:meth:`~taodist.model.leaves.LeafModel.with_warm_start`).

    ``group`` maps a leaf to ``(parts, job)``: the chunks'
    :class:`~taodist.tao.chunks.LeafRows` at the leaf and its
    :class:`LeafJob`. A fit is a :class:`LeafFit` ``(value, coef, range)``,
    the range being that of the leaf's new targets
    (:meth:`~taodist.model.leaves.LeafModel.output_range`). An exact leaf model's
    fit is always returned; an approximate one only if the leaf's objective
    (weighted loss + alpha * l1, outputs clipped to the range) does not
    increase. :class:`LeafKept`: the leaf is kept (fit refused, or skipped at
    its ``skip_rows``); None: kept, its points have no weight. Both results
    with rows carry their digest (:func:`rows_digest`).
    """
    model = LEAF_MODELS[leaf_type].limited_to(leaf_classes).with_max_iter(leaf_max_iter).with_warm_start(leaf_warm_start)
    leaves, problems = [], []
    out, digests = {}, {}
    for leaf, (parts, job) in group.items():
        rows, X, y, sw = zip(*parts)
        digests[leaf] = rows_digest(rows)
        if job.skip_rows == digests[leaf]:
            out[leaf] = LeafKept(digests[leaf])
            continue
        X = None if X[0] is None else stack_part_rows(X)  # only now the rows are copied, once
        # one chunk's labels and weights (a forest tree's single chunk) are used as they are: the task's own
        y, sw = (a[0] if len(a) == 1 else stack_rows(a) for a in (y, sw))
        if not sw.any():  # only zero-weight points: the leaf's loss is constant
            out[leaf] = None
            continue
        leaves.append(leaf)
        problems.append((X, y, sw, job.value, job.coef))
    fits = model.fit_level(problems, task=task, n_outputs=n_outputs, alpha=alpha)
    for leaf, (X, y, sw, old_value, old_coef), (value, coef) in zip(leaves, problems, fits):
        output_range = model.output_range(y, sw, task=task)
        if not model.exact:
            old = model.objective(X, y, sw, old_value, old_coef, task=task, alpha=alpha,
                                  output_range=group[leaf][1].output_range)
            if model.objective(X, y, sw, value, coef, task=task, alpha=alpha, output_range=output_range) > old:
                value = None
        out[leaf] = LeafKept(digests[leaf]) if value is None else LeafFit(value, coef, output_range, digests[leaf])
    return out


class LeafFit(tuple):
    """A leaf's new ``(value, coef, output_range)``, with the digest of the rows it was fitted on (``rows``)."""

    def __new__(cls, value, coef, output_range, rows):
        self = super().__new__(cls, (value, coef, output_range))
        self.rows = rows
        return self

    def __reduce__(self):
        return LeafFit, (*self, self.rows)

    @property
    def value(self):
        return self[0]

    @property
    def coef(self):
        return self[1]

    @property
    def output_range(self):
        return self[2]


class LeafKept:
    """A leaf kept as it is, with the digest of its rows (its fit was refused, or skipped)."""

    def __init__(self, rows):
        self.rows = rows


def rows_digest(row_arrays):
    """A digest of a leaf's global rows (its chunks' arrays, in chunk order): equal digests, equal rows."""
    h = hashlib.blake2b(digest_size=16)
    for rows in row_arrays:
        h.update(np.ascontiguousarray(rows, dtype=np.int64).tobytes())
    return h.hexdigest()
