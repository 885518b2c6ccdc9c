"""``bench allocator`` (doppler_lab.lab.bench.held_memory): its pairing and verdict on synthetic
arms, one real arm on a tiny graph, and a failed arm named."""

from __future__ import annotations

import gzip
import json
import subprocess
from types import SimpleNamespace

import pytest

from doppler_lab.house.errors import ExecutorError
from doppler_lab.lab.bench import BENCHMARKS, held_memory


def _fake_arm(factor: dict[str, float]):
    """Arms whose makespans are ``factor[arm]`` x a base that differs by placement and by process
    pair (the machine's drift), so only the pairing can see the arms' ratio."""
    calls = {"n": 0}

    def arm(name, specs, repeats):
        calls["n"] += 1
        drift = 1.0 + 0.5 * ((calls["n"] - 1) // 2)
        runs = {
            w: {
                p: [factor[name] * drift * (10 + i + 0.01 * r) * 1e-3 for r in range(repeats)]
                for i, p in enumerate(["single", "round-robin", "random0"])
            }
            for w in specs
        }
        return {"allocator": name, "runs": runs}

    return arm


def test_registered():
    assert BENCHMARKS["allocator"] == "doppler_lab.lab.bench.held_memory"


def test_verdict_from_pairs(monkeypatch, tmp_path):
    monkeypatch.setattr(held_memory, "_arm", _fake_arm({"held": 0.9, "system": 1.0}))
    monkeypatch.setattr(held_memory, "QUICK_PAIRS", 6)
    rec = held_memory.run(tmp_path, quick=True, progress=False)
    s = rec["summary"]
    assert s["verdict"] == "better"
    assert s["per_pair_change_pct"] == [-10.0] * 6
    assert s["change_pct"] == pytest.approx(-10.0, abs=1e-6)
    rows = rec["tables"]["Per workload"]
    assert [r["workload"] for r in rows] == ["chainmm", "ffnn"]
    assert all(r["pairs"] == 6 for r in rows)  # the process pairs are the unit
    assert (tmp_path / "allocator.md").exists()
    # every timed run of every process is kept, in run order
    raw = json.loads(gzip.decompress((tmp_path / held_memory.RAW_FILE).read_bytes()))
    assert raw["order"][:2] == [["held", "system"], ["system", "held"]] and raw["repeats"] == 3
    assert len(raw["arms"]["held"]) == 6
    assert raw["arms"]["held"][0]["runs"]["chainmm"]["single"][0] == pytest.approx(9e-3)


def test_no_difference_cannot_be_told(monkeypatch, tmp_path):
    monkeypatch.setattr(held_memory, "_arm", _fake_arm({"held": 1.0, "system": 1.0}))
    monkeypatch.setattr(held_memory, "QUICK_PAIRS", 6)
    rec = held_memory.run(tmp_path, quick=True, progress=False)
    assert rec["summary"]["verdict"] == "cannot tell"


def test_one_arm_measures_every_placement():
    out = held_memory.measure({"tiny": "chainmm:matrices=3,scale=0.01"}, repeats=2)
    assert out["allocator"] in ("held", "system")
    runs = out["runs"]["tiny"]
    assert list(runs) == ["single", "round-robin", "random0", "random1", "random2"]
    assert all(len(v) == 2 and min(v) > 0 for v in runs.values())
    json.dumps(out)  # what the arm's process prints
    # the placers' baselines: inputs on their first consumer's device
    from doppler_lab.ir.placement import round_robin
    from doppler_lab.workloads.specs import graph_from_spec

    g = graph_from_spec("chainmm:matrices=3,scale=0.01")
    rr = held_memory._placements(g, 2)["round-robin"]
    assert (rr.device == round_robin(g, 2).device).all()


def test_a_failed_arm_is_named(monkeypatch):
    def failed(*args, **kwargs):
        return SimpleNamespace(returncode=3, stdout="", stderr="Traceback ...\nMemoryError")

    monkeypatch.setattr(subprocess, "run", failed)
    with pytest.raises(
        ExecutorError, match=r"(?s)'system' arm's process failed \(3\).*MemoryError"
    ):
        held_memory._arm("system", {"tiny": "chainmm:scale=0.01"}, 1)


def test_the_process_pair_is_the_unit(monkeypatch, tmp_path):
    """Placements timed in one process move together: a change that one process pair shows on
    every placement and the next pairs do not is one pair's worth of evidence, not
    ``placements`` pairs' (the verdict is over the process pairs)."""
    calls = {"n": 0}

    def arm(name, specs, repeats):
        calls["n"] += 1
        pair = (calls["n"] - 1) // 2
        f = 0.8 if (name == "held" and pair == 0) else 1.0  # only the first pair differs
        runs = {
            w: {p: [f * (10 + i) * 1e-3] * repeats for i, p in enumerate("abcde")} for w in specs
        }
        return {"allocator": name, "runs": runs}

    monkeypatch.setattr(held_memory, "_arm", arm)
    monkeypatch.setattr(held_memory, "QUICK_PAIRS", 6)
    rec = held_memory.run(tmp_path, quick=True, progress=False)
    assert rec["summary"]["per_pair_change_pct"] == [-20.0] + [0.0] * 5
    assert rec["summary"]["verdict"] == "cannot tell"
