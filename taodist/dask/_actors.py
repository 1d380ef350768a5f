"""TAO's executor over Dask actors: each worker's row chunks held by one actor that the driver calls directly.

:class:`~taodist.dask._executor.DaskExecutor` runs every step of a TAO level
as tasks. Each dependent step then passes through the scheduler (a task
finishes, the scheduler is told, it starts the next one), ~6 ms a step and
~14 ms a wait on a 2-core machine, and a decision level chains four of them
(chunk update, care points, node solves, candidate evaluation): ~0.09 s a
level that the same fit in process does not pay.

Here the chunks are built by that executor's tasks (where their blocks are,
with the row copies it plans), then handed to one :class:`ChunkHost` actor
per worker. An actor call goes from the driver to the worker directly
(~1 ms each way; a round of calls to two workers ~2.5 ms here, ~5 ms with
the ~1 MB tree snapshot a level sends once). The driver queues the ops of each host and sends them in one call
when a result is needed (:meth:`ActorExecutor._flush`); a decision level
is three such rounds (care points and their exchange; solves; evaluations),
all hosts in parallel. What travels between workers goes through the
driver: the care points one node group needs from the other workers'
chunks (indices, labels and weights where the workers hold row copies), the
groups' candidates and the small results. As with the task executor, every
result is computed by the same chunk functions in the same chunk order, so
the tree is the same as in process (the parity tests run on both).

A worker lost mid-fit takes its actor with it. The executor then waits for
Dask to recompute the lost chunks from their lineage, brings every chunk
up to the current tree (its margins at every node, from the latest routing
sent), starts new actors and replays the ops since the last chunk update
(:meth:`ActorExecutor._recover`): the fit goes on and its tree is the same.

The chunks an actor holds are not Dask's to spill: resident rows only (an
out-of-core fit runs on ``DaskExecutor``).
"""

import itertools
import logging
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .._chunks import Routing, chunk_update
from .._executor import pack_keys
from ._client import cluster_workers
from ._executor import DaskExecutor, _run_group

logger = logging.getLogger(__name__)


class Ref:
    """A handle to a result kept on a host: ``value[item]`` of its result ``key`` (the whole value if None)."""

    __slots__ = ("host", "key", "item")

    def __init__(self, host, key, item=None):
        self.host, self.key, self.item = host, key, item


class _RoutingToken:
    """Stands for a Routing the host already holds (a tree snapshot is shipped once per host)."""

    __slots__ = ("n",)

    def __init__(self, n):
        self.n = n


#: tree snapshots a host keeps (the newest); the driver mirrors the rule to know what it must resend
_KEPT_ROUTINGS = 2


class ChunkHost:
    """One worker's row chunks and the results of the ops run on them (lives in a Dask actor).

    Parameters
    ----------
    ids : list of int
        Global indices of the chunks (their order in the fit).
    row_copy : SolverRowCopy or None
        Every chunk's solver rows on this worker (see ``DaskExecutor``), for
        parts that name their rows.
    *chunks : Chunk
    """

    def __init__(self, ids, row_copy, *chunks):
        from distributed import get_worker

        self.chunks = dict(zip(ids, chunks))
        self.row_copy = row_copy
        self.results = {}
        self.routings = {}
        n_threads = get_worker().state.nthreads
        self._pool = ThreadPoolExecutor(n_threads) if n_threads > 1 and len(chunks) > 1 else None

    def run(self, ops, routings, want):
        """Run ``ops`` in order and return ``{key: results[key] for key in want}``.

        ``routings`` are the tree snapshots new to this host, by token.
        """
        self.routings.update(routings)
        try:
            for op in ops:
                getattr(self, "_" + op[0])(*op[1:])
            return {key: self.results[key] for key in want}
        finally:
            for n in sorted(self.routings)[:-_KEPT_ROUTINGS]:
                del self.routings[n]

    def _args(self, args):
        return tuple(self.routings[a.n] if isinstance(a, _RoutingToken) else a for a in args)

    def _each(self, fn, ids):
        if self._pool is not None and len(ids) > 1:
            return list(self._pool.map(fn, ids))
        return [fn(i) for i in ids]

    def _map(self, key, fn, ids, args):
        args = self._args(args)
        self.results[key] = dict(zip(ids, self._each(lambda i: fn(self.chunks[i], *args), ids)))

    def _update(self, fn, ids, args):
        self.results.clear()  # every result of the old chunks has been used (the executor contract)
        args = self._args(args)
        for i, chunk in zip(ids, self._each(lambda i: fn(self.chunks[i], *args, inplace=True), ids)):
            self.chunks[i] = chunk

    def _summary(self, key, source, fn):
        self.results[key] = {i: fn(parts) for i, parts in self.results[source].items()}

    def _export(self, key, source, owner, me):
        """The pieces of the parts ``source`` that other hosts' groups take: ``{host: [(chunk, {key: piece})]}``."""
        out = {}
        for i, parts in sorted(self.results[source].items()):
            for k, piece in parts.items():
                host = owner.get(k, me)
                if host != me:
                    out.setdefault(host, {}).setdefault(i, {})[k] = piece
        self.results[key] = {host: sorted(by_chunk.items()) for host, by_chunk in out.items()}

    def _group(self, key, fn, source, remote, jobs, common):
        mine = [] if source is None else [(i, p) for i, p in self.results[source].items()]
        pieces = [p for _, p in sorted(mine + remote, key=lambda item: item[0])]  # chunk order
        self.results[key] = _run_group(fn, pieces, jobs, common, self.row_copy)

    def _free(self, keys):
        for key in keys:
            self.results.pop(key, None)


class ActorExecutor:
    """Executor whose chunks live in one :class:`ChunkHost` actor per Dask worker.

    Parameters
    ----------
    client : distributed.Client
    copy_rows : bool, default=False
        Keep a copy of every chunk's solver rows on each worker (as
        ``DaskExecutor``'s): node groups then receive only row indices,
        labels and weights from the other workers.

    Attributes
    ----------
    stats : dict
        ``"round_trips"``: the rounds of actor calls (each waits for every
        host it calls, in parallel); ``"tasks"``: the ops sent;
        ``"recoveries"``: the times lost workers' chunks were rebuilt.
    """

    def __init__(self, client, copy_rows=False):
        self.client = client
        self._builder = DaskExecutor(client, copy_rows=copy_rows)  # builds the chunks and row copies as tasks
        self.stats = {"tasks": 0, "round_trips": 0, "recoveries": 0}
        self._keys = itertools.count()
        self._tokens = itertools.count()
        self._hosts = []  # actor proxies
        self._host_address = []  # host index -> the worker its actor lives on
        self._actor_futures = []  # the actors live as long as these futures
        self._host_worker = []  # host index -> the worker it was first started on (its row copy's)
        self._chunk_futures = []  # the chunks as Dask knows them: recomputed from lineage if a worker is lost
        self._host_of = []  # chunk index -> host index (fixed for the fit)
        self._queue = []  # host index -> ops not yet sent
        self._log = []  # (host index, op) since the last chunk update: replayed after a recovery
        self._sent = []  # host index -> tokens of the routings it holds
        self._routings = {}  # token -> Routing, the latest chunk update's and newer
        self._latest = None  # token of the routing the chunks' margins are of
        self._fetched = {}  # result key -> value, since the last chunk update

    def close(self):
        """Let the actors, the chunks and the row copies go (their futures are this executor's only references)."""
        self._hosts, self._actor_futures, self._chunk_futures = [], [], []
        self._builder._row_copies = {}

    # ------------------------------------------------------------ set-up
    def make_chunks(self, blocks, routing, scale, solve_float32):
        self._chunk_futures = self._builder.make_chunks(blocks, routing, scale, solve_float32)
        self._latest = self._token(routing)
        homes = [self._builder._home.get(f.key) for f in self._chunk_futures]
        self._host_worker = sorted(set(homes))
        self._host_of = [self._host_worker.index(h) for h in homes]
        self._start_hosts(self._host_worker)
        return list(range(len(self._chunk_futures)))

    def _start_hosts(self, workers):
        """One actor per host on ``workers[host]``, holding that host's chunks."""
        self._actor_futures = []
        for j, w in enumerate(workers):
            ids = [i for i, h in enumerate(self._host_of) if h == j]
            self._actor_futures.append(self.client.submit(
                ChunkHost, ids, self._builder._row_copies.get(self._host_worker[j]),
                *[self._chunk_futures[i] for i in ids], actor=True, pure=False, workers=[w],
                key=f"taodist-chunk-host-{self._builder.run_id}-{next(self._keys)}"))
        with self.client.as_current():  # actor handles bind to the current client (it need not be the default)
            self._hosts = [f.result() for f in self._actor_futures]
        self._host_address = list(workers)
        self._queue = [[] for _ in workers]
        self._sent = [set() for _ in workers]

    # ------------------------------------------------------------ ops and rounds
    def _token(self, routing):
        for n, r in self._routings.items():
            if r is routing:
                return n
        n = next(self._tokens)
        self._routings[n] = routing
        return n

    def _args(self, args):
        return tuple(_RoutingToken(self._token(a)) if isinstance(a, Routing) else a for a in args)

    def _queue_op(self, host, op):
        self.stats["tasks"] += 1
        self._queue[host].append(op)
        self._log.append((host, op))

    def _by_host(self, chunks):
        ids = [[] for _ in self._hosts]
        for i in chunks:
            ids[self._host_of[i]].append(i)
        return ids

    def _flush(self, want=None):
        """Send every host its queued ops (in parallel) and return ``{host: {key: value}}`` of ``want``."""
        want = want or {}
        calls = [h for h in range(len(self._hosts)) if self._queue[h] or want.get(h)]
        if not calls:
            return {}
        self.stats["round_trips"] += 1
        try:
            return self._call(calls, want)
        except Exception:
            if not self._lost_hosts():
                raise
            self._recover()
            return self._call(range(len(self._hosts)), want)

    def _call(self, hosts, want):
        futures = {}
        for h in hosts:
            ops, self._queue[h] = self._queue[h], []
            tokens = {a.n for a in _walk(ops) if isinstance(a, _RoutingToken)}
            new = {n: self._routings[n] for n in tokens - self._sent[h]}
            self._sent[h] = set(sorted(self._sent[h] | set(new))[-_KEPT_ROUTINGS:])  # as the host keeps them
            futures[h] = self._hosts[h].run(ops, new, sorted(want.get(h, ())))
        results, error = {}, None
        for h, f in futures.items():  # every call ends before anything else touches the chunks
            try:
                results[h] = f.result()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        return results

    def _fetch(self, refs):
        """Values of ``refs``: one round for all of them (and every queued op); results fetched are freed there."""
        want = {}
        for r in refs:
            if r.key not in self._fetched:
                want.setdefault(r.host, set()).add(r.key)
        for h, values in self._flush(want).items():
            self._fetched.update(values)
            self._queue_op(h, ("free", sorted(values)))  # sent with the next round
        values = [self._fetched[r.key] for r in refs]
        return [v if r.item is None else v[r.item] for v, r in zip(values, refs)]

    def _map_refs(self, fn, chunks, args):
        """Queue ``fn(chunk, *args)`` on every chunk's host; a Ref per chunk, in chunk order."""
        args = self._args(self.gather(args))
        refs = {}
        for h, ids in enumerate(self._by_host(chunks)):
            if ids:
                key = next(self._keys)
                self._queue_op(h, ("map", key, fn, ids, args))
                refs.update({i: Ref(h, key, i) for i in ids})
        return [refs[i] for i in chunks]

    # ------------------------------------------------------------ the executor contract
    def map_chunks(self, fn, chunks, *args, gather=True):
        refs = self._map_refs(fn, chunks, args)
        return self.gather(refs) if gather else refs

    def gather(self, handles):
        refs = [a for a in _walk(handles) if isinstance(a, Ref)]
        if not refs:
            return handles
        values = dict(zip(map(id, refs), self._fetch(refs)))
        return _substitute(handles, values)

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        values = self.map_chunks(fn, chunks, *args)
        out = values[0]
        for v in values[1:]:  # neighbours in chunk order, as the local executor folds
            out = combine(out, v, **kwargs)
        return out

    def update_chunks(self, fn, chunks, *args):
        args = self._args(args)
        tokens = [a.n for a in args if isinstance(a, _RoutingToken)]
        if fn is chunk_update and tokens:
            self._latest = tokens[0]
            self._routings = {n: r for n, r in self._routings.items() if n >= self._latest}
        # ops before an update are never replayed (a recovery rebuilds the chunks at the latest tree),
        # and every result of the old chunks has been used
        self._log, self._fetched = [], {}
        for h, ids in enumerate(self._by_host(chunks)):
            if ids:
                self._queue_op(h, ("update", fn, ids, args))
        return list(chunks)

    def split_chunks_by_key(self, fn, chunks, *args, summary=None):
        parts = self._map_refs(fn, chunks, args)
        if summary is None:
            return parts, None, [None] * len(parts)
        summaries = {}
        for h, source in sorted({(r.host, r.key) for r in parts}):
            summaries[source] = next(self._keys)
            self._queue_op(h, ("summary", summaries[source], source, summary))
        return parts, None, [Ref(r.host, summaries[r.key], r.item) for r in parts]

    def run_key_groups(self, fn, parts, keys, jobs, *, gather=True, n_groups=None, **common):
        """As ``DaskExecutor``'s: one group per host, two rounds (the hosts' exchange of care points, the solves)."""
        if keys is not None:
            present = set().union(*keys)
            jobs = {k: job for k, job in jobs.items() if k in present}
        n_hosts = len(self._hosts)
        bundles = pack_keys(jobs, n_hosts if n_groups is None else n_groups)
        owner = {k: j % n_hosts for j, bundle in enumerate(bundles) for k in bundle}
        sources = {}  # host -> the result holding its chunks' parts
        for r in parts:
            if sources.setdefault(r.host, r.key) != r.key:
                raise ValueError("run_key_groups takes the parts of one map_chunks or split_chunks_by_key call")
        exports = {}
        for h, source in sources.items():
            exports[h] = next(self._keys)
            self._queue_op(h, ("export", exports[h], source, owner, h))
        incoming = [[] for _ in range(n_hosts)]
        for exported in self.gather([Ref(h, key) for h, key in exports.items()]):  # one round
            for dest, pieces in exported.items():
                incoming[dest] += pieces
        refs = []
        for j, bundle in enumerate(bundles):
            h = j % n_hosts
            key = next(self._keys)
            self._queue_op(h, ("group", key, fn, sources.get(h), incoming[h], {k: jobs[k] for k in bundle}, common))
            refs.append(Ref(h, key))
        for h, source in sources.items():  # the parts are used up once the groups have run
            self._queue_op(h, ("free", [source]))
        if not gather:
            return refs
        results = {}
        for done in self.gather(refs):
            results.update(done)
        return results

    # ------------------------------------------------------------ a lost worker
    def _lost_hosts(self):
        alive = set(cluster_workers(self.client))
        return [h for h, address in enumerate(self._host_address) if address not in alive]

    def _recover(self):
        """Rebuild every host after a lost worker: chunks from Dask at the current tree, then the ops since."""
        from distributed import wait

        self.stats["recoveries"] += 1
        logger.warning("A worker holding TAO row chunks was lost: rebuilding the chunks and going on")
        alive = sorted(cluster_workers(self.client))
        if not alive:
            raise RuntimeError("Every Dask worker holding TAO's row chunks was lost.")
        workers = list(self._host_address)
        self._hosts, self._actor_futures = [], []
        routing = self._routings[self._latest]
        # every chunk's margins at every decision node of the current tree: whatever state a chunk was
        # left in (recomputed from lineage, or part way through the failed round) it matches the tree again
        nodes = np.flatnonzero(~routing.tree.is_leaf)
        self._chunk_futures = [
            self._builder._submit(chunk_update, f, routing, nodes, name="chunk-rebuild", share=False, inplace=True)
            for f in self._chunk_futures]
        with self.client.as_current():  # wait() asks for the current client (it need not be the default)
            wait(self._chunk_futures)
        where = self.client.who_has(self._chunk_futures)
        for j, w in enumerate(workers):  # a lost host restarts where most of its chunks are now
            if w not in alive:
                held = [h for i, f in enumerate(self._chunk_futures) if self._host_of[i] == j
                        for h in where.get(f.key, ()) if h in alive]
                workers[j] = max(alive, key=held.count)
        log = self._log
        self._start_hosts(workers)
        self._log = []
        for h, op in log:  # the same ops in the same order on the same hosts' chunks
            self._queue_op(h, op)


def _walk(obj):
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _walk(item)
    else:
        yield obj


def _substitute(obj, values):
    if isinstance(obj, Ref):
        return values[id(obj)]
    if isinstance(obj, list):
        return [_substitute(o, values) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_substitute(o, values) for o in obj)
    return obj
