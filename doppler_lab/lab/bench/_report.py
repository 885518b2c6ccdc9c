"""Writing benchmark results: one JSON record and one Markdown page per benchmark (its tables
formatted by :func:`doppler_lab.viz.tables.tidy`, shared with the other report writers).

Every record carries the code version it was measured with (``code_version``, see
:mod:`doppler_lab.house.codeversion`), shown in the page's header; :func:`read_report` reads records
written before versions were recorded too (their ``code_version`` is ``None``).

The page is drawn from the record alone (:func:`render_markdown`), so a page can be drawn anew
from its JSON without running the benchmark again (:func:`rewrite_page`). Its rules: one unit
per column. Makespans carry the unit of their graph (a row's ``unit``: seconds, or the paper's
cost units; rows of older records get the unit their graph label implies, see
:func:`row_time_unit`), and a table whose rows differ in unit is drawn as one table per unit.
Relative columns (``vs_*``) say how far *below* the named reference a makespan is (positive:
better); records written before that convention (:data:`SIGNS`) are read with those columns
turned. Text meant for the project's own notes (an internal file or issue number) is reworded
for readers (:func:`public_text`).
"""

from __future__ import annotations

import os
import platform
import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...house.atomic import atomic_write
from ...house.codeversion import code_version
from ...house.errors import ConfigError
from ...house.jsonutil import read_json, to_jsonable, write_json
from ...viz.html import markdown_table
from ...viz.tables import Tables, is_missing, tidy, tidy_by_unit
from .yardstick import YARDSTICK

CODE_VERSION_NOTE = (
    "digest of the package sources that can change a number (doppler_lab.house.codeversion)"
)
#: the sign convention of ``vs_*`` columns a record was written with: ``below`` (positive: the
#: makespan is below the reference) for every column; records without the field wrote these
#: columns as ``makespan / reference - 1`` (positive: above)
SIGNS = "below"
#: columns that older records wrote as ``makespan / reference - 1``
ABOVE_COLUMNS = re.compile(r"^(?:.*_)?vs_(?:heft|cp_rollout|best_known|best_baseline)$")
#: the names of makespan columns (and their spreads) in the benchmarks' tables: in their row's unit
MAKESPAN_COLUMNS = frozenset(
    "makespan std best lower_bound cp heft greedy general general_std policy clustering "
    "partition cp_rollout best_known local_search ils_heft ils_clustering doppler found "
    "cp_paper_mean cp_paper_best yardstick_mean yardstick_best cp_est_mean cp_est_best "
    "schedule".split()
)
COST_UNITS = "cost units"  # doppler_lab.ir.graph.COST_UNITS (the bench pages need no graph)


def machine_info() -> dict[str, Any]:

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        # imported here, not at the top: optional (the except below)
        import numba

        info["numba"] = numba.__version__
    except ImportError:  # pragma: no cover
        pass
    return info


_plain = to_jsonable  # kept for callers that import it from here


def write_report(
    out_dir: str | Path,
    name: str,
    title: str,
    tables: dict[str, tuple[Sequence[dict[str, Any]], Sequence[str] | None]],
    summary: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
    command: str = "",
    makespans: dict[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    """Write ``<out_dir>/<name>.json`` and ``<name>.md``; returns the JSON record.

    ``tables`` maps a section title to (rows, columns): the columns shown, in order (default:
    every key of the rows); they are kept in the record (``columns``) for :func:`rewrite_page`.
    ``makespans``: per section, makespan columns besides :data:`MAKESPAN_COLUMNS` (e.g. one per
    checkpoint), shown in their rows' unit like those (kept as ``makespan_columns``).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "title": title,
        "command": command,
        "machine": machine_info(),
        "code_version": code_version(),
        "signs": SIGNS,
        "summary": summary or {},
        "tables": {k: list(rows) for k, (rows, _) in tables.items()},
        "columns": {k: list(cols) for k, (_, cols) in tables.items() if cols is not None},
        "notes": list(notes),
    }
    if makespans:
        record["makespan_columns"] = {k: list(v) for k, v in makespans.items()}
    write_json(out / f"{name}.json", record)
    atomic_write(out / f"{name}.md", render_markdown(to_jsonable(record)))
    return record


def public_text(text: str) -> str:
    """``text`` as a reader of the pages can follow it: no project-internal file or issue
    references.

    Example:
        >>> public_text("CP vs YARDSTICK.md (issue 35, item 6)")
        'CP vs the best known placements'
    """
    text = _repo_relative(text)
    text = re.sub(r"\s*\((?:see )?issue \d+[^)]*\)", "", text)
    text = re.sub(r"\bissue \d+(?:, item \d+)?\s*", "", text)
    text = re.sub(r"YARDSTICK(?:\.md)?(?:'s)? best known", "the best known", text)
    return re.sub(r"YARDSTICK(?:\.md)?(?:'s)?", "the best known placements", text)


#: the repository's top folders: a path through one of them is shown from there
_REPO_TOPS = ("data", "runs", "reports", "notebooks", "doppler_lab", "tests")
_ABSOLUTE = re.compile(r"(?<![\w.~-])/(?:[\w.+-]+/)+[\w.+-]*")


def _repo_relative(text: str) -> str:
    """Absolute paths in ``text`` from the repository folder they go through (``data/...``;
    a record keeps the paths of the machine that measured it), others by their file name."""

    def shown(m: re.Match[str]) -> str:
        parts = m.group(0).split("/")
        for i, part in enumerate(parts):
            if part in _REPO_TOPS:
                return "/".join(parts[i:])
        return parts[-1] or m.group(0)

    return _ABSOLUTE.sub(shown, text)


def _public_cells(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows whose text cells (and mappings or lists, as text) read as :func:`public_text`."""
    return [
        {
            k: public_text(v if isinstance(v, str) else str(v))
            if isinstance(v, str | dict | list)
            else v
            for k, v in r.items()
        }
        for r in rows
    ]


def row_time_unit(row: Mapping[str, Any]) -> str | None:
    """The unit of a row's makespans: its ``unit`` when it has one (what the graph's
    ``time_unit`` said), else what its graph label implies (rows of records written before rows
    carried one): cost units for the paper's graphs (``paper:...``, group ``paper``) and random
    DAGs, seconds for the others; None for a row without a graph (a summary row)."""
    if row.get("unit"):
        return str(row["unit"])
    label = next((str(row[k]) for k in ("task", "graph", "model") if row.get(k)), "")
    if not label or label in ("geometric mean", "win / tie / loss"):
        return None

    graph = label.split(" @ ")[0]
    paper = graph.startswith("paper:") or graph in YARDSTICK or row.get("group") == "paper"
    if paper or "random_dag" in graph:
        return COST_UNITS
    return "s"


def _turned(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Rows of a record written before :data:`SIGNS`: ``vs_heft``-like columns turned to say
    how far below the reference the makespan is."""
    out = []
    for row in rows:
        r = dict(row)
        for k, v in row.items():
            if ABOVE_COLUMNS.match(k) and isinstance(v, int | float) and not isinstance(v, bool):
                r[k] = -v
        out.append(r)
    return out


def _turned_note(text: str) -> str:
    """A note of a record written before :data:`SIGNS`, saying what its turned columns hold."""
    text = re.sub(r"(\w*vs_\w+) = makespan / ([^;,.]+?) - 1\b", r"\1 = 1 - makespan / \2", text)
    return text.replace("(> 0: worse than HEFT)", "(> 0: better than HEFT)")


def bench_tables(
    rows: Sequence[Mapping[str, Any]] | Any,
    columns: Sequence[str] | None = None,
    extra_makespans: Sequence[str] = (),
    **kwargs: Any,
) -> Any:
    """A benchmark table for people (:class:`~doppler_lab.viz.tables.Tables`): one table per
    makespan unit (:func:`row_time_unit` of each row; :data:`MAKESPAN_COLUMNS` in it), so that
    each column has one unit and its header names it; rows without makespans (summary rows)
    in a table of their own. ``rows``: dicts or a DataFrame; ``columns``: which, in order
    (default: every key); ``kwargs``: passed on to :func:`~doppler_lab.viz.tables.tidy_by_unit`
    (``show``, ``units``, ``caption``...); ``extra_makespans``: makespan columns besides those.
    """

    if isinstance(rows, pd.DataFrame):
        rows = [{k: v for k, v in r.items() if not _missing(v)} for r in rows.to_dict("records")]
    cols = list(columns) if columns else list(dict.fromkeys(k for r in rows for k in r))
    have = {k for r in rows for k in r}
    makespans = [c for c in cols if (c in MAKESPAN_COLUMNS or c in extra_makespans) and c in have]
    cols = [c for c in cols if c != "unit"]
    if not makespans or not rows:
        frame = pd.DataFrame(list(rows)).reindex(columns=cols)
        return Tables([tidy(frame, units=kwargs.get("units"), show=kwargs.get("show"))])
    units = [row_time_unit(r) for r in rows]
    frame_rows = [{**{c: r.get(c) for c in cols}, "unit": u} for r, u in zip(rows, units)]
    frame = pd.DataFrame(frame_rows).reindex(columns=[*cols, "unit"])
    return tidy_by_unit(frame, makespans, **kwargs)


def _missing(v: Any) -> bool:

    return not isinstance(v, list | dict | tuple) and is_missing(v)


def _table(
    rows: Sequence[Mapping[str, Any]], columns: Sequence[str] | None, extra: Sequence[str] = ()
) -> str:

    if not rows:
        return "(no rows)\n"
    rows = _public_cells(rows)
    if not any(c in MAKESPAN_COLUMNS or c in extra for r in rows for c in r):
        return markdown_table(rows, columns)
    if all(row_time_unit(r) is None for r in rows):  # no graph's rows: no unit to split by
        return markdown_table(rows, columns)  # (e.g. makespans over one device's, per case)
    tables = bench_tables(
        rows,
        columns,
        extra,
        caption="Makespans in {unit}.",
        summary_caption="Summary rows.",
    )
    if len(tables) == 1 and row_time_unit(rows[0]) is not None:
        return tables.tables[0].to_markdown()
    return tables.to_markdown()


def render_markdown(record: Mapping[str, Any]) -> str:
    """A benchmark's Markdown page from its JSON record (see the module's docstring)."""

    tables = record.get("tables", {})
    if record.get("signs") != SIGNS:
        tables = {k: _turned(v) for k, v in tables.items()}
    columns = record.get("columns", {})
    version = record.get("code_version") or "not recorded"
    md = [f"# {public_text(record.get('title', ''))}", ""]
    if record.get("command"):
        md += [f"Command: `{record['command']}`", ""]
    m = record.get("machine") or {}
    if m:
        md += [
            f"Machine: {m.get('cpus')} CPUs ({m.get('processor')}), Python {m.get('python')}, "
            f"{m.get('date')}",
            "",
        ]
    md += [f"Code version: `{version}` ({CODE_VERSION_NOTE})", ""]
    summary = record.get("summary") or {}
    if summary:
        rows = [{"metric": public_text(k), "value": v} for k, v in summary.items()]
        md += ["## Summary", "", markdown_table(rows), ""]
    for section, rows in tables.items():
        md += [f"## {public_text(section)}", "", f"Code version `{version}`.", ""]
        extra = (record.get("makespan_columns") or {}).get(section, ())
        md += [_table(rows, columns.get(section), extra), ""]
    notes = list(record.get("notes") or [])
    if record.get("signs") != SIGNS:
        notes = [_turned_note(n) for n in notes]
        notes.append(
            "Relative columns say how far below the named reference a makespan is (positive: "
            "better); this record was written with vs_heft, vs_cp_rollout, vs_best_known and "
            "vs_best_baseline as "
            "makespan / reference - 1, turned on this page."
        )
    if notes:
        md += ["## Notes", ""] + [f"- {public_text(n)}" for n in notes] + [""]
    return "\n".join(md)


def rewrite_page(path: str | Path) -> Path:
    """Draw ``<name>.md`` anew from the record ``path`` (``<name>.json``) with the current
    renderer, without running the benchmark; returns the page."""
    record = read_report(path)
    page = Path(path).with_suffix(".md")
    atomic_write(page, render_markdown(record))
    return page


def read_report(path: str | Path) -> dict[str, Any]:
    """A benchmark record written by :func:`write_report`; one written before code versions
    were recorded reads with ``code_version`` ``None``."""

    record = read_json(path, "benchmark record")
    if not isinstance(record, dict) or "benchmark" not in record:
        raise ConfigError(f"benchmark record {str(path)!r} has no 'benchmark' field")
    record.setdefault("code_version", None)
    return record
