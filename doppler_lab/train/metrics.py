"""The metrics log: one CSV row per update, columns ``update``, ``episode``, ``graph`` and
``stage/metric`` keys; resumable (rows after the last checkpoint are dropped on restart)."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..house.atomic import atomic_writer, write_error
from ..house.errors import CheckpointError


def _cell(v: Any) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _parse(v: str) -> Any:
    if v == "":
        return None
    try:
        f = float(v)
    except ValueError:
        return v
    return int(f) if f.is_integer() and "." not in v and "e" not in v.lower() else f


class MetricsLog:
    """Append rows to ``path`` with a fixed header.

    Args:
        path: the CSV file.
        columns: the header.
        keep_rows: resume: keep the first ``keep_rows`` data rows of an existing file (which must
            have the same header, or a subset of it written by a version with fewer metrics)
            and drop the rest; None starts a new file.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], keep_rows: int | None = None):
        self.path = Path(path)
        self.columns = list(columns)
        self.rows: list[dict[str, Any]] = []
        if keep_rows is not None and os.path.lexists(self.path):
            header, old = _read(self.path, "; move it away to resume without its rows")
            if header != self.columns and not (
                set(header) <= set(self.columns) and header[:3] == self.columns[:3]
            ):
                # a file from a version with fewer metrics resumes (the new ones empty there);
                # anything else is another run's file
                raise CheckpointError(
                    f"metrics file {str(self.path)!r} has columns {header}, expected {self.columns}"
                )
            if len(old) < keep_rows:
                raise CheckpointError(
                    f"metrics file {str(self.path)!r} has {len(old)} rows but the checkpoint "
                    f"was written after {keep_rows}"
                )
            self.rows = old[:keep_rows]
        with atomic_writer(self.path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(self.columns)
            for r in self.rows:
                w.writerow([_cell(r.get(c)) for c in self.columns])

    def append(self, row: dict[str, Any]) -> None:
        bad = sorted(set(row) - set(self.columns))
        if bad:
            raise KeyError(f"metric {bad[0]!r} is not a column of {str(self.path)!r}")
        self.rows.append(dict(row))
        try:  # appended (a resumed run drops the rows after its checkpoint and rewrites the file)
            with self.path.open("a", newline="") as fh:
                csv.writer(fh).writerow([_cell(row.get(c)) for c in self.columns])
        except OSError as exc:
            raise write_error(self.path, exc, "cannot append to", "") from None


def read_rows(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a metrics CSV, numbers parsed, empty cells None.

    Raises:
        CheckpointError: the file is not a UTF-8 CSV (one line naming it).
    """
    return _read(Path(path))[1]


def _read(path: Path, hint: str = "") -> tuple[list[str], list[dict[str, Any]]]:
    """The header and the rows of the metrics CSV ``path`` (a regular file within
    ``MAX_FILE_BYTES``, UTF-8; :func:`doppler_lab.house.validate.read_text_file`)."""
    from ..house.errors import FormatError
    from ..house.validate import read_text_file

    try:
        text = read_text_file(path)
        header = next(csv.reader(io.StringIO(text, newline="")), [])
        rows = [
            {k: _parse(v) for k, v in r.items()}
            for r in csv.DictReader(io.StringIO(text, newline=""))
        ]
    except FormatError as exc:
        raise CheckpointError(
            f"metrics file {exc}; expected the UTF-8 CSV a run writes{hint}"
        ) from None
    except csv.Error as exc:
        raise CheckpointError(
            f"metrics file {str(path)!r} is not a CSV ({exc}); expected the CSV a run writes{hint}"
        ) from None
    return header, rows
