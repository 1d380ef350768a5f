"""Dask clients for taodist: the one home of cluster start-up and of connecting to a scheduler.

* :func:`resolve_client` -- the client a fit uses: the one given, else the
  default client, else an embedded cluster's;
* :func:`embedded_cluster` -- a client of a new LocalCluster on this machine
  (one single-threaded worker process per core), shut down quietly: what
  ``taodist demo``/``taodist fit`` and a fit with no client start;
* :func:`embedded_local_cluster` -- that LocalCluster, started without Dask's
  malloc trimming and with quieter monitoring;
* :func:`connect` -- a client of a scheduler address, every failure one line
  naming the problem and the fix;
* :func:`cluster_workers` -- the workers of a client's cluster, asked of the
  scheduler;
* :func:`lost_scheduler_as_one_error` -- a fit whose scheduler went away ends
  with one :class:`SchedulerLostError`, whatever call noticed it first.
"""

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
import time
import weakref

import dask
from distributed import Client, LocalCluster, default_client
from distributed.comm import connect as open_comm
from distributed.comm.addressing import parse_address, parse_host_port
from distributed.security import Security

from ..utils.messages import one_line

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def resolve_client(client=None):
    """Yield the client to use, starting an embedded cluster if there is none.

    Order: the explicit ``client``; else the active default client
    (``distributed.default_client()``); else :func:`embedded_cluster`, closed
    on exit.
    """
    if client is None:
        try:
            client = default_client()
        except ValueError:  # no default client: start one below
            pass
    if client is not None:
        # yielded outside the try above: an error of the caller's block must reach the caller as it is
        yield client
        return
    logger.info("Starting an embedded LocalCluster with %d worker processes", local_workers())
    with embedded_cluster() as local:
        logger.info("Dask dashboard: %s", local.dashboard_link)
        yield local


class SchedulerLostError(ConnectionError):
    """A cluster fit lost its Dask scheduler; the cluster's state (rows, actors, tasks) went with it.

    The fit cannot go on. A scheduler only stopped for a while (``SIGSTOP``,
    a network pause shorter than the client's timeout) is waited for instead,
    and the fit goes on unchanged.
    """


@contextlib.contextmanager
def lost_scheduler_as_one_error(client=None):
    """Within the block, an error caused by losing ``client``'s scheduler becomes one :class:`SchedulerLostError`.

    When a scheduler dies mid-fit, what fails first depends on the moment:
    an actor call times out reconnecting, a task's future is cancelled with
    ``"scheduler-connection-lost"``, a Variable read is refused... The client
    notices too: it stops ``"running"`` while it tries to reconnect, and
    closes when it cannot. Either sign turns the error into one that says
    what happened (the original is its ``__cause__``). ``client=None``: the
    default client, if there is one (an embedded cluster's scheduler lives in
    this process and is not watched).
    """
    if client is None:
        try:
            client = default_client()
        except ValueError:  # no client yet: a fit that starts an embedded cluster
            pass
    try:
        yield
    except SchedulerLostError:
        raise
    except Exception as exc:
        reason = _scheduler_lost(client, exc)
        if reason is None:
            raise
        address = getattr(getattr(client, "scheduler", None), "address", None) or "(unknown address)"
        raise SchedulerLostError(
            f"The Dask scheduler at {address} was lost during the fit ({reason}); the cluster's state went "
            "with it and the fit cannot go on. Fit again once the scheduler is back.") from exc


#: seconds a connection error waits for the client to notice a lost scheduler before it is taken as it is
COMM_ERROR_PATIENCE_S = 5.0


def _scheduler_lost(client, exc):
    """Why ``exc`` comes from a lost scheduler (a few words), or None when it does not.

    A connection error (a reset from the scheduler while gathering, say) can
    reach the caller before the client's own connection notices: the client
    is then given a few seconds to stop ``"running"``.
    """
    cause, comm_error = exc, False
    while cause is not None:
        if getattr(cause, "reason", None) == "scheduler-connection-lost":  # distributed's FutureCancelledError
            return "the client lost its connection to it"
        comm_error = comm_error or isinstance(cause, OSError)  # CommClosedError, ConnectionResetError, ...
        cause = cause.__cause__ or cause.__context__
    if comm_error and client is not None:
        deadline = time.monotonic() + COMM_ERROR_PATIENCE_S
        while client.status == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
    if client is not None and client.status == "connecting":
        return "the client lost its connection to it and is trying to reconnect"
    if client is not None and client.status != "running":
        return f"the client lost its connection to it and is {client.status}"
    return None


# ---------------------------------------------------------------- embedded clusters
@contextlib.contextmanager
def computing_on(client):
    """Within the block, Dask computations (``.compute()``, ``persist``) run on ``client``'s cluster.

    ``client`` becomes the current client rather than Dask's ``scheduler``
    config value: a nanny that restarts a killed worker meanwhile pickles
    Dask's config into the new worker process, and a Client in it cannot be
    pickled (the worker would never come back).
    """
    with client.as_current(), dask.config.set(scheduler="dask.distributed"):
        yield client


def local_workers():
    """How many worker processes an embedded cluster starts: one per core."""
    return os.cpu_count() or 1


@contextlib.contextmanager
def embedded_cluster():
    """Yield a client of a new LocalCluster on 127.0.0.1, shut down quietly on exit.

    The cluster has :func:`local_workers` single-threaded worker processes
    and a dashboard on a free port (:func:`embedded_local_cluster`).
    """
    cluster = embedded_local_cluster(n_workers=local_workers(), threads_per_worker=1, processes=True,
                                     host="127.0.0.1", dashboard_address=":0")
    try:
        client = Client(cluster)
    except BaseException:
        cluster.close()
        raise
    EMBEDDED_CLIENTS.add(client)
    try:
        yield client
    finally:
        _shutdown_quietly(client, cluster)


#: clients of the clusters :func:`embedded_cluster` started (and will shut down): nobody else's workers
EMBEDDED_CLIENTS = weakref.WeakSet()


def quiet_if_interrupted(client):
    """Silence the workers' ``distributed`` logs of an embedded cluster when a fit is interrupted (Ctrl-C).

    The interrupt stops the driver with requests to the workers in flight;
    answering one after the fit let go of its state, a worker logged a
    KeyError traceback under the one-line "Aborted!". The cluster is shut
    down right after, so nothing more is lost; a cluster the user started
    keeps its logs.
    """
    if client in EMBEDDED_CLIENTS:
        with contextlib.suppress(Exception):
            client.run(_silence_distributed_logs, on_error="ignore")


def embedded_local_cluster(**kwargs):
    """A ``LocalCluster(**kwargs)`` for one taodist run, its workers started without Dask's malloc trimming.

    Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_`` in its workers so that they
    return freed memory to the OS. Setting it also fixes glibc's mmap
    threshold, so every array over 128 kB a task allocates is mapped and
    faulted in anew, where an ordinary process reuses freed memory; a fit's
    tasks, which allocate many such arrays, run slower for it. A cluster
    started for one fit and closed after it does not need its memory
    back early; clusters the user starts keep whatever they set. The other
    variables (``OMP_NUM_THREADS=1`` ...) stay.

    A nanny also writes those variables into its own process's environment,
    which later worker processes inherit, so the variable is taken out of
    ``os.environ`` while the workers start and put back after.

    Its servers also sample themselves less often (:func:`quieter_monitoring`),
    and its worker processes ignore Ctrl-C (:func:`_workers_ignore_sigint`).
    """
    name = "MALLOC_TRIM_THRESHOLD_"
    inherited = os.environ.pop(name, None)
    try:
        # None unsets a variable (distributed.nanny._get_env_variables)
        with dask.config.set({f"distributed.nanny.pre-spawn-environ.{name}": None, **quieter_monitoring()}), \
                _workers_ignore_sigint():
            return LocalCluster(**kwargs)
    finally:
        if inherited is not None:
            os.environ[name] = inherited


@contextlib.contextmanager
def _workers_ignore_sigint():
    """SIGINT ignored while the cluster's worker processes start, so they inherit the ignore.

    A terminal's Ctrl-C goes to the whole foreground process group: each
    worker of an embedded cluster died with a KeyboardInterrupt traceback
    while this process was shutting the cluster down. Ignoring it there
    leaves the interrupt to this process alone (Python keeps a signal ignored
    at start-up ignored), which closes the cluster itself. Only the main
    thread may change signal handlers; elsewhere nothing changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


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
    500 ms and times its loop every 20 ms. On an idle cluster that is a
    noticeable share of a core, and each sample takes the GIL from the
    thread computing; on a machine with few cores the fit shares them with
    all of it. Sampling less often keeps the dashboard useful at a fraction
    of that cost. Memory monitoring (spilling, pausing, restarting a worker
    over its limit) is left as it is.
    """
    # distributed's defaults joined Dask's config when it was imported (at the top of this module)
    defaults = dask.config.merge(*dask.config.defaults)
    return {key: value for key, value in QUIETER_MONITORING.items()
            if dask.config.get(key) == dask.config.get(key, config=defaults)}


def _silence_distributed_logs(level=None):
    """Set every ``distributed`` logger of this process to ``level`` (default CRITICAL).

    Run in the worker processes too (through ``Client.run``) just before an
    embedded cluster is shut down.

    Returns
    -------
    dict
        The previous level of each logger, to restore.
    """
    level = logging.CRITICAL if level is None else level
    names = ["distributed"] + [n for n in list(logging.root.manager.loggerDict) if n.startswith("distributed.")]
    old = {}
    for name in names:
        named = logging.getLogger(name)
        old[name] = named.level
        named.setLevel(level)
    return old


def _shutdown_quietly(client, cluster):
    """Close ``client``, then ``cluster``, without distributed's shutdown chatter.

    Closing a LocalCluster makes its scheduler, nannies and workers log
    heartbeat failures, "worker process still alive, killing" and
    tracebacks of connections closed under them: noise after a run that
    went well, which reads like a failure. The ``distributed`` loggers of
    every process are silenced for the shutdown only (anything logged while
    the work ran was shown as usual), and the client goes first so that
    nothing of ours still talks to the scheduler while it and the workers stop.
    """
    with contextlib.suppress(Exception):  # workers already gone need no silencing
        client.run(_silence_distributed_logs, on_error="ignore")
    old = _silence_distributed_logs()
    try:
        client.close()
        cluster.close()
    finally:
        for name, level in old.items():
            logging.getLogger(name).setLevel(level)


# ---------------------------------------------------------------- connecting to a scheduler
_ADDRESS_HINT = "expected tcp://HOST:PORT or tls://HOST:PORT, e.g. tcp://scheduler:8786"
_PROTOCOLS = ("tcp", "tls", "inproc", "ws", "wss", "ucx")


def parse_scheduler_address(address):
    """``(scheme, host, port)`` of a scheduler address (host and port: None but for tcp:// and tls://).

    Raises
    ------
    ValueError
        For a malformed address or an unknown protocol. The message starts
        with the address, so that a caller can say where it came from.
    """
    try:
        scheme, location = parse_address(address)
        host, port = parse_host_port(location) if scheme in ("tcp", "tls") else (None, None)
    except (ValueError, TypeError) as exc:
        raise ValueError(one_line(f"{address!r} is not a scheduler address ({exc}); {_ADDRESS_HINT}.")) from None
    if scheme not in _PROTOCOLS:
        raise ValueError(f"{address!r}: unknown protocol {scheme!r}; {_ADDRESS_HINT}.")
    return scheme, host, port


def tls_configured():
    """Whether Dask's config names a CA file for TLS connections (``distributed.comm.tls.ca-file``)."""
    return bool(dask.config.get("distributed.comm.tls.ca-file", None))


def _handshake(address, security, timeout):
    """Open and close one Dask comm to ``address`` within ``timeout`` seconds, handshake included.

    distributed's ``connect`` bounds the connection but not the handshake
    read that follows, so a server that accepts and then says nothing (an
    HTTP server, the dashboard's port) would hang ``Client()`` for ever.
    """
    args = (security or Security()).get_connection_args("client")

    async def probe():
        comm = await asyncio.wait_for(open_comm(address, timeout=timeout, **args), timeout)
        await comm.close()

    try:
        asyncio.run(probe())
    except asyncio.TimeoutError:
        raise TimeoutError(f"no Dask handshake within {timeout}s (is this a Dask scheduler's address?)") from None


def connect(address, security=None, timeout=10):
    """A client of the scheduler at ``address``, or a one-line error naming the problem and the fix.

    A malformed address is refused before any connection, as is a tls://
    address with neither ``security`` nor a CA file in Dask's config; a
    closed port is reported at once (a plain TCP probe) rather than after
    the client's connect timeout; anything else that goes wrong while
    connecting (a timeout, a TLS handshake refused, something that is not a
    Dask scheduler answering) becomes the same kind of one-line error.

    Parameters
    ----------
    address : str
        ``tcp://HOST:PORT``, ``tls://HOST:PORT`` (or another protocol of
        distributed's).
    security : distributed.security.Security, optional
        The TLS files of a tls:// scheduler (default: Dask's config).
    timeout : float, default=10
        Seconds to wait for the connection and the handshake.

    Returns
    -------
    distributed.Client

    Raises
    ------
    ValueError
        For an address that cannot be used as it is (see
        :func:`parse_scheduler_address`; a tls:// one without TLS files).
    ConnectionError
        When the scheduler cannot be reached or does not answer as one.
    """
    scheme, host, port = parse_scheduler_address(address)
    if scheme == "tls" and security is None and not tls_configured():
        raise ValueError(f"{address} is a TLS scheduler: give the security of its TLS files "
                         "(distributed.security.Security), or set distributed.comm.tls.ca-file / .client.cert / "
                         ".client.key in the Dask config.")
    if host is not None:
        probe = min(timeout, 5)
        try:
            socket.create_connection((host, port), timeout=probe).close()
        except OSError as exc:
            reason = f"no answer within {probe}s" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            raise ConnectionError(one_line(
                f"Could not reach the Dask scheduler at {address}: {reason}. Check the address and that the "
                "scheduler is running (and that no firewall is in the way).")) from exc
    try:
        _handshake(address, security, timeout)
        return Client(address, timeout=timeout, security=security)
    except (OSError, TimeoutError) as exc:
        raise ConnectionError(one_line(
            f"Could not reach the Dask scheduler at {address} within {timeout}s: {exc}. Check the address, that "
            "the scheduler is running, and the TLS files for a tls:// scheduler.")) from exc
    except Exception as exc:  # e.g. something that is not a Dask scheduler listening on that port
        raise ConnectionError(one_line(
            f"Could not talk to a Dask scheduler at {address}: {type(exc).__name__}: {exc}. Check that this is "
            "the scheduler's address (not its dashboard's) and that both sides run the same dask/distributed "
            "versions.")) from exc


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
