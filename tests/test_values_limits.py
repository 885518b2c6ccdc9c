"""Issue 36, values, parsing and limits: every result is finite, every bad value is one line
naming it, sizes are checked before anything is allocated (regressions, one per case)."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.house.errors import (
    CheckpointError,
    ClusterError,
    ConfigError,
    DopplerLabError,
    FormatError,
    GraphError,
    SimulationError,
)
from doppler_lab.house.limits import LIMITS
from doppler_lab.io.documents import graph_from_dict, load_cluster, load_graph
from doppler_lab.io.stored import StoredTensors
from doppler_lab.ir.placement import round_robin
from doppler_lab.policies.checkpoint import load_policy, make_policy, save_checkpoint
from doppler_lab.policies.policy_config import PolicyConfig
from doppler_lab.search.adapter import ADAPTER_FORMAT, load_adapter
from doppler_lab.timing.cost_model import CostModel
from doppler_lab.timing.sim import Simulator
from doppler_lab.train.loop import Trainer
from doppler_lab.train.train_config import TrainConfig, preset

ROOT = Path(__file__).resolve().parents[1]

# the textbook DAG-scheduling example's shape: explicit per-device costs, [src, dst, cost] edges
TEXTBOOK = {
    "format": "doppler_lab.graph",
    "version": 1,
    "name": "textbook",
    "nodes": [
        {"name": "t0", "cost": [14, 16, 9]},
        {"name": "t1", "cost": [13, 19, 18]},
        {"name": "t2", "cost": [11, 13, 19]},
        {"name": "t3", "cost": [13, 8, 17]},
    ],
    "edges": [[0, 1, 18], [0, 2, 12], [1, 3, 19], [2, 3, 27]],
}


def one_error_line(capsys, argv: list[str]) -> str:
    """Run the CLI; it must exit 2 with one line on stderr and no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err, err
    return err


def uniform_doc(**changes) -> dict:
    doc = make_cluster("uniform", 2).to_dict()
    for path, value in changes.items():
        parent = doc
        *keys, last = path.split("__")
        for k in keys:
            parent = parent[int(k) if k.isdigit() else k]
        parent[int(last) if last.isdigit() else last] = value
    return doc


@pytest.fixture
def textbook(tmp_path) -> Path:
    path = tmp_path / "textbook.json"
    path.write_text(json.dumps(TEXTBOOK))
    return path


# -- 1. every result is finite ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        (
            {"bandwidth_bytes_per_s__0__1": 5e-324},
            ClusterError,
            r"cluster 'uniform2' bandwidth 0->1 5e-324 B/s gives an infinite transfer time",
        ),
        (
            {"latency_s__0__1": 1e308},
            ClusterError,
            r"latency 0->1 1e\+308 s makes the makespan overflow",
        ),
        (
            {"devices__0__launch_overhead_s": 1e308},
            ClusterError,
            r"device 0 \('dev0'\) launch_overhead_s 1e\+308 makes the makespan overflow",
        ),
    ],
)
def test_clusters_whose_times_overflow_are_named(tmp_path, changes, error, match):
    from doppler_lab.workloads import build

    path = tmp_path / "c.json"
    path.write_text(json.dumps(uniform_doc(**changes)))
    cluster = load_cluster(path)
    graph = build("chainmm", scale=0.01)
    with pytest.raises(error, match=match):
        Simulator(graph, cluster, "wc")


def test_cli_cluster_overflow_is_one_line_not_inf(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(uniform_doc(bandwidth_bytes_per_s__0__1=5e-324)))
    for cmd in (["simulate"], ["place", "--placer", "heft"]):
        argv = [cmd[0], "chainmm:scale=0.01", "--cluster", str(path), *cmd[1:]]
        err = one_error_line(capsys, argv)
        assert "bandwidth 0->1 5e-324 B/s gives an infinite transfer time" in err


def test_node_cost_that_overflows_the_makespan(tmp_path, capsys):
    doc = json.loads(json.dumps(TEXTBOOK))
    doc["nodes"][3]["cost"] = [1e308, 1e308, 1e308]
    path = tmp_path / "big.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(
        GraphError, match=r"node 3 \('t3'\) cost 1e\+308 makes the makespan overflow"
    ):
        CostModel(load_graph(path), make_cluster("uniform", 3))
    assert "makes the makespan overflow" in one_error_line(capsys, ["simulate", str(path)])


def test_edge_cost_that_overflows_the_makespan():
    doc = json.loads(json.dumps(TEXTBOOK))
    doc["edges"][0][2] = 1e308
    doc["edges"][1][2] = 1e308
    with pytest.raises(GraphError, match=r"edge 0 \('t0' -> 't1'\) cost 1e\+308"):
        CostModel(graph_from_dict(doc), make_cluster("uniform", 3))


def test_time_scale_that_overflows_is_named():
    doc = {**TEXTBOOK, "time_scale": 1e300}
    with pytest.raises(GraphError, match="makes the makespan overflow"):
        CostModel(graph_from_dict(doc), make_cluster("uniform", 3))


def test_noise_is_bounded_and_noisy_overflow_is_an_error(capsys):
    err = one_error_line(capsys, ["simulate", "chainmm:scale=0.01", "--noise", "1e308"])
    assert "--noise must be <= 10 (doppler_lab.house.limits.MAX_NOISE)" in err
    g = graph_from_dict(TEXTBOOK)
    with pytest.raises(SimulationError, match="MAX_NOISE"):
        Simulator(g, make_cluster("uniform", 3), noise=11.0)
    # costs just under the bound: a large enough noise draw overflows; named, never inf
    doc = json.loads(json.dumps(TEXTBOOK))
    for node in doc["nodes"]:
        node["cost"] = [1e299, 1e299, 1e299]
    sim = Simulator(graph_from_dict(doc), make_cluster("uniform", 3), "paper", noise=10.0)
    placements = np.zeros((200, 4), dtype=np.int64)
    with pytest.raises(SimulationError, match="overflows with noise sigma 10"):
        sim.makespans(placements, seed=0)


def test_ratio_that_overflows_is_an_error_not_null(tmp_path, capsys):
    doc = {"format": "doppler_lab.graph", "version": 1, "name": "tiny"}
    doc["nodes"] = [{"name": "a", "cost": 5e-324}, {"name": "b", "cost": 5e-324}]
    doc["edges"] = [[0, 1, 1e10]]
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(doc))
    err = one_error_line(capsys, ["simulate", str(path), "--devices", "2", "--json"])
    assert "over the lower bound 9.88131e-324 overflows" in err


def test_results_are_finite_on_the_cost_only_graph():
    sim = Simulator(graph_from_dict(TEXTBOOK), make_cluster("uniform", 3), "paper")
    trace = sim.run(round_robin(sim.graph, 3))
    assert math.isfinite(trace.makespan) and math.isfinite(sim.lower_bound())


# -- 2. training stops on non-finite weights; such files are refused -----------------------------
def test_train_with_a_huge_rate_stops_and_saves_no_policy(tmp_path, capsys, textbook):
    out = tmp_path / "run"
    argv = ["train", "--graph", str(textbook), "--stage", "sim", "--episodes", "8"]
    argv += ["--episodes-per-update", "4", "--set", "lr=1e308", "--out", str(out)]
    err = one_error_line(capsys, argv)
    assert re.search(r"training diverged at update 1 of stage 'sim'.*lr=1e\+308", err), err
    assert not (out / "policy.pt").exists()


def test_divergence_keeps_the_last_good_checkpoint(tmp_path):
    graph = graph_from_dict(TEXTBOOK)
    cfg = preset("sim", episodes=16, episodes_per_update=4, checkpoint_every=1, lr_warmup=0)
    trainer = Trainer(cfg, [graph], make_cluster("uniform", 3), PolicyConfig(), tmp_path)

    def blow_up(tr, row):
        if tr.update == 2:  # after update 2's checkpoint: the next step diverges
            for opt in tr.optimizers.values():
                for group in opt.param_groups:
                    group["lr"] = 1e308

    trainer.callbacks.append(blow_up)
    with pytest.raises(ConfigError, match="training diverged at update 3"):
        trainer.run()
    last = tmp_path / "checkpoints" / "last.pt"
    policy, doc = load_policy(last)  # finite: loads
    assert doc["train"]["update"] == 2
    assert all(torch.isfinite(p).all() for p in policy.parameters())
    assert not (tmp_path / "policy.pt").exists()


def test_checkpoint_with_non_finite_weights_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "p.pt", make_policy(PolicyConfig(), 2))
    doc = torch.load(path, weights_only=True)
    name = next(k for k, v in doc["state_dict"].items() if v.is_floating_point())
    doc["state_dict"][name] = torch.full_like(doc["state_dict"][name], float("nan"))
    torch.save(doc, tmp_path / "nan.pt")
    with pytest.raises(
        CheckpointError, match=f"state_dict entry '{re.escape(name)}' holds non-fin"
    ):
        load_policy(tmp_path / "nan.pt")


def test_adapter_files_only_format_or_non_finite_are_refused(tmp_path):
    graph = graph_from_dict(TEXTBOOK)
    torch.save({"format": ADAPTER_FORMAT}, tmp_path / "a.pt")
    with pytest.raises(ConfigError, match="lacks the field 'bias'"):
        load_adapter(tmp_path / "a.pt", None, graph)
    doc = {
        "format": ADAPTER_FORMAT,
        "bias": torch.full((4, 3), float("inf")),
        "graph": "textbook",
        "nodes": 4,
        "devices": 3,
    }
    torch.save(doc, tmp_path / "b.pt")
    with pytest.raises(ConfigError, match="bias holds non-finite values"):
        load_adapter(tmp_path / "b.pt", None, graph)
    torch.save({**doc, "bias": torch.zeros(2, 3)}, tmp_path / "c.pt")
    with pytest.raises(ConfigError, match=r"bias has shape \(2, 3\); expected \(4, 3\)"):
        load_adapter(tmp_path / "c.pt", None, graph)


# -- 3. one parser, one set of messages ----------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train", "--set", "lr=NaN"], "train config: setting lr=NaN; expected a finite number"),
        (["train", "--set", "zzz=1"], "train config has no setting 'zzz'; expected one of stage,"),
        (
            ["train", "--set", "entropy_coef=1e400"],
            "train config: setting entropy_coef=1e400; expected a finite number",
        ),
        (["train", "--set", "episodes=2.5"], "train config: setting episodes=2.5; expected an int"),
        (["train", "--set", "anchor=1"], "train config: setting anchor=1; expected true or false"),
        (
            ["train", "--policy-set", "hidden=x"],
            "policy config: setting hidden='x'; expected an integer",
        ),
        (["train", "--set", "lr"], "train config: 'lr' is not of the form key=value"),
        (
            ["adapt", "--set", "anchor_bias=1e308"],
            "adapter config: setting anchor_bias=1e+308; expected a finite number >= 0 and <= 1000",
        ),
        (["adapt", "--set", "lr=inf"], "adapter config: setting lr=inf; expected a finite number"),
        (
            ["place", "--placer", "local-search", "-o", "budget=NaN"],
            "placer 'local-search': option budget=NaN; expected a finite number",
        ),
        (
            ["place", "--placer", "local-search", "-o", "budget=x"],
            "placer 'local-search': option budget='x'; expected a positive integer",
        ),
        (["place", "--placer", "heft", "-o", "zzz=1"], "placer 'heft' has no option 'zzz'"),
        (
            ["simulate", "chainmm:scale=nan"],
            "workload spec 'chainmm:scale=nan': parameter scale=nan; expected a finite number",
        ),
        (
            ["simulate", "chainmm:n=x"],
            "workload 'chainmm': parameter n='x'; expected an integer",
        ),
        (["simulate", "chainmm:zzz=1"], "workload 'chainmm' has no parameter 'zzz'; expected one"),
    ],
)
def test_settings_errors_are_one_line_with_one_form(tmp_path, capsys, argv, message):
    cmd, *rest = argv
    graph = {"train": ["--graph", "chainmm:scale=0.01", "--out", str(tmp_path / "r")]}
    graph["adapt"] = ["chainmm:scale=0.01", "--out", str(tmp_path / "r")]
    graph["place"] = ["chainmm:scale=0.01"]
    graph["simulate"] = []
    err = one_error_line(capsys, [cmd, *graph[cmd], *rest])
    assert message in err, err


def test_settings_module_reads_values_as_place_did():
    from doppler_lab.house.settings import parse_items

    got = parse_items(
        ["a=1", "b=1e3", "c=0.5", "d=1/4", "e=true", "f=null", "g=[0.5,0.25]", "h=paper"], "x"
    )
    assert got == {
        "a": 1,
        "b": 1000,
        "c": 0.5,
        "d": 0.25,
        "e": True,
        "f": None,
        "g": [0.5, 0.25],
        "h": "paper",
    }
    assert isinstance(got["b"], int)
    with pytest.raises(ConfigError, match="'a' is given twice"):
        parse_items(["a=1", "a=2"], "x")
    with pytest.raises(ConfigError, match="setting d=1/0; expected a finite number"):
        parse_items(["d=1/0"], "x")


def test_configs_check_types_when_built_from_python():
    with pytest.raises(ConfigError, match="setting lr='x'; expected a finite number"):
        TrainConfig(lr="x")
    with pytest.raises(ConfigError, match="has no setting 'zzz'"):
        TrainConfig().replace(zzz=1)
    assert TrainConfig(lr=1).lr == 1.0 and isinstance(TrainConfig(lr=1).lr, float)
    with pytest.raises(ConfigError, match="setting mp_steps=10000000; expected an integer >= 1"):
        PolicyConfig(mp_steps=10**7)


# -- 4. overflows of sizes and durations ----------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["simulate", "chainmm:scale=1e308"], "n 8192 at scale 1e+308 is inf elements"),
        (["simulate", "llama_block:seq=1e30"], "parameter seq=1e+30; expected an integer <="),
        (
            ["place", "chainmm:scale=0.01", "--placer", "local-search", "--budget", "1e30"],
            "--budget must be <= 1000000000 (doppler_lab.house.limits.MAX_BUDGET)",
        ),
        (
            ["place", "chainmm:scale=0.01", "--placer", "local-search", "-o", "budget=1e30"],
            "option budget=1e+30; expected a positive integer <= 1e+09",
        ),
        (
            ["place", "chainmm:scale=0.01", "--placer", "exact", "--time-limit", "1e30"],
            "--time-limit must be <= 604800 (doppler_lab.house.limits.MAX_SECONDS)",
        ),
        (
            ["execute", "chainmm:scale=0.01", "--cluster", "cpu", "--timeout", "1e10"],
            "--timeout must be <= 604800 (doppler_lab.house.limits.MAX_SECONDS)",
        ),
    ],
)
def test_overflowing_values_are_one_line(capsys, argv, message):
    assert message in one_error_line(capsys, argv)


# -- 5. size limits, checked before allocating --------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["simulate", "chainmm:scale=0.01", "--cluster", "cpu", "--devices", "1e30"],
            "--devices must be <= 1024 (doppler_lab.house.limits.MAX_DEVICES)",
        ),
        (
            ["simulate", "chainmm:scale=0.01", "--cluster", "multihost:hosts=100000,devices=8"],
            "multihost devices is 800000; the limit is 1024",
        ),
        (["simulate", "mlp:layers=1e8"], "parameter layers=100000000; expected an integer >= 1"),
        (
            ["execute", "chainmm:scale=0.01", "--cluster", "cpu", "--warmup", "1e30"],
            "--warmup must be <= 100000 (doppler_lab.house.limits.MAX_REPEATS)",
        ),
        (
            ["execute", "chainmm:scale=0.01", "--cluster", "cpu", "--repeats", "1e6"],
            "--repeats must be <= 100000",
        ),
        (
            ["simulate", "random_dag:num_nodes=1e8"],
            "num_nodes=100000000 gives about 1e+08 nodes; the limit is 2000000",
        ),
        (["simulate", "chainmm:scale=0.01", "--seed", "1e30"], "--seed must fit in 64 bits"),
    ],
)
def test_size_limits_on_the_command_line(capsys, argv, message):
    assert message in one_error_line(capsys, argv)


@pytest.mark.parametrize("route", [10**7, 2**40])
def test_cluster_route_ids_are_limited_before_allocating(tmp_path, route):
    doc = uniform_doc()
    doc.pop("link_names")
    doc["routes"][0][1][0] = route
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=f"route id {route} asks for .*MAX_LINKS"):
        load_cluster(path)


def test_cluster_device_count_is_limited(tmp_path):
    doc = uniform_doc()
    doc["devices"] = doc["devices"] * 600
    path = tmp_path / "c.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match="the number of devices is 1200; the limit is 1024"):
        load_cluster(path)
    with pytest.raises(ClusterError, match="MAX_DEVICES"):
        make_cluster("cpu", 10**6)


def test_graph_size_is_limited(monkeypatch):
    import doppler_lab.house.limits
    import doppler_lab.ir.graph
    from doppler_lab.workloads import build

    monkeypatch.setattr(doppler_lab.ir.graph, "MAX_NODES", 50)
    with pytest.raises(GraphError, match="grows past .* nodes"):
        build("chainmm", scale=0.01)
    monkeypatch.setitem(doppler_lab.house.limits.LIMITS, "MAX_NODES", 3)
    with pytest.raises(FormatError, match="the number of nodes is 4; the limit is 3"):
        graph_from_dict(TEXTBOOK)


def test_checkpoint_with_huge_message_passing_steps_is_refused(tmp_path):
    path = save_checkpoint(tmp_path / "p.pt", make_policy(PolicyConfig(), 2))
    doc = torch.load(path, weights_only=True)
    doc["policy"]["config"]["mp_steps"] = 10**7
    torch.save(doc, tmp_path / "mp.pt")
    with pytest.raises(
        CheckpointError, match=r"mp_steps=10000000; expected an integer >= 1 and <= 64"
    ):
        load_policy(tmp_path / "mp.pt")
    doc["policy"]["config"]["mp_steps"] = 4
    doc["policy"]["num_devices"] = 10**9
    torch.save(doc, tmp_path / "d.pt")
    with pytest.raises(CheckpointError, match="num_devices is 1000000000"):
        load_policy(tmp_path / "d.pt")


def test_every_limit_is_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for name in LIMITS:
        assert f"`{name}`" in readme, name


# -- 6. more one-line errors ---------------------------------------------------------------------
def test_graph_of_inputs_only(tmp_path, capsys):
    doc = {
        "format": "doppler_lab.graph",
        "version": 1,
        "nodes": [
            {"name": "a", "kind": "input", "flops": 0, "out_bytes": 4},
            {"name": "b", "kind": "input", "flops": 0, "out_bytes": 4},
        ],
        "edges": [],
    }
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc))
    for argv in (["simulate", str(path)], ["place", str(path), "--placer", "heft"]):
        assert "has only input nodes (2)" in one_error_line(capsys, argv)


def test_garbage_sidecar_is_a_format_error(tmp_path):
    for blob in (b"garbage" * 10, b"PK\x03\x04garbage", b""):
        path = tmp_path / "g.tensors.pt"
        path.write_bytes(blob)
        with pytest.raises(FormatError, match="cannot read the graph's tensors") as info:
            _ = StoredTensors(path=path).inputs
        assert "\n" not in str(info.value)


def test_zero_cost_graph_reports_no_ratio(tmp_path, capsys):
    doc = {"format": "doppler_lab.graph", "version": 1, "nodes": [{"name": "a", "cost": 0}]}
    doc["edges"] = []
    path = tmp_path / "z.json"
    path.write_text(json.dumps(doc))
    assert main(["simulate", str(path)]) == 0
    assert "(ratio n/a)" in capsys.readouterr().out


# -- 7. cost-only graphs (the textbook examples) -------------------------------------------------
def test_cost_only_graph_simulates_and_places(textbook, capsys):
    g = load_graph(textbook)
    assert g.num_nodes == 4 and g.compute_cost.shape == (4, 3)
    assert main(["simulate", str(textbook), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["num_devices"] == 3 and out["makespan"] > 0
    assert main(["place", str(textbook), "--placer", "heft", "--json"]) == 0
    placed = json.loads(capsys.readouterr().out)
    assert math.isfinite(placed["makespan"]) and placed["makespan"] >= out["lower_bound"]


def test_readme_has_the_cost_only_example():
    readme = (ROOT / "README.md").read_text()
    assert '{"name": "t0", "cost": [14, 16, 9]}' in readme


def test_without_costs_flops_are_still_required():
    doc = {"format": "doppler_lab.graph", "version": 1, "nodes": [{"name": "a"}], "edges": []}
    with pytest.raises(FormatError, match="lacks the field 'flops' .*without an op spec or costs"):
        graph_from_dict(doc)


# -- 8. determinism: train uses one torch thread whatever the process had ------------------------
def test_train_is_bit_identical_whatever_the_thread_count(tmp_path, textbook, capsys, monkeypatch):
    seen = []
    run = Trainer.run

    def counting_run(self):
        seen.append(torch.get_num_threads())
        return run(self)

    monkeypatch.setattr(Trainer, "run", counting_run)
    states = []
    before = torch.get_num_threads()
    try:
        for threads in (2, 1):
            torch.set_num_threads(threads)
            out = tmp_path / f"run{threads}"
            argv = [
                "train",
                "--graph",
                str(textbook),
                "--stage",
                "imitation,sim",
                "--out",
                str(out),
            ]
            argv += ["--episodes", "16", "--episodes-per-update", "4", "--no-progress"]
            assert main(argv) == 0
            assert torch.get_num_threads() == threads  # restored
            states.append(torch.load(out / "2_sim" / "policy.pt", weights_only=True)["state_dict"])
    finally:
        torch.set_num_threads(before)
    capsys.readouterr()
    assert seen == [1, 1, 1, 1]  # each stage of each run on one thread
    a, b = states
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_errors_are_doppler_lab_errors():
    for exc in (ConfigError, GraphError, ClusterError, SimulationError, CheckpointError):
        assert issubclass(exc, DopplerLabError)


def test_docstring_examples():
    import doctest

    import doppler_lab.house.limits
    import doppler_lab.house.settings

    for mod in (doppler_lab.house.limits, doppler_lab.house.settings):
        assert doctest.testmod(mod).failed == 0


def test_paper_text_node_count_is_limited(tmp_path):
    from doppler_lab.io.documents import read_paper_graph

    path = tmp_path / "p.txt"
    path.write_text("10000000000\n0\n1\n2\n1,1\n")
    with pytest.raises(FormatError, match=r"line 1: the node count is 10000000000; the limit"):
        read_paper_graph(path)


def test_calibrated_op_scale_that_overflows_is_named():
    from doppler_lab.workloads import build

    g = build("chainmm", scale=0.01)
    with pytest.raises(GraphError, match=r"calibrated op_scale 1e\+308\) make the makespan"):
        CostModel(g, make_cluster("p100x4"), {"einsum": 1e308})


def test_adapter_table_that_is_not_finite_is_never_written(tmp_path):
    from doppler_lab.search.adapter import AdaptConfig, AdaptResult

    graph = graph_from_dict(TEXTBOOK)
    res = AdaptResult(
        bias=torch.full((4, 3), float("nan")),
        best=round_robin(graph, 3),
        best_cost=1.0,
        start_cost=1.0,
        calls=1,
        rows=[],
        config=AdaptConfig(),
    )
    with pytest.raises(ConfigError, match="non-finite values; expected other settings"):
        res.save(tmp_path / "adapter.pt", graph, make_cluster("uniform", 3), "ck")
    assert not (tmp_path / "adapter.pt").exists()
    with pytest.raises(ConfigError, match="temperature=1e-300; expected a finite number >= 0.001"):
        AdaptConfig(temperature=1e-300)


@pytest.mark.parametrize(
    "spec", ["ffnn:layers=100000000", "llama_block:layers=1000000", "chainmm:matrices=100000000"]
)
def test_a_workload_too_large_is_refused_before_it_is_built(spec):
    """The node count is extrapolated from two small builds, so the refusal is immediate (it
    used to come after the generator had grown 2 million nodes, about 35 s)."""
    from doppler_lab.house.errors import ConfigError
    from doppler_lab.workloads import build_from_spec

    with pytest.raises(ConfigError, match=r"gives about .* nodes; the limit is 2000000"):
        build_from_spec(spec)
