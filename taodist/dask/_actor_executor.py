"""TAO's executor over Dask actors: each worker's row chunks held by one actor that the driver calls directly.

Three modules make up the actor executor:

* ``_actor_executor`` (here): :class:`ActorExecutor`, the driver side --
  chunks, hosts and their rounds of ops, tree snapshots sent to each host,
  recovery from a lost worker.
* :mod:`taodist.dask._actor_host`: :class:`~taodist.dask._actor_host.ChunkHost`,
  the worker side -- a worker's chunks in an actor, its ops, and the calls
  between hosts within a round (results read, node groups claimed).
* :mod:`taodist.dask._messages`: what the two send each other -- packed
  values, references to results kept on a host, tree snapshot tokens, the
  error a failed op sends back.

A host runs a node group as the task executor's group tasks do
(:func:`taodist.tao.executor.run_group`).

:class:`~taodist.dask._executor.DaskExecutor` runs every step of a TAO level
as tasks. Each dependent step then passes through the scheduler (a task
finishes, the scheduler is told, it starts the next one), and a decision
level chains four of them (chunk update, care points, node solves,
candidate evaluation): waits that the same fit in process does not pay.

Here the chunks are built by that executor's tasks (where their blocks are,
with the row copies it plans), then handed to one
:class:`~taodist.dask._actor_host.ChunkHost` actor per worker. An actor call
goes from the driver to the worker directly, without the scheduler. What
they send is pickled once (:class:`~taodist.dask._messages.Packed`), and a
tree snapshot goes as the rows changed since one the host holds
(:class:`~taodist.dask._tree_patch.RoutingPatch`). The driver queues the ops
of each host and sends them in one call when it needs a result
(:meth:`ActorExecutor._flush`): a TAO level is one such round, all hosts in
parallel. Within the round the hosts read what they need of each other
directly, worker to worker (:meth:`ChunkHost.fetch
<taodist.dask._actor_host.ChunkHost.fetch>`, which waits until the op making
a result has run): a node group's care points from the other hosts' chunks
(indices, labels and weights where the workers hold row copies), the groups'
candidates for the evaluation. Host 0 deals the node groups out one at a
time after each thread's first, so a host that finishes early takes the
next (:meth:`ChunkHost._groups <taodist.dask._actor_host.ChunkHost._groups>`).
Only the level's small results (statistics, candidates, evaluations) come to
the driver. As with the task executor, every result is computed by the same
chunk functions in the same chunk order, so the tree is the same as in
process (the parity tests run on both).

A worker lost mid-fit takes its actor with it. The executor then waits for
Dask to recompute the lost chunks from their lineage, brings every chunk
up to the current tree (its margins at every node, from the latest routing
sent), starts new actors and replays the ops since the last chunk update, in one
round and without the frees that followed their readers a round later
(:meth:`ActorExecutor._recover`): the fit goes on and its tree is the same.

The chunks an actor holds are not Dask's to spill: resident rows only (an
out-of-core fit runs on ``DaskExecutor``).
"""

import asyncio
import itertools
import logging
import time

import numpy as np

from ..tao.chunks import chunk_update
from ..tao.executor import merge_groups, pack_keys
from ..tao.routing import Routing
from ._actor_host import ChunkHost
from ._client import cluster_workers
from ._executor import DaskExecutor
from ._messages import KEPT_ROUTINGS, Packed, PeerFailed, Ref, RoutingToken, pick, refs_in, substitute, walk
from ._tree_patch import RoutingPatch

logger = logging.getLogger(__name__)

#: how far back a new tree snapshot looks for one a host holds to be sent as a patch on it
PATCH_STEPS = 4

#: how long a call that could not reach a worker waits for the scheduler to declare the worker
#: lost (see :meth:`ActorExecutor._lost_hosts`): the order of Dask's own connect timeout
_LOST_WORKER_GRACE_SECONDS = 30.0
#: how often a round whose calls have not all returned asks the scheduler whether their workers are still
#: there (see :meth:`ActorExecutor._settle`): a call to a worker that left without closing its connection
#: (a process stuck as it restarts) would otherwise be waited on for ever
_LIVENESS_CHECK_SECONDS = 10.0
#: recoveries one round may need before the fit gives up (each one a lost worker found)
_MAX_RECOVERIES = 4


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
        ``"peer_calls"``: the calls hosts made to each other within rounds
        (for results and the groups' claims); ``"recoveries"``: the times
        lost workers' chunks were rebuilt.
    """

    def __init__(self, client, copy_rows=False):
        self.client = client
        self._builder = DaskExecutor(client, copy_rows=copy_rows)  # builds the chunks and row copies as tasks
        self.stats = {"tasks": 0, "round_trips": 0, "recoveries": 0, "peer_calls": 0}
        self._keys = itertools.count()
        self._tokens = itertools.count()
        self._hosts = []  # actor proxies
        self._host_address = []  # host index -> the worker its actor lives on
        self._host_nthreads = []  # host index -> its worker's threads
        self._actor_futures = []  # the actors live as long as these futures
        self._host_worker = []  # host index -> the worker it was first started on (its row copy's)
        self._chunk_futures = []  # the chunks as Dask knows them: recomputed from lineage if a worker is lost
        self._host_of = []  # chunk index -> host index (fixed for the fit)
        self._queue = []  # host index -> ops not yet sent
        self._log = []  # (host index, op) since the last chunk update: replayed after a recovery
        self._held = []  # host index -> {token: Routing} the host holds (the newest KEPT_ROUTINGS)
        self._routings = {}  # token -> Routing, the latest chunk update's and newer
        self._latest = None  # token of the routing the chunks' margins are of
        self._fetched = {}  # result key -> value, since the last chunk update
        self._rounds = itertools.count()
        self._free_next_round = []  # (host, keys) other hosts read this round: freed with the next one

    def close(self):
        """Let the actors, the chunks and the row copies go (their futures are this executor's only references)."""
        self._hosts, self._actor_futures, self._chunk_futures = [], [], []
        self._builder.close()

    # ------------------------------------------------------------ set-up
    def make_chunks(self, blocks, routing, scale, solve_float32):
        self._chunk_futures = self._builder.make_chunks(blocks, routing, scale, solve_float32)
        self._latest = self._token(routing)
        homes = [self._builder.home_of(f) for f in self._chunk_futures]
        self._host_worker = sorted(set(homes))
        self._host_of = [self._host_worker.index(h) for h in homes]
        self._start_hosts(self._host_worker)
        return list(range(len(self._chunk_futures)))

    def _start_hosts(self, workers):
        """One actor per host, on ``workers[host]`` where it can run, holding that host's chunks.

        The placement is a preference, not a restriction: a host whose
        worker died before the scheduler placed it (as the fit starts, or
        while hosts restart after a loss) would otherwise wait for that
        worker forever. The scheduler runs it elsewhere, its chunks and row
        copy recomputed from their lineage, and the host is then known by
        the worker it actually lives on.
        """
        self._actor_futures = []
        for j, w in enumerate(workers):
            ids = [i for i, h in enumerate(self._host_of) if h == j]
            self._actor_futures.append(self.client.submit(
                ChunkHost, ids, self._builder.row_copy_on(self._host_worker[j]),
                *[self._chunk_futures[i] for i in ids], actor=True, pure=False, workers=[w],
                allow_other_workers=True, key=f"taodist-chunk-host-{self._builder.run_id}-{next(self._keys)}"))
        with self.client.as_current():  # actor handles bind to the current client (it need not be the default)
            self._hosts = [f.result() for f in self._actor_futures]
        where = self.client.who_has(self._actor_futures)
        workers = [next(iter(where.get(f.key) or ()), w) for f, w in zip(self._actor_futures, workers)]
        self._host_address = list(workers)
        self._queue = [[] for _ in workers]
        self._held = [{} for _ in workers]
        peers = [(w, f.key) for w, f in zip(workers, self._actor_futures)]
        info = cluster_workers(self.client)  # (a worker the scheduler no longer lists counts one thread)
        self._host_nthreads = [int(info.get(w, {}).get("nthreads", 1)) for w in workers]
        threads = machine_threads(workers, self._host_nthreads)
        for f in [host.meet(j, peers, threads[j], self._host_nthreads) for j, host in enumerate(self._hosts)]:
            f.result()

    # ------------------------------------------------------------ ops and rounds
    def _token(self, routing):
        for n, r in self._routings.items():
            if r is routing:
                return n
        n = next(self._tokens)
        self._routings[n] = routing
        return n

    def _args(self, args):
        return tuple(RoutingToken(self._token(a)) if isinstance(a, Routing) else a for a in args)

    @staticmethod
    def _routing_for(held, routing):
        """``routing`` as sent to a host holding ``held`` ({token: Routing}): a patch on one of them if it
        derives from one (a few snapshots back at most), else whole."""
        nodes, earlier = [], routing.since()
        for _ in range(PATCH_STEPS):
            if earlier is None:
                break
            nodes.append(earlier[1])
            base = next((n for n, r in held.items() if r is earlier[0]), None)
            if base is not None:
                return RoutingPatch.between(base, held[base], routing, np.unique(np.concatenate(nodes)))
            earlier = earlier[0].since()
        return routing

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
            results = self._call(calls, want)
        except Exception as exc:
            results = self._recover_and_call(exc, want)
        # results other hosts read during the round are freed with the next one (their readers are done)
        for h, keys in self._free_next_round:
            self._queue_op(h, ("free", keys))
        self._free_next_round = []
        return results

    def _recover_and_call(self, failure, want):
        """After a round that failed on a lost worker: rebuild the hosts and replay the round.

        Again if that fails on a lost worker too, up to :data:`_MAX_RECOVERIES`
        times: a second worker can die, or the first be found dead only now
        (a call reached it before the scheduler had removed it), while the
        hosts are rebuilt. Each recovery starts again from the chunks as Dask
        holds them at the current tree and replays the logged ops, so a
        repeated one gives the same state. Any other failure is the fit's own
        error and is raised.
        """
        for _ in range(_MAX_RECOVERIES):
            if not self._lost_hosts(failure):
                raise failure
            try:
                self._recover()
                return self._call(range(len(self._hosts)), want)
            except Exception as exc:  # noqa: BLE001 -- judged by _lost_hosts on the next pass
                failure = exc
        raise failure

    def _call(self, hosts, want):
        round_id = next(self._rounds)
        futures = {}
        for h in hosts:
            ops, self._queue[h] = self._queue[h], []
            tokens = {a.n for a in walk(ops) if isinstance(a, RoutingToken)}
            new = {}
            for n in sorted(tokens - set(self._held[h])):  # (a patch may build on a routing sent just before it)
                new[n] = self._routing_for(self._held[h], self._routings[n])
                self._held[h][n] = self._routings[n]
            self._held[h] = dict(sorted(self._held[h].items())[-KEPT_ROUTINGS:])  # as the host keeps them
            futures[h] = self._host_call(h, "run", round_id, Packed((ops, new, sorted(want.get(h, ())))))
        outcomes = self.client.sync(self._settle, round_id, futures)
        errors = [out for out in outcomes.values() if isinstance(out, BaseException)]
        if errors:  # the host whose own op failed, rather than one that waited for it
            raise next((e for e in errors if not isinstance(e, PeerFailed)), errors[0])
        outcomes = {h: out.value for h, out in outcomes.items()}
        self.stats["peer_calls"] += sum(calls for _, calls in outcomes.values())
        return {h: values for h, (values, _) in outcomes.items()}

    async def _host_call(self, h, function, *args):
        """``function(*args)`` of host ``h``'s actor, on the worker it was started on.

        Sent as distributed's actor handles send it (straight to the worker,
        or through the scheduler when this client does not reach workers), but
        without the handle's recovery: a handle that finds its worker gone
        after the scheduler noticed waits for the scheduler to run the host's
        task again on another worker and then calls that new host, which holds
        no round and never answers. Here the call fails with an ``OSError``
        and the fit rebuilds its hosts itself (:meth:`_recover`).
        """
        from distributed.protocol import to_serialize

        msg = dict(actor=self._actor_futures[h].key, function=function, args=[to_serialize(a) for a in args],
                   kwargs={})
        address = self._host_address[h]
        try:
            if self.client.direct_to_workers:
                reply = await self.client.rpc(address).actor_execute(**msg)
            else:
                reply = await self.client.scheduler.proxy(worker=address, msg={"op": "actor_execute", **msg})
        except OSError as exc:
            raise OSError(f"Unable to contact the TAO chunk host on {address}: {exc}") from exc
        if reply["status"] != "OK":
            raise reply["exception"]
        return reply["result"]

    def _tell(self, h, function, *args):
        """:meth:`_host_call` without waiting for it; a failure (a lost worker, say) is only logged."""
        def log_failure(task):
            if not task.cancelled() and task.exception() is not None:
                logger.debug("TAO chunk host %d did not take %r: %r", h, function, task.exception())

        asyncio.ensure_future(self._host_call(h, function, *args)).add_done_callback(log_failure)

    async def _settle(self, round_id, futures):
        """Every call's result or exception; every call ends before anything else touches the chunks.

        A host may be waiting for a result of a host whose call failed (never
        delivered, or its worker gone): at the first error every host of the
        round is told to give up (:meth:`ChunkHost.abort`), so no call waits
        forever. A call that has not returned after
        :data:`_LIVENESS_CHECK_SECONDS` while the scheduler no longer lists
        its host's worker fails as an unreachable host (``OSError``), which
        the round's recovery then handles like any lost worker.
        """
        async def outcome(future):
            try:
                return await future
            except Exception as exc:
                return exc

        calls = {asyncio.ensure_future(outcome(f)): h for h, f in futures.items()}
        outcomes, pending, aborted = {}, set(calls), False
        while pending:
            done, pending = await asyncio.wait(pending, timeout=_LIVENESS_CHECK_SECONDS,
                                               return_when=asyncio.FIRST_COMPLETED)
            for call in done:
                outcomes[calls[call]] = call.result()
            if not done:  # no answer for a while: a call to a worker that has left may never return
                for call in [c for c in pending if self._host_address[calls[c]] not in await self._workers_now()]:
                    call.cancel()
                    pending.discard(call)
                    outcomes[calls[call]] = OSError(
                        f"Unable to contact the TAO chunk host on {self._host_address[calls[call]]}: the "
                        "scheduler no longer lists its worker, and its call had not returned")
            if not aborted and pending and any(isinstance(o, BaseException) for o in outcomes.values()):
                aborted = True
                for h in futures:
                    self._tell(h, "abort", round_id)  # not awaited: a lost host's worker need not answer
        return outcomes

    async def _workers_now(self):
        """The addresses of the workers the scheduler lists now (:func:`cluster_workers`, on the client's loop)."""
        try:
            info = await self.client.scheduler.identity(n_workers=-1)
        except TypeError:  # a release whose scheduler takes no n_workers (it lists every worker)
            info = await self.client.scheduler.identity()
        return set(info["workers"])

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
        return [pick(v, r.item) for v, r in zip(values, refs)]

    def _known(self, args):
        """``args`` for a host op: results the driver has fetched (and freed there) by value; the rest stay Refs.

        A host resolves a Ref when it runs the op: its own results in place,
        another host's by asking that host (:meth:`ChunkHost.fetch`), which
        answers once the op making it has run in the same round.
        """
        refs = refs_in(args)
        values = {id(r): pick(self._fetched[r.key], r.item) for r in refs if r.key in self._fetched}
        return substitute(args, values) if values else args

    def _map_refs(self, fn, chunks, args):
        """Queue ``fn(chunk, *args)`` on every chunk's host; a Ref per chunk, in chunk order."""
        args = self._known(self._args(args))
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
        refs = refs_in(handles)
        if not refs:
            return handles
        values = dict(zip(map(id, refs), self._fetch(refs)))
        return substitute(handles, values)

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        values = self.map_chunks(fn, chunks, *args)
        out = values[0]
        for v in values[1:]:  # neighbours in chunk order, as the local executor folds
            out = combine(out, v, **kwargs)
        return out

    def update_chunks(self, fn, chunks, *args):
        args = self._args(args)
        tokens = [a.n for a in args if isinstance(a, RoutingToken)]
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

    def run_key_groups(self, fn, parts, keys, jobs, *, gather=True, n_groups=None, threads_arg=None, **common):
        """As ``DaskExecutor``'s, in one round: every host takes groups as it finishes (see ``ChunkHost._groups``).

        ``threads_arg`` reaches a lone group only: its host's machine's
        worker threads, which would otherwise wait for it.
        """
        if keys is not None:
            present = set().union(*keys)
            jobs = {k: job for k, job in jobs.items() if k in present}
        n_hosts = len(self._hosts)
        # two groups per worker thread, as the local executor makes two per thread: dealt out as threads finish
        bundles = pack_keys(jobs, 2 * sum(self._host_nthreads) if n_groups is None else n_groups)
        sources = {}  # host -> the result holding its chunks' parts
        for r in parts:
            if sources.setdefault(r.host, r.key) != r.key:
                raise ValueError("run_key_groups takes the parts of one map_chunks or split_chunks_by_key call")
        deal = next(self._keys)  # names the bundles host 0 deals out
        refs = [Ref(h, next(self._keys)) for h in range(n_hosts)]  # result keys are unique across hosts
        for r in refs:
            self._queue_op(r.host, ("groups", r.key, deal, fn, sources, bundles, jobs, common, threads_arg))
        # other hosts read a host's parts until they have taken every group: freed with the next round
        self._free_next_round += [(h, [source]) for h, source in sorted(sources.items())]
        return merge_groups(self.gather(refs)) if gather else refs

    # ------------------------------------------------------------ a lost worker
    def _lost_hosts(self, failure=None):
        """Hosts whose worker the scheduler no longer lists.

        A call can find a killed worker unreachable (an ``OSError``: "Unable
        to contact Actor's worker", a closed comm) before the scheduler has
        removed it; on a loaded machine that took long enough for the fit to
        fail instead of recovering (seen in CI). After such a ``failure`` the
        scheduler is asked again for up to :data:`_LOST_WORKER_GRACE_SECONDS`;
        any other failure is the fit's own error and is not waited on.
        """
        deadline = time.monotonic() + (_LOST_WORKER_GRACE_SECONDS if isinstance(failure, OSError) else 0.0)
        while True:
            alive = set(cluster_workers(self.client))
            lost = [h for h, address in enumerate(self._host_address) if address not in alive]
            if lost or time.monotonic() >= deadline:
                return lost
            time.sleep(0.2)

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
            self._builder.submit(chunk_update, f, routing, nodes, name="chunk-rebuild", share=False, inplace=True)
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
            # ... but its frees: each ran a round after the ops that read its results, and the replay
            # is one round, so a host could free a result before another host fetched it (that fetch
            # would wait for ever). The next chunk update clears them all.
            if op[0] != "free":
                self._queue_op(h, op)


def machine_threads(workers, nthreads):
    """For each of ``workers`` (addresses, each with its ``nthreads``; a worker may appear twice), the
    threads of them all on its machine, each worker counted once."""
    from distributed.comm import get_address_host

    per_machine = {}
    for w, n in dict(zip(workers, nthreads)).items():
        machine = get_address_host(w)
        per_machine[machine] = per_machine.get(machine, 0) + n
    return [per_machine[get_address_host(w)] for w in workers]
