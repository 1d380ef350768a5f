"""The worker side of the actor executor: one worker's row chunks in a Dask actor, and the ops run on them.

:class:`ChunkHost` is what :class:`~taodist.dask._actor_executor.ActorExecutor`
starts on each worker. It receives a round of ops at a time (:meth:`ChunkHost.run`),
runs them in order on its chunks, and keeps their results for later ops, for
the driver and for the other hosts. Within a round the hosts call each other
directly, worker to worker: a host reads another's results
(:meth:`ChunkHost.fetch`, which waits until the op making them has run) and
claims node groups from host 0 (:meth:`ChunkHost.claim`). The messages are
those of :mod:`taodist.dask._messages`.
"""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import wait as wait_all

from ..tao.executor import merge_groups, run_group
from ._messages import (
    KEPT_ROUTINGS,
    Packed,
    PeerFailed,
    Ref,
    RoutingToken,
    Select,
    pick,
    refs_in,
    sendable_error,
    substitute,
)
from ._tree_patch import RoutingPatch

#: how often a host asked for a result it has not made checks that it still belongs to a fit
_RELEASE_CHECK_SECONDS = 1.0


_OP_THREADS = None
_OP_THREADS_LOCK = threading.Lock()


def _op_threads():
    """The threads this worker's hosts run their ops on, kept for the life of the worker process.

    Not the worker's one actor thread: a host whose op waits for another
    host's result must not keep that host from running when both live on
    one worker (after a lost worker, its hosts restart on the survivors).
    Idle threads are reused, so a worker does not start threads for every
    fit's hosts (nor keep one per host that has ended).
    """
    global _OP_THREADS
    with _OP_THREADS_LOCK:
        if _OP_THREADS is None:
            _OP_THREADS = ThreadPoolExecutor(64, thread_name_prefix="taodist-chunk-host")
        return _OP_THREADS


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
        return await loop.run_in_executor(_op_threads(), self._run, round_id, message)

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
            failure = sendable_error(exc)
            if failure is exc:
                raise
        finally:
            for n in sorted(self.routings)[:-KEPT_ROUTINGS]:
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
        return [pick(self.results[key], item) for key, item in wanted]

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
        [pieces] = await self._made(round_id, [(source, Select(bundles[j]))])
        return Packed((j, pieces))

    def _next_claim(self, deal):
        with self._claims_lock:
            n = self._claims.get(deal, 0)
            self._claims[deal] = n + 1
        return n

    def _args(self, args):
        """``args`` with tree tokens and result references (here or on other hosts) replaced by their values."""
        refs = refs_in(args)
        values, remote = {}, {}
        for r in refs:
            if r.host == self.me:
                values[id(r)] = pick(self.results[r.key], r.item)
            else:
                remote.setdefault(r.host, []).append(r)
        if remote:  # (most ops read nothing of other hosts: no hop through the worker's event loop)
            hosts = sorted(remote)
            fetched = self._call_peers([(h, "fetch", (self._round, [(r.key, r.item) for r in remote[h]]))
                                        for h in hosts])
            for h, got in zip(hosts, fetched):
                values.update((id(r), value) for r, value in zip(remote[h], got))
        return tuple(self.routings[a.n] if isinstance(a, RoutingToken) else substitute(a, values) for a in args)

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
        runs, in host order (no claim: a claim is a call to host 0, slow to
        answer while host 0 computes). Where the hosts' parts only name their
        rows (a row copy on every worker: indices, labels, weights), each host
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
            everything = Select(sorted(set().union(*bundles)))
            theirs = [Ref(h, source, everything) for h, source in sorted(sources.items()) if h != self.me]
            others = dict(item for selected in self._args((theirs,))[0] for item in selected)
        args = (deal, fn, sources, bundles, jobs, common, sum(self._host_threads), others)
        if n_takers > 1:
            takers = [self._pool.submit(self._take_bundles, first + t, *args) for t in range(n_takers)]
            wait_all(takers)  # all of them, even when one fails: none may still be solving once the op ends
            done = merge_groups(taker.result() for taker in takers)
        else:
            done = self._take_bundles(first, *args)
        self.results[key] = done

    def _take_bundles(self, j, deal, fn, sources, bundles, jobs, common, n_dealt, others):
        """Run ``fn`` on bundle ``j`` (dealt to this taker), then on bundles claimed until none is left (one
        thread of :meth:`_groups`). ``n_dealt``: the bundles dealt before the op ran; ``others``: the other
        hosts' parts of every bundle (``{chunk: {key: piece}}``), or None to read them per bundle."""
        done, dealer_pieces = {}, None
        while j < len(bundles):
            wanted = Select(bundles[j])
            if others is not None:
                pieces = pick(others, wanted)
            else:  # (host 0's pieces of a claimed bundle came with the claim)
                skip = {self.me} | ({0} if dealer_pieces is not None else set())
                theirs = [Ref(h, source, wanted) for h, source in sorted(sources.items()) if h not in skip]
                pieces = [item for selected in self._args((theirs,))[0] for item in selected] + (dealer_pieces or [])
            if self.me in sources:
                pieces += pick(self.results[sources[self.me]], wanted)
            pieces = [p for _, p in sorted(pieces, key=lambda item: item[0])]  # chunk order
            done.update(run_group(fn, pieces, {k: jobs[k] for k in bundles[j]}, common, self.row_copy))
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
