"""Optional dependencies (doppler_lab.house.deps): a missing package gives one line naming it and what
needs it, and the core (simulator, placers, executor, calibration) needs none of the notebook,
plot or solver packages (issue 34: the GPU image has no plotly, papermill, ortools, pymetis, ray,
and ``--placement doppler`` ended in ``ModuleNotFoundError: No module named 'pymetis'``)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from doppler_lab.house import deps
from doppler_lab.house.errors import ConfigError

#: what the GPU image lacks, and the rest of the notebook / plot / solver stack
BLOCKED = (
    "plotly",
    "papermill",
    "nbconvert",
    "nbformat",
    "ortools",
    "pymetis",
    "ray",
    "simpy",
    "gymnasium",
    "networkx",
    "pandas",
    "ipywidgets",
)


def test_require_returns_the_module():
    import json as json_module

    assert deps.require("json", "a test") is json_module
    assert deps.available("json")


def block(monkeypatch, package: str) -> None:
    """Make ``package`` and every submodule of it that earlier tests imported unimportable."""
    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


def test_require_names_the_missing_package_in_one_line(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymetis", None)  # makes `import pymetis` raise
    assert not deps.available("pymetis")
    with pytest.raises(ConfigError) as info:
        deps.require("pymetis", "the 'partition' placer")
    msg = str(info.value)
    assert msg == (
        "the 'partition' placer needs the package 'pymetis' (pip install pymetis); "
        "it is not installed"
    )
    assert "\n" not in msg
    block(monkeypatch, "ortools")
    with pytest.raises(ConfigError, match=r"needs the package 'ortools' \(pip install ortools\)"):
        deps.require("ortools.sat.python.cp_model", "the 'exact' placer")
    block(monkeypatch, "torch_geometric")
    with pytest.raises(ConfigError, match=r"pip install torch-geometric"):
        deps.require("torch_geometric.data", "to_pyg")


def test_warn_once_prints_one_line_once(capsys):
    line = "test_deps: a unique notice"
    deps.warn_once(line)
    deps.warn_once(line)
    err = capsys.readouterr().err
    assert err.count(line) == 1 and err.count("\n") == 1


def test_partition_placer_without_pymetis_says_so_in_one_line(monkeypatch):
    from doppler_lab.hardware.cluster import make_cluster
    from doppler_lab.placers import place
    from doppler_lab.workloads import build

    monkeypatch.setitem(sys.modules, "pymetis", None)
    with pytest.raises(ConfigError) as info:
        place("partition", build("ffnn", scale=0.05), make_cluster("p100x4"))
    msg = str(info.value)
    assert "'pymetis' (pip install pymetis); it is not installed" in msg
    assert "'partition' placer" in msg and "\n" not in msg


def test_other_optional_packages_say_what_needs_them(monkeypatch):
    from doppler_lab.house.runners import RayRunner
    from doppler_lab.workloads import build

    for name in ("ray", "networkx"):
        monkeypatch.setitem(sys.modules, name, None)
    with pytest.raises(ConfigError, match=r"runner 'ray' needs the package 'ray'"):
        RayRunner().connect()
    with pytest.raises(ConfigError, match=r"to_networkx needs the package 'networkx'"):
        build("ffnn", scale=0.05).to_networkx()


#: run in a fresh interpreter where every package of BLOCKED raises ImportError
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    BLOCKED = {blocked!r}
    for name in BLOCKED:
        sys.modules[name] = None
    import doppler_lab.timing.calibration, doppler_lab.executor, doppler_lab.placers, doppler_lab.timing.sim
    from doppler_lab.hardware import make_cluster
    from doppler_lab.placers import place
    from doppler_lab.timing.sim import simulate
    from doppler_lab.workloads import build

    out = {{}}
    g = build("ffnn", scale=0.05)
    c = make_cluster("p100x4")
    for placer in ("single", "round-robin", "random", "cp", "heft", "doppler", "doppler"):
        p = place(placer, g, c, seed=0)
        out[placer] = float(simulate(g, c, p, semantics="wc").makespan)
    out["loaded"] = sorted(
        n for n in BLOCKED if sys.modules.get(n) is not None
    )
    print(json.dumps(out))
    """
)


def test_core_works_without_the_optional_packages():
    code = _SCRIPT.format(blocked=BLOCKED)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out.pop("loaded") == []
    assert all(v > 0 for v in out.values()), out
    # the doppler placer placed (twice) without its partition proposals, said once
    notices = [ln for ln in run.stderr.splitlines() if "pymetis" in ln]
    assert len(notices) == 1, run.stderr
    assert "pip install pymetis" in notices[0] and "partition proposals" in notices[0]
    assert "Traceback" not in run.stderr
