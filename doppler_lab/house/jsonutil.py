"""JSON helpers: plain Python values from numpy-laden structures, and atomic writes (through
:mod:`doppler_lab.house.atomic`)."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np


def to_jsonable(x: Any) -> Any:
    """``x`` with numpy arrays and scalars made plain, mapping keys made strings, tuples made
    lists and non-finite floats made ``None`` (strict JSON has no NaN)."""
    if isinstance(x, Mapping):
        return {str(k): to_jsonable(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [to_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_jsonable(x.tolist())
    if isinstance(x, np.generic):
        x = x.item()
    if isinstance(x, Path):
        return str(x)
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_json(
    path: str | os.PathLike,
    obj: Any,
    indent: int | None = 1,
    default: Callable[[Any], Any] | None = None,
) -> Path:
    """Write ``obj`` as strict JSON, atomically (a reader never sees half a file); ``default``
    turns what JSON has no form for into something it has (``str``: any object as its text), as
    for :func:`json.dumps`."""
    from .atomic import atomic_write

    text = json.dumps(to_jsonable(obj), indent=indent, allow_nan=False, default=default)
    return atomic_write(path, text)


def read_json(path: str | os.PathLike, what: str = "JSON file") -> Any:
    """The document in ``path``; :class:`~doppler_lab.house.errors.ConfigError` naming ``what`` and the
    path when the file is missing or is not JSON."""
    from .errors import ConfigError, FormatError
    from .validate import read_json_file

    p = Path(path)
    if not os.path.lexists(p):  # a link loop or a dangling link: read_json_file says which
        raise ConfigError(f"{what} {str(p)!r} does not exist")
    try:
        return read_json_file(p)  # strict: no NaN, no key twice, UTF-8
    except FormatError as exc:
        raise ConfigError(f"{what} {str(p)!r} is not JSON: {exc}") from None


def config_key(*parts: Any) -> str:
    """A short digest of the configurations that shape a run (``to_dict()`` of train and policy
    configs, plain values): runs live in ``<name>-<key>`` so that changed settings or
    presets train anew beside the old run instead of tripping over its resume check."""
    plain = [p.to_dict() if hasattr(p, "to_dict") else p for p in parts]
    text = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:8]
