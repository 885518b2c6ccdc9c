"""The ``doppler-lab train`` command, the pipeline and Stage III on the real executor."""

from __future__ import annotations

import json
import sys

import pytest

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import ConfigError
from doppler_lab.train import preset, read_rows
from doppler_lab.train.cost_functions import make_executor_cost
from doppler_lab.workloads import build_from_spec

GRAPH = "chainmm:matrices=3,scale=0.001"
SMALL = ["--policy-set", "hidden=16", "--policy-set", "mp_steps=2"]


def test_train_two_stages_then_resume(tmp_path, capsys):
    args = ["train", "--stage", "imitation,sim", "--graph", GRAPH, "--episodes", "8"]
    args += ["--episodes-per-update", "4", "--out", str(tmp_path), "--no-progress", *SMALL]
    assert main(args + ["--set", "sil_coef=0.5"]) == 0
    out = capsys.readouterr().out
    assert "imitation: 8 episodes" in out and "sim: 8 episodes" in out
    assert len(read_rows(tmp_path / "1_imitation" / "metrics.csv")) == 2
    sim_cfg = json.loads((tmp_path / "2_sim" / "config.json").read_text())
    assert sim_cfg["train"]["sil_coef"] == 0.5 and sim_cfg["train"]["semantics"] == "wc"
    assert sim_cfg["init"].endswith("1_imitation/policy.pt")
    # a finished run restarted in place does nothing new
    assert main(args + ["--set", "sil_coef=0.5"]) == 0
    assert len(read_rows(tmp_path / "2_sim" / "metrics.csv")) == 2


def test_train_released_preset_and_errors(tmp_path, capsys):
    args = ["train", "--stage", "sim", "--graph", GRAPH, "--episodes", "2", "--no-progress"]
    assert main(args + ["--out", str(tmp_path / "r"), "--preset", "released", *SMALL]) == 0
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    assert cfg["train"]["episodes_per_update"] == 1 and cfg["policy"]["layout"] == "doppler5"
    assert main(args + ["--out", str(tmp_path / "x"), "--stage", "nope"]) == 2
    assert "expected one or more of" in capsys.readouterr().err
    gdp = ["--policy", "gdp", "--init", str(tmp_path / "r" / "policy.pt")]
    assert main(args + ["--out", str(tmp_path / "y"), *gdp]) == 2
    assert "holds a 'dual' policy, expected 'gdp'" in capsys.readouterr().err


def test_stage_real_without_executor(monkeypatch):
    monkeypatch.setitem(sys.modules, "doppler_lab.executor", None)
    with pytest.raises(ConfigError, match="ExecutorCost"):
        make_executor_cost(build_from_spec(GRAPH), make_cluster("cpu", 2), 1)


def test_stage_real_on_cpu_devices(tmp_path):
    from doppler_lab.policies.policy_config import PolicyConfig
    from doppler_lab.train import train

    cfg = preset("real", episodes=4, episodes_per_update=2, repeats=1)
    g = build_from_spec(GRAPH)
    r = train(
        cfg,
        [g],
        make_cluster("cpu", 2),
        PolicyConfig(hidden=16, mp_steps=2),
        tmp_path,
        progress=False,
    )
    assert [row["episode"] for row in r.rows] == [2, 4]
    assert all(row["real/cost_min"] > 0 for row in r.rows)
    # the stage ends with its verdict: final against start, interleaved pairs, the interval
    (v,) = r.summary["verdict"]
    assert v["graph"] == g.name and v["n"] == 10 and v["low"] <= v["mean"] <= v["high"]
    assert v["verdict"] in ("better", "worse", "cannot tell") and v["start_s"] > 0
    assert json.loads((tmp_path / "summary.json").read_text())["verdict"][0]["n"] == 10


def test_stage_real_keeps_its_start_across_a_resume(tmp_path):
    """The start placement is in the checkpoint: a resumed Stage III judges against the
    policy the stage began with, not the one it resumed from."""
    from doppler_lab.policies.policy_config import PolicyConfig
    from doppler_lab.train.loop import Trainer

    cfg = preset("real", episodes=4, episodes_per_update=2, repeats=1, checkpoint_every=1)
    g, cl, pcfg = (
        build_from_spec(GRAPH),
        make_cluster("cpu", 2),
        PolicyConfig(hidden=16, mp_steps=2),
    )

    def stop_after_one(trainer, row):
        if trainer.update == 1:
            raise KeyboardInterrupt

    first = Trainer(cfg, [g], cl, pcfg, tmp_path, progress=False, callbacks=[stop_after_one])
    start = [p.copy() for p in first.start_placements]
    with pytest.raises(KeyboardInterrupt):
        first.run()
    again = Trainer(cfg, [g], cl, pcfg, tmp_path, progress=False, verdict_pairs=5)
    assert [p.tolist() for p in again.start_placements] == [p.tolist() for p in start]
    assert again.run().summary["verdict"][0]["n"] == 5


def test_starting_policy_prefers_the_shipped_checkpoint(tmp_path):
    from doppler_lab.train.analysis import graph_case, starting_policy

    g, cl, sem = graph_case("chainmm:matrices=3,scale=0.001")
    assert (cl.name, sem) == ("p100x4", "wc")
    pol, path, how = starting_policy(g, cl, sem, tmp_path)
    assert how == "shipped doppler/chainmm" and path.name == "chainmm.pt"
    assert pol.num_devices == 4
    with pytest.raises(ConfigError, match="unknown workload 'no_such_graph'; expected"):
        graph_case("no_such_graph", str(tmp_path))
    with pytest.raises(ConfigError, match="paper graph 'ffnn_192nodes' not found"):
        graph_case("ffnn_192nodes", str(tmp_path))  # a released name, not in this folder


def test_shipped_readme_names_each_checkpoints_placed_norm(tmp_path):
    from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
    from doppler_lab.policies.policy_config import PolicyConfig
    from doppler_lab.train.shipped import write_readme

    final = {
        "protocol_makespan_s": 0.2,
        "greedy_makespan_s": 0.21,
        "cp_mean_makespan_s": 0.25,
        "vs_cp": 0.2,
        "lower_bound_s": 0.18,
    }
    index = {}
    for name, norm in (("a", "zscore"), ("b", "smooth")):
        pol = make_policy(PolicyConfig(hidden=8, head_hidden=8, mp_steps=1, placed_norm=norm), 4)
        save_checkpoint(tmp_path / "doppler" / f"{name}.pt", pol, {})
        index[f"doppler/{name}"] = {
            "command": f"python -m doppler_lab.train.shipped --name {name} --seed 0",
            "graph_nodes": 10,
            "episodes": {"imitation": 4, "sim": 8},
            "seed": 0,
            "final": final,
            "train_s": 1.0,
            "size_bytes": 1000,
        }
    (tmp_path / "index.json").write_text(json.dumps({"checkpoints": index}))
    text = write_readme(tmp_path).read_text()
    assert "| doppler/a |" in text and text.split("| doppler/a |")[1].split("\n")[0].endswith(
        "| zscore |"
    )
    assert text.split("| doppler/b |")[1].split("\n")[0].endswith("| smooth |")
    assert f"shipped --name b --seed 0 --dest {tmp_path}`" in text
