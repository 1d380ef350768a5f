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

    Its servers also sample themselves less often (:func:`quieter_monitoring`).
    """
    import dask
    from distributed import LocalCluster

    name = "MALLOC_TRIM_THRESHOLD_"
    inherited = os.environ.pop(name, None)
    try:
        # None unsets a variable (distributed.nanny._get_env_variables)
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{name}": None, **quieter_monitoring()}):
            return LocalCluster(**kwargs)
    finally:
        if inherited is not None:
            os.environ[name] = inherited


#: Dask's monitoring intervals for an embedded cluster (where the user has not set them): its servers'
#: self-profiles, system monitors and event-loop ticks, sampled every 10 / 500 / 20 ms by default
QUIETER_MONITORING = {
    "distributed.worker.profile.interval": "100ms",
    "distributed.admin.system-monitor.interval": "2s",
    "distributed.admin.system-monitor.disk": False,
    "distributed.admin.tick.interval": "200ms",
}


def quieter_monitoring():
    """:data:`QUIETER_MONITORING`'s settings whose keys still hold Dask's defaults (a user's own value stays).

    Every server of a cluster (the scheduler, each nanny and worker) samples
    its event loop's stack every 10 ms for the dashboard's profiles (each
    worker also its tasks' threads), reads the system's counters every
    500 ms and times its loop every 20 ms. An idle 2-worker cluster spent
    7-9% of a core on that, 2.8% with these settings (2.2% with no profiles
    at all), and each sample takes the GIL from the thread computing. On a
    2-core machine the fit shares those cores with all of it. Memory
    monitoring (spilling, pausing, restarting a worker over its limit) is
    left as it is.
    """
    import importlib

    import dask

    importlib.import_module("distributed")  # its defaults join Dask's config when it is imported

    defaults = dask.config.merge(*dask.config.defaults)
    return {key: value for key, value in QUIETER_MONITORING.items()
            if dask.config.get(key) == dask.config.get(key, config=defaults)}


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
