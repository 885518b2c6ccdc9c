"""Trust in files that run code when loaded.

A saved ``ExportedProgram`` (``FILE.pt2``) is read with ``torch.export.load``, which unpickles
parts of the file: loading it can run any code its author put there, like running
``FILE.py:FUNC`` does by design. doppler_lab therefore loads a ``.pt2`` only when the user says
they trust it: ``--trust-pt2`` on the command line, ``DOPPLER_LAB_TRUST_PT2=1`` in the
environment, the :func:`trust_pt2` context in a program, or ``trust=True`` of
:func:`doppler_lab.importers.from_exported`. Otherwise the load is refused in one line naming
the file and the way to say so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from .errors import ImportModelError

TRUST_PT2_ENV = "DOPPLER_LAB_TRUST_PT2"
_TRUE = ("1", "true", "yes", "on")
_trusted: list[bool] = []  # the innermost trust_pt2() setting, if any


def pt2_trusted() -> bool:
    """Whether ``.pt2`` files may be loaded: the innermost :func:`trust_pt2`, else
    ``$DOPPLER_LAB_TRUST_PT2`` (``1``, ``true``, ``yes``, ``on``)."""
    if _trusted:
        return _trusted[-1]
    return os.environ.get(TRUST_PT2_ENV, "").strip().lower() in _TRUE


@contextlib.contextmanager
def trust_pt2(trusted: bool = True) -> Iterator[None]:
    """Within the block, ``.pt2`` files are loaded (``trusted``) or refused (else the
    environment decides when ``trusted`` is None)."""
    if trusted is None:
        yield
        return
    _trusted.append(bool(trusted))
    try:
        yield
    finally:
        _trusted.pop()


def check_pt2_trusted(path: str | os.PathLike, trusted: bool | None = None) -> None:
    """Raise :class:`~doppler_lab.house.errors.ImportModelError` unless loading the ``.pt2`` file
    ``path`` is trusted (``trusted``, else :func:`pt2_trusted`)."""
    if trusted if trusted is not None else pt2_trusted():
        return
    raise ImportModelError(
        f"{Path(path)}: not loaded: a saved program (.pt2) is read with torch.export.load, which "
        f"can run code stored in the file; if you trust it, pass --trust-pt2 (or set "
        f"{TRUST_PT2_ENV}=1)"
    )


__all__ = ["TRUST_PT2_ENV", "check_pt2_trusted", "pt2_trusted", "trust_pt2"]
