"""Tables for people: the one formatter of every notebook table, bench table and report page.

:func:`tidy` turns a frame, a list of row dicts or a mapping (a two-column quantity / value
table) into a :class:`Table` that JupyterLab, the rendered notebook pages and the terminal show
the same way:

- **units in the headers**: a time column (given in ``units``, or named ``*_s``, ``*_ms``,
  ``*_us``) is shown in s, ms or us, chosen per column so that its typical value reads between 1
  and 1000 (``makespan`` in seconds of 0.0000488 reads ``makespan (us)`` / ``48.77``); a relative
  difference (``units={"vs_cp": "%"}``, or a column named ``vs_*`` / ``*_vs_*``) in percent;
  any other unit is only named (``{"flops": "GFLOP"}``);
- **3-4 significant figures**, never scientific notation: thousands separators for large
  numbers, fixed decimals for small ones (a value that rounds to zero at
  :data:`MAX_DECIMALS` decimals reads ``0``), and times in the SI unit that reads best;
- **cost units**: makespans of graphs whose costs are abstract (the paper's graphs, random
  DAGs: ``units={"makespan": COST_UNITS}``) are only named, never scaled as times;
  :func:`tidy_by_unit` splits rows whose units differ (a ``unit`` column) into one table per
  unit, so that every column has one unit and its header names it;
- **integers as integers** (a column whose values are all whole numbers, even when a missing
  value made it a float column);
- **empty cells** for NaN, None and NA;
- **no truncation**: every row and column is in the output; past ``max_columns`` (or the
  columns not named in ``show``) the rest sit behind a ``<details>`` toggle, with the leading
  label columns repeated so that rows stay identifiable; past ``max_rows`` likewise.

:func:`format_value` formats one number with its unit the same way (the index's cards), and
:func:`to_markdown` / :meth:`Table.to_markdown` write the bench pages' Markdown tables.

Example:
    >>> t = tidy([{"graph": "ffnn", "makespan": 4.877223e-05, "nodes": 24.0, "vs_cp": 0.1234,
    ...            "note": None}], units={"makespan": "s"})
    >>> t.frame.to_dict(orient="records")
    [{'graph': 'ffnn', 'makespan (us)': '48.77', 'nodes': '24', 'vs_cp (%)': '12.34', 'note': ''}]
    >>> format_value(0.0123, "s"), format_value(0.25, "%"), format_value(1200.0)
    ('12.3 ms', '25 %', '1,200')
"""

from __future__ import annotations

import dataclasses
import html
import math
import re
from collections.abc import Mapping, Sequence
from numbers import Integral, Real
from typing import Any

import pandas as pd

#: seconds per time unit; a time column is shown in the largest unit its typical value reaches
TIME_UNITS: dict[str, float] = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
#: the unit of makespans of graphs with abstract costs (the paper's graphs, random DAGs)
COST_UNITS = "cost units"
#: decimals shown at most: a smaller value reads 0 (never scientific notation)
MAX_DECIMALS = 10
PERCENT = "%"
#: a ratio (``2.000x``)
RATIO = "x"
DIGITS = 4
MAX_COLUMNS = 10
MAX_ROWS = 60
#: leading label columns repeated beside the hidden ones (so that rows stay identifiable)
MAX_KEYS = 2

_TIME_NAME = re.compile(
    r"^(?P<base>.*?)_(?P<unit>s|ms|us|ns|seconds)(?:_per_(?P<per>[a-z0-9]+))?(?P<tail>_\w+)?$"
)


def infer_unit(name: str) -> str | None:
    """The unit a column's name implies: ``*_s`` / ``*_ms`` / ``*_us`` / ``*_ns`` (also ``*_ms_per_node``)
    and ``seconds`` are times, ``vs_*`` / ``*_vs_*`` relative differences (``%``); else None.

    Example:
        >>> [infer_unit(n) for n in ("train_s", "inference_us_per_node", "vs_cp", "nodes", "speedup_vs_single")]
        ['s', 'us', '%', None, 'x']
    """
    n = str(name).lower()
    if n in ("seconds", "s"):
        return "s"
    if n in ("ms", "us", "ns"):
        return n
    if n.endswith("_per_s") or n.endswith("_per_second"):  # a rate (gflops_per_s), not a time
        return None
    if (m := _TIME_NAME.match(n)) and (m.group("per") or not m.group("tail")):
        unit = m.group("unit")
        return "s" if unit == "seconds" else unit
    if n.startswith(("speedup_", "ratio_")) and "_vs_" in n:  # speedup_vs_single: a ratio
        return RATIO
    if n.startswith("vs_") or "_vs_" in n:
        return PERCENT
    return None


def _header(name: str, unit: str | None) -> str:
    """``makespan_s`` shown in ms: ``makespan (ms)``; ``inference_us_per_node``: ``inference
    (us/node)``; ``vs_cp`` in %: ``vs_cp (%)``."""
    if not unit:
        return name
    if (
        name.lower() in ("s", "ms", "us", "ns", "seconds") and unit in TIME_UNITS
    ):  # named by its unit
        return name if name.lower() == unit else f"time ({unit})"
    m = _TIME_NAME.match(name.lower())
    if m and unit in TIME_UNITS and m.group("base") and (m.group("per") or not m.group("tail")):
        base = name[: len(m.group("base"))] + (m.group("tail") or "")
        per = m.group("per")
        return f"{base} ({unit}/{per})" if per else f"{base} ({unit})"
    return f"{name} ({unit})"


def _quantity_label(name: Any, units: Mapping[str, str | None]) -> str:
    """A quantity of a two-column table without the time unit its name carries (its value
    says the unit it is shown in): ``best_baseline_s`` -> ``best_baseline``."""
    text = str(name)
    unit = units[text] if text in units else infer_unit(text)
    m = _TIME_NAME.match(text.lower())
    if unit in TIME_UNITS and m and m.group("base") and not m.group("per") and not m.group("tail"):
        return text[: len(m.group("base"))]
    return text


def is_missing(x: Any) -> bool:
    """None, NaN, pandas' NA and NaT."""
    if x is None or x is pd.NA or x is pd.NaT:
        return True
    return isinstance(x, float) and math.isnan(x)


def _plain(value: Any) -> Any:
    """numpy scalars to Python scalars."""
    item = getattr(value, "item", None)
    if callable(item) and not isinstance(value, str | bytes) and getattr(value, "ndim", 0) == 0:
        try:
            return item()
        except (TypeError, ValueError):
            return value
    return value


def _is_number(x: Any) -> bool:
    return isinstance(x, Real) and not isinstance(x, bool)


def format_number(x: float, digits: int = DIGITS) -> str:
    """``digits`` significant figures in fixed notation, never scientific (thousands separated;
    whole numbers of ``digits`` or more digits rounded to units; at most
    :data:`MAX_DECIMALS` decimals, so that a value below that reads ``0``); a value with fewer
    significant digits (a setting such as 0.05) is not padded with zeros.

    Example:
        >>> [format_number(v) for v in (1.23456, 0.000821, 12345.6, 2.0, 3e-7, -0.5, 0.0004567891)]
        ['1.235', '0.000821', '12,346', '2', '0.0000003', '-0.5', '0.0004568']
        >>> format_number(2.2e-16), format_number(-4.2e15)
        ('0', '-4,200,000,000,000,000')
    """
    v = float(x)
    if not math.isfinite(v):
        return "inf" if v > 0 else "-inf" if v < 0 else ""
    a = abs(v)
    if a < 0.5 * 10.0**-MAX_DECIMALS:
        return "0"
    decimals = min(digits - 1 - math.floor(math.log10(a)), MAX_DECIMALS)
    if decimals <= 0:
        return f"{v:,.0f}"
    text = f"{v:,.{decimals}f}"
    if not text.strip("-0.,"):  # rounds to zero at MAX_DECIMALS decimals
        return "0"
    if abs(float(f"{v:.{digits}g}") - v) <= 1e-9 * a:  # a short value (0.05): no padding zeros
        text = text.rstrip("0").rstrip(".")
    return text


def format_int(x: float) -> str:
    """A whole number: ``24``, ``1,200``."""
    return f"{int(round(float(x))):,}"


def time_unit_for(seconds: Sequence[float]) -> str:
    """The unit that shows these durations (in seconds) best: s when their (lower) median
    magnitude is at least 1 s, ms from 1 ms, else us; so that the smaller half reads at least
    1 and the larger half with thousands separators rather than as fractions."""
    mags = sorted(abs(float(v)) for v in seconds if _is_number(v) and math.isfinite(float(v)))
    mags = [m for m in mags if m > 0]
    if not mags:
        return "s"
    mid = mags[(len(mags) - 1) // 2]
    return "s" if mid >= 1 else "ms" if mid >= 1e-3 else "us" if mid >= 1e-6 else "ns"


def format_value(value: Any, unit: str | None = None, digits: int = DIGITS) -> str:
    """One value with its unit: a time (``unit`` s, ms or us) in the unit that reads best, a
    fraction in percent (``%``), whole numbers as integers, booleans as yes / no, missing as
    an empty string.

    Example:
        >>> format_value(4.877e-05, "s"), format_value(3, "nodes"), format_value(True)
        ('48.77 us', '3 nodes', 'yes')
    """
    value = _plain(value)
    if is_missing(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if not _is_number(value):
        return str(value) + (f" {unit}" if unit else "")
    v = float(value)
    if unit in TIME_UNITS:
        shown = time_unit_for([v * TIME_UNITS[unit]])
        return f"{format_number(v * TIME_UNITS[unit] / TIME_UNITS[shown], digits)} {shown}"
    if unit == PERCENT:
        return f"{format_number(v * 100, digits)} %"
    if unit == RATIO:
        return f"{format_number(v, digits)}x"
    text = format_int(v) if isinstance(value, Integral) or v.is_integer() else format_number(v)
    return text + (f" {unit}" if unit else "")


@dataclasses.dataclass(frozen=True)
class _Column:
    name: str
    header: str
    cells: list[str]
    numeric: bool


def _format_column(
    name: str, values: list[Any], unit: str | None, digits: int, per_cell: bool
) -> _Column:
    values = [_plain(v) for v in values]
    nums = [float(v) for v in values if _is_number(v) and math.isfinite(float(v))]
    numeric = bool(nums) and all(_is_number(v) or is_missing(v) for v in values)
    per_cell = per_cell or not numeric  # a column of mixed values: each number on its own
    scale, shown = 1.0, unit
    if unit in TIME_UNITS and nums:
        shown = time_unit_for([n * TIME_UNITS[unit] for n in nums])
        scale = TIME_UNITS[unit] / TIME_UNITS[shown]
    elif unit == PERCENT:
        scale = 100.0
    whole = (
        unit not in TIME_UNITS
        and unit not in (PERCENT, RATIO)
        and bool(nums)
        and all(n.is_integer() and abs(n) < 1e15 for n in nums)
    )

    def cell(v: Any) -> str:
        if is_missing(v):
            return ""
        if isinstance(v, bool):
            return "yes" if v else "no"
        if _is_number(v):
            f = float(v) * scale
            if not math.isfinite(f):
                return format_number(f)
            if whole or (per_cell and f.is_integer() and unit is None):
                return format_int(f)
            return format_number(f, digits)
        if isinstance(v, float | int):
            return str(v)
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            return type(v).__name__
        return str(v)

    header = _header(name, shown if (nums or unit not in TIME_UNITS) else unit)
    return _Column(name, header, [cell(v) for v in values], numeric)


def _distinct_headers(cols: list[_Column]) -> list[_Column]:
    """Columns whose headers would repeat another's once a time suffix is dropped
    (``greedy_ms`` beside ``greedy``, both in ms) say what they time: ``greedy time (ms)``."""
    headers = [c.header for c in cols]
    out = []
    for c in cols:
        m = _TIME_NAME.match(c.name.lower())
        if headers.count(c.header) > 1 and m and m.group("base") and c.header != c.name:
            base = c.name[: len(m.group("base"))]
            c = dataclasses.replace(c, header=c.header.replace(base, f"{base} time", 1))
        out.append(c)
    return out


def _frame_of(data: Any, key: str = "quantity") -> pd.DataFrame:
    if isinstance(data, pd.DataFrame):
        frame = data
        if not isinstance(frame.index, pd.RangeIndex) or frame.index.name is not None:
            frame = frame.reset_index()
        return frame
    if isinstance(data, pd.Series):
        return pd.DataFrame({key: [str(k) for k in data.index], "value": list(data)})
    if isinstance(data, Mapping):
        return pd.DataFrame({key: [str(k) for k in data], "value": list(data.values())})
    if isinstance(data, Sequence) and not isinstance(data, str):
        return pd.DataFrame(list(data))
    raise TypeError(
        f"a table of {type(data).__name__}; expected a DataFrame, a Series, a mapping or "
        "a list of row dicts"
    )


class Table:
    """A formatted table (what :func:`tidy` returns); shows itself in notebooks (HTML) and
    terminals (text).

    Attributes:
        frame: every column's formatted cells (strings), headers with their units.
        shown: the headers shown at first; the others sit behind a toggle.
        keys: the label headers repeated beside the hidden columns.
        units: the unit each column is shown in (columns without one are absent).
        caption: a line above the table.
        data: the frame the table was made from.
    """

    def __init__(
        self,
        columns: list[_Column],
        shown: list[str],
        keys: list[str],
        caption: str | None,
        max_rows: int,
        data: pd.DataFrame,
    ):
        self._columns = columns
        self.frame = pd.DataFrame({c.header: c.cells for c in columns}, dtype=object)
        self.shown = shown
        self.keys = keys
        self.caption = caption
        self.max_rows = max_rows
        self.data = data
        self.units = {
            c.name: c.header[c.header.rindex("(") + 1 : -1]
            for c in columns
            if c.header != c.name and c.header.endswith(")")
        }

    @property
    def numeric(self) -> list[bool]:
        """Per column of :attr:`frame`: whether it holds numbers (right-aligned)."""
        return [c.numeric for c in self._columns]

    @property
    def hidden(self) -> list[str]:
        """The headers behind the toggle."""
        return [c.header for c in self._columns if c.header not in self.shown]

    def __len__(self) -> int:
        return len(self.frame)

    # -- HTML ------------------------------------------------------------------------------------
    def _html_table(self, headers: list[str], rows: range, caption: str | None = None) -> str:
        numeric = {c.header: c.numeric for c in self._columns}
        right, left = ' style="text-align:right"', ' style="text-align:left"'
        head = "".join(
            f"<th{right if numeric[h] else left}>{html.escape(h, quote=False)}</th>"
            for h in headers
        )
        body = []
        for i in rows:
            cells = "".join(
                f"<td{right if numeric[h] else left}>"
                f"{html.escape(self.frame[h].iat[i], quote=False)}</td>"
                for h in headers
            )
            body.append(f"<tr>{cells}</tr>")
        cap = f"<caption>{html.escape(caption, quote=False)}</caption>" if caption else ""
        return (
            f'<table class="dataframe doppler-table">{cap}<thead><tr>{head}</tr></thead>'
            f"<tbody>{''.join(body)}</tbody></table>"
        )

    def to_html(self) -> str:
        """The table: its shown columns and first ``max_rows`` rows, the rest behind toggles."""
        n = len(self.frame)
        first = range(min(n, self.max_rows))
        parts = [self._html_table(self.shown, first, self.caption)]
        if n > self.max_rows:
            parts.append(
                f"<details><summary>{n - self.max_rows} more rows</summary>"
                f"{self._html_table(self.shown, range(self.max_rows, n))}</details>"
            )
        hidden = self.hidden
        if hidden:
            names = ", ".join(hidden)
            parts.append(
                f"<details><summary>{len(hidden)} more columns: {html.escape(names)}</summary>"
                f"{self._html_table(self.keys + hidden, range(n))}</details>"
            )
        return (
            '<div class="doppler-table-wrap" style="overflow-x:auto">' + "".join(parts) + "</div>"
        )

    def _repr_html_(self) -> str:
        return self.to_html()

    # -- text ------------------------------------------------------------------------------------
    def to_text(self) -> str:
        """Every row and column as aligned text."""
        if self.frame.empty:
            return "(no rows)"
        out = self.frame.to_string(index=False)
        return (self.caption + "\n" if self.caption else "") + out

    def __repr__(self) -> str:
        return self.to_text()

    def to_markdown(self) -> str:
        """A Markdown pipe table of every row and column, ending in a newline; ``(no rows)``
        when there are none."""
        if self.frame.empty:
            return "(no rows)\n"
        cols = list(self.frame.columns)

        def esc(s: str) -> str:
            return s.replace("|", "\\|")

        out = ["| " + " | ".join(map(esc, cols)) + " |", "|" + "|".join("---" for _ in cols) + "|"]
        for i in range(len(self.frame)):
            out.append("| " + " | ".join(esc(self.frame[c].iat[i]) for c in cols) + " |")
        return "\n".join(out) + "\n"


def tidy(
    data: Any,
    units: Mapping[str, str | None] | None = None,
    show: Sequence[str] | None = None,
    caption: str | None = None,
    digits: int = DIGITS,
    max_columns: int = MAX_COLUMNS,
    max_rows: int = MAX_ROWS,
    columns: Sequence[str] | None = None,
    key: str = "quantity",
) -> Table:
    """A table for people (see the module's docstring for the rules).

    Args:
        data: a DataFrame (a named or non-range index becomes a column), a Series or mapping
            (a quantity / value table, formatted cell by cell), or a list of row dicts.
        units: column -> unit: ``s`` / ``ms`` / ``us`` (the values' time unit; shown in the
            one that reads best), ``%`` (fractions, shown in percent), another name (shown in
            the header only) or None (no unit, even when the name implies one). Columns not
            named here get the unit their name implies (:func:`infer_unit`); names of columns
            the data lacks are ignored (a table whose columns vary with the run).
        show: the columns shown at first, in order; the others (in their order) sit behind a
            toggle. Default: the first ``max_columns`` that are not empty.
        caption: a line above the table.
        digits: significant figures of non-integer numbers.
        max_columns: shown columns when ``show`` is not given.
        max_rows: shown rows; the others sit behind a toggle.
        columns: only these columns, in this order (default: all).
        key: the name column of a mapping's table.

    Raises:
        KeyError: ``show`` or ``columns`` names a column the data does not have.
    """
    per_cell = isinstance(data, Mapping | pd.Series)
    frame = _frame_of(data, key)
    names = [str(c) for c in frame.columns]
    frame.columns = names
    for what, given in (("columns", columns), ("show", show)):  # units may name absent ones
        missing = [c for c in (given or ()) if c not in names]
        if missing:
            raise KeyError(f"table has no column {missing[0]!r} ({what}); it has {names}")
    if columns is not None:
        frame = frame[list(columns)]
        names = list(columns)
    units = dict(units or {})
    cols = []
    for name in names:
        unit = units[name] if name in units else infer_unit(name)
        values = frame[name].tolist()
        if per_cell and name == "value":
            quantities = frame[key].tolist()
            cells = [
                format_value(v, units.get(q, infer_unit(q)), digits)
                for q, v in zip(quantities, values)
            ]
            cols.append(_Column(name, name, cells, False))
            continue
        cols.append(_format_column(name, values, unit, digits, per_cell))
    if per_cell and key in names:  # a value shown in ms: its quantity not named ``*_s``
        i = names.index(key)
        labels = [_quantity_label(q, units) for q in frame[key].tolist()]
        cols[i] = dataclasses.replace(cols[i], cells=labels)
    cols = _distinct_headers(cols)
    by_name = {c.name: c.header for c in cols}
    if show:
        shown = [by_name[c] for c in show]
    else:  # the first max_columns that hold something (empty ones only behind the toggle)
        shown = [c.header for c in cols if any(c.cells) or not len(frame)][:max_columns]
    keys = []
    for c in cols:
        if c.numeric or len(keys) >= MAX_KEYS:
            break
        if c.header in shown:
            keys.append(c.header)
    return Table(cols, shown, keys, caption, max_rows, frame)


def to_markdown(
    rows: Sequence[Mapping[str, Any]] | pd.DataFrame,
    columns: Sequence[str] | None = None,
    units: Mapping[str, str | None] | None = None,
) -> str:
    """A Markdown pipe table of ``rows`` formatted by :func:`tidy` (``columns``: which, in
    order; a column absent from every row is empty), ending in a newline."""
    if not len(rows):
        return "(no rows)\n"
    frame = pd.DataFrame(list(rows)) if not isinstance(rows, pd.DataFrame) else rows
    frame = frame.reindex(columns=list(columns or frame.columns))
    return tidy(frame, units=units).to_markdown()


def settings(config: Any, keys: Sequence[str] | None = None, caption: str | None = None) -> Table:
    """A configuration as a setting / value table (instead of its repr): a dataclass, a mapping
    or an object with ``to_dict``; ``keys``: the settings shown, in order (default: all);
    sequences are joined with commas, None reads ``none``.

    Example:
        >>> settings({"lr": 0.003, "episodes": 400, "graphs": ("a", "b"), "init": None}).frame.value.tolist()
        ['0.003', '400', 'a, b', 'none']
    """
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        values = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    elif isinstance(config, Mapping):
        values = dict(config)
    elif callable(getattr(config, "to_dict", None)):
        values = dict(config.to_dict())
    else:
        raise TypeError(f"settings of a {type(config).__name__}; expected a dataclass or a mapping")
    if keys is not None:
        missing = [k for k in keys if k not in values]
        if missing:
            raise KeyError(f"no setting {missing[0]!r}; there are {sorted(values)}")
        values = {k: values[k] for k in keys}

    def shown(v: Any) -> Any:
        if v is None:
            return "none"
        if isinstance(v, list | tuple):
            return ", ".join(map(str, v))
        if isinstance(v, float):
            return f"{v:g}"  # a setting as it was typed, not to 4 significant figures
        return v

    return tidy({k: shown(v) for k, v in values.items()}, caption=caption, key="setting")


class Tables:
    """Several :class:`Table` one after the other (what :func:`tidy_by` returns)."""

    def __init__(self, tables: list[Table]):
        self.tables = tables

    def __len__(self) -> int:
        return len(self.tables)

    def __iter__(self):
        return iter(self.tables)

    def _repr_html_(self) -> str:
        return "".join(t.to_html() for t in self.tables)

    def __repr__(self) -> str:
        return "\n\n".join(t.to_text() for t in self.tables)

    def to_markdown(self) -> str:
        return "\n".join(
            (f"{t.caption}\n\n" if t.caption else "") + t.to_markdown() for t in self.tables
        )


def tidy_by(
    data: Any,
    by: str,
    units: Mapping[Any, Mapping[str, str | None]],
    caption: str = "{value}",
    **kwargs: Any,
) -> Tables:
    """One :func:`tidy` table per value of column ``by``, each with its own units: for tables
    whose rows measure in different units (makespans of the paper's graphs are in its cost
    units, those of generated workloads in seconds).

    Args:
        data: the rows (as :func:`tidy` takes them).
        by: the column whose values split the rows (in order of appearance).
        units: value of ``by`` -> the units of its table (a value absent: the ``None`` entry,
            else no units beyond those the columns' names imply).
        caption: each table's caption, formatted with ``by`` and ``value``.
        kwargs: passed on to :func:`tidy`.

    Example:
        >>> t = tidy_by([{"group": "paper", "makespan": 1200.0}, {"group": "wc", "makespan": 0.002}],
        ...             "group", {"wc": {"makespan": "s"}}, caption="{by}: {value}")
        >>> [(x.caption, list(x.frame.columns)) for x in t]
        [('group: paper', ['group', 'makespan']), ('group: wc', ['group', 'makespan (ms)'])]
    """
    frame = _frame_of(data)
    if by not in frame.columns:
        raise KeyError(f"table has no column {by!r} (by); it has {list(frame.columns)}")
    tables = []
    for value in dict.fromkeys(frame[by].tolist()):
        part = frame[frame[by] == value].reset_index(drop=True)
        tables.append(
            tidy(
                part,
                units=units.get(value, units.get(None, {})),
                caption=caption.format(by=by, value=value),
                **kwargs,
            )
        )
    return Tables(tables)


#: how :func:`tidy_by_unit` names each unit in its tables' captions
UNIT_NAMES: dict[str | None, str] = {
    "s": "seconds",
    COST_UNITS: "cost units (graphs with abstract costs: the paper's graphs, random DAGs)",
}


def tidy_by_unit(
    data: Any,
    columns: Sequence[str],
    unit_column: str = "unit",
    units: Mapping[str, str | None] | None = None,
    caption: str = "makespans in {unit}",
    summary_caption: str = "rows without makespans (ratios over the others)",
    show: Sequence[str] | None = None,
    **kwargs: Any,
) -> Tables:
    """One :func:`tidy` table per unit of the rows: ``unit_column`` holds each row's unit
    (``s`` or :data:`COST_UNITS`, what :attr:`DataflowGraph.time_unit
    <doppler_lab.ir.graph.DataflowGraph.time_unit>` says of the row's graph; missing: a row
    without makespans) and ``columns`` are in that unit. So every column of every table has one
    unit and its header names it; the unit column itself is not shown.

    Args:
        data: the rows (as :func:`tidy` takes them).
        columns: the columns in the rows' unit (makespans); absent ones are ignored.
        unit_column: the column that gives each row's unit.
        units: units of the other columns (as :func:`tidy` takes them).
        caption: each table's caption, formatted with ``unit`` (from :data:`UNIT_NAMES`).
        summary_caption: the caption of the rows without a unit.
        show: the columns shown at first (those a part lacks are left out).
        kwargs: passed on to :func:`tidy`.

    Example:
        >>> t = tidy_by_unit([{"g": "a", "makespan": 0.002, "unit": "s"},
        ...                   {"g": "b", "makespan": 1900.0, "unit": COST_UNITS}], ["makespan"])
        >>> [list(x.frame.columns) for x in t]
        [['g', 'makespan (ms)'], ['g', 'makespan (cost units)']]
    """
    frame = _frame_of(data)
    if unit_column not in frame.columns:
        raise KeyError(
            f"table has no column {unit_column!r} (unit_column); it has {list(frame.columns)}"
        )
    row_units = [None if is_missing(u) else str(u) for u in frame[unit_column].tolist()]
    tables = []
    for unit in dict.fromkeys(row_units):
        part = frame[[u == unit for u in row_units]].drop(columns=[unit_column])
        part = part.reset_index(drop=True)
        given = {**dict(units or {}), **{c: unit for c in columns}}
        shown = [c for c in show if c in part.columns] if show is not None else None
        name = UNIT_NAMES.get(unit, unit)
        cap = caption.format(unit=name) if unit is not None else summary_caption
        tables.append(tidy(part, units=given, caption=cap, show=shown, **kwargs))
    return Tables(tables)


#: values spanning at least this ratio (two decades) are drawn on a log axis
LOG_SPAN = 100.0


def axis_scale(values: Sequence[float], unit: str | None) -> tuple[float, str | None]:
    """How a chart draws ``values`` given in ``unit`` so that its axis reads like the tables:
    ``(factor, shown unit)``; a time in the SI unit that reads best (seconds of 0.02 are drawn
    as 20 ms), a fraction (``%``) in percent, any other unit as it is.

    Example:
        >>> axis_scale([0.012, 0.02], "s"), axis_scale([0.1], "%"), axis_scale([1900.0], COST_UNITS)
        ((1000.0, 'ms'), (100.0, '%'), (1.0, 'cost units'))
    """
    if unit in TIME_UNITS:
        shown = time_unit_for([float(v) * TIME_UNITS[unit] for v in values if _is_number(v)])
        return TIME_UNITS[unit] / TIME_UNITS[shown], shown
    if unit == PERCENT:
        return 100.0, PERCENT
    return 1.0, unit


def axis_type(values: Sequence[float]) -> str:
    """``log`` when the positive ``values`` span :data:`LOG_SPAN` or more, else ``linear``.

    Example:
        >>> axis_type([0.5, 80.0]), axis_type([2.0, 3.0, None])
        ('log', 'linear')
    """
    vals = [abs(float(v)) for v in values if _is_number(v) and math.isfinite(float(v)) and v]
    return "log" if vals and max(vals) / min(vals) >= LOG_SPAN else "linear"


def axis_title(name: str, unit: str | None) -> str:
    """An axis title with its unit, as a table header says it: ``makespan (ms)``."""
    return _header(name, unit) if unit else name
