"""A git clean filter for the notebooks: outputs, execution counts and saved widget state are
dropped, so a notebook run in JupyterLab (which autosaves its outputs into the file) is committed
as its clean source, and ``git diff`` shows only edits to the cells. What a run writes besides
(the kernel's ``language_info`` beyond its name, papermill's metadata and injected parameters
cell) is dropped too, and keys are written sorted, as nbformat writes them: a notebook run and
saved in place (``jupyter execute --inplace``, papermill, JupyterLab) reads as unchanged.

``make venv`` installs it for the checkout (``.gitattributes`` names the filter for
``notebooks/*.ipynb``)::

    git config filter.doppler-nbclean.clean "python -m doppler_lab.house.nbclean"
    git config filter.doppler-nbclean.smudge cat

A filter alone cannot make ``git status`` clean after such a run: git takes a file whose size
differs from the one recorded in its index for modified without running the filter (``git
diff`` is empty, ``git status`` says modified until ``git add``). So ``make venv`` also names
this module as the checkout's file-system monitor (``core.fsmonitor``, git's hook for telling
it which paths may have changed since it last looked)::

    git config core.fsmonitor "python -P -m doppler_lab.house.nbclean --fsmonitor"

and refreshes the index once. The hook (:func:`fsmonitor_paths`) names every tracked path
except a notebook whose cleaned content is the blob in the index: git then skips that notebook
(the run changed nothing it would commit), and looks at everything else as it always does. An
edit to a notebook's cells changes its cleaned content, so it is named and shows as modified. If
the hook cannot run, git falls back to looking at every file.

Run by hand: ``python -m doppler_lab.house.nbclean < in.ipynb > out.ipynb``, or with paths
(``python -m doppler_lab.house.nbclean notebooks/*.ipynb``) to clean files in place. The output is
JSON with one space of indent (as the notebooks are stored), so a clean notebook passes
through byte for byte.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

#: notebook metadata keys that hold run state, not source
RUN_METADATA = ("widgets", "papermill")
#: cell metadata keys that hold run state
CELL_RUN_METADATA = ("execution", "collapsed", "scrolled", "papermill")
#: the filter's name in ``.gitattributes``
FILTER = "doppler-nbclean"
#: the tag of the cell papermill adds with the parameters of its run
INJECTED = "injected-parameters"


def clean_text(text: str) -> str:
    """``text`` (a notebook's JSON) without outputs, execution counts, widget state or other
    traces of a run (see the module's docstring); keys sorted, as nbformat writes them
    (JupyterLab's writer orders them otherwise), one space of indent."""
    nb = json.loads(text)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook: no list of cells")
    nb["cells"] = [
        c
        for c in nb["cells"]
        if not (isinstance(c, dict) and INJECTED in c.get("metadata", {}).get("tags", []))
    ]
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in CELL_RUN_METADATA:
            cell.get("metadata", {}).pop(key, None)
        if cell.get("metadata", {}).get("tags") == []:  # papermill adds an empty list
            del cell["metadata"]["tags"]
    meta = nb.setdefault("metadata", {})
    for key in RUN_METADATA:
        meta.pop(key, None)
    # the kernel's language: its name is the notebook's; version, lexer and mime type the run's
    language = meta.get("language_info") or {}
    kernel = meta.get("kernelspec") or {}
    meta["language_info"] = {"name": language.get("name") or kernel.get("language") or "python"}
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def _git(*args: str, stdin: bytes | None = None) -> bytes:
    """A git command's output, with the file-system monitor off (the hook must not call
    itself)."""
    env = dict(os.environ)
    n = int(env.get("GIT_CONFIG_COUNT", "0") or 0)
    env.update(
        {
            "GIT_CONFIG_COUNT": str(n + 1),
            f"GIT_CONFIG_KEY_{n}": "core.fsmonitor",
            f"GIT_CONFIG_VALUE_{n}": "",
        }
    )
    return subprocess.run(
        ["git", *args], input=stdin, check=True, capture_output=True, env=env
    ).stdout


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def fsmonitor_paths(top: Path, index: bytes, filtered: set[str]) -> list[str]:
    """The tracked paths git should look at: all of ``index`` (``git ls-files -s -z``'s output)
    but the notebooks of ``filtered`` (those this filter cleans) whose cleaned content is their
    index blob. A notebook committed with its outputs (the report site's) is always named."""
    out = []
    for entry in index.split(b"\0"):
        if not entry:
            continue
        meta, _, raw = entry.partition(b"\t")
        path = raw.decode("utf-8", "surrogateescape")
        if path in filtered and meta.split(b" ")[2] == b"0":
            try:
                text = (top / path).read_text(encoding="utf-8")
                if _blob_id(clean_text(text).encode("utf-8")) == meta.split(b" ")[1].decode():
                    continue
            except (OSError, ValueError):
                pass  # unreadable or not a notebook now: git looks at it
        out.append(path)
    return out


def _filtered(top: Path, index: bytes) -> set[str]:
    """The tracked ``.ipynb`` paths whose ``filter`` attribute is this filter's."""
    names = [
        e.partition(b"\t")[2] for e in index.split(b"\0") if e.endswith(b".ipynb") and b"\t" in e
    ]
    if not names:
        return set()
    attrs = _git("-C", str(top), "check-attr", "-z", "--stdin", "filter", stdin=b"\0".join(names))
    parts = attrs.split(b"\0")
    return {
        parts[i].decode("utf-8", "surrogateescape")
        for i in range(0, len(parts) - 2, 3)
        if parts[i + 2] == FILTER.encode()
    }


def fsmonitor(args: list[str]) -> int:
    """git's ``core.fsmonitor`` hook, protocol 2 (``2 TOKEN``: print a token, then the paths)
    or 1 (``1 NANOSECONDS``: the paths); paths are NUL-separated."""
    version = args[0] if args else "2"
    try:
        top = Path(_git("rev-parse", "--show-toplevel").decode().strip())
        index = _git("-C", str(top), "ls-files", "-s", "-z")
        paths = fsmonitor_paths(top, index, _filtered(top, index))
    except (OSError, subprocess.CalledProcessError):
        return 1  # git looks at every file
    head = f"{time.time_ns()}\0" if version == "2" else ""
    sys.stdout.write(head + "".join(p + "\0" for p in paths))
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:  # a git filter: stdin to stdout
        sys.stdout.write(clean_text(sys.stdin.read()))
        return 0
    if args[0] == "--fsmonitor":
        return fsmonitor(args[1:])
    if args[0] in ("-h", "--help"):
        print(
            "usage: python -m doppler_lab.house.nbclean [NOTEBOOK.ipynb ...]  (none: stdin to "
            "stdout; --fsmonitor VERSION TOKEN: git's core.fsmonitor hook)"
        )
        return 0
    for name in args:
        path = Path(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            print(f"nbclean: cannot read notebook {name!r}: {exc}", file=sys.stderr)
            return 2
        cleaned = clean_text(text)
        if cleaned != text:
            from .atomic import atomic_write

            atomic_write(path, cleaned)
            print(f"cleaned {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
