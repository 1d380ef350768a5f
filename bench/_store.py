"""Deterministic synthetic data sets written block by block to a Zarr store (shared by the bench scripts)."""

import os
import shutil


def fresh_store(path, tag, meta):
    """A temporary Zarr group to write ``path`` into, or None when ``path`` already holds ``attrs[tag] == meta``.

    A stale store at ``path`` (or a left-over temporary) is removed; the
    caller sets ``attrs[tag]`` and renames the temporary onto ``path``.
    """
    import zarr

    if path.exists():
        try:
            if dict(zarr.open_group(str(path), mode="r").attrs).get(tag) == meta:
                return None
        except Exception:
            pass
        shutil.rmtree(path)
    tmp = path.with_name(path.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    return zarr.open_group(str(tmp), mode="w")


def write_blocks(path, meta, n_rows, n_features, rows_per_chunk, make_block, compressors="auto", dtype="float32"):
    """Zarr group {X (``dtype``), y int8} from ``make_block(block_id, rows) -> (X, y)``, never whole in memory.

    Skipped when ``path`` already holds a store written with the same ``meta``;
    written to a temporary name and renamed, so a stopped run leaves no half store.
    """
    g = fresh_store(path, "bench", meta)
    if g is None:
        return False
    tmp = path.with_name(path.name + ".tmp")
    Xz = g.create_array("X", shape=(n_rows, n_features), chunks=(rows_per_chunk, n_features), dtype=dtype,
                        compressors=compressors)
    yz = g.create_array("y", shape=(n_rows,), chunks=(rows_per_chunk,), dtype="int8", compressors=compressors)
    for b, lo in enumerate(range(0, n_rows, rows_per_chunk)):
        X, y = make_block(b, min(n_rows, lo + rows_per_chunk) - lo)
        Xz[lo:lo + len(y)] = X
        yz[lo:lo + len(y)] = y
    g.attrs["bench"] = meta
    os.replace(tmp, path)
    return True
