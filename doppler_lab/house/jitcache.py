"""Where numba keeps the package's compiled kernels: one folder per version of their sources.

numba's on-disk cache (``cache=True``) checks a cached kernel against the file that defines it
alone. Kernels here call kernels of other files (the simulator's ``_kernels`` call
``hardware.rules`` and ``timing.heaps``; ``policies.batched`` calls ``policies.features``), so
after an edit or a ``git pull`` that changes only a callee, numba would load the caller's old
machine code, callee included: a silent wrong result (it happened once: a stale ``select_step``
left a new feature column unwritten).

:func:`configure` (run when the package is imported, before any kernel is compiled) points
numba's cache at ``<root>/doppler_lab-<digest>``: the digest is of every package source that
defines a compiled kernel (a file that mentions ``njit``), so any change to one of them starts a
fresh folder and every kernel compiles again once (about a minute on 2 cores). ``<root>`` is
``$NUMBA_CACHE_DIR`` when you set it, else ``~/.cache/doppler_lab/numba``. Folders of other
versions not imported for :data:`KEEP_DAYS` days are removed. Reading and hashing the sources takes
a few milliseconds.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from .paths import user_cache_dir

ENV = "NUMBA_CACHE_DIR"
PREFIX = "doppler_lab-"
#: folders of other versions unused this long are removed
KEEP_DAYS = 30
PACKAGE_DIR = Path(__file__).resolve().parents[1]


def jit_sources_digest(package_dir: Path | None = None) -> str:
    """A 12-hex digest of the package's sources that define compiled kernels (their paths and
    bytes, comments included: numba's own cache keys on the file, not on its code)."""
    root = Path(package_dir or PACKAGE_DIR)
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        data = path.read_bytes()
        if b"njit" in data:
            h.update(path.relative_to(root).as_posix().encode())
            h.update(b"\0")
            h.update(data)
    return h.hexdigest()[:12]


def cache_root() -> Path:
    """``$NUMBA_CACHE_DIR`` (without a folder this module added), else the user cache's
    ``numba``."""
    given = os.environ.get(ENV)
    if given:
        p = Path(given)
        return p.parent if p.name.startswith(PREFIX) else p
    return user_cache_dir() / "numba"


def configure(package_dir: Path | None = None) -> Path | None:
    """Point numba's cache at this version's folder (the environment for numba and child
    processes, and numba's config when numba is already imported); returns the folder (None
    when the sources cannot be read)."""
    root = cache_root()
    try:
        digest = jit_sources_digest(package_dir)
    except OSError:  # sources we cannot read: numba keeps its own cache beside them
        return None
    folder = root / f"{PREFIX}{digest}"
    os.environ[ENV] = str(folder)
    numba = sys.modules.get("numba")
    if numba is not None:  # imported before us: its config read the environment already
        numba.config.CACHE_DIR = str(folder)
    try:  # in use: its time says so, so that other versions' imports keep it
        os.utime(folder)
    except OSError:  # not made yet (numba makes it), or read-only
        pass
    _prune(root, folder)
    return folder


def _prune(root: Path, keep: Path) -> None:
    """Remove the folders of other versions untouched for :data:`KEEP_DAYS` days."""
    try:
        old = time.time() - KEEP_DAYS * 86400
        for p in root.iterdir():
            if p.name.startswith(PREFIX) and p != keep and p.stat().st_mtime < old:
                shutil.rmtree(p, ignore_errors=True)
    except OSError:  # no cache yet, or one we cannot read: nothing to prune
        pass


__all__ = ["ENV", "KEEP_DAYS", "PREFIX", "cache_root", "configure", "jit_sources_digest"]
