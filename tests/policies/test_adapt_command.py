"""``doppler-lab adapt`` and the doppler placer's ``adapter`` option: the run folder's files, the
adapted policy placing the graph as the run found, resuming, and the errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError
from doppler_lab.io.documents import load_placement
from doppler_lab.placers import get_placer
from doppler_lab.placers.clustering import CLUSTER_CAPS
from doppler_lab.search.budget import heuristic_candidates
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads import build_from_spec

GRAPH = "chainmm:matrices=3,scale=0.001"
ARGS = ["--episodes", "40", "--set", "batch=8", "--set", "samples=4", "--set", "partitions=2"]


def test_adapt_writes_a_table_the_placer_uses(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["adapt", GRAPH, *ARGS, "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    for name in ("adapter.pt", "placement.json", "summary.json", "curve.html", "state.pt"):
        assert (out / name).is_file(), name
    assert summary["calls"] == 40 and summary["semantics"] == "wc"
    assert summary["best_cost"] <= summary["start_cost"] <= summary["greedy_cost"]
    # 1 + 4 samples + the clusterings (the unbounded one and the distinct bounded ones) + 2
    # partitions (equal ones once), then batches of 8 and a last, smaller one
    graph = build_from_spec(GRAPH)
    heuristics = heuristic_candidates(graph, CostModel(graph, _cluster()), 4, 2, True, CLUSTER_CAPS)
    proposals = summary["rows"][0]["calls"] - 8
    assert proposals == 1 + 4 + len(heuristics)
    assert heuristics[0].placer == "clustering" and heuristics[0].meta["cap"] is None
    assert summary["config"]["batch"] == 8 and summary["config"]["clustering"] is True
    assert [r["calls"] for r in summary["rows"]] == [c for c in range(proposals + 8, 41, 8)] + (
        [40] if (40 - proposals) % 8 else []
    )
    placed = load_placement(out / "placement.json")
    sim = Simulator(graph, _cluster(), "wc")
    assert sim.makespan(placed) == pytest.approx(summary["best_cost"])
    # the greedy rollout of the policy with the table is the best placement the run found
    assert summary["settle_steps"] >= 0
    placer = get_placer("doppler", semantics="wc", samples=0, partitions=0, clustering=False,
                        adapter=out / "adapter.pt")  # fmt: skip
    p = placer.place(graph, _cluster(), np.random.default_rng(0))
    assert np.array_equal(p.device, placed.device) and p.meta["adapter"].endswith("adapter.pt")
    assert placer.policy(4).node_bias is None  # set only while placing
    # rerunning the finished run reports the same
    assert main(["adapt", GRAPH, *ARGS, "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == summary["rows"]
    # another seed in the same folder is refused
    assert main(["adapt", GRAPH, *ARGS, "--seed", "1", "--out", str(out)]) == 2
    assert "written by another run (seed 0, this run 1)" in capsys.readouterr().err


def _cluster():
    from doppler_lab.hardware.cluster import make_cluster

    return make_cluster("p100x4")


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--set", "episodes=5"], "--set episodes: use --episodes instead"),
        (["--set", "bogus=1"], "adapter config has no setting 'bogus'; expected one of batch"),
        (
            ["--set", "temperature=0"],
            "adapter config: setting temperature=0; expected a finite number >= 0.001",
        ),
        (["--checkpoint", "doppler/nope"], "nope"),
    ],
)
def test_adapt_errors(tmp_path, capsys, extra, message):
    assert main(["adapt", GRAPH, *ARGS, *extra, "--out", str(tmp_path / "r")]) == 2
    assert message in capsys.readouterr().err


def test_the_adapter_option_is_checked():
    with pytest.raises(ConfigError, match="trains a table of its own"):
        get_placer("doppler", budget=50, search="adapt", adapter="a.pt")
    with pytest.raises(ConfigError, match="adapter = 3, expected a file path"):
        get_placer("doppler", adapter=3)
