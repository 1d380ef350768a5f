"""One group of node fits as a Dask worker runs it, for both Dask executors.

A TAO level's node fits run in groups of keys (see
:meth:`taodist.tao.executor.Executor.run_key_groups`). On Dask a group runs
on a worker, as a task of :class:`~taodist.dask._executor.DaskExecutor` or
inside a chunk host of :class:`~taodist.dask._actor_executor.ActorExecutor`;
both cut the group's pieces out of the chunks' parts the same way, take the
rows that parts only name from the worker's row copy, and merge the
groups' results the same way, here.
"""

from ..tao.chunks import resolve_rows


def run_group(fn, pieces, jobs, common, row_copy=None):
    """``fn({key: (its pieces, jobs[key])}, **common)`` for the keys of ``jobs`` that some piece has.

    Parameters
    ----------
    fn : callable
        The node fit of the group, ``fn(group, **common) -> {key: result}``.
    pieces : list of dict
        Parts of the chunks (``{key: part}``), in chunk order.
    jobs : dict
        Each key's job (its node's solver arguments).
    common : dict
        Keyword arguments every group gets.
    row_copy : SolverRowCopy, optional
        This worker's copy of every chunk's solver rows: parts that name
        their rows (:class:`~taodist.tao.chunks.SolverRows`) take them from it.

    Returns
    -------
    dict
        ``{key: result}`` of ``fn``.
    """
    group = {key: [p[key] for p in pieces if key in p] for key in jobs}
    if row_copy is not None:  # parts that name their rows (SolverRows) get them from this worker's copy
        group = {key: [resolve_rows(p, row_copy.take) for p in ps] for key, ps in group.items()}
    return fn({key: (group[key], job) for key, job in jobs.items() if group[key]}, **common)


def merge_groups(results):
    """One ``{key: result}`` of the groups' result dicts (every key is in one group only)."""
    merged = {}
    for done in results:
        merged.update(done)
    return merged
