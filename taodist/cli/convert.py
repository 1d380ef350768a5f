"""``taodist convert``: data files (.npz, .npy, CSV, Parquet) to chunked Zarr stores."""

import click

from ..io import to_zarr
from ..io.atomic import check_replaceable
from ..io.data import read_table
from ._common import cli_errors


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.argument("out", type=click.Path())
@click.option("--rows-per-chunk", type=click.IntRange(1), default=None, help="Default: ~64 MiB per chunk.")
@click.option("--target", default="y", show_default=True, help="CSV/Parquet column holding y (others are X).")
@click.option("--overwrite", is_flag=True,
              help="Replace OUT if it is a store taodist wrote (other paths are never replaced).")
def convert(source, out, rows_per_chunk, target, overwrite):
    """Convert SOURCE (.npz with X/y or X_train/y_train, .npy, .csv, .parquet) to a chunked Zarr store OUT.

    OUT holds arrays X (float32) and, when present, y; read them with
    taodist.io.open_zarr(OUT, component="X"). A scipy.sparse .npz file
    (scipy.sparse.save_npz) becomes a sparse X, never densified. OUT must be a new path, or,
    with --overwrite, a store taodist wrote; nothing else is ever deleted.
    """
    with cli_errors():
        check_replaceable(out, overwrite, keep=[source])  # before reading: a refused write costs nothing
        arrays = read_table(source, target)
        written = to_zarr(arrays, out, rows_per_chunk=rows_per_chunk, overwrite=overwrite)
    shapes = ", ".join(f"{k} {tuple(v.shape)}" for k, v in arrays.items())
    click.echo(f"wrote {written}: {shapes}")
