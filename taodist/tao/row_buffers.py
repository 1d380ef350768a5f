"""Arrays for node groups' care points, kept for the next group rather than freed.

A node group's care points are gathered into one new array per TAO level
(:func:`taodist.tao.node_tasks.solve_nodes_task`). An array that large is fresh memory
each time (glibc maps it anew and returns it on free), and the kernel zeroes
every fresh page before the copy writes it, which can take as long as the
copy itself. Reusing the arrays skips the zeroing.

Arrays are lent for the time of a ``with`` block and come back to the pool
after it; the pool keeps a few (the largest a fit needed, one per thread
solving at once) until :meth:`RowBuffers.clear`, which the executors call
when a fit ends (``LocalExecutor.close``; the Dask executors on every
worker).
"""

import threading
from contextlib import contextmanager

import numpy as np

#: arrays smaller than this are allocated as usual: small allocations reuse memory already
MIN_KEPT_BYTES = 1 << 20


class RowBuffers:
    """A pool of arrays lent out as ``(rows, columns)`` arrays of any dtype.

    Parameters
    ----------
    max_kept : int, default=8
        Arrays kept at most once returned (the smallest go first).
    """

    def __init__(self, max_kept=8):
        self.max_kept = max_kept
        self._kept = []  # raw uint8 arrays, any dtype's view fits
        self._lock = threading.Lock()

    @contextmanager
    def rows(self, n, d, dtype):
        """An uninitialised ``(n, d)`` array of ``dtype`` for the ``with`` block; reused after it.

        Nothing may keep the array (or a view of it) past the block: the
        next block to borrow it overwrites it.
        """
        dtype = np.dtype(dtype)
        nbytes = n * d * dtype.itemsize
        if nbytes < MIN_KEPT_BYTES:
            yield np.empty((n, d), dtype=dtype)
            return
        raw = self._take(nbytes)
        try:
            yield raw[:nbytes].view(dtype).reshape(n, d)
        finally:
            self._give_back(raw)

    def clear(self):
        """Let every kept array go (arrays lent out come back to the pool as usual)."""
        with self._lock:
            self._kept = []

    def kept_bytes(self):
        """Bytes the pool holds now (arrays lent out not counted)."""
        with self._lock:
            return sum(raw.nbytes for raw in self._kept)

    def _take(self, nbytes):
        with self._lock:
            fits = [i for i, raw in enumerate(self._kept) if raw.nbytes >= nbytes]
            if fits:
                return self._kept.pop(min(fits, key=lambda i: self._kept[i].nbytes))
        return np.empty(nbytes, dtype=np.uint8)

    def _give_back(self, raw):
        with self._lock:
            self._kept.append(raw)
            self._kept.sort(key=lambda r: r.nbytes)
            del self._kept[:max(0, len(self._kept) - self.max_kept)]


#: the process's pool (every executor thread of every fit in it borrows from this one)
ROW_BUFFERS = RowBuffers()


def release_row_buffers():
    """Empty this process's pool (:data:`ROW_BUFFERS`): a fit has ended. Returns True (for ``Client.run``)."""
    ROW_BUFFERS.clear()
    return True
