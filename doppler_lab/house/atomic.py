"""Atomic file writes: the one way doppler_lab writes a file.

Every writer in the package goes through :func:`atomic_write` (bytes or text) or
:func:`atomic_writer` (a file object for ``torch.save``, ``np.savez``, ``csv``, ...):

* the content goes to a temporary file in the target's folder (``.NAME.XXXX.tmp``, made with
  ``O_EXCL``), is flushed and ``fsync``-ed, then ``os.replace``-d onto the target: a reader sees
  the old file or the new one, never half of one;
* a target that is a symbolic link is replaced by the new file: the link itself goes, the file
  it pointed to is never written through (a link planted at ``out.json`` cannot redirect a
  write elsewhere);
* a failed write (disk full, read-only file system, no permission, ...) removes the temporary
  file, leaves the old target intact and raises :class:`~doppler_lab.house.errors.WriteError` in one
  line naming the file and the reason (the command line prints it and exits with code 2).

New files get the usual permissions (``0o666`` less the process umask at import time); a
replaced file keeps its mode. ``keep_previous`` keeps the old content under another name
(training's ``last.prev.pt``). The only files written otherwise (``tests/test_atomic.py`` lists
them, with their reasons, and fails on any other write) are journals that are appended to
(``metrics.csv``, whose rows after the last checkpoint a resumed run drops and rewrites, and the
JSON lines of ``python -m doppler_lab.lab.bench.search_probe``); the download staging folder of
:mod:`doppler_lab.io.datasets`, whose checked files are then copied in atomically; a run
folder's lock file (:mod:`doppler_lab.house.runfolder`), written in place under its lock; the
executed copy of a notebook, which papermill rewrites after every cell
(:mod:`doppler_lab.lab.reporting.notebook_runs`); and the rendezvous folder of the ``dist``
executor's worker processes.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from .errors import WriteError

_UMASK = os.umask(0)
os.umask(_UMASK)


def _reason(exc: OSError) -> str:
    code = exc.errno
    text = exc.strerror or (os.strerror(code) if code else None) or type(exc).__name__
    name = _errno.errorcode.get(code, "") if code else ""
    return f"{text.lower()} ({name})" if name else text.lower()


def write_error(
    path: str | os.PathLike,
    exc: OSError,
    doing: str = "cannot write",
    after: str = "; the old file, if any, is unchanged",
) -> WriteError:
    """The :class:`WriteError` of ``exc`` raised while writing ``path`` (one line: ``doing``, the
    path, the reason, then ``after``)."""
    p = str(path)
    blocker = _file_in_the_way(Path(path)) if exc.errno in (_errno.EEXIST, _errno.ENOTDIR) else None
    if blocker is not None:  # mkdir's "file exists" would name neither the file nor the cause
        return WriteError(
            f"{doing} {p}: {blocker} is a file, not a folder; expected a folder there",
            p,
            exc.errno,
        )
    return WriteError(f"{doing} {p}: {_reason(exc)}{after}", p, exc.errno)


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest folder above ``path`` that exists and is no folder (what makes ``mkdir`` or
    ``open`` of ``path`` fail with ``EEXIST`` / ``ENOTDIR``); else None."""
    for folder in path.parents:
        if os.path.lexists(folder):
            return folder if os.path.exists(folder) and not os.path.isdir(folder) else None
    return None


def _mode_for(target: Path) -> int:
    try:
        st = os.stat(target, follow_symlinks=False)
    except OSError:
        return 0o666 & ~_UMASK
    if target.is_symlink():
        return 0o666 & ~_UMASK
    return st.st_mode & 0o7777


def _fsync_dir(folder: Path) -> None:
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


@contextlib.contextmanager
def atomic_writer(
    path: str | os.PathLike,
    mode: str = "wb",
    keep_previous: str | os.PathLike | None = None,
    **open_args: Any,
) -> Iterator[IO]:
    """A file object whose content replaces ``path`` when the block ends without an error
    (``mode`` ``"wb"`` or ``"w"``; ``open_args`` such as ``encoding``, ``newline`` go to
    :func:`open`). The folder is made. An error inside the block leaves ``path`` as it was;
    an :class:`OSError` of the write itself becomes a :class:`WriteError`.

    ``keep_previous``: a path that gets the old ``path`` (if any) just before the new content
    replaces it, itself atomically (a hard link, or a copy where links are not supported), so
    that at every moment ``path`` holds the old or the new content and ``keep_previous`` the
    one before."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_writer mode {mode!r}; expected 'w' or 'wb'")
    target = Path(path)
    if target.is_dir() and not target.is_symlink():
        raise WriteError(
            f"cannot write {target}: it is a folder; expected a file path", str(target)
        )
    folder = target.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise write_error(target, exc) from None
    if mode == "w":
        open_args.setdefault("encoding", "utf-8")
    ok = False
    try:
        try:
            fh = os.fdopen(fd, mode, **open_args)
        except BaseException:
            os.close(fd)
            raise
        with fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, _mode_for(target))
        if keep_previous is not None and target.is_file() and not target.is_symlink():
            _keep(target, Path(keep_previous))
        os.replace(tmp, target)
        ok = True
    except OSError as exc:
        if isinstance(exc, WriteError):
            raise
        raise write_error(target, exc) from None
    finally:
        if not ok:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    _fsync_dir(folder)


def _keep(target: Path, previous: Path) -> None:
    """``previous`` becomes a copy of ``target`` (a hard link where possible), atomically."""
    fd, tmp = tempfile.mkstemp(prefix=f".{previous.name}.", suffix=".tmp", dir=previous.parent)
    os.close(fd)
    try:
        os.unlink(tmp)
        try:
            os.link(target, tmp)
        except OSError:
            import shutil

            shutil.copy2(target, tmp)
        os.replace(tmp, previous)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise write_error(previous, exc) from None


def atomic_write(path: str | os.PathLike, data: bytes | str, encoding: str = "utf-8") -> Path:
    """Write ``data`` (text is encoded with ``encoding``) to ``path`` atomically; returns the
    path. See the module docstring for what happens to links and on failure."""
    raw = data.encode(encoding) if isinstance(data, str) else bytes(data)
    with atomic_writer(path, "wb") as fh:
        fh.write(raw)
    return Path(path)


def atomic_copy(src: str | os.PathLike, dst: str | os.PathLike) -> Path:
    """Copy the file ``src`` to ``dst`` atomically."""
    import shutil

    with open(src, "rb") as fin, atomic_writer(dst, "wb") as fout:
        shutil.copyfileobj(fin, fout)
    return Path(dst)


__all__ = ["atomic_copy", "atomic_write", "atomic_writer", "write_error"]
