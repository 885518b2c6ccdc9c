"""Where data lives: the paper's released graphs, checkpoint folders, the per-user data folder.

One home for every location the package resolves, so commands, notebooks, benches and tests
look in the same places in the same order:

- the paper's graphs (:func:`paper_graphs_dir`): a folder given explicitly, else
  ``$DOPPLER_PAPER_GRAPHS``, else the per-user copy installed by
  ``doppler-lab data paper-graphs`` (:func:`user_paper_graphs_dir`), else
  ``shared/data/doppler-paper`` beside a source checkout;
- shipped policy checkpoints (:func:`checkpoint_dirs`): ``$DOPPLER_LAB_CHECKPOINTS``, the
  package's ``data/checkpoints``, the checkout's ``data/checkpoints``,
  ``<prefix>/share/doppler_lab/checkpoints``, the per-user ``checkpoints`` folder, and
  ``./data/checkpoints``;
- the per-user data folder (:func:`user_data_dir`): ``$XDG_DATA_HOME/doppler_lab`` or
  ``~/.local/share/doppler_lab``.

No absolute machine paths: every default is relative to the package, the checkout, the prefix
or the user's home.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # doppler_lab/, above house/
REPO_ROOT = PACKAGE_DIR.parent  # the checkout, for a source or editable install
PAPER_GRAPHS_ENV = "DOPPLER_PAPER_GRAPHS"
CHECKPOINTS_ENV = "DOPPLER_LAB_CHECKPOINTS"
CHECKOUT_PAPER_GRAPHS_DIR = REPO_ROOT.parent / "shared" / "data" / "doppler-paper"
BENCH_POLICY_RUNS = "runs/bench_policy"  # bench policy's run cache (relative: the working folder)
# finished runs of the stored caches, committed (relative: the checkout; house.runstore)
RUN_STORE = "data/runs"
PAPER_GRAPHS_HINT = (
    "run `doppler-lab data paper-graphs` (downloads them from github.com/xinyuyao/Doppler; "
    "`--from DIR` installs a local copy of its compute_graph/), or set "
    f"${PAPER_GRAPHS_ENV} to a folder holding the files"
)


def user_data_dir() -> Path:
    """The per-user data folder: ``$XDG_DATA_HOME/doppler_lab``, else
    ``~/.local/share/doppler_lab`` (it need not exist)."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "doppler_lab"


def user_cache_dir() -> Path:
    """The per-user cache folder: ``$XDG_CACHE_HOME/doppler_lab``, else
    ``~/.cache/doppler_lab`` (it need not exist)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "doppler_lab"


def user_paper_graphs_dir() -> Path:
    """Where ``doppler-lab data paper-graphs`` installs the paper's graphs by default."""
    return user_data_dir() / "paper-graphs"


def paper_graph_dirs() -> list[Path]:
    """The folders searched for the paper's graphs, in order (existing or not)."""
    env = os.environ.get(PAPER_GRAPHS_ENV)
    return [
        *([Path(env)] if env else []),
        user_paper_graphs_dir(),
        CHECKOUT_PAPER_GRAPHS_DIR,
    ]


def _has_graphs(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*.txt"))


def paper_graphs_dir(explicit: str | os.PathLike | None = None) -> Path | None:
    """The folder of the paper's released graphs.

    Args:
        explicit: a folder to use instead of the search (``None`` or ``""``: search
            :func:`paper_graph_dirs`).

    Returns:
        The first folder that holds ``*.txt`` graphs, or ``None`` when none does.
    """
    candidates = [Path(explicit)] if explicit else paper_graph_dirs()
    return next((c for c in candidates if _has_graphs(c)), None)


def paper_graph_path(name: str, explicit: str | os.PathLike | None = None) -> Path:
    """The file of the paper graph ``name`` (e.g. ``ffnn_192nodes``) in :func:`paper_graphs_dir`.

    Raises:
        ConfigError: no such file; names where it looked and how to get the graphs.
    """
    from .errors import ConfigError

    folder = paper_graphs_dir(explicit)
    path = folder / f"{name}.txt" if folder is not None else None
    if path is None or not path.is_file():
        where = folder or explicit or ", ".join(str(d) for d in paper_graph_dirs())
        raise ConfigError(f"paper graph {name!r} not found in {where}; {PAPER_GRAPHS_HINT}")
    return path


def bench_checkpoints_dir(runs_dir: str | os.PathLike = BENCH_POLICY_RUNS) -> Path:
    """Where ``bench policy`` exports its trained checkpoints (``<placer>/<graph>.pt``) and
    ``bench quality`` looks for them first."""
    return Path(runs_dir) / "checkpoints"


def checkpoint_dirs() -> list[Path]:
    """Folders searched for shipped checkpoints, in order (existing ones only, no repeats)."""
    env = os.environ.get(CHECKPOINTS_ENV)
    cands = [
        *([Path(env)] if env else []),
        PACKAGE_DIR / "data" / "checkpoints",
        REPO_ROOT / "data" / "checkpoints",  # editable install / source checkout
        Path(sys.prefix) / "share" / "doppler_lab" / "checkpoints",
        user_data_dir() / "checkpoints",
        Path.cwd() / "data" / "checkpoints",
    ]
    out: list[Path] = []
    for c in cands:
        if c.is_dir() and c.resolve() not in [o.resolve() for o in out]:
            out.append(c)
    return out


__all__ = [
    "BENCH_POLICY_RUNS",
    "CHECKOUT_PAPER_GRAPHS_DIR",
    "CHECKPOINTS_ENV",
    "PAPER_GRAPHS_ENV",
    "PAPER_GRAPHS_HINT",
    "REPO_ROOT",
    "bench_checkpoints_dir",
    "checkpoint_dirs",
    "paper_graph_dirs",
    "paper_graph_path",
    "paper_graphs_dir",
    "user_cache_dir",
    "user_data_dir",
    "user_paper_graphs_dir",
]
