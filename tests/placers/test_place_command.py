"""``doppler-lab place``: JSON fields, files, and clear errors."""

from __future__ import annotations

import json

import pytest

from doppler_lab.cli import main
from doppler_lab.io.documents import load_placement, save_graph

from placer_helpers import small_dag


@pytest.fixture(scope="module")
def graph_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("g") / "dag.json"
    save_graph(small_dag(12, 0, inputs=2), path)
    return str(path)


def _json(capsys, argv):
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_json_output_of_a_list_scheduler(capsys, graph_file, tmp_path):
    out = tmp_path / "p.json"
    r = _json(
        capsys,
        ["place", graph_file, "--placer", "heft", "--devices", "3", "--json", "--out", str(out)],
    )
    for key in ("placer", "placement", "makespan", "lower_bound", "schedule_makespan"):
        assert key in r
    assert r["placer"] == "heft" and r["semantics"] == "paper" and len(r["placement"]) == 14
    assert r["makespan"] >= r["lower_bound"] > 0
    assert load_placement(out).device.tolist() == r["placement"]
    # simulate --placement reads what place --out wrote
    sim = _json(
        capsys, ["simulate", graph_file, "--devices", "3", "--placement", str(out), "--json"]
    )
    assert sim["makespan"] == pytest.approx(r["makespan"])


def test_gantt_file(capsys, graph_file, tmp_path):
    out = tmp_path / "g.html"
    assert main(["place", graph_file, "--placer", "cp", "--gantt", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert out.exists() and "plotly" in out.read_text()


def test_json_output_of_exact_and_search(capsys, graph_file):
    r = _json(
        capsys,
        ["place", graph_file, "--placer", "exact", "--devices", "2", "--time-limit", "5", "--json"],
    )
    assert r["optimal"] is True and r["bound"] == pytest.approx(r["schedule_makespan"])
    r = _json(
        capsys,
        [
            "place",
            graph_file,
            "--placer",
            "local-search",
            "--budget",
            "40",
            "--semantics",
            "wc",
            "--json",
        ],
    )
    assert r["sim_calls"] <= 40 and r["options"]["semantics"] == "wc"
    r = _json(capsys, ["place", graph_file, "--placer", "cp", "-o", "estimate=additive", "--json"])
    assert r["schedule_model"] == "additive"


def test_learned_placer_from_a_shipped_checkpoint(capsys):
    r = _json(
        capsys,
        ["place", "chainmm", "--placer", "doppler", "--checkpoint", "chainmm", "--json"],
    )
    # greedy + 16 samples + the clustering + up to 4 partition proposals that differ from it
    assert r["placer"] == "doppler" and 18 <= r["sim_calls"] <= 22
    assert r["options"]["checkpoint"] == "chainmm" and r["makespan"] >= r["lower_bound"]
    argv = ["place", "chainmm", "--placer", "doppler", "--checkpoint", "chainmm", "--json"]
    alone = _json(capsys, [*argv, "-o", "partitions=0", "-o", "clustering=false"])
    assert alone["sim_calls"] == 17 and alone["makespan"] >= r["makespan"]
    # which candidate won, and the best of each kind
    assert r["source"] in ("greedy", "sample", "clustering", "partition")
    others = [r[k] for k in ("rollout_cost", "clustering_cost", "partition_cost") if r[k]]
    assert r["makespan"] == pytest.approx(min(others))
    assert alone["partition_cost"] is None and alone["clustering_cost"] is None
    assert alone["source"] in ("greedy", "sample")
    assert main([*argv[:-1], "--no-progress"]) == 0
    # "best rollout ..., clustering ..., best partition ...: the X won"
    assert ", clustering " in (out := capsys.readouterr().out) and ": the " in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--placer", "nope"], "unknown placer 'nope'"),
        (["--placer", "cp", "--budget", "5"], "takes no --budget"),
        (["--placer", "local-search", "--budget", "0"], "--budget must be positive"),
        (["--placer", "exact", "--time-limit", "-1"], "--time-limit must be positive"),
        (["--placer", "etf", "-o", "memory_cap=1"], "no placement of"),
        (["--placer", "cp", "-o", "estimate"], "is not of the form key=value"),
        (["--placer", "heft", "--checkpoint", "x.pt"], "takes no --checkpoint"),
        (["--placer", "gdp"], "needs a checkpoint"),
        (["--placer", "doppler", "--checkpoint", "nope.pt"], "'nope.pt' does not exist"),
    ],
)
def test_bad_input_exits_2_with_a_message(capsys, graph_file, argv, message):
    assert main(["place", graph_file, *argv]) == 2
    assert message in capsys.readouterr().err


def test_the_winning_candidate_is_named_in_words():
    from doppler_lab.commands._common import source_label

    assert source_label("greedy") == "greedy rollout"
    assert source_label("sample") == "sampled rollout"
    assert source_label("greedy on 2 devices") == "greedy rollout on 2 devices"
    assert source_label("partition") == "partition"
