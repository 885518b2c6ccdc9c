"""The command's front door loads no torch (nor pandas): ``--help``, ``--version``, ``workloads list``,
``simulate`` and ``place`` with any built-in (non-learned) placer, on workloads, graph JSON and
the paper's files. Each runs in a fresh interpreter that reports, after each command, whether
``torch`` or ``torch_geometric`` is in ``sys.modules``. The learned placers still load it when
used. (Named ``test_cli_front_door``: ``tests/sim/test_front_door.py`` is the simulator's.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import doppler_lab
from doppler_lab.cli import main
from doppler_lab.house.codeversion import code_version
from doppler_lab.placers import BUILTIN_PLACERS, LEARNED_PLACERS

from paper_graphs import paper_graph_path

REPO = Path(__file__).resolve().parents[1]
TINY = "chainmm:scale=0.05"
HEAVY = ("torch", "torch_geometric", "pandas")
MARK = "FRONT-DOOR-REPORT "
# per placer: what keeps it short on TINY (the exact solver needs a time limit above 30 nodes)
PLACER_ARGS = {
    "exact": ["--time-limit", "1"],
    "local-search": ["--budget", "40"],
    "enumerative": ["--budget", "40"],
}

CHILD = f"""
import json, sys
from doppler_lab.cli import main
for argv in json.loads(sys.argv[1]):
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    sys.stdout.flush()
    loaded = [m for m in {HEAVY!r} if m in sys.modules]
    print({MARK!r} + json.dumps({{"argv": argv, "rc": rc, "loaded": loaded}}), flush=True)
"""


def run_fresh(*commands: list[str]) -> list[dict]:
    """Run ``commands`` one after another in one fresh interpreter; a report per command."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps([list(c) for c in commands])],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    reports = [
        json.loads(line[len(MARK) :]) for line in proc.stdout.splitlines() if line.startswith(MARK)
    ]
    assert len(reports) == len(commands), proc.stdout[-3000:] + proc.stderr[-3000:]
    return reports


#: commands whose own third-party solver loads pandas (ortools' CP-SAT)
PANDAS_OK = ("exact",)


def assert_torch_free(reports: list[dict]) -> None:
    for r in reports:
        assert r["rc"] == 0, r
        loaded = [
            m for m in r["loaded"] if not (m == "pandas" and any(a in PANDAS_OK for a in r["argv"]))
        ]
        assert loaded == [], f"{' '.join(r['argv'])} loaded {', '.join(loaded)}"


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["--version"],
        ["workloads", "list"],
        ["simulate", TINY, "--devices", "2"],
        ["place", TINY, "--placer", "cp", "--devices", "2", "--no-progress"],
    ],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_front_door_commands_do_not_load_torch(argv):
    assert_torch_free(run_fresh(argv))


def test_every_builtin_placer_places_without_torch():
    """One interpreter for all of them: the report after each command names the first that
    loads torch."""
    commands = [
        ["place", TINY, "--placer", name, "--devices", "2", "--no-progress"]
        + PLACER_ARGS.get(name, [])
        for name in BUILTIN_PLACERS
    ]
    assert_torch_free(run_fresh(*commands))


def test_graph_files_place_and_simulate_without_torch(tmp_path):
    graph, placement = tmp_path / "g.json", tmp_path / "p.json"
    assert_torch_free(
        run_fresh(
            ["workloads", "build", TINY, "--out", str(graph)],
            ["place", str(graph), "--placer", "heft", "--devices", "2", "--out", str(placement)],
            ["simulate", str(graph), "--devices", "2", "--placement", str(placement), "--json"],
            ["simulate", str(graph), "--devices", "2", "--placement", "cp", "--no-progress"],
        )
    )


def test_paper_graphs_place_and_simulate_without_torch():
    paper = str(paper_graph_path("chain_mm_112nodes"))
    assert_torch_free(
        run_fresh(
            ["simulate", paper, "--devices", "4", "--placement", "round-robin"],
            ["place", paper, "--placer", "cp", "--devices", "4"],
        )
    )


def test_help_still_lists_every_placer_and_command(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["place", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in [*BUILTIN_PLACERS, *LEARNED_PLACERS]:
        assert name in out


def test_learned_placer_still_loads_torch_when_used():
    """The laziness only moves when torch loads: the doppler placer still works, with torch
    but without torch_geometric (its import alone took seconds), the general policy and a
    memory-capped run (the general memory policy) both."""
    reports = run_fresh(
        ["place", TINY, "--placer", "doppler", "--devices", "2", "--no-progress"],
        ["place", TINY, "--placer", "doppler", "--devices", "2", "--memory-cap", "1GB", "--json"],
    )
    for report in reports:
        assert report["rc"] == 0 and report["loaded"] == ["torch"], report


def test_version_prints_package_and_code_version(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    assert doppler_lab.__version__ in out and code_version() in out
    assert out.startswith("doppler-lab ")
