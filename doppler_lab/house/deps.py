"""Optional dependencies: one clear line when a package that a feature needs is missing.

The core (graphs, the simulator, the placers, the executor, calibration) needs numpy, numba,
torch and scipy only. The notebook and plot stack (plotly, papermill, nbconvert, nbformat,
ipywidgets, pandas), the exact placer's CP-SAT solver (ortools), METIS partitions (pymetis),
Ray sweeps (ray), the reference simulator (simpy), the gym environment (gymnasium) and graph
export (networkx) are imported where a feature uses them, through :func:`require`, so that a
machine without them (a GPU image with torch only) runs everything else, and a feature that
does need one says so in one line::

    ConfigError: METIS partitions (the 'partition' placer) needs the package 'pymetis'
    (pip install pymetis); it is not installed

:func:`available` asks without raising (for optional extras such as the ``doppler`` placer's
partition proposals), and :func:`warn_once` prints a one-line notice on stderr once per process.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

from .errors import ConfigError

#: the pip name of a module whose distribution is named differently
PIP_NAMES = {
    "torch_geometric": "torch-geometric",
    "sklearn": "scikit-learn",
    "yaml": "pyyaml",
    "PIL": "pillow",
}

_WARNED: set[str] = set()


def package_name(module: str) -> str:
    """The pip package that provides ``module`` (its top-level name unless :data:`PIP_NAMES`
    says otherwise)."""
    top = module.partition(".")[0]
    return PIP_NAMES.get(top, top)


def missing_message(module: str, what: str, pip_name: str | None = None) -> str:
    """The one line :func:`require` raises: ``<what> needs the package 'X' (pip install X); it
    is not installed``."""
    pkg = pip_name or package_name(module)
    return f"{what} needs the package {pkg!r} (pip install {pkg}); it is not installed"


def require(module: str, what: str, pip_name: str | None = None) -> ModuleType:
    """Import and return ``module`` (e.g. ``"pymetis"``, ``"plotly.graph_objects"``).

    Args:
        module: the module to import.
        what: the feature that needs it, as the start of the message ("the 'exact' placer").
        pip_name: the package to install, when it is not the module's top-level name.

    Raises:
        ConfigError: one line naming the package, how to install it and ``what`` needs it,
            when the module (or its package) is not installed. An installed package whose own
            import fails for another reason (one of its dependencies is missing) says that
            instead, in one line too.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        top = module.partition(".")[0]
        missing = exc.name or ""
        if not missing or missing == top or missing.startswith(top + "."):
            msg = missing_message(module, what, pip_name)
        else:
            pkg = pip_name or package_name(module)
            msg = f"{what} needs the package {pkg!r}, whose import failed: {exc}"
        raise ConfigError(" ".join(msg.split())) from None


def available(module: str) -> bool:
    """Whether ``module`` imports (without raising; a broken install counts as missing)."""
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def warn_once(line: str) -> None:
    """``line`` on stderr, once per process (a missing optional extra: the work goes on)."""
    if line in _WARNED:
        return
    _WARNED.add(line)
    print(f"doppler-lab: warning: {line}", file=sys.stderr, flush=True)
