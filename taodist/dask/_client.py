"""Which Dask client a fit uses, and the embedded LocalCluster when none."""

import contextlib
import logging
import os

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def resolve_client(client=None):
    """Yield the client to use, starting an embedded cluster if there is none.

    Order: the explicit ``client``; else the active default client
    (``distributed.default_client()``); else a ``LocalCluster`` with one
    single-threaded worker process per core, closed on exit.
    """
    from distributed import Client, default_client

    if client is not None:
        yield client
        return
    try:
        yield default_client()
        return
    except ValueError:
        pass
    n = os.cpu_count() or 1
    logger.info("Starting an embedded LocalCluster with %d worker processes", n)
    with embedded_local_cluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as local:
            logger.info("Dask dashboard: %s", local.dashboard_link)
            yield local


def embedded_local_cluster(**kwargs):
    """A ``LocalCluster(**kwargs)`` for one taodist run, its workers started without Dask's malloc trimming.

    Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` in its workers so that they
    return freed memory to the OS. Setting it also fixes glibc's mmap
    threshold, so every array over 128 kB a task allocates is mapped and
    faulted in anew, where an ordinary process reuses freed memory: on a
    2-worker cluster a 60k-row MNIST fit's TAO iterations took 1.97x the
    in-process time with it and 1.54x without (``bench/bench_dask_overhead.py
    --no-malloc-trim``). A cluster started for one fit and closed after it
    does not need its memory back early; clusters the user starts keep
    whatever they set. The other variables (``OMP_NUM_THREADS=1`` ...) stay.

    A nanny also writes those variables into its own process's environment,
    which later worker processes inherit, so the variable is taken out of
    ``os.environ`` while the workers start and put back after.
    """
    import dask
    from distributed import LocalCluster

    name = "MALLOC_TRIM_THRESHOLD_"
    inherited = os.environ.pop(name, None)
    try:
        # None unsets a variable (distributed.nanny._get_env_variables)
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{name}": None}):
            return LocalCluster(**kwargs)
    finally:
        if inherited is not None:
            os.environ[name] = inherited


def cluster_workers(client):
    """``{address: info}`` of every worker of the client's cluster, asked of the scheduler now.

    Not ``Client.scheduler_info()``: it returns the client's cached identity,
    which the client's periodic refresh (it asks for no per-worker
    information) can overwrite with an empty ``"workers"`` between the fetch
    and the return. Twenty jobs whose drivers share one worker's client hit
    that: a fit saw no workers ("min() arg is an empty sequence").
    """
    try:
        info = client.sync(client.scheduler.identity, n_workers=-1)
    except TypeError:  # a release whose scheduler takes no n_workers (it lists every worker)
        info = client.sync(client.scheduler.identity)
    return info["workers"]
