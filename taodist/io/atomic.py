"""Writing files and stores safely: one home for taodist's atomic writes.

Two rules, shared by every writer in taodist:

* **Atomic**: output is written under a temporary name in the target's own
  folder (same file system, so the final rename is atomic) and renamed into
  place only when complete. A crash or an error leaves the old content, or
  nothing, never half a file. The temporary name is removed on failure.
* **Never delete what we did not write**: a Zarr store (a folder) is only
  ever replaced when it carries taodist's marker attribute (see
  :func:`mark_store`) *and* the caller asked for it (``overwrite=True``).
  Any other existing folder or file at a store's path is refused, as is a
  path that contains the working directory.

Files are created with mode ``0o666`` filtered by the umask, as a plain
``open()`` would (``tempfile.mkstemp`` would give ``0o600``).
"""

import os
import secrets
import shutil

from .._version import __version__

#: the attribute taodist sets on the root of every Zarr store it writes
MARKER_KEY = "taodist"


def _temp_sibling(target, tag):
    """A fresh hidden name beside ``target`` (same folder, so renames stay atomic).

    Only the start of a long name is kept: a name the file system takes must never become one it
    refuses by what is added to it (the random part keeps the names distinct).
    """
    folder, name = os.path.split(os.path.abspath(target))
    return os.path.join(folder, f".{name[:64]}.{tag}-{os.getpid()}-{secrets.token_hex(4)}")


def _fsync_folder(folder):
    """Make a rename in ``folder`` durable; not possible on every platform, so best effort."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path, content, *, check=None, mode=0o666, replace=True):
    """Write a file atomically, with the permissions a plain ``open()`` gives (or ``mode``).

    Parameters
    ----------
    path : str or path-like
        Destination file. An existing regular file there is replaced (as
        ``open(path, "wb")`` would); an existing folder is refused.
    content : bytes-like or callable
        The bytes to write, or a function called with the open binary file
        object that writes to it (``lambda fh: np.save(fh, a)``).
    check : callable, optional
        Called with the temporary file's path once it is complete and
        flushed; raise from it to abandon the write (``path`` is then left
        untouched), e.g. ``check=taodist.load`` to vet a downloaded model.
    mode : int, default=0o666
        The new file's permissions, filtered by the umask (``0o600`` for a
        secret only its owner may read).
    replace : bool, default=True
        Whether an existing file at ``path`` is replaced. With ``False`` the
        complete file is linked into place only if nothing is there yet, so
        of two processes creating the same file at once one wins and the
        other gets :class:`FileExistsError` (and can read the winner's file).

    Returns
    -------
    str
        The path written (exactly ``path``: nothing is appended to it).

    Raises
    ------
    IsADirectoryError
        If ``path`` is an existing folder.
    FileNotFoundError
        If the folder that should hold ``path`` does not exist.
    FileExistsError
        With ``replace=False``, if something is at ``path`` already.
    """
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    if os.path.isdir(target):
        raise IsADirectoryError(f"{target} is an existing folder; give a file name for the output.")
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"The folder {folder} does not exist; create it first or choose another output path.")
    tmp = _temp_sibling(target, "tmp")
    try:
        # O_EXCL: never write through a file or link someone else put at the temporary name.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except PermissionError as exc:  # name the folder, not the temporary file nobody asked for
        raise PermissionError(f"Cannot write {target}: no permission to create files in {folder}.") from exc
    try:
        with os.fdopen(fd, "wb") as fh:
            if callable(content):
                content(fh)
            else:
                fh.write(content)
            fh.flush()
            os.fsync(fh.fileno())
        if check is not None:
            check(tmp)
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails if anything (even a dangling link) is at target: never clobbers
            os.unlink(tmp)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_folder(folder)
    return target


# ------------------------------------------------------------ Zarr stores
def mark_store(path):
    """Tag the Zarr store at ``path`` as written by taodist (a root attribute).

    Only stores carrying this mark may later be replaced by taodist
    (:func:`check_replaceable`).
    """
    import zarr

    node = zarr.open(os.fspath(path), mode="r+")
    node.attrs[MARKER_KEY] = {"written_by": "taodist", "taodist_version": __version__}


def is_taodist_store(path):
    """Whether ``path`` is a Zarr store (folder, not a link) carrying taodist's mark.

    Parameters
    ----------
    path : str or path-like

    Returns
    -------
    bool
    """
    path = os.fspath(path)
    if os.path.islink(path) or not os.path.isdir(path):
        return False
    import zarr

    try:
        attrs = dict(zarr.open(path, mode="r").attrs)
    except Exception:  # noqa: BLE001 -- any folder zarr cannot open is, by definition, not our store
        return False
    mark = attrs.get(MARKER_KEY)
    return isinstance(mark, dict) and mark.get("written_by") == "taodist"


def contains(outer, inner):
    """Whether path ``inner`` is ``outer`` itself or lies inside it (links resolved)."""
    outer = os.path.realpath(os.fspath(outer))
    inner = os.path.realpath(os.fspath(inner))
    return inner == outer or inner.startswith(outer.rstrip(os.sep) + os.sep)


def check_replaceable(path, overwrite, keep=()):
    """Raise unless a store may be written at ``path``.

    A new path is fine. An existing one is replaced only if it is a store
    taodist wrote (:func:`is_taodist_store`) and ``overwrite`` is true, and
    never if it holds the working directory or any path in ``keep`` (the
    inputs of the command).

    Parameters
    ----------
    path : str or path-like
    overwrite : bool
    keep : iterable of str or path-like
        Paths that must survive (e.g. the source of a conversion).

    Raises
    ------
    FileExistsError
        With a message saying what is at ``path`` and what to do.
    """
    path = os.fspath(path)
    for precious in (os.getcwd(), *keep):
        if contains(path, precious):
            what = "the working directory" if precious == os.getcwd() else os.fspath(precious)
            raise FileExistsError(f"Refusing to write to {path}: it holds {what}, which would be deleted; "
                                  "choose a new output path.")
    if not os.path.lexists(path):
        return
    if not is_taodist_store(path):
        raise FileExistsError(f"{path} already exists and is not a store taodist wrote; taodist never deletes it. "
                              "Choose a new output path, or remove it yourself.")
    if not overwrite:
        raise FileExistsError(f"{path} already exists (a store taodist wrote); pass --overwrite "
                              "(overwrite=True in Python) to replace it, or choose a new output path.")


def _remove_own(tmp):
    """Remove a temporary name this process created (a store folder, or a stray file)."""
    if os.path.isdir(tmp) and not os.path.islink(tmp):
        shutil.rmtree(tmp)
    elif os.path.lexists(tmp):
        os.unlink(tmp)


def atomic_store(path, write, *, overwrite=False, keep=()):
    """Write a Zarr store (a folder) atomically and mark it as taodist's.

    Parameters
    ----------
    path : str or path-like
        Destination folder; see :func:`check_replaceable` for when an
        existing one may be replaced.
    write : callable
        ``write(tmp)`` writes the whole store at the folder path ``tmp``.
    overwrite : bool, default=False
        Replace an existing store taodist wrote.
    keep : iterable of path-like
        Paths that must not be inside ``path`` (they would be deleted).

    Returns
    -------
    str
        ``path``.
    """
    target = os.fspath(path)
    check_replaceable(target, overwrite, keep)  # before any work: a refused write costs nothing
    tmp = _temp_sibling(target, "tmp")
    try:
        write(tmp)
        mark_store(tmp)
        # checked again: the target may have appeared while the store was written
        check_replaceable(target, overwrite, keep)
        if os.path.lexists(target):
            old = _temp_sibling(target, "old")
            os.rename(target, old)
            try:
                os.rename(tmp, target)
            except BaseException:
                os.rename(old, target)
                raise
            shutil.rmtree(old)  # a store taodist wrote (checked above), now replaced
        else:
            os.rename(tmp, target)
    finally:
        _remove_own(tmp)
    _fsync_folder(os.path.dirname(os.path.abspath(target)))
    return target
