"""The decision step on a chunk: each node's care points, their sample, and a candidate's evaluation.

At a decision node of depth ``d``, every point reaching it has a loss at
the leaf its left subtree sends it to and at the leaf its right subtree
does; its pseudolabel is the better side and its weight the difference
(:func:`_care_points`). Points with zero weight do not care. For every node
of a depth a chunk returns small statistics (:class:`NodeStats`, summed over
the chunks by the driver) and its care points for the node's solver
(:class:`CareSample`), all of them or a deterministic sample
(:func:`sampling_priority`); once the nodes are solved it evaluates each
candidate on its care points (:func:`chunk_evaluate`).
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from ..utils.rows import columns
from .chunks import rows_of
from .leaf_losses import row_losses
from .margins import MarginExtremes, oblique_margins
from .part_rows import ChunkRows, SolverRows
from .routing import group_by, nodes_at_depth

#: multiplier of the splitmix64 hash used for sampling priorities
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclass(frozen=True)
class NodeStats:
    """A decision node's statistics over the points of one chunk reaching it, or summed over chunks.

    Chunks' statistics are summed with ``+`` in chunk order, field by field
    (``0 + stats`` is ``stats``, so ``sum`` works too): the same additions
    in the same order whatever the executor.
    """

    w_right: float  # care weight of the points whose pseudolabel is "right"
    w_left: float  # care weight of the points whose pseudolabel is "left"
    care_loss: float  # the node's current weighted 0/1 loss on its care points
    sw_right: float  # sample weight the node sends right now
    sw_left: float  # sample weight the node sends left now
    n_care: int  # number of care points (points with positive weight)

    def __add__(self, other):
        if not isinstance(other, NodeStats):
            return NotImplemented
        return NodeStats(self.w_right + other.w_right, self.w_left + other.w_left, self.care_loss + other.care_loss,
                         self.sw_right + other.sw_right, self.sw_left + other.sw_left, self.n_care + other.n_care)

    def __radd__(self, other):
        if not (isinstance(other, int) and other == 0):
            return NotImplemented
        return NodeStats(other + self.w_right, other + self.w_left, other + self.care_loss, other + self.sw_right,
                         other + self.sw_left, other + self.n_care)

    def needs_solve(self):
        """Whether the node needs a solve.

        Not when no care point has weight (nothing to gain) or all care weight
        wants one side (sending everything there is exact): the driver sets those.
        """
        return self.n_care != 0 and self.w_left != 0 and self.w_right != 0


class CareSample(NamedTuple):
    """A chunk's care points at a node, for the node's solver (a sample of them with a care-point cap)."""

    priority: np.ndarray  # sampling priorities (see sampling_priority)
    rows: np.ndarray  # global row indices
    X: object  # X_solve rows: an array, a ChunkRows, or a SolverRows naming them
    target: np.ndarray  # pseudolabels, True: right
    weight: np.ndarray  # care weights


class ObliqueSplit(NamedTuple):
    """A decision node's oblique parameters: right iff ``w . x + b >= 0`` (a candidate, or an update)."""

    w: np.ndarray
    b: float


class AxisSplit(NamedTuple):
    """A decision node's axis-aligned parameters: right iff ``x[feature] >= threshold``.

    Or, with a ``missing_column`` (the indicator of ``feature``'s missing
    values), right iff ``missing_right`` where that indicator is set.
    """

    feature: int
    threshold: float
    missing_column: int = -1
    missing_right: bool = False


class CandidateEvaluation(NamedTuple):
    """A candidate's weighted 0/1 loss on a node's care points and its margins' extremes.

    The extremes cover every point reaching the node (see
    :meth:`~taodist.tao.margins.MarginExtremes.clearing_shift`). Combined over
    chunks in chunk order with :meth:`merged`.
    """

    loss: float
    extremes: MarginExtremes

    def merged(self, other):
        return CandidateEvaluation(self.loss + other.loss, self.extremes.merged(other.extremes))


def _care(chunk, routing, depth):
    """Rows at decision nodes of ``depth`` with their pseudolabel and weight (see :func:`_care_points`).

    Kept on the chunk for its routing and depth: a level reads them when it
    cuts the care points and again when it evaluates the candidates, and
    nothing changes the chunk's margins in between (a new tree is a new
    :class:`~taodist.tao.routing.Routing`), so the second read would repeat
    the whole computation.
    """
    memo = chunk.__dict__.get("_care_memo")
    if memo is not None and memo[0] is routing and memo[1] == depth:
        return memo[2]
    result = _care_points(chunk, routing, depth)
    chunk.__dict__["_care_memo"] = (routing, depth, result)
    return result


def _care_points(chunk, routing, depth):
    """``(rows, nodes, target, weight)``: rows at decision nodes of ``depth``, the node, pseudolabel and weight."""
    t = routing.tree
    rows, nodes = nodes_at_depth(chunk, routing, depth)
    dec = ~t.is_leaf[nodes]
    rows, nodes = rows[dec], nodes[dec]
    left = t.descend(chunk.margins, t.children_left[nodes], routing.column_of, rows)
    right = t.descend(chunk.margins, t.children_right[nodes], routing.column_of, rows)
    if t.leaf_model.has_coef and chunk.leaf_losses is not None:  # constant leaves: a look-up, nothing to save
        loss_left, loss_right = chunk.leaf_losses.losses(chunk, routing, rows, left, right)
    else:
        loss_left, loss_right = row_losses(chunk, t, rows, left), row_losses(chunk, t, rows, right)
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

    Returns ``{node: (stats, sample)}``: the :class:`NodeStats` of the
    chunk's points at the node, and a :class:`CareSample` of its care points
    (its ``max_care_points`` lowest priorities when a cap is set, and only
    those with priority <= ``thresholds[node]`` when thresholds are given),
    or None if it has none. The sample's X rows are a
    :class:`~taodist.tao.part_rows.SolverRows` naming them where the
    executor replicates the solver rows. With ``priorities_only`` the sample
    is just the priorities, so a first pass can find each node's
    ``max_care_points``-th lowest priority overall.
    """
    chunk = rows_of(chunk, routing)
    rows, nodes, target, weight = _care(chunk, routing, depth)
    out = {}
    for node, idx in group_by(nodes, np.arange(rows.size)):
        r, tg, w = rows[idx], target[idx], weight[idx]
        current = chunk.margins[r, routing.column_of[node]] >= 0
        sw = chunk.sw[r]
        care = w > 0
        stats = NodeStats(w_right=w @ tg, w_left=w @ ~tg, care_loss=w @ (current != tg), sw_right=sw @ current,
                          sw_left=sw @ ~current, n_care=int(care.sum()))
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
                sample = CareSample(prio, g, X, tg, w)
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


def chunk_evaluate(chunk, routing, depth, candidates):
    """Evaluate candidate parameters of nodes of ``depth`` on the chunk's points at them.

    ``candidates[node]`` is an :class:`ObliqueSplit` or an :class:`AxisSplit`.
    Returns ``{node: CandidateEvaluation}``: the weighted 0/1 loss on the
    care points, and the margin extremes that locate the point closest to
    an oblique hyperplane.
    """
    chunk = rows_of(chunk, routing)
    rows, nodes, target, weight = _care(chunk, routing, depth)
    out = {}
    for node, idx in group_by(nodes, np.arange(rows.size)):
        if node not in candidates:
            continue
        care = weight[idx] > 0
        r, tg, w = rows[idx], target[idx][care], weight[idx][care]
        split = candidates[node]
        if isinstance(split, AxisSplit):
            m = columns(chunk.X, [split.feature], r)[:, 0] - split.threshold
            if split.missing_column >= 0:
                m[columns(chunk.X, [split.missing_column], r)[:, 0] != 0] = 1.0 if split.missing_right else -1.0
        else:
            m = oblique_margins(chunk.X, r, split.w, split.b)
        # the margin extremes cover every point reaching the node: a point that
        # does not care now still feeds the leaf refits after this step
        out[node] = CandidateEvaluation(w @ ((m[care] >= 0) != tg), MarginExtremes.of(m))
    return out
