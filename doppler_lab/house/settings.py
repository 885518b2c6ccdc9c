"""``KEY=VALUE`` settings: one parser and one set of messages for ``train --set`` /
``--policy-set``, ``adapt --set``, ``place -o`` and the parameters of workload and model specs
(``chainmm:scale=0.1``).

A value is read as ``true``/``false`` (a boolean), ``null`` (None), an integer (``8``, ``1e3``),
a finite number (``0.5``, ``1e-5``, ``1/256``), a JSON list, object or quoted string
(``[0.5,0.25]``, ``"x"``), or else the text itself (``paper``). A number that is not finite
(``nan``, ``inf``, ``1e400``) is an error, never a string.

Every message has one of two forms (``OWNER`` is ``train config``, ``placer 'heft'``,
``workload 'chainmm'``, ...; ``NOUN`` is ``setting``, ``option`` or ``parameter``)::

    OWNER has no NOUN 'zzz'; expected one of a, b, c
    OWNER: NOUN lr='x'; expected a finite number > 0

Example:
    >>> parse_items(["lr=3e-4", "explore=perturb", "episodes=1e3"], "train config")
    {'lr': 0.0003, 'explore': 'perturb', 'episodes': 1000}
    >>> parse_items(["lr=NaN"], "train config")
    Traceback (most recent call last):
    ...
    doppler_lab.house.errors.ConfigError: train config: setting lr=NaN; expected a finite number
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import ConfigError, FormatError
from .validate import is_int, is_number, parse_int_text, parse_json, parse_number_text, show

__all__ = [
    "bad_setting",
    "check_dataclass",
    "check_setting",
    "dataclass_changes",
    "given_once",
    "parse_item",
    "parse_items",
    "parse_spec",
    "parse_value",
    "split_specs",
    "unknown_setting",
]

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# -- messages -----------------------------------------------------------------------------------
def unknown_setting(owner: str, key: str, valid: Iterable[str], noun: str = "setting"):
    """The error for a key that ``owner`` does not have."""
    names = ", ".join(valid)
    expected = f"expected one of {names}" if names else f"it takes no {noun}s"
    return ConfigError(f"{owner} has no {noun} {key!r}; {expected}")


def bad_setting(owner: str, key: str, value: Any, expected: str, noun: str = "setting"):
    """The error for a value of the wrong type or out of range."""
    if isinstance(value, _Literal):
        shown = str(value)
    elif is_int(value) and abs(value) >= 10**16:
        shown = f"{float(value):.3g}"
    else:
        shown = show(value)
    return ConfigError(f"{owner}: {noun} {key}={shown}; expected {expected}")


class _Literal(str):
    """A value shown as written (``NaN``, not ``'NaN'``)."""


# -- parsing ------------------------------------------------------------------------------------
def _not_finite(text: str) -> bool:
    try:
        return not math.isfinite(float(text))
    except ValueError:
        return False


def parse_value(text: str, owner: str = "", key: str = "", noun: str = "setting") -> Any:
    """The value written in ``text`` (see the module's docstring).

    Raises:
        ConfigError: a number that is not finite (``nan``, ``inf``, ``1e400``, ``1/0``).
    """
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low == "null":
        return None
    whole = parse_int_text(t)
    if whole is not None:
        return whole
    number = parse_number_text(t)
    if number is not None:
        return number
    if _not_finite(t):
        raise bad_setting(owner or "value", key or "?", _Literal(t), "a finite number", noun)
    num, slash, den = t.partition("/")
    if slash:
        a, b = parse_number_text(num), parse_number_text(den)
        if a is not None and b is not None:
            q = a / b if b else math.inf
            if not math.isfinite(q):
                raise bad_setting(
                    owner or "value", key or "?", _Literal(t), "a finite number", noun
                )
            return q
    if t[:1] in '[{"':
        try:
            return parse_json(t, f"{noun} {key}")
        except FormatError:
            pass  # the text as it is: whoever takes it says what it expected
    return t


def parse_item(item: str, owner: str, noun: str = "setting") -> tuple[str, Any]:
    """``"heads=8"`` -> ``("heads", 8)``; ``-`` in a key reads as ``_``."""
    key, eq, value = item.partition("=")
    key = key.strip().replace("-", "_")
    if not eq or not _NAME_RE.match(key) or not value.strip():
        raise ConfigError(f"{owner}: {item!r} is not of the form key=value")
    return key, parse_value(value, owner, key, noun)


def parse_items(items: Iterable[str], owner: str, noun: str = "setting") -> dict[str, Any]:
    """``["a=1", "b=x"]`` -> ``{"a": 1, "b": "x"}``; a key given twice is an error."""
    out: dict[str, Any] = {}
    for item in items:
        key, value = parse_item(item, owner, noun)
        if key in out:
            raise ConfigError(f"{owner}: {noun} {key!r} is given twice")
        out[key] = value
    return out


def split_specs(text: str, owner: str | None = None) -> list[str]:
    """The specs of a comma-separated list whose specs' own parameters are comma-separated too:
    an item ``key=value`` (no ``:`` in its key) continues the spec before it where that one has
    parameters (a ``:``), any other item starts a spec; items stripped.

    Without ``owner`` (``--placer cp,,heft``) an empty item, or ``key=value`` that continues no
    spec, is kept as a spec for the caller to name; with it (``graph specs``) an empty item is
    left out and such a ``key=value`` is an error naming ``owner``.

    Example:
        >>> split_specs("cp, doppler:samples=4,partitions=0 ,heft,budget=3")
        ['cp', 'doppler:samples=4,partitions=0', 'heft', 'budget=3']
        >>> split_specs("ffnn:scale=0.1,layers=2,,chainmm", "graph specs")
        ['ffnn:scale=0.1,layers=2', 'chainmm']

    Raises:
        ConfigError: with ``owner``, a parameter with no spec to continue.
    """
    specs: list[str] = []
    for item in (part.strip() for part in str(text).split(",")):
        parameter = "=" in item and ":" not in item.partition("=")[0]
        if parameter and specs and ":" in specs[-1]:
            specs[-1] += f",{item}"
        elif owner is None:
            specs.append(item)
        elif parameter:
            raise ConfigError(
                f"{owner} {text!r}: parameter {item!r} has no spec before it to continue; "
                "expected SPEC[:key=value,...] items separated by commas"
            )
        elif item:
            specs.append(item)
    return specs


def given_once(
    into: dict[str, Any], key: str, value: Any, there: str, here: str, owner: str
) -> None:
    """Set ``into[key] = value`` where ``into`` has no other value for ``key``: a setting
    given twice (``--budget 5 -o budget=7``, ``--set episodes=5 --episodes 2``) is harmless
    with one value and an error with two, where one of them would win in silence.

    ``there`` says how the value already in ``into`` was given (``in --set episodes=5``),
    ``here`` how ``value`` is (``--episodes 2``), ``owner`` whose setting it is (``placer
    'cp': option``).

    Example:
        >>> opts = {"budget": 5}
        >>> given_once(opts, "budget", 5, "in -o budget=5", "--budget 5", "placer 'x': option")
        >>> given_once(opts, "budget", 7, "in -o budget=5", "--budget 7", "placer 'x': option")
        Traceback (most recent call last):
        ...
        doppler_lab.house.errors.ConfigError: placer 'x': option 'budget' is given in -o budget=5 and --budget 7; expected it once: give it once, or the same value in both

    Raises:
        ConfigError: naming both and the key.
    """
    if key in into and not _same(into[key], value):
        raise ConfigError(
            f"{owner} {key!r} is given {there} and {here}; expected it once: give it once, or "
            "the same value in both"
        )
    into[key] = value


def _same(a: Any, b: Any) -> bool:
    """One value given twice: equal, and a boolean only where the other is one (``True`` is
    not ``1``)."""
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def parse_spec(spec: str, owner: str = "", noun: str = "parameter") -> tuple[str, dict[str, Any]]:
    """``"llama_block:heads=8,seq=512"`` -> ``("llama_block", {"heads": 8, "seq": 512})``."""
    name, _, rest = spec.strip().partition(":")
    items = [s.strip() for s in rest.split(",") if s.strip()]
    return name.strip(), parse_items(items, owner or f"spec {spec.strip()!r}", noun)


# -- checking -----------------------------------------------------------------------------------
def check_setting(
    value: Any,
    kind: str,
    owner: str,
    key: str,
    noun: str = "setting",
    minimum: float | None = None,
    maximum: float | None = None,
    above: float | None = None,
) -> Any:
    """``value`` checked against ``kind`` (``int``, ``float``, ``bool``, ``str``, each optionally
    ``| None``) and the range; an ``int`` for a ``float`` becomes a float. Other kinds pass.

    Raises:
        ConfigError: (:func:`bad_setting`) naming the key and the expected type or range.
    """
    base, _, rest = kind.partition("|")
    base = base.strip()
    nullable = rest.strip() == "None"
    if value is None and nullable:
        return None
    rng = " and ".join(
        x
        for x in (
            None if above is None else f"> {_num(above)}",
            None if minimum is None else f">= {_num(minimum)}",
            None if maximum is None else f"<= {_num(maximum)}",
        )
        if x
    )
    if base == "bool":
        if not isinstance(value, bool):
            raise bad_setting(owner, key, value, "true or false", noun)
        return value
    if base == "str":
        if not isinstance(value, str):
            raise bad_setting(owner, key, value, "a string", noun)
        return value
    if base not in ("int", "float"):
        return value
    what = "an integer" if base == "int" else "a finite number"
    expected = what + (f" {rng}" if rng else "")
    if base == "int":
        ok = is_int(value)
    else:
        ok = is_number(value) and math.isfinite(_as_float(value))
    if not ok:
        raise bad_setting(owner, key, value, what, noun)
    v = int(value) if base == "int" else float(value)
    if (
        (minimum is not None and v < minimum)
        or (maximum is not None and v > maximum)
        or (above is not None and v <= above)
    ):
        raise bad_setting(owner, key, value, expected, noun)
    return v


def _num(x: float) -> str:
    """A bound in a message: ``1000`` for ``1e3``, ``0.5``, ``1e+09``."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e6:
        return str(int(x))
    return f"{x:g}" if isinstance(x, float) else str(x)


def _as_float(value: Any) -> float:
    try:
        return float(value)
    except OverflowError:
        return math.inf


def _kind(field: dataclasses.Field) -> str:
    t = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", "")
    return t.replace("Optional[", "").strip()


def check_dataclass(obj: Any, owner: str, ranges: Mapping[str, Mapping[str, float]] = {}) -> None:
    """Check every field of the (frozen) dataclass ``obj`` against its annotation (``int``,
    ``float``, ``bool``, ``str``, ``X | None``) and ``ranges[name]`` (keywords of
    :func:`check_setting`); ints in float fields become floats. For ``__post_init__``."""
    for f in dataclasses.fields(obj):
        if not f.init:
            continue
        v = getattr(obj, f.name)
        checked = check_setting(v, _kind(f), owner, f.name, **ranges.get(f.name, {}))
        if checked is not v and type(checked) is not type(v):
            object.__setattr__(obj, f.name, checked)


def dataclass_changes(
    cls: Any, changes: Mapping[str, Any], owner: str, exclude: Iterable[str] = ()
) -> dict[str, Any]:
    """``changes`` if every key is a field of dataclass ``cls`` (and not in ``exclude``), else
    :func:`unknown_setting` listing the valid keys."""
    skip = set(exclude)
    valid = [f.name for f in dataclasses.fields(cls) if f.init and f.name not in skip]
    for key in changes:
        if key not in valid:
            raise unknown_setting(owner, key, valid)
    return dict(changes)
