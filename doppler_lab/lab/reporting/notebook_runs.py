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

import ast
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from ...house.atomic import atomic_write
from ...house.deps import require
from ...house.errors import ConfigError, FormatError
from ...house.jsonutil import write_json
from ...house.paths import REPO_ROOT
from ...house.validate import exception_line
from ...viz.html import (
    holds_plotly_bundle,
    markdown_to_text,
    with_back_link,
    with_plotly,
    with_shared_assets,
    with_title,
)

NOTEBOOKS_DIR = REPO_ROOT / "notebooks"


def read_notebook(path: str | os.PathLike, doing: str = "reading a notebook") -> Any:
    """The notebook in ``path`` (nbformat 4), from a regular file within the size limit.

    Raises:
        FormatError: not a notebook (not JSON, empty, an old format nbformat cannot convert),
            naming the file: nbformat's own exceptions were tracebacks.
    """
    from ...house.userfiles import input_file

    nbformat = require("nbformat", doing)

    def fail(msg: str) -> FormatError:
        return FormatError(msg, str(path))

    p = input_file(path, "notebook", fail)
    try:
        return nbformat.read(str(p), as_version=4)
    except Exception as exc:  # noqa: BLE001 - nbformat raises its own and jsonschema's types
        why = exception_line(exc, 200)
        raise fail(f"not a notebook nbformat can read ({why}); expected an .ipynb file") from None


def notebook_parameters(path: str | os.PathLike) -> dict[str, Any]:
    """The defaults in a notebook's ``parameters`` cell (evaluated as Python literals)."""

    nb = read_notebook(path, "reading a notebook's parameters")
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
            kernel_manager_class="doppler_lab.lab.reporting.notebook_runs.IpcKernelManager",
        )
    finally:
        if env_before is None:
            os.environ.pop("PYDEVD_DISABLE_FILE_VALIDATION", None)
    summary = out / "summary.json"
    if not summary.exists():
        raise ConfigError(f"notebook {nb_path.name} ran but wrote no summary.json into {out}")
    return json.loads(summary.read_text())


def _ipc_kernel_manager() -> type:
    # imported here, not at the top: an optional dependency, loaded only when used
    from jupyter_client.manager import KernelManager
    from jupyter_core.utils import run_sync

    class IpcKernelManager(KernelManager):
        """A kernel reached over local IPC sockets rather than TCP ports: nothing listens on the
        network, and ipykernel does not warn that TCP runs without encryption (once per
        notebook of a report).

        The sockets are files in a private temporary folder made for this kernel and removed
        with it. jupyter_client's default names them ``kernel-ipc-N`` in the working directory,
        the kernel's being ``notebooks/``: a build stopped by a timeout or Ctrl-C left them there,
        beside the user's notebooks."""

        def __init__(self, **kwargs: Any) -> None:
            kwargs.setdefault("transport", "ipc")
            self._own_sockets = "ip" not in kwargs
            self._socket_dir: str | None = None
            super().__init__(**kwargs)

        async def _async_pre_start_kernel(self, **kw: Any) -> Any:
            # made when the kernel starts (a manager never started leaves nothing behind),
            # before the connection file names the sockets
            if self._own_sockets and self.transport == "ipc" and self._socket_dir is None:
                self._socket_dir = tempfile.mkdtemp(prefix="doppler-kernel-")
                self.ip = os.path.join(self._socket_dir, "ipc")
            return await super()._async_pre_start_kernel(**kw)

        async def _async_cleanup_resources(self, restart: bool = False) -> None:
            # the one clean-up both the blocking and the async shutdown await
            await super()._async_cleanup_resources(restart=restart)
            if not restart and self._socket_dir is not None:
                shutil.rmtree(self._socket_dir, ignore_errors=True)
                self._socket_dir = None

        pre_start_kernel = run_sync(_async_pre_start_kernel)
        cleanup_resources = run_sync(_async_cleanup_resources)

    return IpcKernelManager


def __getattr__(name: str) -> Any:
    # papermill imports the kernel manager by its dotted name; jupyter_client loads lazily
    if name == "IpcKernelManager":
        return _ipc_kernel_manager()
    raise AttributeError(name)


def _kernel_name() -> str:
    """The Jupyter kernel of this interpreter: ``python3`` from ipykernel (sys.executable)."""
    # imported here, not at the top: an optional dependency, loaded only when used
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if "python3" not in specs:
        raise ConfigError(f"no 'python3' Jupyter kernel for {sys.executable}; install ipykernel")
    return "python3"


def write_summary(out_dir: str | os.PathLike, summary: Mapping[str, Any]) -> Path:
    """Write a notebook's ``summary.json`` (numpy values made plain)."""

    return write_json(Path(out_dir) / "summary.json", dict(summary))


def render_html(
    executed_notebook: str | os.PathLike,
    html_path: str | os.PathLike,
    back_link: str | None = None,
    title: str | None = None,
    banner: str | None = None,
    assets_dir: str | os.PathLike | None = None,
    stamp: str | None = None,
) -> Path:
    """Render an executed notebook to HTML that draws offline (no input prompts).

    Its charts are live: plotly.js is loaded once, in the page's head, from ``assets_dir`` (a
    site's shared copy) or inline (a page that opens alone); a copy of plotly.js inside the
    notebook's outputs is dropped. With ``assets_dir`` the page's style sheet (nbconvert's, a
    quarter of a megabyte) is shared there too. Widgets are drawn by their static view (see
    :func:`static_widget_outputs`): no widget manager is fetched from the network.

    Args:
        executed_notebook: the executed copy.
        html_path: the page to write.
        back_link: the index's address, linked in a bar at the top of the page.
        title: the browser title (inline markdown is stripped); default nbconvert's.
        banner: a line shown in that bar, e.g. :data:`~doppler_lab.viz.html.QUICK_BANNER`.
        assets_dir: a site's folder of shared files (see
            :func:`~doppler_lab.viz.html.with_shared_assets`); None: a page that holds all.
        stamp: a muted note at the right of that bar (the code version that made the page).
    """
    require("nbformat", "rendering a notebook to HTML")
    require("nbconvert", "rendering a notebook to HTML")
    # imported here, not at the top: an optional dependency, loaded only when used
    from jinja2 import DictLoader
    from nbconvert import HTMLExporter

    nb = read_notebook(executed_notebook, "rendering a notebook to HTML")
    static_widget_outputs(nb)
    drop_plotly_bundles(nb)
    exporter = HTMLExporter(
        template_name="lab",
        extra_loaders=[DictLoader({"doppler_page.html.j2": _OFFLINE_TEMPLATE})],
        template_file="doppler_page.html.j2",
    )
    exporter.exclude_input_prompt = True
    exporter.exclude_output_prompt = True
    body, _ = exporter.from_notebook_node(nb)
    if assets_dir is None:
        body = with_plotly(body)
    else:
        body = with_shared_assets(body, assets_dir, Path(html_path).parent)
    recorded = nb.metadata.get("papermill", {}).get("parameters", {}).get("out_dir")
    body = without_machine_paths(body, Path(executed_notebook).parent, recorded)
    body = with_back_link(body, back_link, banner, stamp)
    if title:
        body = with_title(body, f"{markdown_to_text(title)} · doppler_lab")

    return atomic_write(html_path, body)


def without_machine_paths(
    text: str, out_dir: str | os.PathLike, recorded: str | None = None
) -> str:
    """``text`` (a page) without the paths of the machine that built it: the run's folder
    ``out_dir`` (papermill passes it absolute, and the parameters cell shows it) by its name,
    and so the folder the run ``recorded`` (where a site moved from), paths in the repository
    relative to it, the home folder as ``~``.

    Example:
        >>> without_machine_paths('out_dir = "/srv/x/site/00_q"; /srv/x/site/00_q/a.csv', "/srv/x/site/00_q")
        'out_dir = "00_q"; 00_q/a.csv'
    """
    folder = Path(out_dir).absolute()
    swaps = [(str(folder), folder.name)]
    if isinstance(recorded, str) and Path(recorded).is_absolute() and len(recorded) > 1:
        swaps.append((recorded.rstrip("/"), Path(recorded).name))
    swaps += [(str(REPO_ROOT) + os.sep, ""), (str(REPO_ROOT), ".")]
    home = str(Path.home())
    if len(home) > 1:
        swaps.append((home + os.sep, "~/"))
    for path, shown in swaps:
        text = text.replace(path, shown)
    return text


#: nbconvert's ``lab`` page without what it fetches from CDNs: require.js, MathJax and
#: mermaid (the notebooks use none of them) and the widget manager (widgets are drawn static)
_OFFLINE_TEMPLATE = """{%- extends 'index.html.j2' -%}
{% block html_head_js_requirejs %}{% endblock html_head_js_requirejs %}
{% block html_head_js_mathjax %}{% endblock html_head_js_mathjax %}
{% block html_head_js_mermaidjs %}{% endblock html_head_js_mermaidjs %}
{% block jupyter_widgets %}{% endblock jupyter_widgets %}
"""
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
#: what a page shows for a widget that has no static view of its own
WIDGET_NOTE = (
    '<p style="color:#6a737d"><i>An interactive widget: it runs when the notebook is opened '
    "in JupyterLab.</i></p>"
)
_WIDGET_REPR = re.compile(r"^[A-Z]\w*\((children|layout|value|description|outputs|options)=")


def static_widget_outputs(nb: Any) -> int:
    """Draw a notebook's widgets without a widget manager: the saved widget state is dropped
    (nbconvert would fetch a manager from a CDN to draw it, and the page would be blank
    offline), and each widget view gives way to the output's other representation, the static
    view the explorer carries beside its widget (:func:`doppler_lab.viz.widgets.explorer_view`),
    a progress bar's text; a widget with nothing else to show gets :data:`WIDGET_NOTE`.
    Changes ``nb`` in place; returns the number of widget views replaced."""
    nb.metadata.pop("widgets", None)
    replaced = 0
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            data = out.get("data")
            if not data or WIDGET_VIEW not in data:
                continue
            del data[WIDGET_VIEW]
            replaced += 1
            plain = data.get("text/plain", "")
            if not set(data) - {"text/plain"} and (not plain or _WIDGET_REPR.match(plain)):
                data.pop("text/plain", None)
                data["text/html"] = WIDGET_NOTE
    return replaced


_MATHJAX_TAG = re.compile(r'<script src="https://[^"]*/mathjax/[^"]*"></script>')


def drop_plotly_bundles(nb: Any) -> int:
    """Remove the outputs that hold plotly.js itself (plotly's ``notebook`` renderer puts the
    library into a notebook's first chart), so that a page loads it once from where it chooses
    (:func:`~doppler_lab.viz.html.with_plotly`), and the MathJax that renderer fetches for each
    chart (the charts use no LaTeX). Changes ``nb`` in place; returns the outputs removed."""

    dropped = 0
    for cell in nb.cells:
        outputs = cell.get("outputs")
        if not outputs:
            continue
        kept = [o for o in outputs if not holds_plotly_bundle(_html_of(o))]
        dropped += len(outputs) - len(kept)
        for o in kept:
            text = _html_of(o)
            if "mathjax" in text:
                o["data"]["text/html"] = _MATHJAX_TAG.sub("", text)
        cell.outputs = kept
    return dropped


def _html_of(output: Any) -> str:
    html = output.get("data", {}).get("text/html", "")
    return "".join(html) if isinstance(html, list) else html


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
    """Configure plotly and pandas for the notebooks.

    Figures are shown as plotly's mimetype (JupyterLab draws it) and as HTML for rendered
    pages. In JupyterLab (``interactive``) that HTML comes from plotly's ``notebook`` renderer,
    which puts plotly.js into the notebook once, so that any export of it draws offline.
    Headless runs (papermill: the tests, ``doppler-lab report``) use :data:`PAGE_RENDERER`:
    each chart's HTML without the library, which :func:`render_html` loads once per page (a
    site's pages share one copy). pandas shows every row and column of a frame shown as is
    (the notebooks' tables go through :func:`doppler_lab.viz.tables.tidy`; this keeps any other
    frame whole too).
    """
    pio = require("plotly.io", "the notebooks' charts")

    if PAGE_RENDERER not in pio.renderers:
        pio.renderers[PAGE_RENDERER] = _page_renderer()
    pio.renderers.default = f"plotly_mimetype+{'notebook' if interactive else PAGE_RENDERER}"

    for option, value in (
        ("display.max_columns", None),
        ("display.max_rows", 500),
        ("display.width", 200),
        ("display.precision", 4),
    ):
        pd.set_option(option, value)


#: plotly's renderer of the headless runs: a chart's HTML without plotly.js (nor MathJax)
PAGE_RENDERER = "doppler_page"


def _page_renderer() -> Any:
    # imported here, not at the top: an optional dependency, loaded only when used
    from plotly.io import to_html
    from plotly.io.base_renderers import MimetypeRenderer

    class PageRenderer(MimetypeRenderer):
        """A chart as HTML that calls the page's plotly.js (loaded by :func:`render_html`)."""

        def to_mimebundle(self, fig_dict: dict[str, Any]) -> dict[str, str]:
            return {
                "text/html": to_html(
                    fig_dict,
                    include_plotlyjs=False,
                    include_mathjax=False,
                    full_html=False,
                    default_width="100%",
                    default_height=525,
                    config={"displaylogo": False, "responsive": True},
                    validate=False,
                )
            }

    return PageRenderer()
