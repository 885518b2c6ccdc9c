"""The user's files: what a command may read, and what it may write over.

Every command reads its inputs and guards its outputs here, beside the one writer
(:mod:`doppler_lab.house.atomic`), so one rule holds for all of them.

Reading (:func:`input_file`, :func:`read_input_bytes`): an input must be a regular file (or a
link to one). A FIFO, a character or block device, a socket or a folder is refused by name
without being opened (a FIFO would block forever, ``/dev/zero`` would fill memory); a link loop
says so (not "does not exist"); a file over its size limit
(:data:`~doppler_lab.house.limits.MAX_FILE_BYTES`) is refused before a byte is read, and a read
stops at the limit even when the size was not known in advance.

Writing (:func:`check_output`): nothing of the user's is destroyed without consent.

* an output is never one of the command's inputs (``place G.json --out G.json`` is refused,
  through links too);
* an existing file is replaced only when it is the command's own kind of output (a placement
  document for ``place --out``, a trace for ``--trace``, a doppler-lab HTML page for
  ``--gantt``), or with ``--force``; anything else (the user's notes, a graph, a link, a
  folder, a device) is refused in one line naming the path;
* a sidecar (``import --out m.json`` also writes ``m.tensors.pt``) is checked the same way and
  named in the command's output.

Example:
    >>> import tempfile, os
    >>> folder = tempfile.mkdtemp()
    >>> notes = os.path.join(folder, "notes.txt")
    >>> _ = open(notes, "w").write("mine")
    >>> check_output(notes, what="--gantt", own=html_page)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    doppler_lab.house.errors.ConfigError: --gantt ... exists and is not a file doppler-lab writes there; ...
"""

from __future__ import annotations

import errno as _errno
import os
import stat
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from .errors import ConfigError, DopplerLabError
from .limits import LIMITS

Fail = Callable[[str], DopplerLabError]
#: how a file is recognised as a command's own output (a path to yes or no)
Own = Callable[[Path], bool]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def file_kind(mode: int) -> str:
    """What a file of ``st_mode`` ``mode`` is, in words (``"a regular file"``, ``"a FIFO ..."``)."""
    return next((name for test, name in _KINDS if test(mode)), "a regular file")


def file_or_folder(path: str | os.PathLike) -> str:
    """``"a folder"`` or ``"a file"``: what ``path`` (which exists) is, for a message about a
    name that was meant as a file but is read as something else."""
    return "a folder" if os.path.isdir(path) else "a file"


def _stat(path: Path, what: str, fail: Fail) -> os.stat_result | None:
    """``os.stat`` of ``path`` (following links); None when nothing is there."""
    try:
        return os.stat(path)
    except OSError as exc:
        if exc.errno == _errno.ELOOP:
            raise fail(f"{what} {str(path)!r} is a symbolic link loop; expected a file") from None
        if exc.errno in (_errno.ENOENT, _errno.ENOTDIR):
            if os.path.islink(path):
                target = os.readlink(path)
                raise fail(
                    f"{what} {str(path)!r} is a symbolic link to {target}, which does not exist"
                ) from None
            return None
        why = (exc.strerror or str(exc)).lower()
        raise fail(f"{what} {str(path)!r}: cannot read it: {why}") from None


def input_file(
    path: str | os.PathLike,
    what: str = "input file",
    fail: Fail = ConfigError,
    limit: str = "MAX_FILE_BYTES",
) -> Path:
    """``path`` if it is a regular file (or a link to one) within the size limit named
    ``limit``; it is not opened.

    Raises:
        the error ``fail`` makes: nothing there, a link loop, a special file or a folder (named
        by kind), a file over the limit.
    """
    p = Path(path)
    st = _stat(p, what, fail)
    if st is None:
        raise fail(f"{what} {str(p)!r} does not exist")
    if not stat.S_ISREG(st.st_mode):
        raise fail(f"{what} {str(p)!r} is {file_kind(st.st_mode)}; expected a regular file")
    _check_size(p, st.st_size, what, fail, limit)
    return p


def _check_size(p: Path, size: int, what: str, fail: Fail, limit: str) -> None:
    bound = LIMITS[limit]
    if size > bound:
        raise fail(
            f"{what} {str(p)!r} has {size:,} bytes; the limit is {bound:,} "
            f"(doppler_lab.house.limits.{limit})"
        )


def read_input_bytes(path: str | os.PathLike, what: str = "input file", **checks: Any) -> bytes:
    """The bytes of the input file ``path`` (:func:`input_file`'s checks first, ``checks`` its
    ``fail`` and ``limit``; the read itself stops one byte past the limit, for files whose size
    the system does not know)."""
    fail: Fail = checks.get("fail", ConfigError)
    limit: str = checks.get("limit", "MAX_FILE_BYTES")
    p = input_file(path, what, fail, limit)
    bound = LIMITS[limit]
    try:
        with open(p, "rb") as fh:
            data = fh.read(bound + 1)
    except OSError as exc:
        why = (exc.strerror or str(exc)).lower()
        raise fail(f"{what} {str(p)!r}: cannot read it: {why}") from None
    _check_size(p, len(data), what, fail, limit)
    return data


#: how the files ``torch.save`` writes begin: a zip archive, or (before torch 1.6) a pickle
_TORCH_FILE_STARTS = (b"PK\x03\x04", b"\x80")


def torch_file_problem(path: str | os.PathLike, exc: BaseException) -> str:
    """Why ``torch.load(path, weights_only=True)`` raised ``exc``, in words for a message: not
    a file ``torch.save`` wrote at all (a JSON graph, a text file, an empty or cut download), a
    pickle of objects other than tensors and plain data (never loaded: they could run code), or
    else the first line of torch's own message (never its paragraph of advice)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        head = b""
    if not head.startswith(_TORCH_FILE_STARTS):
        return "it is not a file torch.save wrote"
    text = str(exc).strip()
    if text.startswith("Weights only load failed"):
        return (
            "it holds objects other than tensors and plain data, which are never loaded (they "
            "could run code)"
        )
    first = text.splitlines()[0] if text else type(exc).__name__
    return first if len(first) <= 200 else first[:197] + "..."


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether ``a`` and ``b`` are one existing file (through links and ``..``)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def spec_files(spec: str | None) -> list[Path]:
    """The existing files a graph or cluster spec names (``G.json``, ``FILE.py:FUNC``,
    ``paper_costs:G.txt``, ``m.pt2:granularity=op``): every ``:``-separated head or tail of it
    that is a file."""
    if not spec:
        return []
    parts = str(spec).split(":")
    found: list[Path] = []
    for i in range(1, len(parts) + 1):
        for text in (":".join(parts[:i]), ":".join(parts[i - 1 :])):
            if text and os.path.isfile(text) and Path(text) not in found:
                found.append(Path(text))
    return found


def json_document(*formats: str) -> Own:
    """An :data:`Own` test: a strict JSON object whose ``"format"`` is one of ``formats``."""

    def test(path: Path) -> bool:
        import json

        try:
            doc = json.loads(read_input_bytes(path))
        except (DopplerLabError, ValueError, RecursionError):
            return False
        return isinstance(doc, dict) and doc.get("format") in formats

    return test


#: what every doppler-lab HTML page says it was made by (:class:`doppler_lab.viz.html.HtmlReport`)
HTML_GENERATOR = '<meta name="generator" content="doppler_lab.viz.HtmlReport">'


#: the end of the title of a notebook page doppler-lab rendered (``report --render``, the site)
RENDERED_TITLE_END = "\u00b7 doppler_lab</title>"


def html_page(path: Path) -> bool:
    """An :data:`Own` test: an HTML page doppler-lab wrote (its generator tag, or a rendered
    notebook's title, near the top)."""
    try:
        with open(input_file(path), "rb") as fh:
            head = fh.read(4096)
    except (OSError, DopplerLabError):
        return False
    return HTML_GENERATOR.encode() in head or RENDERED_TITLE_END.encode() in head


def check_output(
    path: str | os.PathLike,
    *,
    what: str = "--out",
    inputs: Iterable[str | os.PathLike] = (),
    own: Own | None = None,
    force: bool = False,
    fail: Fail = ConfigError,
) -> Path:
    """``path`` if a command may write its output there (see the module docstring): not one of
    ``inputs``; new, or the command's own kind of file (``own``), or ``force``.

    Args:
        path: the output path.
        what: the option that named it, for messages (``--out``, ``--gantt``).
        inputs: the files the command reads (missing ones and non-files are skipped).
        own: recognises a file the command wrote before (None: no existing file is).
        force: replace an existing file that is not the command's own (never an input).
        fail: the error type for a refusal.
    """
    p = Path(path)
    for given in inputs:
        if same_file(p, given):
            raise fail(
                f"{what} {str(p)!r} is the input {str(given)!r}: the command never writes over its input; "
                "expected another path"
            )
    if not os.path.lexists(p):
        return p
    if os.path.islink(p):
        if force:
            return p  # the link is replaced, never the file it points to
        raise fail(
            f"{what} {str(p)!r} is a symbolic link; use another path, or --force to replace the link "
            "(never the file it points to)"
        )
    mode = os.stat(p, follow_symlinks=False).st_mode
    if not stat.S_ISREG(mode):
        raise fail(f"{what} {str(p)!r} is {file_kind(mode)}; expected a file path")
    if force or (own is not None and own(p)):
        return p
    raise fail(
        f"{what} {str(p)!r} exists and is not a file doppler-lab writes there; use another path, or "
        "--force to replace it"
    )


def output_folder(path: str | os.PathLike, what: str = "--out", fail: Fail = ConfigError) -> Path:
    """``path`` if a command can make or use it as the folder it writes into, checked before
    any work: not empty (``''`` is not the current folder), not a file or another special file,
    and no file where one of its parent folders should be.

    Raises:
        the error ``fail`` makes, naming ``what`` and the path.
    """
    if not str(path).strip():
        raise fail(f"{what} {str(path)!r} is empty; expected a folder path")
    p = Path(path)
    for folder in (p, *p.parents):
        if not os.path.lexists(folder):
            continue
        try:
            mode = os.stat(folder).st_mode
        except OSError:  # a dangling link or a loop: mkdir will say what it is
            return p
        if stat.S_ISDIR(mode):
            return p
        where = "" if folder == p else f": {str(folder)!r} above it"
        raise fail(f"{what} {str(p)!r}{where} is {file_kind(mode)}; expected a folder")
    return p


def guard_outputs(args: Any, outputs: Mapping[str, Own | None]) -> list[Path]:
    """Check a command's output options before it does any work (:func:`check_output`).

    Args:
        args: the parsed command line; every other option whose text names a file
            (:func:`spec_files`) counts as an input, ``args.force`` as consent.
        outputs: the output options (``args`` attribute names such as ``"out"``, ``"gantt"``)
            and how each recognises the command's own file.

    Returns:
        The output paths given.
    """
    force = bool(getattr(args, "force", False))
    inputs: list[Path] = []
    for key, value in vars(args).items():
        if key in outputs or key.startswith("_"):
            continue
        for text in value if isinstance(value, list | tuple) else [value]:
            if isinstance(text, str):
                inputs += spec_files(text)
    given: dict[str, Path] = {}
    for key, own in outputs.items():
        value = getattr(args, key, None)
        if not value:
            continue
        what = "--" + key.replace("_", "-")
        path = check_output(value, what=what, inputs=inputs, own=own, force=force)
        for other, seen in given.items():
            if os.path.abspath(seen) == os.path.abspath(path):
                raise ConfigError(f"{what} and {other} are both {str(path)!r}; expected two paths")
        given[what] = path
    return list(given.values())


def add_force_output_argument(parser: Any) -> None:
    """``--force`` of the commands that write files (:func:`check_output`)."""
    parser.add_argument(
        "--force",
        action="store_true",
        help="replace an existing output file even if this command did not write it (never "
        "one of the command's inputs)",
    )


__all__ = [
    "HTML_GENERATOR",
    "add_force_output_argument",
    "check_output",
    "file_kind",
    "file_or_folder",
    "guard_outputs",
    "html_page",
    "input_file",
    "json_document",
    "output_folder",
    "read_input_bytes",
    "same_file",
    "spec_files",
    "torch_file_problem",
]
