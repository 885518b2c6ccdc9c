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

Run by hand: ``python -m doppler_lab.house.nbclean < in.ipynb > out.ipynb``, or with paths
(``python -m doppler_lab.house.nbclean notebooks/*.ipynb``) to clean files in place. The output is
JSON with one space of indent (as the notebooks are stored), so a clean notebook passes
through byte for byte.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

#: notebook metadata keys that hold run state, not source
RUN_METADATA = ("widgets", "papermill")
#: cell metadata keys that hold run state
CELL_RUN_METADATA = ("execution", "collapsed", "scrolled", "papermill")
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


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:  # a git filter: stdin to stdout
        sys.stdout.write(clean_text(sys.stdin.read()))
        return 0
    if args[0] in ("-h", "--help"):
        print(
            "usage: python -m doppler_lab.house.nbclean [NOTEBOOK.ipynb ...]  (none: stdin to stdout)"
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
