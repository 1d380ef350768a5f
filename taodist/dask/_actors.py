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
(~1 ms each way; a round of calls to two workers ~2 ms here). What they
send is pickled once (:class:`Packed`), and a tree snapshot goes as the rows
changed since one the host holds (:class:`~taodist.dask._tree_patch.RoutingPatch`):
a whole depth-8 MNIST tree made a round ~5 ms. The driver queues the ops of
each host and sends them in one call when it needs a result
(:meth:`ActorExecutor._flush`): a TAO level is one such round, all hosts in
parallel. Within the round the hosts read what they need of each other
directly, worker to worker (:meth:`ChunkHost.fetch`, which waits until the
op making a result has run): a node group's care points from the other
hosts' chunks (indices, labels and weights where the workers hold row
copies), the groups' candidates for the evaluation. Host 0 deals the node
groups out one at a time after each thread's first, so a host that finishes
early takes the next (:meth:`ChunkHost._groups`). Only the level's small results (statistics,
candidates, evaluations) come to the driver. As with the task executor,
every result is computed by the same chunk functions in the same chunk
order, so the tree is the same as in process (the parity tests run on both).

A worker lost mid-fit takes its actor with it. The executor then waits for
Dask to recompute the lost chunks from their lineage, brings every chunk
up to the current tree (its margins at every node, from the latest routing
sent), starts new actors and replays the ops since the last chunk update
(:meth:`ActorExecutor._recover`): the fit goes on and its tree is the same.

The chunks an actor holds are not Dask's to spill: resident rows only (an
out-of-core fit runs on ``DaskExecutor``).
"""

import asyncio
import itertools
import logging
import pickle
import threading
import time
import traceback
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all

import numpy as np

from ..tao.chunks import chunk_update
from ..tao.executor import pack_keys
from ..tao.routing import Routing
from ._client import cluster_workers
from ._executor import DaskExecutor, _run_group
from ._tree_patch import RoutingPatch

logger = logging.getLogger(__name__)


class PeerFailed(RuntimeError):
    """A chunk host's ops failed before making a result another host waits for (the other host's error is the cause)."""


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

#: how far back a new tree snapshot looks for one a host holds to be sent as a patch on it
_PATCH_STEPS = 4

#: how often a host asked for a result it has not made checks that it still belongs to a fit
_RELEASE_CHECK_SECONDS = 1.0

#: how long a call that could not reach a worker waits for the scheduler to declare the worker
#: lost (see :meth:`ActorExecutor._lost_hosts`): the order of Dask's own connect timeout
_LOST_WORKER_GRACE_SECONDS = 30.0


_HOST_THREADS = None
_HOST_THREADS_LOCK = threading.Lock()


def _host_threads():
    """The threads this worker's hosts run their ops on, kept for the life of the worker process.

    Not the worker's one actor thread: a host whose op waits for another
    host's result must not keep that host from running when both live on
    one worker (after a lost worker, its hosts restart on the survivors).
    Idle threads are reused, so a worker does not start threads for every
    fit's hosts (nor keep one per host that has ended).
    """
    global _HOST_THREADS
    with _HOST_THREADS_LOCK:
        if _HOST_THREADS is None:
            _HOST_THREADS = ThreadPoolExecutor(64, thread_name_prefix="taodist-chunk-host")
        return _HOST_THREADS


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

        self._worker = get_worker()
        self.chunks = dict(zip(ids, chunks))
        self.row_copy = row_copy
        self.results = {}
        self.routings = {}
        n_threads = self._worker.state.nthreads
        # the worker's threads: for its chunks' passes and for taking node groups (see _groups)
        self._pool = ThreadPoolExecutor(n_threads) if n_threads > 1 else None
        self._n_threads = n_threads
        self.me, self._peers, self._key = None, {}, None
        self._machine_threads = 1  # threads of the fit's workers on this host's machine (see meet)
        # deal -> bundles dealt so far (host 0; an int per level of the fit, kept: another host may claim
        # before this one has started the round)
        self._claims, self._claims_lock = {}, threading.Lock()
        self._round = self._failed = None
        self._changed = None  # an asyncio.Event on the worker's loop that fetch() waits on
        self._peer_calls = 0  # calls this host made to others in its current round
        self._peer_calls_lock = threading.Lock()  # (counted from every thread taking node groups)

    def meet(self, me, peers, machine_threads=1, host_threads=None):
        """This host's index and every host's ``(worker address, actor key)``: where its ops read others' results.

        ``machine_threads``: the threads of the fit's workers on this host's
        machine, this one's included (what a lone node group may use, see
        :meth:`_groups`). ``host_threads``: every host's worker threads, in
        host order (each takes node groups on each of them; one each if None).
        """
        self.me, self._peers = me, dict(enumerate(peers))
        self._host_threads = list(host_threads) if host_threads is not None else [1] * len(peers)
        self._key = peers[me][1]
        self._machine_threads = machine_threads

    async def run(self, round_id, message):
        """Run a round's ops in order; ``Packed(({key: results[key] for key in want}, peer calls))``.

        ``message``: ``Packed((ops, routings, want))``; ``routings`` are the
        tree snapshots new to this host, by token. An op's arguments may name
        results of the other hosts' ops of the same round (:class:`Ref`): they
        are fetched from those hosts directly (:meth:`fetch`), waiting for them
        to be made.
        """
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(_host_threads(), self._run, round_id, message)

    def _run(self, round_id, message):
        self._round, self._peer_calls = round_id, 0
        try:
            ops, routings, want = message.value
            for n, routing in sorted(routings.items()):  # (a patch may build on a routing in the same message)
                self.routings[n] = routing.apply(self.routings[routing.base]) if isinstance(routing, RoutingPatch) else routing
            for op in ops:
                getattr(self, "_" + op[0])(*op[1:])
                self._worker.loop.add_callback(self._wake)  # a host waiting for a result may now have it
            return Packed(({key: self.results[key] for key in want}, self._peer_calls))
        except BaseException as exc:
            self._failed = round_id  # a host waiting for a result this round will not make must not wait on
            self._worker.loop.add_callback(self._wake)
            failure = _sendable(exc)
            if failure is exc:
                raise
        finally:
            for n in sorted(self.routings)[:-_KEPT_ROUTINGS]:
                del self.routings[n]
        raise failure  # (outside the except block: Dask would try to send the original as its context too)

    # ------------------------------------------------ results between hosts, without the driver
    async def abort(self, round_id):
        """Have whoever waits for this host's results of round ``round_id`` stop waiting (another host failed)."""
        self._failed = round_id
        self._wake()

    def _wake(self):
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def fetch(self, round_id, wanted):
        """``Packed([results[key][item] ...])`` of ``wanted`` ``(key, item)`` pairs, once this host has made them.

        Runs on the worker's event loop (a coroutine), so it answers while
        this host's ops run. Raises :class:`PeerFailed` if this host's ops of
        round ``round_id`` failed before making them.
        """
        return Packed(await self._made(round_id, wanted))

    async def _made(self, round_id, wanted):
        """:meth:`fetch`'s values, not packed."""
        while not all(key in self.results for key, _ in wanted):
            if self._failed == round_id:
                raise PeerFailed(f"the TAO chunk host on {self._worker.address} failed this round")
            if self._key not in self._worker.state.actors:
                # its round never came (the driver stopped part way through sending it) and the fit
                # let it go: the host waiting here would otherwise hold a worker thread for ever
                raise PeerFailed(f"the TAO chunk host on {self._worker.address} was released")
            if self._changed is None:
                self._changed = asyncio.Event()
            try:
                await asyncio.wait_for(self._changed.wait(), _RELEASE_CHECK_SECONDS)
            except asyncio.TimeoutError:
                pass
        return [_item(self.results[key], item) for key, item in wanted]

    def _call_peers(self, calls):
        """``[function(*args) of host's actor for (host, function, args) in calls]``, all at once.

        Straight to the hosts' workers, not through the driver.
        """
        from distributed.protocol import to_serialize
        from distributed.utils import sync

        async def call(host, function, args):
            address, actor = self._peers[host]
            reply = await self._worker.rpc(address).actor_execute(
                actor=actor, function=function, args=[to_serialize(a) for a in args], kwargs={})
            if reply["status"] != "OK":
                raise reply["exception"]
            return reply["result"].value

        async def all_calls():
            return await asyncio.gather(*(call(*c) for c in calls))

        with self._peer_calls_lock:
            self._peer_calls += len(calls)
        return sync(self._worker.loop, all_calls)

    async def claim(self, round_id, deal, n_dealt, bundles, source):
        """The next bundle of the groups ops named ``deal`` and this host's pieces of it (host 0 deals).

        ``Packed((index, pieces))``: ``index`` of the bundle in ``bundles``
        (past the ``n_dealt`` dealt before the op ran; past the end when every
        bundle is taken) and this host's parts' pieces of it from result
        ``source`` (None without ``source`` or when none is left), in the one
        call: a host other than 0 would otherwise call host 0 twice per
        bundle, once to claim it and once for its pieces.
        """
        j = n_dealt + self._next_claim(deal)
        if j >= len(bundles) or source is None:
            return Packed((j, None))
        [pieces] = await self._made(round_id, [(source, _Select(bundles[j]))])
        return Packed((j, pieces))

    def _next_claim(self, deal):
        with self._claims_lock:
            n = self._claims.get(deal, 0)
            self._claims[deal] = n + 1
        return n

    def _args(self, args):
        """``args`` with tree tokens and result references (here or on other hosts) replaced by their values."""
        refs = [a for a in _walk(args) if isinstance(a, Ref)]
        values, remote = {}, {}
        for r in refs:
            if r.host == self.me:
                values[id(r)] = _item(self.results[r.key], r.item)
            else:
                remote.setdefault(r.host, []).append(r)
        if remote:  # (most ops read nothing of other hosts: no hop through the worker's event loop)
            hosts = sorted(remote)
            fetched = self._call_peers([(h, "fetch", (self._round, [(r.key, r.item) for r in remote[h]]))
                                        for h in hosts])
            for h, got in zip(hosts, fetched):
                values.update((id(r), value) for r, value in zip(remote[h], got))
        return tuple(self.routings[a.n] if isinstance(a, _RoutingToken) else _substitute(a, values) for a in args)

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

    def _groups(self, key, deal, fn, sources, bundles, jobs, common, threads_arg=None):
        """Take groups of keys (``bundles``) until none is left and run ``fn`` on each; ``{key: result}``.

        Every host runs this op on the same bundles: host 0 deals them out one
        at a time, so a host that finishes early takes the next rather than
        waiting for a slower one (node solves differ in cost far more than
        their care-point counts say). A bundle's pieces are this host's parts
        and those of every other host (``sources``: host -> its parts' result
        key), fetched from them; host 0's come with the claim (:meth:`claim`).
        Grouping never changes a result.

        The first bundle of every thread of every host is dealt before the op
        runs, in host order (no claim: a claim is a call to host 0, ~2-3 ms
        while host 0 computes). Where the hosts' parts only name their rows
        (a row copy on every worker: indices, labels, weights), each host
        reads the other hosts' parts of every bundle in one call before it
        starts, rather than once per bundle it takes.

        A worker of several threads takes bundles on each of them, as the
        local executor runs groups on its threads. A lone bundle (the root
        level) leaves every other thread idle: the host that takes it passes
        ``fn`` the threads of its machine's workers through ``threads_arg``
        (as the local executor lends its idle threads,
        :meth:`taodist.tao.executor.LocalExecutor.run_key_groups`). Hosts on
        other machines lend nothing: their cores are not this machine's.
        """
        if threads_arg is not None and len(bundles) == 1 and self._machine_threads > 1:
            common = {**common, threads_arg: self._machine_threads}
        # one taker per thread (the local executor's groups run on its threads); one for a lone bundle
        n_takers = self._n_threads if self._pool is not None and len(bundles) > 1 else 1
        first = sum(self._host_threads[:self.me])  # this host's takers' first bundles, dealt in host order
        others = None
        if self.row_copy is not None:  # small parts: every other host's of every bundle, in one call each
            everything = _Select(sorted(set().union(*bundles)))
            theirs = [Ref(h, source, everything) for h, source in sorted(sources.items()) if h != self.me]
            others = dict(item for selected in self._args((theirs,))[0] for item in selected)
        args = (deal, fn, sources, bundles, jobs, common, sum(self._host_threads), others)
        if n_takers > 1:
            takers = [self._pool.submit(self._take_bundles, first + t, *args) for t in range(n_takers)]
            wait_all(takers)  # all of them, even when one fails: none may still be solving once the op ends
            done = {}
            for taker in takers:
                done.update(taker.result())
        else:
            done = self._take_bundles(first, *args)
        self.results[key] = done

    def _take_bundles(self, j, deal, fn, sources, bundles, jobs, common, n_dealt, others):
        """Run ``fn`` on bundle ``j`` (dealt to this taker), then on bundles claimed until none is left (one
        thread of :meth:`_groups`). ``n_dealt``: the bundles dealt before the op ran; ``others``: the other
        hosts' parts of every bundle (``{chunk: {key: piece}}``), or None to read them per bundle."""
        done, dealer_pieces = {}, None
        while j < len(bundles):
            wanted = _Select(bundles[j])
            if others is not None:
                pieces = _item(others, wanted)
            else:  # (host 0's pieces of a claimed bundle came with the claim)
                skip = {self.me} | ({0} if dealer_pieces is not None else set())
                theirs = [Ref(h, source, wanted) for h, source in sorted(sources.items()) if h not in skip]
                pieces = [item for selected in self._args((theirs,))[0] for item in selected] + (dealer_pieces or [])
            if self.me in sources:
                pieces += _item(self.results[sources[self.me]], wanted)
            pieces = [p for _, p in sorted(pieces, key=lambda item: item[0])]  # chunk order
            done.update(_run_group(fn, pieces, {k: jobs[k] for k in bundles[j]}, common, self.row_copy))
            if j == len(bundles) - 1:  # the last bundle: none left to claim
                break
            if self.me == 0:
                j, dealer_pieces = n_dealt + self._next_claim(deal), None
            else:
                source = sources.get(0) if others is None else None
                j, dealer_pieces = self._call_peers([(0, "claim", (self._round, deal, n_dealt, bundles, source))])[0]
        return done

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
        self._held = []  # host index -> {token: Routing} the host holds (the newest _KEPT_ROUTINGS)
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
        self._held = [{} for _ in workers]
        peers = [(w, f.key) for w, f in zip(workers, self._actor_futures)]
        info = cluster_workers(self.client)  # (a worker the scheduler no longer lists counts one thread)
        self._host_nthreads = [int(info.get(w, {}).get("nthreads", 1)) for w in workers]
        threads = _machine_threads(workers, self._host_nthreads)
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
        return tuple(_RoutingToken(self._token(a)) if isinstance(a, Routing) else a for a in args)

    @staticmethod
    def _routing_for(held, routing):
        """``routing`` as sent to a host holding ``held`` ({token: Routing}): a patch on one of them if it
        derives from one (a few snapshots back at most), else whole."""
        nodes, earlier = [], routing.since()
        for _ in range(_PATCH_STEPS):
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
            if not self._lost_hosts(exc):
                raise
            self._recover()
            results = self._call(range(len(self._hosts)), want)
        # results other hosts read during the round are freed with the next one (their readers are done)
        for h, keys in self._free_next_round:
            self._queue_op(h, ("free", keys))
        self._free_next_round = []
        return results

    def _call(self, hosts, want):
        round_id = next(self._rounds)
        futures = {}
        for h in hosts:
            ops, self._queue[h] = self._queue[h], []
            tokens = {a.n for a in _walk(ops) if isinstance(a, _RoutingToken)}
            new = {}
            for n in sorted(tokens - set(self._held[h])):  # (a patch may build on a routing sent just before it)
                new[n] = self._routing_for(self._held[h], self._routings[n])
                self._held[h][n] = self._routings[n]
            self._held[h] = dict(sorted(self._held[h].items())[-_KEPT_ROUTINGS:])  # as the host keeps them
            futures[h] = self._hosts[h].run(round_id, Packed((ops, new, sorted(want.get(h, ())))))
        outcomes = self.client.sync(self._settle, round_id, futures)
        errors = [out for out in outcomes.values() if isinstance(out, BaseException)]
        if errors:  # the host whose own op failed, rather than one that waited for it
            raise next((e for e in errors if not isinstance(e, PeerFailed)), errors[0])
        outcomes = {h: out.value for h, out in outcomes.items()}
        self.stats["peer_calls"] += sum(calls for _, calls in outcomes.values())
        return {h: values for h, (values, _) in outcomes.items()}

    async def _settle(self, round_id, futures):
        """Every call's result or exception; every call ends before anything else touches the chunks.

        A host may be waiting for a result of a host whose call failed (never
        delivered, or its worker gone): at the first error every host of the
        round is told to give up (:meth:`ChunkHost.abort`), so no call waits
        forever.
        """
        async def outcome(future):
            try:
                return await future
            except Exception as exc:
                return exc

        calls = {asyncio.ensure_future(outcome(f)): h for h, f in futures.items()}
        outcomes, pending, aborted = {}, set(calls), False
        while pending:
            done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            for call in done:
                outcomes[calls[call]] = call.result()
            if not aborted and pending and any(isinstance(o, BaseException) for o in outcomes.values()):
                aborted = True
                for h in futures:
                    self._hosts[h].abort(round_id)  # not awaited: a lost host's worker need not answer
        return outcomes

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
        return [_item(v, r.item) for v, r in zip(values, refs)]

    def _known(self, args):
        """``args`` for a host op: results the driver has fetched (and freed there) by value; the rest stay Refs.

        A host resolves a Ref when it runs the op: its own results in place,
        another host's by asking that host (:meth:`ChunkHost.fetch`), which
        answers once the op making it has run in the same round.
        """
        refs = [a for a in _walk(args) if isinstance(a, Ref)]
        values = {id(r): _item(self._fetched[r.key], r.item) for r in refs if r.key in self._fetched}
        return _substitute(args, values) if values else args

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
        if not gather:
            return refs
        results = {}
        for done in self.gather(refs):
            results.update(done)
        return results

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


def _sendable(exc):
    """``exc``, or a RuntimeError naming it where it cannot be pickled.

    Dask sends an actor call's exception back pickled; one that cannot be
    (it holds a lock, a context variable) is only logged, and the driver
    would wait for the reply for ever.
    """
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        text = "".join(traceback.format_exception(exc)).rstrip()
        return RuntimeError(f"A TAO chunk host op failed with an error that cannot be sent back:\n{text}")


def _machine_threads(workers, nthreads):
    """For each of ``workers`` (addresses, each with its ``nthreads``; a worker may appear twice), the
    threads of them all on its machine, each worker counted once."""
    from distributed.comm import get_address_host

    per_machine = {}
    for w, n in dict(zip(workers, nthreads)).items():
        machine = get_address_host(w)
        per_machine[machine] = per_machine.get(machine, 0) + n
    return [per_machine[get_address_host(w)] for w in workers]


#: arrays of fewer bytes go inside a :class:`Packed` value's pickle; larger ones travel as frames of their own
_PACK_INBAND_BYTES = 64 * 1024


class Packed:
    """A value pickled once, its small arrays inside the pickle: what the hosts and the driver send each other.

    Dask serialises a call's arguments and result element by element, and
    every NumPy array becomes a frame of its own with its own header. A
    round's ops carry hundreds of small arrays (the node jobs' warm starts,
    the evaluations); sent as they are, a round to two workers took 11-13 ms
    against 2.6 ms for the same ops pickled into one buffer (the deepest
    level of a 60k-row MNIST fit, ad-hoc probe). Arrays of at least
    :data:`_PACK_INBAND_BYTES` stay out of the pickle (Dask sends them
    without a copy: the rows of a node group's care points).

    The value is pickled when packed, so a value that cannot be pickled
    fails the call that packs it (Dask, failing to serialise a message,
    only logs it: the caller would wait for ever).
    """

    __slots__ = ("header", "large", "_value")

    def __init__(self, value):
        self.large, self._value = [], value
        try:
            self.header = pickle.dumps(value, protocol=5, buffer_callback=self._inband)
        except Exception:  # a function defined in place (as Dask does: cloudpickle when pickle cannot)
            import cloudpickle

            self.large = []
            self.header = cloudpickle.dumps(value, protocol=5, buffer_callback=self._inband)

    def _inband(self, buffer):
        # a true value keeps the buffer in the pickle; a false one sends it out of band, as a frame of its own
        return memoryview(buffer).nbytes < _PACK_INBAND_BYTES or self.large.append(buffer)

    @property
    def value(self):
        if self._value is _UNPACKED:
            self._value = pickle.loads(self.header, buffers=self.large)
        return self._value

    def __reduce__(self):
        return _unpack, (self.header, *self.large)


_UNPACKED = object()


def _unpack(header, *large):
    packed = Packed.__new__(Packed)
    packed.header, packed.large, packed._value = header, list(large), _UNPACKED
    return packed


class _Select:
    """Stands for the pieces of some keys in a host's parts: ``[(chunk, {key: piece})]``, chunks that have any."""

    __slots__ = ("keys",)

    def __init__(self, keys):
        self.keys = keys


def _item(value, item):
    if item is None:
        return value
    if isinstance(item, _Select):
        picked = ((i, {k: parts[k] for k in item.keys if k in parts}) for i, parts in sorted(value.items()))
        return [(i, p) for i, p in picked if p]
    return value[item]


def _walk(obj):
    if isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _walk(item)
    else:
        yield obj


def _substitute(obj, values):
    if isinstance(obj, Ref):
        return values.get(id(obj), obj)
    if isinstance(obj, list):
        return [_substitute(o, values) for o in obj]
    if isinstance(obj, tuple):
        return tuple(_substitute(o, values) for o in obj)
    return obj
