"""Colours, lane labels and argument checks shared by the plotting modules."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from ..house.errors import ConfigError

# one colour per node kind (doppler_lab.ir.graph.NODE_KINDS) and for transfers; read-only
KIND_COLORS = MappingProxyType(
    {
        "input": "#9AA5B1",
        "einsum": "#3B75AF",
        "elementwise": "#EF8636",
        "reduce": "#519E3E",
        "torch": "#8D69B8",
        "compute": "#3B75AF",
        "transfer": "#C5C5C5",
    }
)
FALLBACK_COLORS: tuple[str, ...] = (
    "#3B75AF",
    "#EF8636",
    "#519E3E",
    "#C53A32",
    "#8D69B8",
    "#84584E",
    "#D57DBF",
    "#7F7F7F",
    "#BCBC35",
    "#42BCCD",
)
CRITICAL_COLOR = "#B3122E"
NODE_COLORSCALE = "Turbo"


def kind_color(kind: str) -> str:
    """Colour of a node kind (a stable fallback for kinds not in the palette)."""
    if kind in KIND_COLORS:
        return KIND_COLORS[kind]
    return FALLBACK_COLORS[sum(map(ord, kind)) % len(FALLBACK_COLORS)]


def series_color(i: int) -> str:
    """Colour of the ``i``-th device, run or method."""
    return FALLBACK_COLORS[i % len(FALLBACK_COLORS)]


def with_alpha(hex_color: str, alpha: float) -> str:
    """``#RRGGBB`` as an ``rgba(...)`` string with opacity ``alpha``."""
    h = hex_color.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha:g})"


def check_choice(value: str, choices: Sequence[str], what: str) -> str:
    """Return ``value`` if it is one of ``choices``, else raise :class:`ConfigError`."""
    if value not in choices:
        raise ConfigError(f"{what} {value!r} is not supported; expected one of {tuple(choices)}")
    return value


def check_columns(columns: Sequence[str], needed: Sequence[str], what: str) -> None:
    """Raise :class:`ConfigError` naming the first of ``needed`` missing from ``columns``."""
    have = list(columns)
    for c in needed:
        if c not in have:
            raise ConfigError(f"{what} has no column {c!r}; it has {have}")
