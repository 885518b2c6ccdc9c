"""environment.yml and pyproject.toml list the same packages (conda users get the same set)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _names(reqs):
    return {re.split(r"[<>=!~ \[]", r, maxsplit=1)[0].lower().replace("_", "-") for r in reqs}


def test_environment_matches_pyproject():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = _names(project["dependencies"]) | _names(project["optional-dependencies"]["dev"])
    env = (REPO / "environment.yml").read_text()
    listed = _names(m.group(1) for m in re.finditer(r"^\s+- ([A-Za-z][^\s#]*)\s*$", env, re.M))
    assert wanted <= listed, f"missing from environment.yml: {sorted(wanted - listed)}"
    assert "torch==2.13.0" in env and "torch==2.13.0" in project["dependencies"]
