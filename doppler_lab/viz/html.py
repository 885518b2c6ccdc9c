"""A small builder of self-contained HTML reports: headings, text, tables and plotly figures;
and the pieces every report writer shares (the report site's index and notebook pages, the
demo, the bench tables, the shipped checkpoints' README): the table skeleton
(:func:`html_table`), Markdown tables with their cell format (:func:`markdown_table`,
:func:`format_cell`) and the link back to an index (:func:`with_back_link`).

The page embeds plotly.js once, in its head (only when it has figures), so it opens offline
and each figure adds only its own data.

Example:
    >>> report = HtmlReport("Demo")
    >>> _ = report.heading("Results").text("Makespan **ratio** to the lower bound.")
    >>> _ = report.table([{"graph": "ffnn", "ratio": 1.4849}])
    >>> "<table" in report.to_html()
    True
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..house.deps import require
from ..house.errors import ConfigError

_CSS = """
:root { --fg:#1f2328; --muted:#6a737d; --line:#d8dee4; --stripe:#f6f8fa; --accent:#3b75af; }
* { box-sizing: border-box; }
body { margin:0; color:var(--fg); background:#fff;
  font:15px/1.55 -apple-system,BlinkMacSystemFont,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif; }
main { max-width:1240px; margin:0 auto; padding:28px 28px 60px; }
h1 { font-size:1.9em; margin:0 0 .2em; }
h2 { font-size:1.4em; margin:1.8em 0 .5em; padding-bottom:.25em; border-bottom:1px solid var(--line); }
h3 { font-size:1.15em; margin:1.4em 0 .4em; }
h4,h5,h6 { font-size:1em; margin:1.2em 0 .3em; }
p.subtitle { color:var(--muted); margin:0 0 1.2em; }
a { color:var(--accent); }
code { font:0.9em/1.4 ui-monospace,SFMono-Regular,Menlo,Consolas,monospace; background:var(--stripe);
  padding:.1em .3em; border-radius:4px; }
pre { background:var(--stripe); padding:12px 14px; border-radius:6px; overflow:auto; }
pre code { background:none; padding:0; }
nav.toc { border:1px solid var(--line); border-radius:6px; padding:8px 16px; margin:1em 0; display:inline-block; }
nav.toc ul { margin:.3em 0; padding-left:1.2em; }
.table-wrap { overflow-x:auto; margin:.8em 0 1.4em; }
table { border-collapse:collapse; font-size:.92em; }
caption { caption-side:top; text-align:left; color:var(--muted); padding-bottom:.4em; }
th, td { padding:5px 12px; border-bottom:1px solid var(--line); text-align:left; white-space:nowrap; }
th { border-bottom:2px solid var(--line); font-weight:600; background:#fff; position:sticky; top:0; }
tbody tr:nth-child(even) { background:var(--stripe); }
tbody tr:hover { background:#eef4fb; }
td.num, th.num { text-align:right; font-variant-numeric:tabular-nums; }
td.na { color:var(--muted); }
figure { margin:1em 0 1.6em; }
figcaption { color:var(--muted); font-size:.92em; margin-top:.3em; }
"""

_MD_INLINE = (
    (re.compile(r"\*\*(.+?)\*\*"), r"<strong>\1</strong>"),
    (re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])"), r"<em>\1</em>"),
    (re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)"), r'<a href="\2">\1</a>'),
)


def _inline(text: str) -> str:
    """Escape ``text`` and apply inline markdown: `code`, **bold**, *em*, [link](url)."""
    parts = text.split("`")
    out = []
    for i, part in enumerate(parts):
        if i % 2 == 1 and i < len(parts) - 1:
            out.append(f"<code>{html.escape(part, quote=False)}</code>")
            continue
        s = html.escape(part if i % 2 == 0 else "`" + part, quote=False)
        for pattern, repl in _MD_INLINE:
            s = pattern.sub(repl, s)
        out.append(s)
    return "".join(out)


def _pipe_row(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def markdown_to_html(text: str) -> str:
    """A small markdown subset: ``#`` headings, paragraphs, ``-``/``1.`` lists, fenced code
    blocks, pipe tables, and inline `code`, **bold**, *em*, [links](url)."""
    out: list[str] = []
    lines = text.strip("\n").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        if not stripped:
            i += 1
        elif stripped.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith("```"):
                j += 1
            code = "\n".join(lines[i + 1 : j])
            out.append(f"<pre><code>{html.escape(code, quote=False)}</code></pre>")
            i = j + 1
        elif m := re.match(r"(#{1,6})\s+(.*)", stripped):
            level = len(m.group(1))
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
            i += 1
        elif stripped.startswith("|"):
            block = []
            while i < len(lines) and lines[i].strip().startswith("|"):
                block.append(lines[i])
                i += 1
            out.append(_pipe_table(block))
        elif re.match(r"([-*]|\d+\.)\s+", stripped):
            ordered = bool(re.match(r"\d+\.", stripped))
            items = []
            while i < len(lines) and (m := re.match(r"\s*(?:[-*]|\d+\.)\s+(.*)", lines[i])):
                items.append(f"<li>{_inline(m.group(1))}</li>")
                i += 1
            tag = "ol" if ordered else "ul"
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
        else:
            para = []
            while (
                i < len(lines)
                and lines[i].strip()
                and not re.match(r"(#{1,6}\s|```|\||[-*]\s|\d+\.\s)", lines[i].strip())
            ):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
    return "\n".join(out)


def _pipe_table(block: list[str]) -> str:
    rows = [_pipe_row(r) for r in block if not re.fullmatch(r"\s*\|?[\s:|-]+\|?\s*", r)]
    if not rows:
        return ""
    head = "".join(f"<th>{_inline(c)}</th>" for c in rows[0])
    return html_table(head, ("".join(f"<td>{_inline(c)}</td>" for c in r) for r in rows[1:]))


def html_table(header: str, rows: Iterable[str], caption: str = "") -> str:
    """The reports' table around ready cells: ``header`` the ``<th>`` cells, each of ``rows``
    one row's ``<td>`` cells, ``caption`` a ``<caption>`` element (or nothing); wide tables
    scroll in their ``table-wrap``."""
    body = "".join(f"<tr>{r}</tr>" for r in rows)
    return (
        f'<div class="table-wrap"><table>{caption}<thead><tr>{header}</tr></thead>'
        f"<tbody>{body}</tbody></table></div>"
    )


def format_cell(x: Any) -> str:
    """A table cell as :mod:`doppler_lab.viz.tables` writes it: 4 significant figures, whole
    numbers as integers, an empty cell for None and NaN, anything else as its text."""
    from .tables import format_value

    return format_value(x)


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str] | None = None,
    units: Mapping[str, str | None] | None = None,
) -> str:
    """A Markdown pipe table of ``rows`` (dicts; ``columns``: which, in order; default: every
    key), formatted by :func:`doppler_lab.viz.tables.tidy` (units in the headers, ``units`` as
    there), ending in a newline; ``(no rows)`` when there are none."""
    from .tables import to_markdown

    return to_markdown(rows, columns, units)


_BAR = (
    '<nav style="font:14px/1.4 sans-serif;padding:8px 20px;border-bottom:1px solid #d8dee4;'
    'position:sticky;top:0;z-index:100;background:#fff">{content}</nav>'
)
_BACK_LINK = '<a href="{href}" style="color:#3b75af">&larr; all reports</a>'
_BANNER = (
    '<span class="doppler-banner" style="margin-left:16px;padding:2px 10px;border-radius:10px;'
    'background:#fff8c5;color:#7d4e00;border:1px solid #d4a72c;font-weight:600">{text}</span>'
)
_STAMP = '<span style="float:right;color:#6a737d">{text}</span>'
#: the banner of a page built with a notebook's quick profile
QUICK_BANNER = "quick profile: smoke-test sizes, not the experiment"
#: the index's longer word on it
QUICK_NOTE = (
    "quick profile: smoke-test sizes. These numbers check that the notebooks run; they are not "
    "the experiment (`doppler-lab report` runs the report sizes)"
)


def banner_html(text: str) -> str:
    """A visible banner (inline markdown), as the notebook pages and the index show it."""
    return _BANNER.format(text=_inline(text))


def with_back_link(
    page: str, href: str | None, banner: str | None = None, stamp: str | None = None
) -> str:
    """``page`` (a whole HTML page) with a bar at the top of its body that stays in view: a
    link to the index ``href`` (when given), a ``banner`` (when given, inline markdown) and a
    muted ``stamp`` on the right (when given, inline markdown: the code version that made it)."""
    m = re.search(r"<body[^>]*>", page)
    if m is None or (href is None and banner is None and stamp is None):
        return page
    content = "" if href is None else _BACK_LINK.format(href=html.escape(href))
    if banner:
        content += banner_html(banner)
    if stamp:
        content += _STAMP.format(text=_inline(stamp))
    return page[: m.end()] + _BAR.format(content=content) + page[m.end() :]


#: the file name of plotly.js in a report site's ``assets/`` folder
PLOTLY_ASSET = "plotly.min.js"
_PLOTLY_BUNDLE = re.compile(r"<script[^>]*>\s*/\*\*?\s*\*?\s*plotly\.js v\d")


def plotly_script(src: str | None = None) -> str:
    """The ``<script>`` that loads plotly.js: from the address ``src`` (a site's shared copy),
    or the whole library inline (a page that opens alone, offline)."""
    if src is not None:
        return f'<script src="{html.escape(src)}" charset="utf-8"></script>'
    require("plotly.offline", "an HTML page with charts")
    from plotly.offline import get_plotlyjs

    return f'<script type="text/javascript">{get_plotlyjs()}</script>'


def holds_plotly_bundle(text: str) -> bool:
    """Whether HTML (a page, or one output of a notebook: plotly's ``notebook`` renderer puts
    the library into a notebook's first chart output) carries plotly.js itself."""
    return bool(_PLOTLY_BUNDLE.search(text))


def with_plotly(page: str, src: str | None = None) -> str:
    """``page`` with plotly.js loaded once in its head (see :func:`plotly_script`) when it draws
    a chart and does not carry the library already; else ``page`` as is."""
    if "Plotly.newPlot" not in page or holds_plotly_bundle(page):
        return page
    return page.replace("</head>", plotly_script(src) + "</head>", 1)


_HEAD_STYLE = re.compile(r"<style[^>]*>.*?</style>", flags=re.S)


def with_shared_assets(page: str, assets_dir: str | Path, page_dir: str | Path) -> str:
    """``page`` loading its heavy parts from a site's folder of shared files: plotly.js
    (:func:`write_plotly_asset`; when the page draws a chart) and the style sheets of its head
    (as one ``notebook-<digest>.css``, written there once), each linked by its path from
    ``page_dir``."""
    import hashlib
    import os

    from ..house.atomic import atomic_write

    folder = Path(assets_dir)
    href = Path(os.path.relpath(folder, page_dir)).as_posix()
    end = page.find("</head>")
    styles = _HEAD_STYLE.findall(page, 0, end) if end > 0 else []
    if styles:
        css = "\n".join(re.sub(r"^<style[^>]*>|</style>$", "", s) for s in styles)
        name = f"notebook-{hashlib.sha256(css.encode()).hexdigest()[:8]}.css"
        if not (folder / name).exists():
            atomic_write(folder / name, css)
        head = _HEAD_STYLE.sub("", page[:end])
        link = f'<link rel="stylesheet" href="{html.escape(href)}/{name}">'
        page = head + link + page[end:]
    if "Plotly.newPlot" in page and not holds_plotly_bundle(page):
        write_plotly_asset(folder)
        page = with_plotly(page, f"{href}/{PLOTLY_ASSET}")
    return page


def write_plotly_asset(folder: str | Path) -> Path:
    """plotly.js as ``folder/plotly.min.js``, the one copy a report site's pages load (written
    only when missing or different); returns its path."""
    require("plotly.offline", "a report site with charts")
    from plotly.offline import get_plotlyjs

    from ..house.atomic import atomic_write

    path = Path(folder) / PLOTLY_ASSET
    text = get_plotlyjs()
    if path.exists() and path.stat().st_size == len(text.encode()) and path.read_text() == text:
        return path
    return atomic_write(path, text)


def with_title(page: str, title: str) -> str:
    """``page`` with its browser title (``<title>``) set to ``title`` (plain text)."""
    tag = f"<title>{html.escape(title, quote=False)}</title>"
    if re.search(r"<title>.*?</title>", page, flags=re.S):
        return re.sub(r"<title>.*?</title>", lambda _: tag, page, count=1, flags=re.S)
    return page.replace("</head>", tag + "</head>", 1)


def markdown_to_text(text: str) -> str:
    """Inline markdown as plain text: ``*my*`` -> ``my``, ``**b**`` -> ``b``, `` `c` `` -> ``c``,
    ``[a](url)`` -> ``a``.

    Example:
        >>> markdown_to_text("Bring your own model: where should the ops of *my* `Llama` go?")
        'Bring your own model: where should the ops of my Llama go?'
    """
    out = re.sub(r"\[([^\]]+)\]\([^)\s]+\)", r"\1", text)
    out = re.sub(r"\*\*(.+?)\*\*", r"\1", out)
    out = re.sub(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])", r"\1", out)
    return out.replace("`", "")


def inline_markdown(text: str) -> str:
    """Inline markdown as HTML (escaped): `code`, **bold**, *em*, [link](url)."""
    return _inline(text)


def _slug(text: str, taken: set[str]) -> str:
    base = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "section"
    slug, k = base, 2
    while slug in taken:
        slug, k = f"{base}-{k}", k + 1
    taken.add(slug)
    return slug


class HtmlReport:
    """A one-file HTML report built block by block; every method returns the report.

    Args:
        title: page title and top heading.
        subtitle: a muted line under the title (a command, a date, a commit).
        toc: list the level-2 headings at the top when there are at least three.
    """

    def __init__(self, title: str, subtitle: str | None = None, toc: bool = True):
        self.title = title
        self.subtitle = subtitle
        self.toc = toc
        self._blocks: list[str] = []
        self._headings: list[tuple[int, str, str]] = []
        self._slugs: set[str] = set()
        self._figures = 0

    @property
    def num_figures(self) -> int:
        """Figures added so far."""
        return self._figures

    def heading(self, text: str, level: int = 2) -> HtmlReport:
        """A section heading (level 2 by default; 1 is the page title)."""
        if not 1 <= level <= 6:
            raise ConfigError(f"heading level {level} for {text!r}; expected 1..6")
        slug = _slug(text, self._slugs)
        self._headings.append((level, text, slug))
        self._blocks.append(f'<h{level} id="{slug}">{html.escape(text, quote=False)}</h{level}>')
        return self

    def text(self, content: str) -> HtmlReport:
        """A block of text: HTML when it starts with ``<``, else a small markdown subset
        (see :func:`markdown_to_html`)."""
        s = content.strip()
        self._blocks.append(s if s.startswith("<") else markdown_to_html(s))
        return self

    def html(self, raw: str) -> HtmlReport:
        """Raw HTML, inserted as is."""
        self._blocks.append(raw)
        return self

    def code(self, text: str) -> HtmlReport:
        """A preformatted block (a command line, a config)."""
        self._blocks.append(f"<pre><code>{html.escape(text, quote=False)}</code></pre>")
        return self

    def table(
        self,
        data: pd.DataFrame | Sequence[Mapping[str, Any]],
        caption: str | None = None,
        digits: int = 4,
        index: bool | None = None,
        columns: Sequence[str] | None = None,
        units: Mapping[str, str | None] | None = None,
    ) -> HtmlReport:
        """A table from a frame or a list of dicts, formatted by
        :func:`doppler_lab.viz.tables.tidy` (units in the headers, ``digits`` significant
        figures, whole numbers as integers, empty cells for missing values); numeric columns
        are right-aligned.

        Args:
            data: the rows.
            caption: a line above the table.
            digits: significant digits of non-integer numbers.
            index: show the frame's index (default: when it is not a plain range).
            columns: the columns to show, in order (default: all).
            units: column -> unit, as :func:`~doppler_lab.viz.tables.tidy` takes them.
        """
        from .tables import tidy

        if isinstance(data, pd.DataFrame):
            frame = data
        elif isinstance(data, Sequence) and not isinstance(data, str):
            frame = pd.DataFrame(list(data))
        else:
            raise ConfigError(
                f"table data of type {type(data).__name__}; expected a DataFrame or a list of dicts"
            )
        if index or (index is None and not isinstance(frame.index, pd.RangeIndex)):
            frame = frame.reset_index()
        if columns is not None:
            missing = [c for c in columns if c not in frame.columns]
            if missing:
                raise ConfigError(
                    f"table has no column {missing[0]!r}; it has {list(frame.columns)}"
                )
            frame = frame[list(columns)]
        table = tidy(frame, units=units, digits=digits, max_columns=len(frame.columns) or 1)
        numeric = dict(zip(table.frame.columns, table.numeric))
        num = ' class="num"'
        head = "".join(
            f"<th{num if numeric[c] else ''}>{html.escape(c, quote=False)}</th>"
            for c in table.frame.columns
        )
        body = (
            "".join(
                f"<td{num if numeric[c] else ''}>{html.escape(table.frame[c].iat[i], quote=False)}</td>"
                for c in table.frame.columns
            )
            for i in range(len(table))
        )
        cap = f"<caption>{_inline(caption)}</caption>" if caption else ""
        self._blocks.append(html_table(head, body, cap))
        return self

    def figure(self, fig: Any, caption: str | None = None) -> HtmlReport:
        """A plotly figure (interactive; its data embedded in the page)."""
        if not hasattr(fig, "to_html") or not hasattr(fig, "layout"):
            raise ConfigError(f"figure of type {type(fig).__name__}; expected a plotly Figure")
        self._figures += 1
        height = fig.layout.height or 450
        div = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"figure-{self._figures}",
            default_width="100%",
            default_height=f"{int(height)}px",
            config={"displaylogo": False, "responsive": True},
        )
        cap = f"<figcaption>{_inline(caption)}</figcaption>" if caption else ""
        self._blocks.append(f"<figure>{div}{cap}</figure>")
        return self

    def to_html(self) -> str:
        """The whole page as a string."""
        head_js = plotly_script() if self._figures else ""
        top = [f"<h1>{html.escape(self.title, quote=False)}</h1>"]
        if self.subtitle:
            top.append(f'<p class="subtitle">{_inline(self.subtitle)}</p>')
        sections = [(t, s) for level, t, s in self._headings if level == 2]
        if self.toc and len(sections) >= 3:
            items = "".join(
                f'<li><a href="#{s}">{html.escape(t, quote=False)}</a></li>' for t, s in sections
            )
            top.append(f'<nav class="toc"><strong>Contents</strong><ul>{items}</ul></nav>')
        return (
            "<!DOCTYPE html>\n"
            '<html lang="en"><head><meta charset="utf-8">'
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            '<meta name="generator" content="doppler_lab.viz.HtmlReport">'
            f"<title>{html.escape(self.title, quote=False)}</title>"
            f"<style>{_CSS}</style>{head_js}</head>\n"
            "<body><main>\n" + "\n".join(top + self._blocks) + "\n</main></body></html>\n"
        )

    def write(self, path: str | Path) -> Path:
        """Write the page to ``path`` (parent folders are created); returns the path."""
        from ..house.atomic import atomic_write

        return atomic_write(path, self.to_html())


def write_gantt_html(
    trace: Any,
    graph: Any,
    path: str | Path,
    title: str | None = None,
    time_unit: str | None = "auto",
    subtitle: str | None = None,
) -> Path:
    """Write one self-contained HTML page holding the Gantt chart of ``trace`` (``subtitle``:
    the line under the title; default: the makespan, when ``title`` is given).

    ``time_unit="auto"``: seconds for graphs whose costs come from the cost model, cost units
    for graphs with explicit costs (the paper's files); see
    :func:`~doppler_lab.viz.gantt.resolve_time_unit`.
    """
    from .gantt import format_span, gantt, resolve_time_unit

    unit = resolve_time_unit(trace, graph, time_unit)
    report = HtmlReport(
        title or f"{trace.graph_name}: makespan {format_span(trace.makespan, unit)}",
        subtitle or (f"makespan {format_span(trace.makespan, unit)}" if title else None),
    )
    report.figure(gantt(trace, graph, title=title, time_unit=unit))
    return report.write(path)
