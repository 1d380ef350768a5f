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
    from distributed import Client, LocalCluster, default_client

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
    with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        with Client(cluster) as local:
            logger.info("Dask dashboard: %s", local.dashboard_link)
            yield local


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
