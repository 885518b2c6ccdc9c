"""The house's layout: a flat root, unique module names, and the old paths still importable."""

from __future__ import annotations

import importlib
import warnings
from collections import Counter
from pathlib import Path

import pytest

from doppler_lab.house.moved import MOVED

ROOT = Path(__file__).resolve().parents[1] / "doppler_lab"


def test_root_holds_only_the_face_and_the_command() -> None:
    loose = sorted(p.name for p in ROOT.glob("*.py"))
    assert loose == ["__init__.py", "cli.py"], loose


def test_no_two_modules_share_a_name() -> None:
    """Outside ``commands/`` (named after their commands) each module name says one thing."""
    names = Counter(
        p.name
        for p in ROOT.rglob("*.py")
        if p.name != "__init__.py" and "commands" not in p.relative_to(ROOT).parts
    )
    assert [n for n, k in names.items() if k > 1] == []


@pytest.mark.parametrize("old", sorted(MOVED))
def test_old_module_paths_still_import(old: str) -> None:
    path = ROOT.parent / (old.replace(".", "/") + ".py")
    assert not path.exists(), f"{old} is both moved and present"
    new = [importlib.import_module(n) for n in MOVED[old]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import sys

        sys.modules.pop(old, None)
        mod = importlib.import_module(old)
    assert any(issubclass(w.category, DeprecationWarning) and old in str(w.message) for w in caught)
    if len(new) == 1:
        assert mod is new[0]
    else:  # a split module: every public name of each part
        for part in new:
            public = [k for k in vars(part) if not k.startswith("_")]
            assert all(getattr(mod, k) is getattr(part, k) for k in public)


def test_cost_model_names_its_new_home() -> None:
    with pytest.raises(ImportError, match="doppler_lab.timing.cost_model import CostModel"):
        from doppler_lab.hardware import CostModel  # noqa: F401


def test_only_the_commands_import_the_lab() -> None:
    """The experiment wing (``lab/``) sits just under ``commands/``: no module of the library
    imports it, lazily or not (its old paths are in ``MOVED``)."""
    import ast

    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).parts
        if rel[0] in ("lab", "commands"):
            continue
        here = ["doppler_lab", *rel[:-1]]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                base = here[: len(here) - node.level + 1] if node.level else []
                names = [".".join(base + ([node.module] if node.module else []))]
                names += [f"{names[0]}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            if any(n == "doppler_lab.lab" or n.startswith("doppler_lab.lab.") for n in names):
                bad.append(f"{'/'.join(rel)}:{node.lineno}")
    assert bad == [], "the library imports the lab wing: " + ", ".join(bad)
