"""The executor that runs TAO's chunk functions and node fits on Dask workers.

Row chunks are futures on the workers and stay there: every chunk function
is submitted as a task on its chunk (Dask schedules it where the chunk
lives) and only small results come back to the driver (losses, node
statistics, candidate losses). A node's fit is one task that receives only
that node's care points, pulled from the chunks' part futures. Same
interface as :class:`taodist._tao.LocalExecutor`.
"""

import operator
import uuid

from .._chunks import make_chunk


def _keys(parts):
    return sorted(parts)


class DaskExecutor:
    """Executor over a ``distributed.Client``.

    Parameters
    ----------
    client : distributed.Client
    """

    def __init__(self, client):
        self.client = client
        self.run_id = uuid.uuid4().hex[:8]

    def close(self):
        pass

    def _submit(self, fn, *args, name=None, **kwargs):
        # pure=False: chunk state changes between passes, so identical-looking
        # arguments must not be deduplicated; the key names read well on the
        # dashboard.
        key = f"taodist-{name or fn.__name__}-{self.run_id}-{uuid.uuid4().hex[:8]}"
        return self.client.submit(fn, *args, key=key, pure=False, **kwargs)

    def map(self, fn, items):
        return self.client.gather([self._submit(fn, item) for item in items])

    def make_chunks(self, blocks, routing, scale, solve_float32):
        flat = self.client.compute([part for b in blocks for part in b[:3]])  # read blocks on the workers
        return [
            self._submit(make_chunk, *flat[3 * i:3 * i + 3], b[3], routing, scale, solve_float32, name="chunk")
            for i, b in enumerate(blocks)
        ]

    def map_chunks(self, fn, chunks, *args):
        return self.client.gather([self._submit(fn, c, *args) for c in chunks])

    def update_chunks(self, fn, chunks, *args):
        return [self._submit(fn, c, *args, name="chunk-update") for c in chunks]

    def scatter_parts(self, fn, chunks, *args):
        parts = [self._submit(fn, c, *args) for c in chunks]
        keys = self.client.gather([self._submit(_keys, p) for p in parts])
        return parts, keys

    def map_parts(self, fn, parts):
        return self.client.gather([self._submit(fn, p) for p in parts])

    def run_keyed_tasks(self, fn, parts, keys, jobs):
        futures = {}
        for key, kwargs in jobs.items():
            pieces = [self._submit(operator.getitem, p, key, name="part") for p, ks in zip(parts, keys) if key in ks]
            futures[key] = self._submit(fn, pieces, name=f"{fn.__name__}-{key}", **kwargs)
        results = self.client.gather(list(futures.values()))
        return dict(zip(futures, results))
