"""What a reader of the pages must never meet, checked on a page as it is written: a number in
scientific notation in a table, a path of the machine that built it, a reference to the
project's own notes (an issue number, an internal file), a column whose name says one unit while
its values carry another, a table that names a column twice.

:func:`html_problems` checks a rendered notebook page or the index; :func:`markdown_problems` a
bench page's Markdown tables. Both return one line per problem (empty: the page is fine); the
tests walk every page of a quick site and every bench page with them.

Example:
    >>> markdown_problems("| makespan_s (ms) | n |\\n|---|---|\\n| 1.2e-05 | 3 |\\n")
    ["column 'makespan_s (ms)': its name says s, its header ms", "column 'makespan_s (ms)': '1.2e-05' in scientific notation"]
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Sequence

#: a cell that is a number in scientific notation (with a unit or not)
SCIENTIFIC = re.compile(r"^[-+]?\d[\d,]*(?:\.\d*)?[eE][-+]?\d+(?:\s*\S+)?$")
#: references a reader cannot follow
INTERNAL = (re.compile(r"\bissue\s+#?\d+", re.IGNORECASE), re.compile(r"YARDSTICK"))
#: absolute paths of a build machine in a page's visible text
MACHINE_PATH = re.compile(r"(?<![\w.:/~-])/(?:home|tmp|work|Users|root|private|var/folders)/\S")
TIME_UNITS = ("s", "ms", "us", "ns")
_NAME_UNIT = re.compile(r"^(?P<base>\w*?)_(?P<unit>s|ms|us|ns)$")
_HEADER = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)$")
_CELL_UNIT = re.compile(r"^[-+]?[\d,.]+\s+(?P<unit>s|ms|us|ns)$")


def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def _table_problems(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """Problems of one table given its header texts and its rows of cell texts."""
    out = []
    seen: set[str] = set()
    for h in headers:
        if h in seen and h:
            out.append(f"column {h!r} appears twice in one table")
        seen.add(h)
    units: list[str | None] = []
    for h in headers:
        m, unit = _HEADER.match(h), None
        name = m.group("name") if m else h
        named = _NAME_UNIT.match(name)
        if m:
            unit = m.group("unit")
            if named and named.group("unit") != unit:
                out.append(f"column {h!r}: its name says {named.group('unit')}, its header {unit}")
        elif named:
            unit = named.group("unit")
        units.append(unit)
    rows = [list(r) for r in rows]
    quantity = len(headers) == 2 and headers[1] == "value"
    for r in rows:
        for i, cell in enumerate(r[: len(headers)]):
            h = headers[i]
            if SCIENTIFIC.match(cell):
                out.append(f"column {h!r}: {cell!r} in scientific notation")
            cu = _CELL_UNIT.match(cell)
            if cu and units[i] in TIME_UNITS and cu.group("unit") != units[i]:
                out.append(f"column {h!r} holds {cell!r}")
        if quantity and len(r) >= 2 and (named := _NAME_UNIT.match(r[0])):
            cu = _CELL_UNIT.match(r[1])
            if cu and cu.group("unit") != named.group("unit"):
                out.append(f"quantity {r[0]!r} holds {r[1]!r}")
    return out


def _text_problems(text: str, paths: Sequence[str]) -> list[str]:
    out = [f"an internal reference: {m.group(0)!r}" for p in INTERNAL for m in p.finditer(text)]
    out += [f"a machine path: {p!r}" for p in paths if p and p in text]
    out += [f"a machine path: {m.group(0)!r}..." for m in MACHINE_PATH.finditer(text)]
    return out


def html_problems(page: str, paths: Sequence[str] = (), allowed: Sequence[str] = ()) -> list[str]:
    """Problems of an HTML page: its tables (``<th>`` / ``<td>`` cells), its visible text,
    and ``paths`` (the build machine's folders) anywhere in it; ``allowed``: paths the page may
    show (ones a user gave it as parameters)."""
    for path in sorted(allowed, key=len, reverse=True):
        page = page.replace(path, "<given path>") if path else page
    out = [f"a machine path: {p!r}" for p in paths if p and p in page]
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", page, flags=re.S | re.I)
    for table in re.findall(r"<table\b.*?</table>", body, flags=re.S | re.I):
        heads = [_text(h) for h in re.findall(r"<th\b[^>]*>(.*?)</th>", table, flags=re.S)]
        rows = [
            [_text(c) for c in re.findall(r"<td\b[^>]*>(.*?)</td>", tr, flags=re.S)]
            for tr in re.findall(r"<tr\b[^>]*>(.*?)</tr>", table, flags=re.S)
        ]
        rows = [r for r in rows if r]
        if heads and rows and len(heads) > len(rows[0]):  # pandas' index header row
            heads = heads[-len(rows[0]) :]
        out += _table_problems(heads, rows)
    out += _text_problems(_text(body), ())
    return list(dict.fromkeys(out))


def markdown_problems(text: str, paths: Sequence[str] = ()) -> list[str]:
    """Problems of a Markdown page: its pipe tables' cells and headers, and its text."""
    out: list[str] = []
    block: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            block.append(cells)
            continue
        if len(block) >= 2:
            out += _table_problems(block[0], [r for r in block[2:]])
        block = []
    out += _text_problems(text, paths)
    return list(dict.fromkeys(out))


__all__ = ["html_problems", "markdown_problems"]
