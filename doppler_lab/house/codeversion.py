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
import subprocess
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
    "lab/bench/recheck.py",
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


def _remembered(name: str) -> dict[str, Any]:
    """The per-user cache file ``name`` (a JSON object; empty when missing or unreadable)."""
    try:
        known = json.loads((user_cache_dir() / name).read_text())
    except (OSError, ValueError):
        return {}
    return known if isinstance(known, dict) else {}


def _remember(name: str, known: dict[str, Any]) -> None:
    """Write the per-user cache file ``name``: the newest :data:`CACHE_ENTRIES` entries (the
    last ones), nothing where the folder is read-only."""
    try:
        write_json(user_cache_dir() / name, dict(list(known.items())[-CACHE_ENTRIES:]))
    except OSError:
        pass


def _stripped_digests(raw: dict[str, bytes]) -> dict[str, str]:
    """The sha256 of each stripped source, by the sha256 of its bytes (remembered on disk)."""
    known = _remembered("codeversion.json")
    new = {
        key: hashlib.sha256(
            strip_comments_and_docstrings(data.decode("utf-8", errors="replace")).encode()
        ).hexdigest()
        for key, data in raw.items()
        if not isinstance(known.get(key), str)
    }
    if new:
        known = {**known, **new}
        _remember("codeversion.json", known)
    return {key: known[key] for key in raw}


@functools.lru_cache(maxsize=4)
def _digest(package_dir: Path) -> str:
    files = [
        (p.relative_to(package_dir).as_posix(), p.read_bytes()) for p in source_files(package_dir)
    ]
    return _digest_of(files)


def _digest_of(files: list[tuple[str, bytes]]) -> str:
    """The code version of a package's covered sources, ``(path in the package, bytes)`` sorted
    by path."""
    raw = {hashlib.sha256(data).hexdigest(): data for _, data in files}
    stripped = _stripped_digests(raw)
    h = hashlib.sha256()
    for rel, data in files:
        h.update(rel.encode() + b"\0" + stripped[hashlib.sha256(data).hexdigest()].encode() + b"\0")
    return h.hexdigest()[:12]


def _git(repo: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, check=True
    ).stdout


def commit_of_version(
    version: str, repo: Path | None = None, package: str = "doppler_lab"
) -> str | None:
    """The newest commit of ``repo``'s history (``HEAD``'s ancestors that touch ``package``)
    whose ``package`` sources have the code version ``version`` by today's rules (what
    :data:`EXCLUDED` leaves out, how comments are stripped); None where no commit has it (a
    version of uncommitted edits, or one whose rules differed). Each commit's version is
    remembered in the per-user cache (``codeversion-commits.json``), and each source read
    once, so a second search reads nothing."""
    repo = Path(repo or PACKAGE_DIR.parent)
    try:
        commits = _git(repo, "rev-list", "HEAD", "--", package).decode().split()
    except (OSError, ValueError, subprocess.CalledProcessError):
        return None
    known = _remembered("codeversion-commits.json")
    rules = hashlib.sha256(repr(EXCLUDED).encode()).hexdigest()[:8]  # a rule change: new cache
    blobs: dict[str, bytes] = {}
    found = None
    for commit in commits:
        key = f"{rules}:{commit}"
        if not isinstance(known.get(key), str):
            known[key] = _commit_digest(repo, commit, package, blobs)
        if known[key] == version:
            found = commit
            break
    _remember("codeversion-commits.json", known)
    return found


def _commit_digest(repo: Path, commit: str, package: str, blobs: dict[str, bytes]) -> str:
    """The code version of ``package`` at ``commit`` by today's rules (``blobs``: the sources
    read so far, by git object id)."""
    listing = _git(repo, "ls-tree", "-r", "-z", commit, "--", package).split(b"\0")
    files: list[tuple[str, str]] = []
    for line in filter(None, listing):
        meta, _, name = line.decode().partition("\t")
        _, kind, oid = meta.split()
        rel = name[len(package) + 1 :]
        if kind == "blob" and rel.endswith(".py") and "__pycache__" not in rel:
            if not _excluded(rel):
                files.append((rel, oid))
    missing = [oid for _, oid in files if oid not in blobs]
    if missing:
        out = _git(repo, "cat-file", "--batch", stdin="\n".join(missing).encode() + b"\n")
        at = 0
        for oid in missing:
            header_end = out.index(b"\n", at)
            size = int(out[at:header_end].split()[2])
            blobs[oid] = out[header_end + 1 : header_end + 1 + size]
            at = header_end + 1 + size + 1
    return _digest_of(sorted(((rel, blobs[oid]) for rel, oid in files), key=lambda f: f[0]))


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
    "commit_of_version",
    "source_files",
    "strip_comments_and_docstrings",
    "versioned_key",
]
