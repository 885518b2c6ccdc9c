"""Old module paths of the package, kept importable after the house was regrouped (0.2).

``import doppler_lab.sim`` (or ``from doppler_lab.graph import DataflowGraph``) still works: a
finder on ``sys.meta_path`` answers each old name with the module that holds its code now, and
warns once (``DeprecationWarning``) with the new name. The old name and the new one are then the
same module object, so ``isinstance`` checks and monkeypatches agree. Scripts and notebooks
should move to the new names; :data:`MOVED` lists them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
import warnings
from collections.abc import Sequence

_P = "doppler_lab."

#: the experiment code's wing (issue 44): bench/, reporting/, train/experiments/ and
#: timing/studies.py moved under lab/; old module -> new module
_LAB_MOVES: dict[str, str] = {
    "bench": "lab.bench",
    "bench._report": "lab.bench._report",
    "bench.budget_curve": "lab.bench.budget_curve",
    "bench.executor": "lab.bench.executor",
    "bench.fidelity": "lab.bench.fidelity",
    "bench.finetuning": "lab.bench.finetuning",
    "bench.general": "lab.bench.general",
    "bench.general_alone": "lab.bench.general_alone",
    "bench.general_config": "lab.bench.general_config",
    "bench.gpu": "lab.bench.gpu",
    "bench.importing": "lab.bench.importing",
    "bench.learner": "lab.bench.learner",
    "bench.memory_bound": "lab.bench.memory_bound",
    "bench.memory_fidelity": "lab.bench.memory_fidelity",
    "bench.policy": "lab.bench.policy",
    "bench.policy_wc": "lab.bench.policy_wc",
    "bench.quality": "lab.bench.quality",
    "bench.search_probe": "lab.bench.search_probe",
    "bench.sim": "lab.bench.sim",
    "bench.stuck": "lab.bench.stuck",
    "bench.yardstick": "lab.bench.yardstick",
    "bench.zero_shot": "lab.bench.zero_shot",
    "reporting": "lab.reporting",
    "reporting.claims": "lab.reporting.claims",
    "reporting.demo_job": "lab.reporting.demo_job",
    "reporting.findings": "lab.reporting.findings",
    "reporting.notebook_runs": "lab.reporting.notebook_runs",
    "reporting.page_checks": "lab.reporting.page_checks",
    "reporting.site": "lab.reporting.site",
    "timing.studies": "lab.studies",
    "train.experiments": "lab.experiments",
    "train.experiments.common": "lab.experiments.common",
    "train.experiments.demo_stages": "lab.experiments.demo_stages",
    "train.experiments.real": "lab.experiments.real",
    "train.experiments.scaling": "lab.experiments.scaling",
    "train.experiments.stages": "lab.experiments.stages",
    "train.experiments.transfer": "lab.experiments.transfer",
}

#: old module -> new module(s); a module whose content was split names every part
MOVED: dict[str, tuple[str, ...]] = {
    **{
        _P + m: (_P + "house." + m,)
        for m in (
            "errors validate limits settings deps atomic jsonutil paths progress codeversion "
            "runfolder trust nbclean runners"
        ).split()
    },
    **{
        _P + m: (_P + "ir." + m,)
        for m in ("graph", "ops", "program", "placement", "trace", "trace_path")
    },
    **{
        _P + old: tuple(_P + n for n in new)
        for old, new in {
            "stored": ("io.stored",),
            "datasets": ("io.datasets",),
            "rules": ("hardware.rules",),
            "gpu_specs": ("hardware.gpu_specs",),
            "schedule": ("timing.schedule",),
            "episode": ("timing.episode",),
            "contention": ("timing.contention",),
            "calibration": ("timing.calibration",),
            "sim": ("timing.sim",),
            "sim.reference": ("timing.sim.reference",),
            "fidelity": ("executor.fidelity_runs",),
            "env": ("policies.env",),
            "policies.placers": ("search.learned",),
            "policies.search": ("search.budget",),
            "policies.adapt": ("search.adapter",),
            "policies.config": ("policies.policy_config",),
            "train.config": ("train.train_config",),
            "train.general": ("train.general_policy",),
            "train.experiments.demo": ("lab.experiments.demo_stages",),
            "report": ("lab.reporting.site",),
            "experiments": ("lab.reporting.notebook_runs",),
            "demo": ("lab.reporting.demo_job",),
            "yardstick": ("lab.bench.yardstick",),
            "analysis": ("workloads.catalog", "lab.studies"),
            "importers.costs": ("importers.flop_counts",),
            "train.costs": ("train.cost_functions",),
            "placers.base": ("placers.placer_base",),
            "policies.base": ("policies.policy_base",),
            "placers.memory_fit": ("timing.fit", "placers.repair", "placers.registry"),
        }.items()
    },
    **{_P + old: (_P + new,) for old, new in _LAB_MOVES.items()},
}


def _merged(name: str, parts: Sequence[types.ModuleType]) -> types.ModuleType:
    """One module holding the public names of ``parts`` (an old module that was split)."""
    mod = types.ModuleType(name, f"moved: {', '.join(p.__name__ for p in parts)}")
    for p in parts:
        mod.__dict__.update({k: v for k, v in vars(p).items() if not k.startswith("__")})
    return mod


class _Alias(importlib.abc.Loader):
    def __init__(self, new: tuple[str, ...]) -> None:
        self.new = new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        warnings.warn(
            f"{spec.name} moved to {' and '.join(self.new)}; the old name will go in a later "
            "release",
            DeprecationWarning,
            stacklevel=2,
        )
        parts = [importlib.import_module(n) for n in self.new]
        return parts[0] if len(parts) == 1 else _merged(spec.name, parts)

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):  # noqa: D102 - importlib's protocol
        new = MOVED.get(fullname)
        if new is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(new))


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once), so that a stale folder of an old path
    (a ``__pycache__`` left by a previous version) cannot shadow the new module."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())  # before path finders: a stale old folder loses
