"""Writing benchmark results: one JSON record and one Markdown page per benchmark (its tables:
:func:`doppler_lab.viz.html.markdown_table`, shared with the other report writers).

Every record carries the code version it was measured with (``code_version``, see
:mod:`doppler_lab.house.codeversion`), shown in the page's header; :func:`read_report` reads records
written before versions were recorded too (their ``code_version`` is ``None``).
"""

from __future__ import annotations

import platform
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..house.atomic import atomic_write
from ..house.codeversion import code_version
from ..house.jsonutil import read_json, to_jsonable, write_json

CODE_VERSION_NOTE = (
    "digest of the package sources that can change a number (doppler_lab.house.codeversion)"
)


def machine_info() -> dict[str, Any]:
    import os

    info: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
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
) -> dict[str, Any]:
    """Write ``<out_dir>/<name>.json`` and ``<name>.md``; returns the JSON record.

    ``tables`` maps a section title to (rows, columns) (:func:`doppler_lab.viz.html.markdown_table`).
    """
    # imported here: the plotting package loads only when a report is written
    from ..viz.html import markdown_table

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "benchmark": name,
        "title": title,
        "command": command,
        "machine": machine_info(),
        "code_version": code_version(),
        "summary": summary or {},
        "tables": {k: list(rows) for k, (rows, _) in tables.items()},
        "notes": list(notes),
    }
    write_json(out / f"{name}.json", record)
    md = [f"# {title}", ""]
    if command:
        md += [f"Command: `{command}`", ""]
    m = record["machine"]
    md += [f"Machine: {m['cpus']} CPUs ({m['processor']}), Python {m['python']}, {m['date']}", ""]
    md += [f"Code version: `{record['code_version']}` ({CODE_VERSION_NOTE})", ""]
    if summary:
        md += [
            "## Summary",
            "",
            markdown_table([{"metric": k, "value": v} for k, v in summary.items()]),
            "",
        ]
    for section, (rows, cols) in tables.items():
        md += [f"## {section}", "", f"Code version `{record['code_version']}`.", ""]
        md += [markdown_table(rows, cols), ""]
    if notes:
        md += ["## Notes", ""] + [f"- {n}" for n in notes] + [""]
    atomic_write(out / f"{name}.md", "\n".join(md))
    return record


def read_report(path: str | Path) -> dict[str, Any]:
    """A benchmark record written by :func:`write_report`; one written before code versions
    were recorded reads with ``code_version`` ``None``."""
    from ..house.errors import ConfigError

    record = read_json(path, "benchmark record")
    if not isinstance(record, dict) or "benchmark" not in record:
        raise ConfigError(f"benchmark record {str(path)!r} has no 'benchmark' field")
    record.setdefault("code_version", None)
    return record
