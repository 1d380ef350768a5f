"""Thread counts and calling numba's parallel kernels safely from several threads."""

import os
import threading

import numba

# numba falls back to its "workqueue" threading layer where neither OpenMP
# (libgomp) nor TBB is installed, and that layer aborts the process when two
# threads enter a parallel region at once (threads of a Dask worker, say).
# Calls are serialised unless a thread-safe layer is in use.
_WORKQUEUE_LOCK = threading.Lock()


def run_parallel(kernel, *args):
    """``kernel(*args)`` for a ``parallel=True`` numba kernel, serialised where the threading layer needs it."""
    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel region has run yet in this process
        layer = None
    if layer in ("omp", "tbb"):
        return kernel(*args)
    with _WORKQUEUE_LOCK:
        return kernel(*args)


def effective_n_jobs(n_jobs):
    """joblib's convention: None -> 1, -1 -> all cores, -2 -> all but one."""
    if n_jobs is None:
        return 1
    if n_jobs < 0:
        return max(1, (os.cpu_count() or 1) + 1 + n_jobs)
    return max(1, n_jobs)
