"""The code version that caches of expensive results are keyed by, and that every table shows.

:func:`code_version` is a digest of the package's Python sources that can change a computed
number: every ``doppler_lab/**/*.py`` except the presentation and plumbing listed in
:data:`EXCLUDED` (commands, plots and widgets, report building, data locations). Comments and
docstrings are left out, so rewording them keeps the version; any other edit (code, formatting
of code) makes a new one. The choice over the git commit: the digest is the same in every clone,
in an installed package and in a tree with uncommitted edits to unrelated files, and it changes
with an uncommitted edit to the code a run depends on, which a commit hash would miss.

:func:`versioned_key` is :func:`~doppler_lab.house.jsonutil.config_key` over the configuration and
the code version: run folders named with it are reused only by the same code.

Stripping costs a second or two for the whole package, so the stripped digest of each file is
remembered in the per-user cache folder (``codeversion.json``, keyed by the sha256 of the
file's bytes; a read-only or missing cache only makes it slower).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import io
import json
import tokenize
from pathlib import Path
from typing import Any

from .jsonutil import config_key, write_json
from .paths import user_cache_dir

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # doppler_lab/, above house/
# relative POSIX paths (a trailing "/" is a folder) that cannot change a computed number
EXCLUDED: tuple[str, ...] = (
    "commands/",
    "viz/",
    "lab/reporting/",
    "cli.py",
    "house/codeversion.py",
    "house/errors.py",
    "house/moved.py",
    "house/nbclean.py",
    "house/paths.py",
    "house/runstore.py",
    "io/datasets.py",
    "lab/bench/yardstick.py",
    "lab/bench/_report.py",
    "lab/bench/pages.py",
)


def _excluded(rel: str) -> bool:
    return any(rel.startswith(e) if e.endswith("/") else rel == e for e in EXCLUDED)


def _char_col(line: str, byte_col: int) -> int:
    """A column in characters from ``ast``'s column in UTF-8 bytes."""
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def strip_comments_and_docstrings(source: str) -> str:
    """``source`` without comments, docstrings, trailing blanks and empty lines (the source
    itself when it does not parse)."""
    lines = source.splitlines()
    try:
        tree = ast.parse(source)
        spans = [
            (tok.start[0], tok.start[1], tok.end[0], tok.end[1])
            for tok in tokenize.generate_tokens(io.StringIO(source).readline)
            if tok.type == tokenize.COMMENT
        ]
    except (SyntaxError, tokenize.TokenError, ValueError):
        return source
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not (
            isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            continue
        doc = body[0]
        end_line = doc.end_lineno or doc.lineno
        spans.append(
            (
                doc.lineno,
                _char_col(lines[doc.lineno - 1], doc.col_offset),
                end_line,
                _char_col(lines[end_line - 1], doc.end_col_offset or 0),
            )
        )
    for r0, c0, r1, c1 in sorted(spans, reverse=True):  # last first: earlier spans stay valid
        lines[r0 - 1] = lines[r0 - 1][:c0] + lines[r1 - 1][c1:]
        del lines[r0:r1]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def source_files(package_dir: Path = PACKAGE_DIR) -> list[Path]:
    """The sources the code version covers, sorted by their path in the package."""
    files = [
        p
        for p in package_dir.rglob("*.py")
        if "__pycache__" not in p.parts and not _excluded(p.relative_to(package_dir).as_posix())
    ]
    return sorted(files, key=lambda p: p.relative_to(package_dir).as_posix())


CACHE_ENTRIES = 4000  # stripped digests remembered (a few trees' worth of files)


def _stripped_digests(raw: dict[str, bytes]) -> dict[str, str]:
    """The sha256 of each stripped source, by the sha256 of its bytes (remembered on disk)."""
    path = user_cache_dir() / "codeversion.json"
    try:
        known = json.loads(path.read_text())
        known = known if isinstance(known, dict) else {}
    except (OSError, ValueError):
        known = {}
    new = {
        key: hashlib.sha256(
            strip_comments_and_docstrings(data.decode("utf-8", errors="replace")).encode()
        ).hexdigest()
        for key, data in raw.items()
        if not isinstance(known.get(key), str)
    }
    if new:
        kept = {**known, **new}
        try:  # the newest entries last; the oldest are dropped beyond CACHE_ENTRIES
            write_json(path, dict(list(kept.items())[-CACHE_ENTRIES:]))
        except OSError:
            pass
        known = {**known, **new}
    return {key: known[key] for key in raw}


@functools.lru_cache(maxsize=4)
def _digest(package_dir: Path) -> str:
    files = [
        (p.relative_to(package_dir).as_posix(), p.read_bytes()) for p in source_files(package_dir)
    ]
    raw = {hashlib.sha256(data).hexdigest(): data for _, data in files}
    stripped = _stripped_digests(raw)
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode() + b"\0" + stripped[hashlib.sha256(data).hexdigest()].encode() + b"\0")
    return h.hexdigest()[:12]


def code_version(package_dir: Path | None = None) -> str:
    """A 12-hex digest of the sources that can change a computed number (computed once per
    process; see the module docstring for what it covers)."""
    return _digest(Path(package_dir or PACKAGE_DIR).resolve())


def versioned_key(*parts: Any, version: str | None = None) -> str:
    """:func:`~doppler_lab.house.jsonutil.config_key` of ``parts`` and the code version (this
    package's, or ``version``: the key an older code gave the same configuration): a cache
    folder named with it is reused only by the same configuration and the same code."""
    return config_key(*parts, {"code_version": version or code_version()})


__all__ = [
    "EXCLUDED",
    "code_version",
    "source_files",
    "strip_comments_and_docstrings",
    "versioned_key",
]
