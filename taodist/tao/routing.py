"""Which rows of a chunk reach which node: the tree snapshot every chunk task routes with.

A :class:`Routing` is the tree as the driver last changed it, with the
column each decision node's margin takes in a chunk's margins. It travels
with every chunk task (an executor may ship it once, or only the nodes that
changed since the last one), and carries a digest of every leaf so that a
chunk can tell which leaves changed since it last evaluated them
(:class:`~taodist.tao.leaf_losses.LeafLossCache`).

:func:`nodes_at_depth` walks a chunk's rows down to one depth by the signs
of its margins; :func:`group_by` splits rows by the node they reach. (The
per-row routing of prediction, from ``X`` rather than from margins, is
:mod:`taodist.model.route`.)
"""

import hashlib
import weakref
from dataclasses import dataclass

import numba
import numpy as np


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

        Equal digests mean equal outputs:
        :class:`~taodist.tao.leaf_losses.LeafLossCache` reuses a loss only at
        a leaf whose digest has not changed.
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

        A decision level's update changes only decision nodes, so hashing
        every leaf's parameters again (a linear leaf's whole coefficient
        rows) would give the same digests.
        """
        digests = previous.__dict__.get("_leaf_digests")
        if digests is not None:
            self.__dict__["_leaf_digests"] = digests


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


def group_by(keys, values):
    """Yield ``(key, values with that key)`` for the distinct keys, in key order."""
    if keys.size == 0:
        return
    order = np.argsort(keys, kind="stable")
    sk = keys[order]
    bounds = np.flatnonzero(np.diff(sk)) + 1
    for start, idx in zip(np.r_[0, bounds], np.split(values[order], bounds)):
        yield int(sk[start]), idx
