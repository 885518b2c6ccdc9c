"""The report site: every notebook executed, rendered to HTML with live charts, and an index.

``doppler-lab report`` (``make reports``) runs each notebook of ``notebooks/`` headlessly with
its own defaults (a notebook's ``parameters`` cell holds its report-sized settings), or with its
``quick`` profile (``--quick``: small settings stored in the notebook's metadata under
``doppler_lab.quick``, see :func:`quick_parameters`), or with overrides from a JSON file, and
writes into the site folder (``reports/site``, the copy kept in git; ``reports/quick`` for
``--quick``)::

    index.html                  title, question, headline results, status per notebook
    site.json                   the same, machine-readable (kept across --only runs)
    assets/plotly.min.js        plotly.js, once for the whole site (and the pages' style sheet)
    <notebook>/<notebook>.ipynb the executed copy
    <notebook>/<notebook>.html  rendered, charts live and offline (plotly.js from assets/)
    <notebook>/summary.json     what the notebook recorded

Every page and the index carry the code version
(:func:`~doppler_lab.house.codeversion.code_version`) that made their numbers, and a page whose
version differs from the package's carries a visible mark, "built from an older version (X;
code is now Y)" (:func:`version_mark`). The pages are static HTML, so the mark is put in when a
page is drawn: a build draws anew every page it keeps from an earlier build whose mark was drawn
against another code version, and ``refresh`` (``doppler-lab report --refresh``) does only that,
with the index, without running a notebook. A notebook is
executed again only when its code version, its source or its parameters differ from the run the
site folder holds (else that run is reused and its page drawn anew); ``rerun`` (``--rerun``)
executes it anyway.

Key numbers on the index come from ``summary.json``: its ``key_numbers`` mapping when the
notebook writes one, else a short selection of its flat fields (numbers and short strings, and
small mappings of them flattened as ``makespans.cp``).

Example:
    >>> key_numbers({"lower_bound": 2.5, "makespans": {"cp": 3.0}, "rows": [1, 2]})
    {'lower_bound': 2.5, 'makespans.cp': 3.0}
"""

from __future__ import annotations

import datetime as dt
import hashlib
import html
import json
import os
import re
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from ...house import codeversion
from ...house.errors import ConfigError
from ...house.jsonutil import read_json, write_json
from ...house.validate import read_json_file
from ...viz.html import (
    QUICK_BANNER,
    QUICK_NOTE,
    HtmlReport,
    banner_html,
    html_table,
    inline_markdown,
    markdown_to_html,
)
from ...viz.tables import format_value
from .claims import claim_rows
from .findings import page_findings
from .notebook_runs import (
    NOTEBOOKS_DIR,
    REPO_ROOT,
    notebook_parameters,
    read_notebook,
    render_html,
    run_notebook,
    without_machine_paths,
)

SITE_FORMAT = "doppler_lab.report_site"
SITE_VERSION = 1
#: a notebook holds its quick profile in its metadata: ``{"doppler_lab": {"quick": {...}}}``
METADATA_KEY = "doppler_lab"
QUICK_KEY = "quick"

STATUSES: tuple[str, ...] = ("ok", "failed", "not run")
MAX_KEY_NUMBERS = 10
MAX_STRING = 60
#: the site folder of ``doppler-lab report`` (kept in git) and of ``--quick`` (not kept)
DEFAULT_SITE = "reports/site"
QUICK_SITE = "reports/quick"
#: the folder of the site's shared files (plotly.js), and a page's way to it
ASSETS = "assets"


# -- notebooks -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NotebookInfo:
    """What the index says about a notebook before running it.

    Attributes:
        path: the notebook file.
        title: its first markdown heading.
        question: the first paragraph after that heading (markdown).
    """

    path: Path
    title: str
    question: str

    @property
    def stem(self) -> str:
        return self.path.stem


def notebook_info(path: str | os.PathLike) -> NotebookInfo:
    """The title (first markdown heading) and question (first paragraph) of a notebook."""
    nb = read_notebook(path)
    title, question = "", ""
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        paragraphs = re.split(r"\n\s*\n", cell.source.strip())
        for para in paragraphs:
            text = para.strip()
            if not title and (m := re.match(r"#{1,6}\s+(.*)", text)):
                title = m.group(1).strip()
                rest = text[m.end() :].strip()
                if rest and not question:
                    question = rest
            elif title and not question and text and not text.startswith("#"):
                question = text
            if title and question:
                return NotebookInfo(Path(path), title, " ".join(question.split()))
    return NotebookInfo(Path(path), title or Path(path).stem, " ".join(question.split()))


def find_notebooks(
    only: Sequence[str] | None = None, notebooks_dir: str | os.PathLike | None = None
) -> list[Path]:
    """The notebooks to run, in order: all of ``notebooks_dir`` or those named in ``only``.

    A name matches a notebook by its stem (``00_quickstart``), file name, number (``00``) or
    the rest of its stem (``quickstart``).

    Raises:
        ConfigError: a name matches no notebook, or several.
    """
    folder = Path(notebooks_dir) if notebooks_dir is not None else NOTEBOOKS_DIR
    every = sorted(folder.glob("*.ipynb"))
    if not every:
        raise ConfigError(f"no notebooks in {folder}")
    if not only:
        return every
    picked: list[Path] = []
    for name in only:
        hits = [p for p in every if _matches(p.stem, name)]
        if len(hits) != 1:
            why = "matches no notebook" if not hits else f"is ambiguous ({[p.stem for p in hits]})"
            raise ConfigError(
                f"notebook {name!r} {why}; expected one of: {', '.join(p.stem for p in every)}"
            )
        if hits[0] not in picked:
            picked.append(hits[0])
    return sorted(picked)


def _matches(stem: str, name: str) -> bool:
    name = name.removesuffix(".ipynb")
    number, _, rest = stem.partition("_")
    return name in (stem, number, rest)


def quick_parameters(path: str | os.PathLike) -> dict[str, Any] | None:
    """The ``quick`` profile of a notebook: the ``doppler_lab.quick`` mapping of its metadata
    (small values of some of its parameters, for ``doppler-lab report --quick``); None when it
    has none.

    Raises:
        ConfigError: the profile is not a mapping, or names a parameter the notebook's
            ``parameters`` cell does not declare.
    """
    nb = read_notebook(path)
    meta = nb.metadata.get(METADATA_KEY, {})
    profile = meta.get(QUICK_KEY) if isinstance(meta, Mapping) else None
    if profile is None:
        return None
    where = f"notebook {Path(path).name}: metadata {METADATA_KEY}.{QUICK_KEY}"
    if not isinstance(profile, Mapping):
        raise ConfigError(f"{where} is {profile!r}; expected an object of parameter -> value")
    declared = notebook_parameters(path)
    unknown = sorted(set(profile) - set(declared))
    if unknown:
        raise ConfigError(
            f"{where} names {unknown}, not in its parameters cell; expected some of "
            f"{sorted(declared)}"
        )
    return dict(profile)


def read_params_file(path: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """Per-notebook parameter overrides from JSON: ``{"00_quickstart": {"scale": 0.1}, ...}``
    (a key may be any name :func:`find_notebooks` accepts)."""

    p = Path(path)
    doc = read_json(p, "parameters file")
    if not isinstance(doc, dict) or not all(isinstance(v, dict) for v in doc.values()):
        raise ConfigError(
            f"parameters file {str(p)!r}: expected an object of notebook name -> "
            '{"parameter": value}'
        )
    return doc


def _overrides_for(stem: str, overrides: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, params in overrides.items():
        if _matches(stem, name):
            out.update(params)
    return out


def _check_override_names(
    notebooks: Sequence[Path], overrides: Mapping[str, Mapping[str, Any]]
) -> None:
    stems = [p.stem for p in notebooks]
    for name in overrides:
        if not any(_matches(s, name) for s in stems):
            raise ConfigError(
                f"parameters given for notebook {name!r}, which is not being run "
                f"(running: {', '.join(stems)})"
            )


# -- key numbers -----------------------------------------------------------------------------------
def _scalar(value: Any) -> bool:
    if isinstance(value, bool) or value is None:
        return isinstance(value, bool)
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and 0 < len(value) <= MAX_STRING and not _path_like(value)


def _path_like(text: str) -> bool:
    """A file path (absolute, home-relative, or naming a file by its extension): not a result."""
    return text.startswith(("/", "~", "./", "../")) or bool(
        re.search(r"\.(pt|pt2|json|csv|ipynb|html|txt|npz)$", text)
    )


def key_numbers(summary: Mapping[str, Any], limit: int = MAX_KEY_NUMBERS) -> dict[str, Any]:
    """A readable selection of a notebook's ``summary.json`` for the index page.

    The summary's own ``key_numbers`` mapping when it has one; else its top-level numbers, booleans
    and short strings, and its small mappings of those (at most ``limit`` entries, flattened as
    ``name.key``); lists, deeper structures and file paths are left out. The index prefers
    a summary's ``headline`` (see :mod:`doppler_lab.lab.reporting.findings`); these are its
    fallback for notebooks without one.
    """
    own = summary.get("key_numbers")
    source = own if isinstance(own, Mapping) else summary
    out: dict[str, Any] = {}
    for key, value in source.items():
        if len(out) >= limit:
            break
        if _scalar(value):
            out[str(key)] = value
        elif isinstance(value, Mapping) and 0 < len(value) <= limit:
            if all(_scalar(v) for v in value.values()):
                for k, v in value.items():
                    if len(out) >= limit:
                        break
                    out[f"{key}.{k}"] = v
    return out


# -- results ---------------------------------------------------------------------------------------
@dataclass
class NotebookResult:
    """One notebook's line on the index.

    Attributes:
        stem: the notebook's name without ``.ipynb``.
        title, question: from :func:`notebook_info`.
        status: ``ok``, ``failed`` or ``not run``.
        seconds: wall time of execution and rendering.
        profile: ``defaults``, ``quick`` or ``custom`` (overrides given).
        parameters: the parameters passed besides the defaults (``out_dir`` excluded).
        key_numbers: from :func:`key_numbers` (the card's fallback when there is no headline).
        headline: the summary's headline results (``label``, ``value``, ``unit``, ``passed``;
            see :mod:`doppler_lab.lab.reporting.findings`).
        findings: the summary's findings paragraph.
        error: the failure, one line (``ExceptionName: message``).
        page: the rendered page, relative to the site folder (None when none was written).
        finished: ISO time stamp of the run.
        code_version: the code version the notebook ran with (see
            :func:`~doppler_lab.house.codeversion.code_version`).
        notebook_digest: the digest of the notebook's cells it ran (:func:`notebook_digest`).
        reused: this build reused the run (same code version, notebook and parameters) and
            drew its page anew.
        drawn_with: the package's code version when the page was last drawn (its
            :func:`version_mark` is true of that version).
    """

    stem: str
    title: str
    question: str
    status: str = "not run"
    seconds: float | None = None
    profile: str = "defaults"
    parameters: dict[str, Any] = field(default_factory=dict)
    key_numbers: dict[str, Any] = field(default_factory=dict)
    headline: list[dict[str, Any]] = field(default_factory=list)
    findings: str | None = None
    error: str | None = None
    page: str | None = None
    finished: str | None = None
    code_version: str | None = None
    notebook_digest: str | None = None
    reused: bool = False
    drawn_with: str | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ConfigError(f"notebook {self.stem}: status {self.status!r}; expected {STATUSES}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> NotebookResult:
        names = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True)
class Site:
    """A built site.

    Attributes:
        out_dir: its folder.
        index: the index page.
        results: one per notebook shown (those run now and those kept from earlier runs).
        ran: stems of the notebooks run by this build.
    """

    out_dir: Path
    index: Path
    results: list[NotebookResult]
    ran: list[str]

    @property
    def failed(self) -> list[str]:
        """Notebooks of this build that failed or did not run."""
        by_stem = {r.stem: r for r in self.results}
        return [s for s in self.ran if by_stem[s].status != "ok"]

    @property
    def ok(self) -> bool:
        return not self.failed


def _error_line(exc: BaseException) -> str:
    ename, evalue = getattr(exc, "ename", None), getattr(exc, "evalue", None)
    if ename:  # papermill's PapermillExecutionError: the notebook's own exception
        cell = getattr(exc, "exec_count", None)
        where = f" (cell [{cell}])" if cell is not None else ""
        return f"{ename}: {evalue}{where}"
    return f"{type(exc).__name__}: {exc}".strip()


def run_one(
    info: NotebookInfo,
    out_dir: Path,
    parameters: Mapping[str, Any],
    profile: str,
    timeout_s: int,
    progress: bool = False,
) -> NotebookResult:
    """Execute and render one notebook into ``out_dir/<stem>/``; failures are recorded, not
    raised (the executed copy is rendered anyway, so its page shows the traceback)."""
    folder = out_dir / info.stem
    executed = folder / info.path.name
    page = folder / f"{info.stem}.html"

    result = NotebookResult(
        info.stem,
        info.title,
        info.question,
        profile=profile,
        parameters=dict(parameters),
        code_version=codeversion.code_version(),
        notebook_digest=notebook_digest(info.path),
    )
    for stale in (executed, page, folder / "summary.json"):
        stale.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        summary = run_notebook(
            info.path, folder, parameters, timeout_s=timeout_s, progress=progress
        )
        result.status = "ok"
        result.key_numbers = key_numbers(summary)
        result.headline, result.findings = _headline(summary)
    except Exception as exc:  # a failing notebook is reported on the index, not fatal
        result.status = "failed"
        result.error = _error_line(exc)
    result.finished = dt.datetime.now().isoformat(timespec="seconds")
    if executed.exists():
        draw_page(result, info, out_dir)
    result.seconds = round(time.perf_counter() - t0, 2)
    return result


def draw_page(result: NotebookResult, info: NotebookInfo, out_dir: Path) -> None:
    """Render ``result``'s executed notebook to its page (plotly.js from the site's assets,
    the quick banner, the code version); a failure to render is recorded in ``result``."""

    folder = out_dir / info.stem
    page = folder / f"{info.stem}.html"
    banners = [_quick_banner() if result.profile == "quick" else None, version_mark(result)]
    try:
        render_html(
            folder / info.path.name,
            page,
            back_link="../index.html",
            title=info.title,
            banner=" · ".join(b for b in banners if b) or None,
            assets_dir=out_dir / ASSETS,
            stamp=page_stamp(result),
        )
        result.page = page.relative_to(out_dir).as_posix()
        result.drawn_with = codeversion.code_version()
    except Exception as exc:  # e.g. a corrupt partial notebook
        result.status = "failed"
        result.error = (result.error + "; " if result.error else "") + _error_line(exc)


def version_mark(result: NotebookResult) -> str | None:
    """The mark of a page built from other code than the package's now: ``built from an older
    version (X; code is now Y)``; None when the versions agree or nothing ran."""

    now = codeversion.code_version()
    if result.status == "not run" or result.code_version == now:
        return None
    return (
        f"built from an older version ({result.code_version or 'not recorded'}; code is now {now})"
    )


def page_stamp(result: NotebookResult) -> str:
    """The line a page carries: the code version that made its numbers, and when it ran."""
    parts = [f"code version `{result.code_version or 'unknown'}`"]
    if result.finished:
        parts.append(f"ran {result.finished.replace('T', ' ')[:16]}")
    return " · ".join(parts)


def notebook_digest(path: str | os.PathLike) -> str:
    """A 12-hex digest of a notebook's cells (their kinds and sources; not outputs or
    metadata): an edited notebook is run again, a notebook saved with outputs is not."""
    nb = read_notebook(path)
    h = hashlib.sha256()
    for cell in nb.cells:
        h.update(f"{cell.cell_type}\0{cell.source}\0".encode())
    return h.hexdigest()[:12]


def reusable(
    earlier: NotebookResult | None,
    info: NotebookInfo,
    parameters: Mapping[str, Any],
    profile: str,
    out_dir: Path,
) -> bool:
    """Whether the site folder holds a run of this notebook that a build may reuse: it
    succeeded with the same code version, the same notebook cells and the same parameters, and
    its executed copy, ``summary.json`` and page are there (:func:`why_not_reused`)."""

    return why_not_reused(earlier, info, parameters, profile, out_dir) is None


def why_not_reused(
    earlier: NotebookResult | None,
    info: NotebookInfo,
    parameters: Mapping[str, Any],
    profile: str,
    out_dir: Path,
) -> str | None:
    """Why a build would run this notebook again rather than reuse ``earlier``, its last run in
    the site folder: ``never built``, ``failed last time``, ``code changed``, ``notebook
    edited``, ``other parameters`` or ``files missing`` (its executed copy, ``summary.json``
    or page); None where it would reuse it."""
    if earlier is None or earlier.status == "not run":
        return "never built"
    if earlier.status != "ok":
        return "failed last time"
    if earlier.code_version != codeversion.code_version():
        return "code changed"
    if earlier.notebook_digest != notebook_digest(info.path):
        return "notebook edited"
    if earlier.parameters != dict(parameters) or earlier.profile != profile:
        return "other parameters"
    folder = out_dir / info.stem
    kept = (folder / info.path.name, folder / "summary.json")
    if earlier.page is None or not all(p.exists() for p in (*kept, out_dir / earlier.page)):
        return "files missing"
    return None


def site_folder(out_dir: str | os.PathLike | None, quick: bool) -> Path:
    """The site folder a build writes: ``out_dir``, else :data:`DEFAULT_SITE` (with ``quick``:
    :data:`QUICK_SITE`)."""
    return Path(out_dir if out_dir is not None else QUICK_SITE if quick else DEFAULT_SITE).resolve()


def plan_builds(
    only: Sequence[str] | None = None,
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
    quick: bool = False,
    notebooks_dir: str | os.PathLike | None = None,
    progress: bool = False,
) -> list[tuple[NotebookInfo, dict[str, Any], str]]:
    """What a build runs: per notebook its info, the parameters it is given and its profile
    (``defaults``, ``quick`` or ``custom``), in order; the arguments are
    :func:`build_site`'s.

    Raises:
        ConfigError: an override names a notebook not being run, or a parameter that is not
            in the notebook's parameters cell (before anything runs).
    """
    notebooks = find_notebooks(only, notebooks_dir)
    overrides = dict(parameters or {})
    _check_override_names(notebooks, overrides)
    plans = []
    for info in (notebook_info(p) for p in notebooks):
        params = quick_parameters(info.path) if quick else {}
        if params is None and progress:
            tqdm.write(f"note: {info.stem} has no quick profile; it runs with its defaults")
        profile = "quick" if quick and params is not None else "defaults"
        extra = _overrides_for(info.stem, overrides)
        if extra:
            profile = "custom"
            # before anything runs: a misspelt parameter failed the notebook after its build
            unknown = sorted(set(extra) - set(notebook_parameters(info.path)))
            if unknown:
                raise ConfigError(
                    f"parameters for notebook {info.stem}: {', '.join(map(repr, unknown))} "
                    f"not in its parameters cell; expected some of "
                    f"{', '.join(sorted(notebook_parameters(info.path)))}"
                )
        plans.append((info, {**(params or {}), **extra}, profile))
    return plans


@dataclass(frozen=True)
class PageStatus:
    """Where one notebook's page stands in a site folder, against what a build would run now.

    Attributes:
        stem: the notebook.
        reuse: whether a build now would reuse the page (same code version, notebook cells,
            parameters and profile, its files all there) rather than run the notebook.
        why: what a build would do and why (``reused``, ``code changed``, ``notebook
            edited``, ``other parameters``, ``failed last time``, ``never built``, ``files
            missing``).
        result: the page's last result in the folder (None: never built there).
    """

    stem: str
    reuse: bool
    why: str
    result: NotebookResult | None


def site_status(
    out_dir: str | os.PathLike | None = None,
    only: Sequence[str] | None = None,
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
    quick: bool = False,
    notebooks_dir: str | os.PathLike | None = None,
) -> list[PageStatus]:
    """Per notebook a build would run (:func:`plan_builds`), whether that build would reuse
    the page kept in the site folder or run the notebook again, and why; nothing runs."""
    out = site_folder(out_dir, quick)
    earlier = {r.stem: r for r in read_site(out)} if out.is_dir() else {}
    pages = []
    for info, params, profile in plan_builds(only, parameters, quick, notebooks_dir):
        r = earlier.get(info.stem)
        why = why_not_reused(r, info, params, profile, out)
        pages.append(PageStatus(info.stem, why is None, why or "reused", r))
    return pages


def build_site(
    out_dir: str | os.PathLike | None = None,
    only: Sequence[str] | None = None,
    parameters: Mapping[str, Mapping[str, Any]] | None = None,
    quick: bool = False,
    keep_going: bool = False,
    progress: bool = True,
    timeout_s: int = 3600,
    notebooks_dir: str | os.PathLike | None = None,
    command: str | None = None,
    rerun: bool = False,
) -> Site:
    """Execute the notebooks, render each to HTML, and write ``index.html`` and ``site.json``.

    Its parameters are ``doppler-lab report``'s flags, passed through by the command.

    Args:
        out_dir: the site folder (default :data:`DEFAULT_SITE`, :data:`QUICK_SITE` when
            ``quick``).
        only: names of the notebooks to run (see :func:`find_notebooks`); default all. The
            index keeps the other notebooks' earlier results found in ``site.json``.
        parameters: per-notebook overrides, applied over the quick profile.
        quick: use each notebook's quick profile (see :func:`quick_parameters`).
        keep_going: after a failure, run the remaining notebooks (else they are "not run").
        progress: tqdm bars (notebooks, and cells of the running notebook).
        timeout_s: limit per notebook cell.
        notebooks_dir: where the notebooks are (default ``notebooks/``).
        command: the command line shown on the index page.
        rerun: execute every notebook run, even one whose earlier run in ``out_dir`` had the
            same code version, notebook and parameters (by default that run is reused).

    Returns:
        The :class:`Site`; ``site.ok`` is False when a notebook failed.
    """

    out = site_folder(out_dir, quick)
    plans = plan_builds(only, parameters, quick, notebooks_dir, progress)
    out.mkdir(parents=True, exist_ok=True)
    earlier = {r.stem: r for r in read_site(out)}
    fresh: dict[str, NotebookResult] = {}
    failed = False
    bar = tqdm(plans, desc="notebooks", unit="nb", disable=not progress)
    for info, params, profile in bar:
        if failed and not keep_going:
            fresh[info.stem] = NotebookResult(info.stem, info.title, info.question, profile=profile)
            continue
        bar.set_postfix_str(info.stem)
        before = earlier.get(info.stem)
        if not rerun and reusable(before, info, params, profile, out):
            res = replace(before, title=info.title, question=info.question, reused=True)
            draw_page(res, info, out)
            how = "reused (same code version, notebook and parameters; --rerun runs it)"
        else:
            res = run_one(info, out, params, profile, timeout_s, progress=progress)
            how = f"{res.seconds:.1f} s"
        fresh[info.stem] = res
        failed = failed or res.status != "ok"
        if progress:
            bar.write(f"{res.status:>6}  {info.stem}  {how}" + _tail(res.error))
    bar.close()
    results = _merge(out, fresh, notebooks_dir)
    index = write_index(out, results, command=command)
    return Site(out, index, results, list(fresh))


def _quick_banner() -> str:

    return QUICK_BANNER


def _tail(error: str | None) -> str:
    return f"  {error}" if error else ""


def _merge(
    out: Path, fresh: Mapping[str, NotebookResult], notebooks_dir: str | os.PathLike | None
) -> list[NotebookResult]:
    """This build's results, plus earlier ones (from ``site.json``) of the other notebooks that
    still exist, plus "not run" lines for notebooks never run; in notebook order."""
    earlier = {r.stem: r for r in read_site(out)}
    results = []
    for path in find_notebooks(None, notebooks_dir):
        stem = path.stem
        if stem in fresh:
            results.append(fresh[stem])
            continue
        if (
            stem in earlier
            and earlier[stem].status != "not run"
            and (earlier[stem].page is None or (out / earlier[stem].page).exists())
        ):
            kept: NotebookResult | None = earlier[stem]
        else:
            kept = recovered_result(out, notebook_info(path))
        if kept is None:
            info = notebook_info(path)
            results.append(NotebookResult(stem, info.title, info.question))
            continue
        redraw_if_stale(kept, path, out)
        refresh_headline(kept, out)
        results.append(kept)
    return results


def refresh_headline(result: NotebookResult, out_dir: Path) -> bool:
    """A kept page's headline results drawn anew from its ``summary.json`` by today's
    findings code, which reads a page's numbers and makes none (it is outside the code
    version), so an index and claims table built later show what it now draws from them
    (e.g. the numbers behind a verdict). Only where the paragraph it draws is the one the
    page shows: a page whose findings would now read differently keeps its headline until it
    runs again. Writes the headline into ``summary.json`` too; returns whether it changed."""
    path = out_dir / result.stem / "summary.json"
    if result.status != "ok" or not path.is_file():
        return False
    summary = read_json(path)
    try:
        found = page_findings(result.stem, summary)
    except (ConfigError, KeyError, TypeError, ValueError, IndexError):
        return False  # a summary of an older layout: its page keeps what it ran with
    if found.text != summary.get("findings") or found.headline == summary.get("headline"):
        return False
    result.headline = [dict(h) for h in found.headline]
    write_json(path, {**summary, "headline": found.headline})
    return True


def redraw_if_stale(result: NotebookResult, path: Path, out_dir: Path) -> bool:
    """Draw a kept page anew (from its executed copy) when its :func:`version_mark` was drawn
    against another code version than the package's now; returns whether it was drawn."""

    info = notebook_info(path)
    if (
        result.drawn_with == codeversion.code_version()
        or not (out_dir / info.stem / path.name).exists()
    ):
        return False
    draw_page(result, info, out_dir)
    return True


def refresh_site(
    out_dir: str | os.PathLike | None = None,
    notebooks_dir: str | os.PathLike | None = None,
    command: str | None = None,
) -> Site:
    """Draw the site's pages whose version marks are out of date, and its index, anew from
    the runs the site folder holds, running no notebook (``doppler-lab report --refresh``)."""
    out = Path(out_dir if out_dir is not None else DEFAULT_SITE).resolve()
    if not (out / "site.json").exists():
        raise ConfigError(f"{out_dir or DEFAULT_SITE}: no report site to refresh (no site.json)")
    results = _merge(out, {}, notebooks_dir)
    return Site(out, write_index(out, results, command=command), results, [])


def _headline(summary: Mapping[str, Any]) -> tuple[list[dict[str, Any]], str | None]:
    """A summary's headline results (well-formed entries only) and findings paragraph."""
    rows = summary.get("headline")
    headline = [
        dict(h) for h in rows or [] if isinstance(h, Mapping) and "label" in h and "value" in h
    ] if isinstance(rows, list) else []  # fmt: skip
    text = summary.get("findings")
    return headline, text if isinstance(text, str) and text.strip() else None


#: what :func:`run_notebook` passes every notebook besides ``out_dir`` (not an override)
_HEADLESS = (("interactive", False),)


def recovered_result(out_dir: str | os.PathLike, info: NotebookInfo) -> NotebookResult | None:
    """A notebook's line rebuilt from what an earlier build left on disk (its executed copy,
    ``summary.json`` and page) when ``site.json`` does not list it, e.g. after that build was
    interrupted before writing the index; None when any of the three is missing."""
    folder = Path(out_dir) / info.stem
    executed, page, summary = (
        folder / info.path.name,
        folder / f"{info.stem}.html",
        folder / "summary.json",
    )
    if not (executed.exists() and page.exists() and summary.exists()):
        return None
    meta = json.loads(executed.read_text(encoding="utf-8")).get("metadata", {}).get("papermill", {})
    given = meta.get("parameters") or {}
    params = {k: v for k, v in given.items() if (k, v) not in _HEADLESS and k != "out_dir"}
    failed = bool(meta.get("exception"))
    doc = {} if failed else json.loads(summary.read_text())
    headline, findings = _headline(doc)
    quick = info.path.exists() and params == (quick_parameters(info.path) or None)
    return NotebookResult(
        info.stem,
        info.title,
        info.question,
        status="failed" if failed else "ok",
        seconds=meta.get("duration"),
        profile="quick" if quick else "custom" if params else "defaults",
        parameters=params,
        key_numbers=key_numbers(doc),
        headline=headline,
        findings=findings,
        error="failed in an earlier build (see its page)" if failed else None,
        page=page.relative_to(Path(out_dir)).as_posix(),
        finished=(meta.get("end_time") or "")[:19] or None,
    )


def read_site(out_dir: str | os.PathLike) -> list[NotebookResult]:
    """The results recorded in ``out_dir/site.json`` (empty when there is none)."""

    path = Path(out_dir) / "site.json"
    if not os.path.lexists(path):
        return []
    doc = read_json_file(path)  # a regular file within MAX_FILE_BYTES, strict JSON
    got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
    if got != SITE_FORMAT:
        raise ConfigError(f"{path} is not a report site index (format {got!r})")
    return [NotebookResult.from_dict(r) for r in doc.get("notebooks", [])]


# -- index page ------------------------------------------------------------------------------------
_INDEX_CSS = """
<style>
.status { display:inline-block; padding:1px 9px; border-radius:10px; font-size:.85em; font-weight:600; }
.status.ok, .status.met { background:#dafbe1; color:#116329; }
.status.failed, .status.missed { background:#ffebe9; color:#a40e26; }
.status.not-run, .status.unmeasured, .status.not-tested { background:#eaeef2; color:#57606a; }
.status.supports { background:#dafbe1; color:#116329; }
.status.contradicts { background:#ffebe9; color:#a40e26; }
.status.inconclusive { background:#fff8c5; color:#7d4e00; }
section.nb { border:1px solid var(--line); border-radius:8px; padding:4px 20px 12px; margin:18px 0; }
section.nb h2 { border:none; margin-top:.6em; }
section.nb .meta { color:var(--muted); font-size:.9em; }
section.nb pre.error { background:#fff5f5; color:#a40e26; white-space:pre-wrap; }
section.nb p.findings { border-left:3px solid var(--accent); padding-left:10px; }
.keys { display:flex; flex-wrap:wrap; gap:8px; margin:.6em 0 .8em; }
.keys div { border:1px solid var(--line); border-radius:6px; padding:4px 10px; min-width:90px; max-width:340px; }
.keys div.met { border-color:#4ac26b; } .keys div.missed { border-color:#ff8182; }
.keys span { display:block; color:var(--muted); font-size:.78em; }
.keys b { font-weight:600; font-variant-numeric:tabular-nums; }
.keys i { font-style:normal; font-size:.78em; margin-left:6px; }
details.params { color:var(--muted); font-size:.9em; }
td.title { white-space:normal; min-width:260px; }
.doppler-banner { display:inline-block; }
</style>
"""

#: how the index names the profile a notebook ran with
PROFILE_NAMES = {
    "quick": "quick profile (smoke-test sizes)",
    "defaults": "report-sized defaults",
    "custom": "custom parameters",
}


def _format_value(value: Any) -> str:

    return html.escape(format_value(value))


def _status_badge(status: str) -> str:
    return f'<span class="status {status.replace(" ", "-")}">{html.escape(status)}</span>'


def _title_html(r: NotebookResult) -> str:

    return inline_markdown(r.title)


def _link(r: NotebookResult, inner: str) -> str:
    """``inner`` (HTML) linked to the notebook's page when it has one."""
    if r.page is None:
        return inner
    return f'<a href="{html.escape(r.page)}">{inner}</a>'


def _seconds(s: float | None) -> str:
    if s is None:
        return "–"
    return f"{s:.1f} s" if s < 120 else f"{s / 60:.1f} min"


def _targets(r: NotebookResult) -> tuple[int, int, int]:
    """Targets met, missed and not measured among a notebook's headline results."""
    verdicts = [h.get("passed") for h in r.headline if h.get("target") is not None]
    return verdicts.count(True), verdicts.count(False), verdicts.count(None)


def _targets_badge(r: NotebookResult) -> str:
    met, missed, unmeasured = _targets(r)
    if not met + missed + unmeasured:
        return ""
    kind = "missed" if missed else "met" if met else "unmeasured"
    text = f"targets: {met} of {met + missed + unmeasured} met" + (
        f", {unmeasured} not measured" if unmeasured else ""
    )
    return f'<span class="status {kind}">{text}</span>'


def _overview(results: Sequence[NotebookResult]) -> str:

    rows = (
        f"<td>{_link(r, html.escape(r.stem))}</td><td class='title'>{_title_html(r)}</td>"
        f"<td>{_status_badge(r.status)} {_targets_badge(r)}</td>"
        f"<td class='num'>{_seconds(r.seconds)}</td>"
        f"<td>{html.escape(r.profile)}</td>"
        for r in results
    )
    head = (
        "<th>notebook</th><th>title</th><th>status</th><th class='num'>run time</th>"
        "<th>profile</th>"
    )
    return html_table(head, rows)


def site_claims(results: Sequence[NotebookResult]) -> list[dict[str, Any]]:
    """The paper's claims with the page that tests each, its verdict and its numbers
    (:func:`~doppler_lab.lab.reporting.claims.claim_rows`), from the headline results of the
    pages that ran."""

    ran = {r.stem.partition("_")[0]: r.headline for r in results if r.status == "ok"}
    return claim_rows(ran)


def _claims_table(results: Sequence[NotebookResult], claims: Sequence[Mapping[str, Any]]) -> str:
    """The index's claims table: claim, the page that tests it (linked), verdict, numbers."""

    by_number = {r.stem.partition("_")[0]: r for r in results}
    rows = []
    for c in claims:
        page = by_number.get(c["page"]) if c["page"] else None
        cell = "" if page is None else _link(page, html.escape(page.stem))
        rows.append(
            f"<td class='title'>{html.escape(c['claim'])}</td><td>{cell}</td>"
            f"<td>{_status_badge(c['verdict'])}</td><td>{html.escape(c['numbers'])}</td>"
        )
    head = "<th>claim of the paper</th><th>page</th><th>verdict</th><th>numbers behind it</th>"
    return html_table(head, rows)


def _headline_boxes(r: NotebookResult) -> str:

    boxes = []
    for h in r.headline:
        value = format_value(h.get("value"), h.get("unit")) or "not measured"
        passed, target = h.get("passed"), h.get("target")
        kind = "" if target is None or passed is None else " met" if passed else " missed"
        verdict = "not judged" if passed is None else "met" if passed else "missed"
        mark = "" if target is None else f"<i>target {html.escape(str(target))}: {verdict}</i>"
        boxes.append(
            f'<div class="{kind.strip()}"><span>{html.escape(str(h["label"]))}</span>'
            f"<b>{html.escape(value)}</b>{mark}</div>"
        )
    return f'<div class="keys">{"".join(boxes)}</div>' if boxes else ""


def _section(r: NotebookResult) -> str:

    parts = [f'<section class="nb" id="{html.escape(r.stem)}">']
    parts.append(f"<h2>{_link(r, _title_html(r))}</h2>")
    meta = [_status_badge(r.status)]
    if badge := _targets_badge(r):
        meta.append(badge)
    meta.append(f"<code>{html.escape(r.stem)}</code>")
    if r.seconds is not None:
        meta.append(f"ran in {_seconds(r.seconds)}")
    if r.finished:
        meta.append(f"on {html.escape(r.finished.replace('T', ' '))}")
    if r.code_version:
        meta.append(f"code version <code>{html.escape(r.code_version)}</code>")
    if r.reused:
        meta.append("reused by this build (same code version, notebook and parameters)")
    meta.append(html.escape(PROFILE_NAMES.get(r.profile, r.profile)))
    parts.append(f'<p class="meta">{" · ".join(meta)}</p>')
    if r.profile == "quick" and r.status != "not run":
        parts.append(f"<p>{banner_html('quick profile: smoke-test sizes')}</p>")
    if mark := version_mark(r):
        parts.append(f"<p>{banner_html(mark)}</p>")
    if r.question:
        parts.append(markdown_to_html(r.question))
    if r.error:
        parts.append(f'<pre class="error">{html.escape(r.error)}</pre>')
    if r.headline:
        parts.append(_headline_boxes(r))
    elif r.key_numbers:
        boxes = "".join(
            f"<div><span>{html.escape(k)}</span><b>{_format_value(v)}</b></div>"
            for k, v in r.key_numbers.items()
        )
        parts.append(f'<div class="keys">{boxes}</div>')
    if r.findings:
        parts.append(
            f'<p class="findings"><strong>Findings.</strong> {html.escape(r.findings)}</p>'
        )
    if r.parameters:
        shown = ", ".join(f"{k}={v!r}" for k, v in r.parameters.items())
        parts.append(
            f'<details class="params"><summary>parameters ({html.escape(r.profile)})</summary>'
            f"<code>{html.escape(shown)}</code></details>"
        )
    if r.page:
        parts.append(f"<p>{_link(r, 'open the notebook report →')}</p>")
    parts.append("</section>")
    return "".join(parts)


def site_profile(results: Sequence[NotebookResult]) -> str:
    """Which profile built the site: ``quick``, ``defaults``, ``custom``, ``mixed`` (notebooks
    ran with different ones) or ``none`` (nothing ran)."""
    ran = {r.profile for r in results if r.status != "not run"}
    return ran.pop() if len(ran) == 1 else "mixed" if ran else "none"


def _profile_line(results: Sequence[NotebookResult]) -> str:
    profile = site_profile(results)
    if profile == "mixed":
        counts: dict[str, int] = {}
        for r in results:
            if r.status != "not run":
                counts[r.profile] = counts.get(r.profile, 0) + 1
        return "built with mixed profiles: " + ", ".join(
            f"{n} with the {PROFILE_NAMES.get(p, p)}" for p, n in counts.items()
        )
    return f"built with the {PROFILE_NAMES.get(profile, profile)}"


def code_versions_line(results: Sequence[NotebookResult]) -> str:
    """The index's stamp: the code version that made the pages' numbers (or each version with
    its count of pages, when pages kept from earlier builds ran with other code)."""
    counts: dict[str, int] = {}
    for r in results:
        if r.status != "not run":
            key = r.code_version or "unknown"
            counts[key] = counts.get(key, 0) + 1
    if not counts:
        return "no pages yet"
    if len(counts) == 1:
        return f"code version `{next(iter(counts))}`"
    return "code versions " + ", ".join(f"`{v}` ({n} pages)" for v, n in counts.items())


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO_ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def write_index(
    out_dir: str | os.PathLike, results: Sequence[NotebookResult], command: str | None = None
) -> Path:
    """Write ``index.html`` and ``site.json`` for ``results``; returns the index path."""

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ok = sum(r.status == "ok" for r in results)
    bad = sum(r.status == "failed" for r in results)
    stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M")
    commit = _commit()
    sub = [
        f"built {stamp}" + (f" at commit `{commit}`" if commit else ""),
        code_versions_line(results),
        _profile_line(results),
    ]
    sub.append(
        f"{len(results)} notebooks: {ok} ok, {bad} failed, {len(results) - ok - bad} not run"
    )
    if command:
        sub.append(f"`{without_machine_paths(command, out)}`")
    report = HtmlReport("doppler_lab: experiment reports", subtitle=" · ".join(sub), toc=False)
    report.html(_INDEX_CSS)

    if any(r.profile == "quick" and r.status != "not run" for r in results):
        report.html(f"<p>{banner_html(QUICK_NOTE)}</p>")
    stale = [r.stem for r in results if version_mark(r)]
    if stale:
        report.html(
            f"<p>{banner_html(f'{len(stale)} of {len(results)} pages built from an older version (code is now `{codeversion.code_version()}`)')}</p>"
        )
        report.text(
            f"Pages built from an older version show numbers of other code: run them again "
            f"with `doppler-lab report --only {' '.join(s.partition('_')[0] for s in stale)}`."
        )
    report.text(
        "Each notebook asks one question about learned device placement (DOPPLER) and answers it "
        "with the package; it was executed headlessly and rendered with its charts live. "
        "Regenerate with `make reports` (report-sized defaults; notebooks whose code version, "
        "cells and parameters are unchanged are reused) or `doppler-lab report --quick`."
    )
    report.html(_overview(results))
    claims = site_claims(results)
    report.html("<h2 id='claims'>The paper's claims</h2>")
    report.text(
        "Each claim of the DOPPLER paper, the page that tests it and that page's verdict: "
        "'supports' only where the 95% interval of the paired differences excludes no "
        "difference in the claimed direction, 'contradicts' where it excludes it in the other, "
        "'inconclusive' otherwise (or where the page gives no interval); 'not tested' where no "
        "page has run it."
    )
    report.html(_claims_table(results, claims))
    for r in results:
        report.html(_section(r))
    index = report.write(out / "index.html")

    doc = {
        "format": SITE_FORMAT,
        "version": SITE_VERSION,
        "built": dt.datetime.now().isoformat(timespec="seconds"),
        "commit": commit,
        "code_version": codeversion.code_version(),
        "command": command,
        "profile": site_profile(results),
        "notebooks": [asdict(r) for r in results],
        "claims": claims,
    }

    write_json(out / "site.json", doc)
    return index
