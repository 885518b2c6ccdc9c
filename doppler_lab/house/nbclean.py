"""A git clean filter for the notebooks: outputs, execution counts and saved widget state are
dropped, so a notebook run in JupyterLab (which autosaves its outputs into the file) is committed
as its clean source, and ``git diff`` shows only edits to the cells.

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
RUN_METADATA = ("widgets",)
#: cell metadata keys that hold run state
CELL_RUN_METADATA = ("execution", "collapsed", "scrolled")


def clean_text(text: str) -> str:
    """``text`` (a notebook's JSON) without outputs, execution counts or widget state; keys
    keep their order (JupyterLab's and nbformat's writers differ in it)."""
    nb = json.loads(text)
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ValueError("not a notebook: no list of cells")
    for cell in nb["cells"]:
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        for key in CELL_RUN_METADATA:
            cell.get("metadata", {}).pop(key, None)
    for key in RUN_METADATA:
        nb.get("metadata", {}).pop(key, None)
    return json.dumps(nb, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args:  # a git filter: stdin to stdout
        sys.stdout.write(clean_text(sys.stdin.read()))
        return 0
    for name in args:
        path = Path(name)
        text = path.read_text(encoding="utf-8")
        cleaned = clean_text(text)
        if cleaned != text:
            from .atomic import atomic_write

            atomic_write(path, cleaned)
            print(f"cleaned {path}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
