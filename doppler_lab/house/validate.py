"""Strict checks for values that come from outside: JSON files, ``key=value`` specs and the
command line.

Every reader uses these, so one rule holds everywhere: a value is taken as it was written or
rejected with one :class:`~doppler_lab.house.errors.DopplerLabError` line that names the item and what
was expected. Nothing is coerced silently: a float or a boolean is never an id or a count
(``True`` is an ``int`` in Python and ``1.0 == 1``), a string is never a number, a missing field
is never a zero, and ``NaN``/``Infinity`` never pass as JSON numbers.

The checks take ``fail``, a function from a message to the exception to raise (a
:class:`~doppler_lab.house.errors.FormatError` naming the file, a
:class:`~doppler_lab.house.errors.ConfigError`, ...), so each reader keeps its own error type.

Example:
    >>> from doppler_lab.house.errors import ConfigError
    >>> want_int(3, "edge 0 source", ConfigError)
    3
    >>> want_int(1.0, "edge 0 source", ConfigError)
    Traceback (most recent call last):
    ...
    doppler_lab.house.errors.ConfigError: edge 0 source is 1.0 (a float); expected an integer
    >>> show(np.float64(-2.0)), show("x"), show(None)
    ('-2', "'x'", 'null')
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, NoReturn

import numpy as np

from .errors import DopplerLabError, FormatError

Fail = Callable[[str], DopplerLabError]

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_NUMBER_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_EXP_INT_TEXT = re.compile(r"[+-]?[0-9]+[eE]\+?[0-9]+")  # 1e3: an integer in exponent form


# -- showing values -----------------------------------------------------------------------------
def show(value: Any) -> str:
    """``value`` as a user wrote it, for messages: ``-2`` (not ``np.float64(-2.0)``: an integral
    numpy float went through an array, so it shows as the integer it most likely was written
    as), ``2.0`` (a Python float as parsed), ``1.5``, ``'x'``, ``true``, ``null``, ``nan``;
    long values shortened."""
    if isinstance(value, np.floating) and np.isfinite(value) and float(value).is_integer():
        # a number that went through a float array: written as an integer, most likely
        return str(int(value)) if abs(value) < 1e16 else repr(float(value))
    if isinstance(value, np.generic):
        value = value.item()
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, np.ndarray):
        value = value.tolist()
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def one_line(text: object, limit: int = 200) -> str:
    """``text`` (a foreign library's message, say) on one line of at most ``limit`` characters;
    control characters (a node name's ``ESC [2J``, a right-to-left override) shown escaped
    (``\\x1b``), never sent to the terminal.

    Example:
        >>> one_line("node 'a\\x1b[2J'\\nfailed")
        "node 'a\\\\x1b[2J' failed"
    """
    flat = printable(" ".join(str(text).split()))
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def exception_line(
    exc: BaseException, limit: int = 1000, typed: bool = False, first: bool = True
) -> str:
    """``exc``'s message on one line (:func:`one_line`): its first line (a foreign library's
    first sentence, never the paragraph of advice or the dump after it), or with ``first``
    false all of it (a user's own code, every line theirs); the exception type's name where
    the message is empty, and ``Type: message`` with ``typed``.

    Example:
        >>> exception_line(ValueError("bad shape\\n  at line 3"))
        'bad shape'
        >>> exception_line(ValueError("bad shape\\n  at line 3"), typed=True, first=False)
        'ValueError: bad shape at line 3'
        >>> exception_line(KeyError(), typed=True)
        'KeyError'
    """
    lines = str(exc).strip().splitlines()
    text = one_line(lines[0] if first else " ".join(lines), limit) if lines else ""
    if not text:
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}" if typed else text


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab escaped (``\\x1b``)."""
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode() for c in text
    )


class TerminalText(io.TextIOBase):
    """A text stream for a terminal: what is written goes to ``stream`` through
    :func:`printable`, so a name read from a file (a graph's, a node's) cannot move the
    cursor, clear the screen or reverse the text. ``doppler-lab`` wraps stdout in it when
    stdout is a terminal; a pipe or a file gets the bytes as they are."""

    def __init__(self, stream: Any):
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(printable(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return True

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self.stream, "encoding", "utf-8")


def type_name(value: Any) -> str:
    """The JSON-ish name of ``value``'s type: ``a string``, ``a boolean``, ``null``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool | np.bool_):
        return "a boolean"
    if isinstance(value, int | np.integer):
        return "an integer"
    if isinstance(value, float | np.floating):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, Mapping):
        return "an object"
    if isinstance(value, list | tuple):
        return "a list"
    return f"a {type(value).__name__}"


def _bad(value: Any, what: str, expected: str, fail: Fail) -> NoReturn:
    raise fail(f"{what} is {show(value)} ({type_name(value)}); expected {expected}")


# -- scalars ------------------------------------------------------------------------------------
def is_int(value: Any) -> bool:
    """True for a real integer: not a bool, not an integral float."""
    return isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_)


def is_number(value: Any) -> bool:
    """True for an int or float that is not a bool (finite or not)."""
    return isinstance(value, int | float | np.integer | np.floating) and not isinstance(
        value, bool | np.bool_
    )


def _range_text(minimum: float | None, maximum: float | None, above: float | None) -> str:
    parts = []
    if above is not None:
        parts.append(f"> {show(above)}")
    if minimum is not None:
        parts.append(f">= {show(minimum)}")
    if maximum is not None:
        parts.append(f"<= {show(maximum)}")
    return " and ".join(parts)


def want_int(
    value: Any,
    what: str,
    fail: Fail,
    minimum: int | None = None,
    maximum: int | None = None,
) -> int:
    """``value`` if it is an integer in ``[minimum, maximum]``."""
    rng = _range_text(minimum, maximum, None)
    expected = f"an integer {rng}".rstrip()
    if not is_int(value):
        _bad(value, what, expected, fail)
    v = int(value)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        raise fail(f"{what} is {show(v)}; expected {expected}")
    if not -(2**63) <= v < 2**63:
        raise fail(f"{what} is {show(v)}; expected an integer that fits in 64 bits")
    return v


def want_number(
    value: Any,
    what: str,
    fail: Fail,
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
    finite: bool = True,
) -> float:
    """``value`` as a float if it is a number (finite unless ``finite=False``) with
    ``value >= minimum``, ``value <= maximum`` and ``value > above``."""
    rng = _range_text(minimum, maximum, above)
    expected = f"{'a finite' if finite else 'a'} number {rng}".rstrip()
    if not is_number(value):
        _bad(value, what, expected, fail)
    try:
        v = float(value)
    except OverflowError:  # an int too large for a float
        raise fail(f"{what} is {show(value)}; expected {expected}") from None
    if (
        (finite and not math.isfinite(v))
        or math.isnan(v)
        or (minimum is not None and v < minimum)
        or (maximum is not None and v > maximum)
        or (above is not None and v <= above)
    ):
        raise fail(f"{what} is {show(value)}; expected {expected}")
    return v


def want_str(value: Any, what: str, fail: Fail, choices: Iterable[str] | None = None) -> str:
    """``value`` if it is a string (one of ``choices`` when given)."""
    options = None if choices is None else tuple(choices)
    expected = "a string" if options is None else f"one of {', '.join(options)}"
    if not isinstance(value, str) or (options is not None and value not in options):
        _bad(value, what, expected, fail)
    return value


def want_bool(value: Any, what: str, fail: Fail) -> bool:
    """``value`` if it is ``true`` or ``false`` (not 0 or 1)."""
    if not isinstance(value, bool):
        _bad(value, what, "true or false", fail)
    return value


# -- containers ---------------------------------------------------------------------------------
def want_object(value: Any, what: str, fail: Fail) -> Mapping[str, Any]:
    """``value`` if it is a JSON object (a mapping)."""
    if not isinstance(value, Mapping):
        _bad(value, what, "an object", fail)
    return value


def want_list(value: Any, what: str, fail: Fail, length: int | None = None) -> list[Any]:
    """``value`` as a list if it is a list (of ``length`` items when given)."""
    expected = "a list" if length is None else f"a list of {length} items"
    if not isinstance(value, list | tuple):
        _bad(value, what, expected, fail)
    if length is not None and len(value) != length:
        raise fail(f"{what} has {len(value)} items; expected {length}")
    return list(value)


def want_fields(
    doc: Any,
    what: str,
    fail: Fail,
    required: Iterable[str] = (),
    optional: Iterable[str] = (),
) -> Mapping[str, Any]:
    """``doc`` if it is an object with every ``required`` field and no field outside
    ``required`` and ``optional`` (a misspelt field is an error, not a silent default)."""
    obj = want_object(doc, what, fail)
    req = tuple(required)
    for key in req:
        if key not in obj:
            raise fail(f"{what} lacks the field {key!r}")
    known = set(req) | set(optional)
    for key in obj:
        if key not in known:
            raise fail(
                f"{what} has an unknown field {show(key)}; expected {', '.join(sorted(known))}"
            )
    return obj


def want_ints(
    value: Any,
    what: str,
    fail: Fail,
    length: int | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
) -> list[int]:
    """A list of integers in ``[minimum, maximum]``."""
    items = want_list(value, what, fail, length)
    return [want_int(x, f"{what}[{i}]", fail, minimum, maximum) for i, x in enumerate(items)]


def want_numbers(
    value: Any,
    what: str,
    fail: Fail,
    length: int | None = None,
    minimum: float | None = None,
    above: float | None = None,
    nullable: bool = False,
) -> list[float | None]:
    """A list of finite numbers (``null`` entries kept as ``None`` when ``nullable``)."""
    items = want_list(value, what, fail, length)
    return [
        None
        if (nullable and x is None)
        else want_number(x, f"{what}[{i}]", fail, minimum=minimum, above=above)
        for i, x in enumerate(items)
    ]


def want_matrix(
    value: Any,
    what: str,
    fail: Fail,
    shape: tuple[int, ...],
    minimum: float | None = None,
    integer: bool = False,
) -> np.ndarray:
    """A nested list of the given ``shape`` of finite numbers (integers when ``integer``), as an
    array."""

    def walk(v: Any, label: str, depth: int) -> Any:
        if depth == len(shape):
            if integer:
                return want_int(v, label, fail, minimum=None if minimum is None else int(minimum))
            return want_number(v, label, fail, minimum=minimum)
        items = want_list(v, label, fail, shape[depth])
        return [walk(x, f"{label}[{i}]", depth + 1) for i, x in enumerate(items)]

    data = walk(value, what, 0)
    return np.array(data, dtype=np.int64 if integer else np.float64).reshape(shape)


# -- text ---------------------------------------------------------------------------------------
def parse_int_text(text: str) -> int | None:
    """The integer written in ``text`` (ASCII digits, optional sign, or ``1e3``), else None.
    Unlike ``int()``, no underscores, no non-ASCII digits."""
    t = text.strip()
    if len(t) > 100:  # int() refuses 4300 digits; no count or seed needs 100
        return None
    if _INT_TEXT.fullmatch(t):
        return int(t)
    if _EXP_INT_TEXT.fullmatch(t):
        mantissa, _, exp = t.lower().partition("e")
        if int(exp) <= 30:
            return int(mantissa) * 10 ** int(exp)
    return None


def parse_number_text(text: str) -> float | None:
    """The finite number written in ``text`` (``0.5``, ``-2``, ``1e-5``), else None.
    Unlike ``float()``: no ``nan``/``inf``, no underscores, no non-ASCII digits."""
    t = text.strip()
    if len(t) > 100 or not _NUMBER_TEXT.fullmatch(t):
        return None
    v = float(t)
    return v if math.isfinite(v) else None


# -- JSON ---------------------------------------------------------------------------------------
class _JSONRejected(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _JSONRejected(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    v = float(text)
    if not math.isfinite(v):
        raise _JSONRejected(f"number {text} is out of range")
    return v


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _JSONRejected(f"key {k!r} appears twice in one object")
        out[k] = v
    return out


def parse_json(text: str | bytes, source: str) -> Any:
    """The strict JSON document in ``text``: no ``NaN``/``Infinity``, no number that overflows,
    no key twice in one object, valid UTF-8, not nested deeper than the parser can go.

    Raises:
        FormatError: naming ``source`` and, where known, the line.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"not UTF-8 text (byte {exc.start})", source) from None
    try:
        return json.loads(
            text,
            parse_constant=_no_constant,
            parse_float=_finite_float,
            object_pairs_hook=_unique_keys,
        )
    except json.JSONDecodeError as exc:
        raise FormatError(f"not valid JSON: {exc.msg}", source, exc.lineno) from None
    except ValueError as exc:  # ours (NaN, a key twice) or the parser's (an int of 5000 digits)
        why = str(exc)
        if "sys.set_int_max_str_digits" in why:  # Python's advice is not the user's to take
            digits = re.search(r"value has (\d+) digits", why)
            many = f"{int(digits[1]):,} digits" if digits else "too many digits"
            why = f"an integer of {many} is out of range; expected a number of at most 4,300 digits"
        raise FormatError(f"not valid JSON: {why}", source) from None
    except RecursionError:
        raise FormatError("JSON nested too deeply", source) from None


def read_json_file(path: str | Path) -> Any:
    """The strict JSON document in the file ``path`` (see :func:`parse_json`).

    Raises:
        FormatError: the file cannot be read or is not strict JSON.
    """
    p = Path(path)
    return parse_json(_read_bytes(p), str(p))


def read_json_object(path: str | Path, what: str) -> dict[str, Any]:
    """The strict JSON object in the file ``path`` (:func:`read_json_file`), ``what`` the file
    is (``"a run's result"``) named in the error.

    Raises:
        FormatError: naming ``what`` and the file: it cannot be read, is not strict JSON, or
            holds something other than an object.
    """
    p = Path(path)
    try:
        doc = read_json_file(p)
    except FormatError as exc:
        why = str(exc).removeprefix(f"{exc.path}: ") if exc.path else str(exc)
        raise FormatError(f"{what} could not be read as JSON ({why})", str(p)) from None
    if not isinstance(doc, dict):
        raise FormatError(f"{what} must be a JSON object, got {type(doc).__name__}", str(p))
    return doc


def _read_bytes(p: Path) -> bytes:
    """The bytes of ``p``: a regular file within ``MAX_FILE_BYTES``
    (:func:`doppler_lab.house.userfiles.read_input_bytes`), else a :class:`FormatError`."""
    from .userfiles import read_input_bytes

    def fail(msg: str) -> FormatError:
        exc = FormatError(msg)
        exc.path = str(p)
        return exc

    return read_input_bytes(p, "file", fail=fail)


def read_text_file(path: str | Path) -> str:
    """The UTF-8 text of ``path``.

    Raises:
        FormatError: the file cannot be read or is not UTF-8.
    """
    p = Path(path)
    data = _read_bytes(p)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"not UTF-8 text (byte {exc.start})", str(p)) from None
