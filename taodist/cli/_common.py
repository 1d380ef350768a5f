"""What the command modules share: the cluster options, the Dask client a command runs on, one-line errors.

Starting a cluster and connecting to a scheduler are :mod:`taodist.dask._client`'s;
this module turns the options into its calls and its errors into ``Error: ...``
lines that name the option at fault.
"""

import contextlib
import logging

import click
from distributed.security import Security

from ..dask._client import connect, embedded_cluster, parse_scheduler_address, tls_configured
from ..io.data import DataFileError
from ..utils.messages import one_line


def cluster_options(required=False):
    """--scheduler plus the TLS files of distributed's ``Security`` (mutual TLS)."""

    def decorate(command):
        for option in reversed([
            click.option("--scheduler", required=required, envvar="DASK_SCHEDULER_ADDRESS",
                         help="Address of a Dask scheduler (tcp:// or tls://; env DASK_SCHEDULER_ADDRESS)."
                         + ("" if required else " Default: an embedded LocalCluster.")),
            click.option("--tls-ca-file", type=click.Path(exists=True, dir_okay=False),
                         help="CA certificate for a tls:// scheduler."),
            click.option("--tls-cert", type=click.Path(exists=True, dir_okay=False),
                         help="This client's certificate (signed by that CA)."),
            click.option("--tls-key", type=click.Path(exists=True, dir_okay=False),
                         help="This client's private key (if not inside --tls-cert)."),
        ]):
            command = option(command)
        return command

    return decorate


def _security(tls_ca_file, tls_cert, tls_key):
    if not (tls_ca_file or tls_cert or tls_key):
        return None  # distributed then reads its config (distributed.comm.tls.*)
    if not (tls_ca_file and tls_cert):
        raise click.UsageError("TLS needs both --tls-ca-file and --tls-cert (and --tls-key unless the "
                               "certificate file holds the key).")
    return Security(tls_ca_file=tls_ca_file, tls_client_cert=tls_cert, tls_client_key=tls_key,
                    require_encryption=True)


def cluster_client(scheduler, in_process=False, tls_ca_file=None, tls_cert=None, tls_key=None):
    """A context yielding None (in-process), a client of ``scheduler``, or an embedded cluster's."""
    if in_process:
        return contextlib.nullcontext(None)
    security = _security(tls_ca_file, tls_cert, tls_key)
    if scheduler is None:
        return embedded_cluster()
    return _connect(scheduler, security)


def _connect(scheduler, security):
    """A client of ``scheduler`` (a ``distributed.Client`` closes on leaving a ``with``), or an ``Error:`` line.

    The address and the TLS options are checked here first, so that the
    message names the option to fix.
    """
    try:
        scheme, _, _ = parse_scheduler_address(scheduler)
    except ValueError as exc:
        raise fail(f"--scheduler {exc}") from None
    if scheme == "tls" and security is None and not tls_configured():
        raise fail(f"{scheduler} is a TLS scheduler: pass --tls-ca-file and --tls-cert (and --tls-key), or set "
                   "distributed.comm.tls.ca-file / .client.cert / .client.key in the Dask config.")
    try:
        client = connect(scheduler, security)
    except (ValueError, ConnectionError) as exc:
        raise fail(exc) from None
    return _without_reconnect_logs(client)


@contextlib.contextmanager
def _without_reconnect_logs(client):
    """``client``, closed on exit, with distributed's client logger silenced meanwhile.

    When the scheduler goes away mid-command the client logs its failed
    reconnection attempts at ERROR level; the command then ends with one
    ``Error:`` line that says the scheduler was lost, and the log lines above
    it would only repeat it.
    """
    logger = logging.getLogger("distributed.client")
    previous = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with client:
            yield client
    finally:
        logger.setLevel(previous)


#: what the command line says before a fit that compiles (:func:`taodist.solvers.l1_logistic.first_run_compiles`)
COMPILING_NOTICE = ("compiling taodist's kernels for this machine: the first fit takes up to a minute longer; "
                    "later runs load them from numba's cache")


def fail(message):
    """A click error printed as the single line ``Error: message`` (exit code 1)."""
    return click.ClickException(" ".join(str(message).split()))


@contextlib.contextmanager
def cli_errors():
    """Expected failures -- bad input files, refused outputs -- as one ``Error: ...`` line, exit code 1."""
    try:
        yield
    except DataFileError as exc:  # its message names the file and the problem as it is
        raise click.ClickException(str(exc)) from exc
    except (ValueError, OSError) as exc:
        raise click.ClickException(one_line(exc)) from exc
    except MemoryError as exc:
        raise out_of_memory(exc) from exc


def out_of_memory(exc):
    """A MemoryError (e.g. parameters asking for more trees than memory holds) as one ``Error:`` line."""
    return fail(f"out of memory: {one_line(exc)}. Ask for less (fewer trees, a smaller depth) or use a machine "
                "with more memory.")
