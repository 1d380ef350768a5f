"""The executor that runs TAO's chunk functions and node fits on Dask workers.

Row chunks are futures on the workers and stay there: every chunk function
is submitted as a task on its chunk (Dask schedules it where the chunk
lives) and only small results come back to the driver (losses, node
statistics, candidate losses). A node's fit is one task that receives only
that node's care points, pulled from the chunks' part futures. It satisfies
the contract :class:`taodist._executor.Executor` (chunk order, new chunk
handles after an update, grouping-independent keyed fits).
"""

import uuid

from .._chunks import make_chunk, streamed_chunk
from .._executor import pack_keys
from ._client import cluster_workers
from ._data import BlockReader


def _head(parts, summary):
    return sorted(parts), (summary(parts) if summary else None)


class DaskExecutor:
    """Executor over a ``distributed.Client``.

    Parameters
    ----------
    client : distributed.Client
    stream : bool, default=False
        Keep the rows in storage: chunks hold labels and weights and re-read
        their X block in every task (out-of-core fits).

    Attributes
    ----------
    stats : dict
        Counters since construction: ``"tasks"`` submitted and
        ``"round_trips"``, the calls that wait for results on the cluster
        (what a TAO level's latency is made of; the tests bound them).
    """

    def __init__(self, client, stream=False):
        self.client = client
        self.stream = stream
        self.run_id = uuid.uuid4().hex[:8]
        self.stats = {"tasks": 0, "round_trips": 0}

    def close(self):
        pass

    def _submit(self, fn, *args, name=None, **kwargs):
        # pure=False: chunk state changes between passes, so identical-looking
        # arguments must not be deduplicated; the key names read well on the
        # dashboard.
        key = f"taodist-{name or fn.__name__}-{self.run_id}-{uuid.uuid4().hex[:8]}"
        self.stats["tasks"] += 1
        return self.client.submit(fn, *args, key=key, pure=False, **kwargs)

    def _gather(self, futures):
        """Results of ``futures`` (one future or a list): one round trip."""
        self.stats["round_trips"] += 1
        return self.client.gather(futures)

    def make_chunks(self, blocks, routing, scale, solve_float32):
        if self.stream:  # only labels and weights are held; X blocks are read per task
            labels = self.client.compute([part for b in blocks for part in b[1:3]])
            return [
                self._submit(streamed_chunk, BlockReader(b[0]), *labels[2 * i:2 * i + 2], b[3], scale,
                             solve_float32, name="chunk")
                for i, b in enumerate(blocks)
            ]
        flat = self.client.compute([part for b in blocks for part in b[:3]])  # read blocks on the workers
        return [
            self._submit(make_chunk, *flat[3 * i:3 * i + 3], b[3], routing, scale, solve_float32, name="chunk")
            for i, b in enumerate(blocks)
        ]

    def map_chunks(self, fn, chunks, *args):
        return self._gather([self._submit(fn, c, *args) for c in chunks])

    def reduce_chunks(self, fn, combine, chunks, *args, **kwargs):
        """As the local executor's, but a tree of ``combine`` tasks on the workers: one result travels."""
        level = [self._submit(fn, c, *args) for c in chunks]
        while len(level) > 1:  # neighbours pair up, so the chunk order is kept
            level = [self._submit(combine, a, b, name="combine", **kwargs) for a, b in zip(level[::2], level[1::2])] \
                + level[len(level) - len(level) % 2:]
        return self._gather(level[0])

    def update_chunks(self, fn, chunks, *args):
        return [self._submit(fn, c, *args, name="chunk-update") for c in chunks]

    def split_chunks_by_key(self, fn, chunks, *args, summary=None):
        parts = [self._submit(fn, c, *args) for c in chunks]
        heads = self._gather([self._submit(_head, p, summary) for p in parts])  # one round trip
        return parts, [k for k, _ in heads], [s for _, s in heads]

    def run_key_groups(self, fn, parts, keys, jobs, **common):
        """Run ``fn`` on a few groups of keys per worker.

        One task per node would mean one small task per (chunk, node) to
        extract its part, thousands per level for deep trees. Instead keys
        are packed into about two groups per worker, balanced by their
        number of care points; each chunk sends a group only that group's
        parts. Results do not depend on the packing.
        """
        n_workers = len(cluster_workers(self.client))
        bundles = pack_keys(jobs, 2 * max(1, n_workers))
        futures = []
        for bundle in bundles:
            wanted = set(bundle)
            pieces = [self._submit(_select, p, sorted(wanted & set(ks)), name="parts")
                      for p, ks in zip(parts, keys) if wanted & set(ks)]
            futures.append(self._submit(_run_group, fn, pieces, {k: jobs[k] for k in bundle}, common,
                                        name=f"{fn.__name__}-group"))
        results = {}
        for done in self._gather(futures):
            results.update(done)
        return results


def _select(parts, wanted):
    return {k: parts[k] for k in wanted}


def _run_group(fn, pieces, jobs, common):
    return fn({key: ([p[key] for p in pieces if key in p], job) for key, job in jobs.items()}, **common)
