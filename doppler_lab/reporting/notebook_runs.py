"""Running the notebooks: papermill execution with parameters, JSON summaries, HTML rendering.

Every notebook in ``notebooks/`` has a cell tagged ``parameters`` (flat literals, among them
``out_dir``, ``seed`` and ``interactive``) and ends by writing ``summary.json`` into ``out_dir``.
Opened in JupyterLab a notebook runs its defaults: ``interactive = True`` (widgets, progress bars)
and ``out_dir = "reports/<notebook>"``, which :func:`repo_path` resolves from the repository root
whatever the kernel's working directory. :func:`run_notebook` executes one headlessly
(``interactive=False`` unless given, ``out_dir`` absolute) and returns that summary; the test suite
and ``doppler-lab report`` both go through it.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..house.deps import require
from ..house.errors import ConfigError
from ..house.paths import REPO_ROOT

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


def notebook_parameters(path: str | os.PathLike) -> dict[str, Any]:
    """The defaults in a notebook's ``parameters`` cell (evaluated as Python literals)."""
    import ast

    nbformat = require("nbformat", "reading a notebook's parameters")
    nb = nbformat.read(str(path), as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code" and "parameters" in cell.metadata.get("tags", []):
            params: dict[str, Any] = {}
            for node in ast.parse(cell.source).body:
                if (
                    isinstance(node, ast.Assign)
                    and len(node.targets) == 1
                    and isinstance(node.targets[0], ast.Name)
                ):
                    params[node.targets[0].id] = ast.literal_eval(node.value)
            return params
    raise ConfigError(f"notebook {path} has no cell tagged 'parameters'")


def run_notebook(
    notebook: str | os.PathLike,
    out_dir: str | os.PathLike,
    parameters: Mapping[str, Any] | None = None,
    kernel_name: str | None = None,
    timeout_s: int = 1800,
    progress: bool = False,
) -> dict[str, Any]:
    """Execute ``notebook`` with papermill into ``out_dir`` and return its ``summary.json``.

    The executed copy is written to ``out_dir/<name>.ipynb``; the notebook runs with its own
    folder as working directory and gets ``out_dir`` (absolute) as a parameter, and
    ``interactive=False`` unless ``parameters`` says otherwise (no widgets, no progress bars).
    """
    pm = require("papermill", "running a notebook")

    nb_path = Path(notebook)
    if not nb_path.is_absolute() and not nb_path.exists():
        nb_path = NOTEBOOKS_DIR / nb_path
    if not nb_path.exists():
        raise ConfigError(f"notebook {notebook} does not exist")
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    declared = notebook_parameters(nb_path)
    params = dict(parameters or {})
    unknown = sorted(set(params) - set(declared))
    if unknown:
        raise ConfigError(
            f"notebook {nb_path.name} has no parameter(s) {unknown}; it takes {sorted(declared)}"
        )
    params["out_dir"] = str(out)
    if "interactive" in declared:
        params.setdefault("interactive", False)
    env_before = os.environ.get("PYDEVD_DISABLE_FILE_VALIDATION")
    os.environ["PYDEVD_DISABLE_FILE_VALIDATION"] = "1"  # quiets a debugger warning in kernels
    try:
        pm.execute_notebook(
            str(nb_path),
            str(out / nb_path.name),
            parameters=params,
            kernel_name=kernel_name or _kernel_name(),
            cwd=str(nb_path.parent),
            progress_bar=progress,
            execution_timeout=timeout_s,
            kernel_manager_class="doppler_lab.reporting.notebook_runs.IpcKernelManager",
        )
    finally:
        if env_before is None:
            os.environ.pop("PYDEVD_DISABLE_FILE_VALIDATION", None)
    summary = out / "summary.json"
    if not summary.exists():
        raise ConfigError(f"notebook {nb_path.name} ran but wrote no summary.json into {out}")
    return json.loads(summary.read_text())


def _ipc_kernel_manager() -> type:
    from jupyter_client.manager import KernelManager

    class IpcKernelManager(KernelManager):
        """A kernel reached over local IPC sockets (files in the runtime folder) rather than
        TCP ports: nothing listens on the network, and ipykernel does not warn that TCP runs
        without encryption (once per notebook of a report)."""

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport", "ipc")
            super().__init__(**kwargs)

    return IpcKernelManager


def __getattr__(name: str) -> Any:
    # papermill imports the kernel manager by its dotted name; jupyter_client loads lazily
    if name == "IpcKernelManager":
        return _ipc_kernel_manager()
    raise AttributeError(name)


def _kernel_name() -> str:
    """The Jupyter kernel of this interpreter: ``python3`` from ipykernel (sys.executable)."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if "python3" not in specs:
        raise ConfigError(f"no 'python3' Jupyter kernel for {sys.executable}; install ipykernel")
    return "python3"


def write_summary(out_dir: str | os.PathLike, summary: Mapping[str, Any]) -> Path:
    """Write a notebook's ``summary.json`` (numpy values made plain)."""
    from ..house.jsonutil import write_json

    return write_json(Path(out_dir) / "summary.json", dict(summary))


def render_html(
    executed_notebook: str | os.PathLike,
    html_path: str | os.PathLike,
    back_link: str | None = None,
    title: str | None = None,
    banner: str | None = None,
) -> Path:
    """Render an executed notebook to HTML with its plotly charts live (no input prompts).

    Args:
        executed_notebook: the executed copy.
        html_path: the page to write.
        back_link: the index's address, linked in a bar at the top of the page.
        title: the browser title (inline markdown is stripped); default nbconvert's.
        banner: a line shown in that bar, e.g. :data:`~doppler_lab.viz.html.QUICK_BANNER`.
    """
    nbformat = require("nbformat", "rendering a notebook to HTML")
    require("nbconvert", "rendering a notebook to HTML")
    from nbconvert import HTMLExporter

    nb = nbformat.read(str(executed_notebook), as_version=4)
    exporter = HTMLExporter(template_name="lab")
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(nb)
    from ..viz.html import markdown_to_text, with_back_link, with_title

    body = with_back_link(body, back_link, banner)
    if title:
        body = with_title(body, f"{markdown_to_text(title)} · doppler_lab")
    from ..house.atomic import atomic_write

    return atomic_write(html_path, body)


def repo_path(path: str | os.PathLike) -> Path:
    """A folder named by a notebook parameter: ``path`` itself when absolute, else ``path`` under
    the repository root, so a notebook writes to the same place whether JupyterLab (the notebook's
    folder), papermill or a shell in the checkout runs it.

    Example:
        >>> repo_path("reports/00_quickstart") == REPO_ROOT / "reports" / "00_quickstart"
        True
    """
    p = Path(path).expanduser()
    return p if p.is_absolute() else REPO_ROOT / p


def setup_notebook(interactive: bool = False) -> None:
    """Configure plotly for notebooks: live charts in JupyterLab and in rendered HTML reports.

    ``plotly_mimetype`` shows figures in JupyterLab; ``notebook`` embeds plotly.js once per
    notebook, so the HTML rendered from an executed notebook draws its charts offline.
    ``interactive`` is accepted for symmetry with the widgets (nothing else changes).
    pandas shows every row and column of a frame shown as is (the notebooks' tables go through
    :func:`doppler_lab.viz.tables.tidy`; this keeps any other frame whole too).
    """
    pio = require("plotly.io", "the notebooks' charts")

    pio.renderers.default = "plotly_mimetype+notebook"
    import pandas as pd

    for option, value in (
        ("display.max_columns", None),
        ("display.max_rows", 500),
        ("display.width", 200),
        ("display.precision", 4),
    ):
        pd.set_option(option, value)
