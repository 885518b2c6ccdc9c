"""Run folders: one writer at a time, and only folders of the same command.

``train``, ``train-general`` and ``adapt`` write a run folder (``--out DIR``) and resume what
they find there. :func:`run_folder` guards it for the length of the command (``demo`` takes
the lock alone for its report folder):

* **a lock**: ``DIR/.doppler-lab.lock`` holds an exclusive ``flock`` and names its holder
  (``PID host command``). A second command on the same folder while the first runs stops with
  one line naming the holder (exit code 2). The kernel drops the lock when its holder dies, so a
  lock file left by a dead process is simply taken over (where ``flock`` is unsupported, a lock
  naming a PID that no longer runs on this host is taken over). The file goes when the command
  ends.
* **a marker**: ``DIR/.doppler-lab-run.json`` (``{"command": "train", "version": 1}``) says
  which command made the folder. A folder marked by the same command is resumed; an empty or
  new folder is marked and used; a folder marked by another command, or holding files without a
  marker (the user's own ``config.json``, ``metrics.csv``, ..., or a run of a doppler-lab
  older than the marker), is refused in one line unless ``force`` (``--force``), which marks it
  and goes on (a run of the same command in it still resumes).
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

from .atomic import atomic_write, write_error
from .errors import RunFolderError

LOCK_NAME = ".doppler-lab.lock"
MARKER_NAME = ".doppler-lab-run.json"
MARKER_VERSION = 1

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows: the PID check alone
    fcntl = None  # type: ignore[assignment]


def _holder(path: Path) -> tuple[int | None, str, str]:
    """``(pid, host, command)`` named in the lock file (None, "", "" when unreadable)."""
    try:
        parts = path.read_text(encoding="utf-8", errors="replace").split(maxsplit=2)
    except OSError:
        return None, "", ""
    pid = int(parts[0]) if parts and parts[0].isdigit() else None
    host = parts[1] if len(parts) > 1 else ""
    command = parts[2].strip() if len(parts) > 2 else ""
    return pid, host, command


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    except OSError:
        return False
    return True


def _busy(folder: Path, lock: Path) -> RunFolderError:
    pid, host, command = _holder(lock)
    who = f"doppler-lab {command}" if command else "another doppler-lab command"
    where = f"PID {pid}" if pid is not None else "PID unknown"
    if host and host != socket.gethostname():
        where += f" on {host}"
    return RunFolderError(
        f"run folder {folder} is in use by {who} ({where}); wait for it to end or use another "
        f"--out (lock file {lock})"
    )


class _Lock:
    def __init__(self, folder: Path, command: str):
        self.folder = folder
        self.path = folder / LOCK_NAME
        self.command = command
        self.fd: int | None = None

    def acquire(self) -> None:
        for _ in range(20):  # the holder may remove the file between our open and our lock
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise write_error(self.path, exc, "cannot lock the run folder with", "") from None
            try:
                if fcntl is not None:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except OSError as exc:
                        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                            raise _busy(self.folder, self.path) from None
                        self._pid_check()  # no flock on this file system
                else:  # pragma: no cover
                    self._pid_check()
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
                if not same:
                    os.close(fd)
                    continue
                text = f"{os.getpid()} {socket.gethostname()} {self.command}\n".encode()
                os.ftruncate(fd, 0)
                os.pwrite(fd, text, 0)
                self.fd = fd
                return
            except BaseException:
                if self.fd is None:
                    with contextlib.suppress(OSError):
                        os.close(fd)
                raise
        raise RunFolderError(f"cannot lock run folder {self.folder}: its lock file keeps changing")

    def _pid_check(self) -> None:
        pid, host, _ = _holder(self.path)
        here = not host or host == socket.gethostname()
        if pid is not None and pid != os.getpid() and (not here or _alive(pid)):
            raise _busy(self.folder, self.path)

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # while still holding it: a waiter re-checks the inode
        with contextlib.suppress(OSError):
            os.close(self.fd)
        self.fd = None


def _check_marker(
    folder: Path, command: str, force: bool, own: Callable[[Path], bool] | None = None
) -> None:
    marker = folder / MARKER_NAME
    theirs = None
    if marker.is_file():
        try:
            doc = json.loads(marker.read_text(encoding="utf-8"))
            theirs = doc.get("command") if isinstance(doc, dict) else None
        except (OSError, ValueError):
            theirs = None
        if theirs == command:
            return
    others = sorted(p.name for p in folder.iterdir() if p.name not in (LOCK_NAME, MARKER_NAME))
    if not others and theirs is None:
        pass  # a new or empty folder
    elif theirs is None and own is not None and own(folder):
        pass  # the command's own folder from before the marker (a report site kept in git)
    elif not force:
        if theirs is not None:
            what = f"holds a run of doppler-lab {theirs}, not of {command}"
        else:
            shown = ", ".join(others[:4]) + (", ..." if len(others) > 4 else "")
            what = (
                f"holds files doppler-lab {command} did not mark as its run ({shown}); if it is "
                "a run of an older doppler-lab, --force resumes it"
            )
        raise RunFolderError(
            f"run folder {folder} {what}; use another --out, or --force to write there anyway"
        )
    atomic_write(marker, json.dumps({"command": command, "version": MARKER_VERSION}) + "\n")


@contextlib.contextmanager
def run_folder(
    path: str | os.PathLike,
    command: str,
    force: bool = False,
    mark: bool = True,
    own: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """Hold the run folder ``path`` for ``command`` (``"train"``, ``"adapt"``, ...) for the
    block: made if missing, locked against a second writer, checked to be a run of
    ``command`` (or new, or ``force``) and marked as one. See the module docstring.
    ``mark=False``: the lock alone (report folders such as ``demo``'s, which are rewritten
    whole each time). ``own``: recognises an unmarked folder as one ``command`` wrote (it is
    then marked and used); a symbolic link is refused unless ``force``.

    Raises:
        RunFolderError: another process holds the folder, or it is not a run of ``command``.
        WriteError: the folder or its lock cannot be made.
    """
    if not str(path).strip():  # '' is not the current folder
        raise RunFolderError(f"run folder {str(path)!r} is empty; expected a folder (--out DIR)")
    folder = Path(path)
    if folder.is_symlink() and not force:
        raise RunFolderError(
            f"run folder {folder} is a symbolic link; expected a folder (--out DIR), or --force "
            "to write where it points"
        )
    if folder.exists() and not folder.is_dir():
        raise RunFolderError(f"run folder {folder} is a file; expected a folder (--out DIR)")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise write_error(folder, exc, "cannot make the run folder", "") from None
    lock = _Lock(folder, command)
    lock.acquire()
    try:
        if mark:
            _check_marker(folder, command, force, own)
        yield folder
    finally:
        lock.release()


def add_force_argument(parser: argparse.ArgumentParser) -> None:
    """``--force`` of the commands that write a run folder (:func:`run_folder`)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="write into --out even if it holds files this command did not write there (a run "
        "of another command, your own files, a run of an older doppler-lab); a run of this "
        "command in it still resumes",
    )


__all__ = ["LOCK_NAME", "MARKER_NAME", "add_force_argument", "run_folder"]
