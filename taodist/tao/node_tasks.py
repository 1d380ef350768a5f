"""The decision step's tasks: solving a group of decision nodes, and evaluating their candidates on a chunk.

The driver (:mod:`taodist.tao.optimizer`) sends every decision node of a
depth to a few groups (:meth:`~taodist.tao.executor.Executor.run_key_groups`),
each node with its :class:`NodeJob` and the chunks' parts at it
(:func:`~taodist.tao.care_points.chunk_node_parts`). A group sums each
node's statistics, builds the reduced problem of the nodes that need a solve
(:func:`node_problem`) and solves them (:func:`solve_nodes_task`); the
chunks then evaluate the candidates where they were made
(:func:`evaluate_groups`), so the candidates need not visit the driver first.
"""

from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np

from ..model.kinds import AXIS
from ..utils.rows import stack_rows
from .care_points import AxisSplit, ObliqueSplit, chunk_evaluate
from .node_solvers import NODE_SOLVERS, NodeProblem, solve_axis_missing
from .part_rows import part_rows_layout, stack_part_rows
from .row_buffers import ROW_BUFFERS


@dataclass(frozen=True)
class NodeJob:
    """What a decision node's solve needs besides its care points."""

    kind: int  # the node's kind (taodist.model.kinds: AXIS or OBLIQUE)
    alpha: float  # l1 penalty weight
    w0: np.ndarray  # warm start: the solver's last iterate at the node, or its current weights
    b0: float
    max_care_points: int | None  # cap on the care points the solver sees (a sample), or None
    n_care: int = 1  # last iteration's care points: only to balance the groups (the solve counts its own)
    indicator_of: np.ndarray | None = None  # an axis node's features' missingness indicators (solve_axis_missing)


def node_problem(parts, *, alpha, w0, b0, max_care_points, n_care, out=None):
    """One decision node's :class:`~taodist.tao.node_solvers.NodeProblem` from its care points in the chunks.

    ``parts`` are the chunks' ``(stats, sample)`` for this node (see
    :func:`~taodist.tao.care_points.chunk_node_parts`). With a cap, the
    ``max_care_points`` lowest priorities are kept and the penalty scaled by
    ``max_care_points / n_care`` (the loss/penalty balance of all care
    points). None when the sample holds one pseudolabel only. ``out``: where
    to put the care points' rows, without a cap (see :func:`node_rows_layout`).
    """
    samples = [sample for _, sample in parts if sample is not None]
    prio, rows, X, target, weight = zip(*samples)
    # one chunk's arrays (in process: one chunk per thread) are used as they are: this task's own, and
    # a copy of a node's care points costs as much as a pass of its solver; the rows are copied once
    prio, rows, target, weight = (a[0] if len(a) == 1 else stack_rows(a) for a in (prio, rows, target, weight))
    if max_care_points is not None and rows.size > max_care_points:
        keep = np.argpartition(prio, max_care_points - 1)[:max_care_points]
        keep = keep[np.argsort(rows[keep])]  # global row order: chunking-independent input
        X, target, weight = stack_part_rows(X)[keep], target[keep], weight[keep]
    else:
        X = stack_part_rows(X, out=out)
    if target.size < n_care:
        # A sample stands for all n_care points. Scale the penalty down rather
        # than the weights up (the same minimiser): SAGA's step size ignores
        # sample weights, and weights of n_care / k >> 1 made its steps too
        # long (a small sample's training error several times that of all points).
        alpha = alpha * target.size / n_care
    if target.all() or not target.any():  # the sample saw one side only: keep the node
        return None
    return NodeProblem(X, target, weight, alpha, w0, b0)


def node_rows_layout(parts, job):
    """``(rows, columns, dtype)`` of an oblique node's care-point rows as :func:`node_problem` stacks them.

    None where they cannot go into a given array: an axis-aligned node, a
    care-point cap (a sample of the rows), sparse rows.
    """
    if job.kind == AXIS or job.max_care_points is not None:
        return None
    return part_rows_layout([sample.X for _, sample in parts if sample is not None])


def stacked_rows(layouts):
    """A context lending one array for rows of these ``(rows, columns, dtype)`` layouts one after another.

    From the process's pool (:data:`~taodist.tao.row_buffers.ROW_BUFFERS`): its
    memory is not fresh each level. None (nothing lent) without layouts or
    when they differ in columns or dtype.
    """
    if not layouts or len({(d, dtype) for _, d, dtype in layouts}) > 1:
        return nullcontext(None)
    _, d, dtype = layouts[0]
    return ROW_BUFFERS.rows(sum(n for n, _, _ in layouts), d, dtype)


def solve_nodes_task(group, *, solver, threads=1):
    """Candidates ``{node: ObliqueSplit, AxisSplit or None}`` for a group of decision nodes of one depth.

    ``group`` maps a node to ``(parts, job)``, ``job`` a :class:`NodeJob` (see
    :meth:`~taodist.tao.executor.Executor.run_key_groups`). Oblique nodes go
    to the solver's level-wide entry point together; axis nodes are solved
    exactly. A candidate is a :class:`~taodist.tao.care_points.ObliqueSplit` or an
    :class:`~taodist.tao.care_points.AxisSplit` for
    :func:`~taodist.tao.care_points.chunk_evaluate`. A node's
    statistics are summed from its parts here, so the driver need not wait
    for them first: a node that needs no solve
    (:meth:`~taodist.tao.care_points.NodeStats.needs_solve`) gets None, as
    does one whose sample holds one pseudolabel only. ``threads``: how many
    threads the group may use (the executor's idle ones, see
    :meth:`~taodist.tao.executor.Executor.run_key_groups`).
    """
    out, oblique, solve = {}, {}, []
    for node, (parts, job) in group.items():
        stats = 0
        for part_stats, _ in parts:  # summed in chunk order, as the driver sums them
            stats = stats + part_stats
        if not stats.needs_solve():  # the driver sets such a node from its statistics
            out[node] = None
        else:
            solve.append((node, parts, job, stats.n_care))
    # the oblique nodes' care points go straight into one array, which the level solver then
    # takes as it is rather than stacking the nodes' rows again (see node_solvers.consecutive_rows);
    # it is lent for the solves only (the solvers' candidates are arrays of their own)
    layouts = [node_rows_layout(parts, job) for _, parts, job, _ in solve]
    with stacked_rows([lay for lay in layouts if lay is not None]) as level_rows:
        start = 0
        for (node, parts, job, n_care), layout in zip(solve, layouts):
            rows = None
            if level_rows is not None and layout is not None:
                rows, start = level_rows[start:start + layout[0]], start + layout[0]
            problem = node_problem(parts, alpha=job.alpha, w0=job.w0, b0=job.b0,
                                   max_care_points=job.max_care_points, n_care=n_care, out=rows)
            if problem is None:
                out[node] = None
            elif job.kind == AXIS and job.indicator_of is not None:
                out[node] = AxisSplit(*solve_axis_missing(problem.X, problem.target, problem.weight, job.indicator_of))
            elif job.kind == AXIS:
                out[node] = AxisSplit(*NODE_SOLVERS["axis"].solve(problem.X, problem.target, problem.weight))
            else:
                oblique[node] = problem
        solutions = NODE_SOLVERS[solver].solve_level(list(oblique.values()), threads=threads)
        out.update({node: ObliqueSplit(w, b) for node, (w, b) in zip(oblique, solutions)})
    return out


def merge_candidates(groups):
    """``{node: candidate}`` from the result dicts of :func:`solve_nodes_task` groups, sorted, Nones dropped."""
    merged = {node: cand for group in groups for node, cand in group.items() if cand is not None}
    return {node: merged[node] for node in sorted(merged)}


def evaluate_groups(chunk, routing, depth, groups):
    """:func:`~taodist.tao.care_points.chunk_evaluate` of the candidates of :func:`solve_nodes_task` ``groups``.

    A task on the chunk that takes the groups' results where they were made:
    the candidates need not visit the driver before they are evaluated.
    """
    candidates = merge_candidates(groups)
    return chunk_evaluate(chunk, routing, depth, candidates) if candidates else {}
