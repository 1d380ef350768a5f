"""The ``taodist`` command line (click ships with Dask).

One module per group of commands, each only parsing options and calling the
public API:

* :mod:`~taodist.cli.demo` -- ``demo``: a sparse oblique tree on real data,
  from start to finish;
* :mod:`~taodist.cli.jobs` -- ``fit`` a job file here, or ``submit`` it to a
  cluster and follow it with ``status``, ``logs``, ``cancel``, ``result``;
* :mod:`~taodist.cli.models` -- ``predict`` with a saved model, ``inspect`` one;
* :mod:`~taodist.cli.convert` -- ``convert`` data files to chunked Zarr stores;
* :mod:`~taodist.cli.compile` -- ``compile`` the kernels into numba's cache ahead of a first fit.

Starting a cluster and connecting to a scheduler are
:mod:`taodist.dask._client`'s, reading data files :mod:`taodist.io.data`'s;
:mod:`~taodist.cli._common` turns their errors into ``Error: ...`` lines.
"""

import warnings

import click

from . import compile, convert, demo, jobs, models


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    """A warning as the command shows it: one ``Warning:`` line on stderr, not Python's source excerpt."""
    click.echo(f"Warning: {' '.join(str(message).split())}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="taodist")
def main():
    """taodist: Tree Alternating Optimization trees, forests and LapTAO."""
    warnings.showwarning = _one_line_warning


for _command in (demo.demo, jobs.fit, jobs.submit, jobs.status, jobs.logs, jobs.cancel, jobs.result,
                 models.predict, models.inspect, convert.convert, compile.compile_kernels):
    main.add_command(_command)

__all__ = ["main"]
