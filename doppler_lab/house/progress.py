"""How long runs show what they do: tqdm bars and one-line notes on stderr.

One home for progress display. Library functions take a ``progress: bool`` and pass it here as
``enabled``; they never read global state. Every ``doppler-lab`` subcommand gets
``--no-progress`` (:func:`add_progress_argument`); progress is off with it or with ``--json``
(:func:`show_progress`), so stdout carries only results.

Example:
    >>> total = 0
    >>> for i in progress(range(3), desc="demo", enabled=False):
    ...     total += i
    >>> total
    3
    >>> format_seconds(0.0042), format_seconds(42), format_seconds(150), format_seconds(7300)
    ('4.2 ms', '42 s', '2.5 min', '2.0 h')
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TypeVar

from tqdm.auto import tqdm

__all__ = [
    "add_progress_argument",
    "format_seconds",
    "live",
    "note",
    "progress",
    "show_progress",
    "timer",
]

T = TypeVar("T")

#: how often :func:`live` and :func:`timer` redraw their line (seconds)
TICK_S = 0.5


def progress(
    iterable: Iterable[T] | None = None,
    *,
    total: float | None = None,
    desc: str | None = None,
    enabled: bool = True,
    unit: str = "it",
    leave: bool = False,
    bar_format: str | None = None,
    delay_s: float = 0.0,
) -> tqdm:
    """A tqdm bar on stderr over ``iterable`` (or, without one, updated by hand to ``total``).

    Args:
        iterable: what to iterate over; ``None`` for a bar advanced with ``bar.update(n)``.
        total: the expected count (default: ``len(iterable)`` when it has one).
        desc: the label in front of the bar.
        enabled: ``False`` gives a silent bar with the same interface.
        unit: what one step is (``run``, ``call``, ``step``, ...).
        leave: keep the finished bar on screen.
        bar_format: tqdm's layout of the line (default: tqdm's own).
        delay_s: show nothing until this many seconds have passed (quick runs stay silent).
    """
    return tqdm(
        iterable,
        total=total,
        desc=desc,
        unit=unit,
        leave=leave,
        disable=not enabled,
        file=sys.stderr,
        dynamic_ncols=True,
        bar_format=bar_format,
        delay=delay_s,
    )


@contextmanager
def live(bar: tqdm, before: Callable[[], None] | None = None) -> Iterator[tqdm]:
    """Keep ``bar``'s line fresh while a long step blocks (its elapsed time keeps running
    between updates); ``before`` runs first on each tick (to change the label, say).

    Example:
        >>> with progress(total=2, enabled=False) as bar, live(bar):
        ...     bar.update(2)
    """
    if bar.disable:
        yield bar
        return
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(TICK_S):
            if before is not None:
                before()
            if time.time() >= bar.start_t + bar.delay:  # a bar with a delay: not before it
                bar.refresh()
                bar.last_print_t = time.time()  # shown: tqdm clears it when it closes

    thread = threading.Thread(target=tick, name=f"progress: {bar.desc}", daemon=True)
    thread.start()
    try:
        yield bar
    finally:
        stop.set()
        thread.join()


@contextmanager
def timer(
    desc: str, total_s: float | None = None, enabled: bool = True, delay_s: float = 0.0
) -> Iterator[tqdm]:
    """A line on stderr that counts the seconds while an opaque call runs (a solver, a long
    reference run), against ``total_s`` (a time limit or a prediction) when known; with
    ``delay_s`` only once the call has run that long.

    Example:
        >>> with timer("solve", total_s=1.0, enabled=False):
        ...     pass
    """
    of = f" of ~{format_seconds(total_s)}" if total_s is not None and total_s > 0 else ""
    t0 = time.perf_counter()
    with progress(
        desc=desc, enabled=enabled, unit="s", bar_format="{desc}", delay_s=delay_s
    ) as bar:

        def show() -> None:
            elapsed = time.perf_counter() - t0
            shown = f"{elapsed:.0f} s" if elapsed < 100 else format_seconds(elapsed)
            bar.set_description_str(f"{desc}: {shown}{of}", refresh=False)

        show()
        if not delay_s:
            bar.refresh()
        with live(bar, before=show):
            yield bar
        show()


def note(message: str, enabled: bool = True) -> None:
    """One line on stderr (written so that it does not break a running bar)."""
    if enabled:
        tqdm.write(message, file=sys.stderr)


def format_seconds(seconds: float) -> str:
    """A duration for people: ``4.2 ms``, ``42 s``, ``2.5 min``, ``2.0 h``."""
    s = float(seconds)
    if s < 1:
        return f"{s * 1e3:.3g} ms"
    if s < 100:
        return f"{s:.3g} s"
    if s < 100 * 60:
        m = s / 60
        return f"{m:.1f} min" if m < 10 else f"{m:.0f} min"
    return f"{s / 3600:.1f} h"


def format_time(value: float, in_seconds: bool = True) -> str:
    """A makespan or duration with its unit, 4 significant figures: ``523.6 us``, ``1.234 ms``,
    ``2.5 s``; a graph's own cost units (``in_seconds=False``: the paper's cost files) as
    ``1234 units``."""
    v = float(value)
    if not in_seconds:
        return f"{v:.6g} units"
    if not math.isfinite(v):
        return f"{v} s"
    a = abs(v)
    for scale, unit in ((1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")):
        if a >= scale or unit == "ns":
            return f"{v / scale:.4g} {unit}"
    return f"{v:.4g} s"  # pragma: no cover


def add_progress_argument(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` on a command's parser (``--json`` turns progress off too)."""
    parser.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress bars or notes on stderr (--json implies it)",
    )


def show_progress(args: argparse.Namespace) -> bool:
    """Whether a command shows progress on stderr: not with ``--no-progress`` or ``--json``."""
    return not (getattr(args, "no_progress", False) or getattr(args, "json", False))
