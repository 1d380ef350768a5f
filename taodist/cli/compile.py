"""``taodist compile``: fill numba's cache with the kernels of the common fits, ahead of the first one."""

import click

from ..estimators.compile_ahead import compile_common_kernels
from ..solvers.l1_logistic import numba_cache_location


@click.command(name="compile")
def compile_kernels():
    """Compile taodist's kernels for this machine into numba's on-disk cache.

    A first fit otherwise compiles the kernels it uses (tens of seconds);
    after this, every process of this installation -- this shell's fits, the
    workers of a local cluster -- loads them from the cache instead. Run it
    once after installing (a Docker image build does). NUMBA_CACHE_DIR
    chooses the cache's folder.
    """
    click.echo("compiling taodist's kernels for this machine (about a minute the first time)...")
    for kind, seconds in compile_common_kernels().items():
        click.echo(f"  {kind}: {seconds:.1f}s")
    click.echo(f"numba's cache: {numba_cache_location()}")
