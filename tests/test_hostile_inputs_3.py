"""Hostile and unlucky inputs, third round: options that one mode of a command ignored in
silence, a setting given twice with two values, and a learned placer on a graph and cluster
whose (node, device) tensors would be huge. Each case failed on the code before its fix."""

from __future__ import annotations

import json

import pytest
from test_hostile_inputs import one_error_line  # one place for the rule: exit 2, one line
from test_hostile_inputs_2 import never_runs

from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError, PlacementError


class Reached(Exception):
    """Raised by a stand-in for the work: the command got past its checks."""


def reached(monkeypatch, module, name: str, seen: list) -> None:
    """Make ``module.name`` record its arguments and raise :class:`Reached`."""

    def stand_in(*args, **kwargs):
        seen.append((args, kwargs))
        raise Reached(name)

    monkeypatch.setattr(module, name, stand_in)


# -- train-general --distill ---------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "instead"),
    [
        (["--imitation-episodes", "8"], "use --distill-imitation-episodes"),
        (["--sim-episodes", "8"], "use --distill-sim-episodes"),
        (["--anchor-budget", "9"], "use --distill-budget"),
        (["--anchor-episodes", "8"], "search distillation has no anchor stage"),
        (["--teacher", "cluster"], "Stage I imitates the searches' best placements"),
        (["--graphs-per-step", "2"], "Stage II keeps distillation's settings"),
        (["--estimate", "est"], "the policy of --init keeps its own"),
        (["--layout", "doppler11"], "the policy of --init keeps its own"),
        (["--validate"], "score the result afterwards with --score CKPT"),
        (["--hint-free"], "search distillation trains with the hint"),
        (["--hints", "partition"], "search distillation trains with the clustering's hint"),
    ],
)
def test_train_general_distill_refuses_the_plain_stage_options(
    tmp_path, capsys, monkeypatch, extra, instead
):
    import doppler_lab.train.distill as dl

    never_runs(monkeypatch, dl, "distill")
    # --distill 1 --imitation-episodes 8 ran the distillation's own Stage I episodes in silence
    argv = ["train-general", "--distill", "1", "--out", str(tmp_path / "run"), *extra]
    err = one_error_line(capsys, argv)
    assert f"{extra[0]} is an option of Stages I + II without --distill" in err
    assert instead in err


def test_train_general_distill_takes_the_options_it_honours(tmp_path, monkeypatch):
    import doppler_lab.train.distill as dl

    seen: list = []
    reached(monkeypatch, dl, "distill", seen)
    argv = ["train-general", "--distill", "2", "--out", str(tmp_path / "run"), "--tasks", "3"]
    argv += ["--lr", "0.002", "--seed", "4", "--memory-share", "0.5", "--no-progress"]
    argv += ["--distill-imitation-episodes", "5", "--paper-cost-share", "0.25"]
    with pytest.raises(Reached):
        main(argv)
    recipe = seen[0][0][1]
    assert (recipe.rounds, recipe.tasks, recipe.seed, recipe.imitation_episodes) == (2, 3, 4, 5)
    assert (recipe.sim_lr, recipe.memory_share, recipe.paper_cost_share) == (0.002, 0.5, 0.25)


def test_train_general_command_line_is_unchanged_by_the_option_table():
    from doppler_lab.cli import build_parser

    args = build_parser().parse_args(
        ["train-general", "--tasks", "2", "--imitation-episodes", "8", "--lr", "0.01"]
        + ["--seed", "1", "--name", "doppler/general-v9", "--validate", "--jobs", "1"]
    )
    from doppler_lab.commands.train_general import command_line

    assert command_line(args) == (
        "doppler-lab train-general --tasks 2 --imitation-episodes 8 --lr 0.01 --seed 1 "
        "--name doppler/general-v9"
    )
    args = build_parser().parse_args(
        ["train-general", "--distill", "2", "--distill-budget", "50", "--no-distill-proposals"]
    )
    assert command_line(args) == (
        "doppler-lab train-general --distill 2 --distill-budget 50 --no-distill-proposals"
    )
    args = build_parser().parse_args(["train-general", "--layout", "doppler12", "--hint-free"])
    assert command_line(args) == "doppler-lab train-general --layout doppler12 --hint-free"
    args = build_parser().parse_args(["train-general", "--hints", "clustering, partition"])
    assert command_line(args) == "doppler-lab train-general --hints clustering,partition"


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ("heft", "'heft' is none of them"),
        ("clustering,clustering", "one is repeated"),
        ("", "'' is none of them"),
        ("clustering+heft", "'heft' is none of them"),
        ("none", "for no hint, leave --hints out"),
        ("clustering+partition", "a '+' groups hints in the doppler placer's hints= option"),
    ],
)
def test_train_general_hints_name_the_bad_one(tmp_path, capsys, value, said):
    argv = ["train-general", "--out", str(tmp_path / "run"), "--hints", value]
    err = one_error_line(capsys, argv)
    assert repr(value) in err and said in err
    if "is none of them" in said or "repeated" in said:
        assert "expected distinct names among clustering, partition" in err


def test_train_general_refuses_hint_free_with_hints(tmp_path, capsys, monkeypatch):
    import doppler_lab.train.general_policy as g

    never_runs(monkeypatch, g, "train_general")
    argv = ["train-general", "--out", str(tmp_path / "run"), "--hint-free", "--hints", "partition"]
    err = one_error_line(capsys, argv)
    assert "--hint-free is --hints clustering; give one" in err


# -- a setting given twice -----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--placer", "cp", "-o", "semantics=wc", "--semantics", "paper"],
            "semantics=wc (in --placer or -o) and as --semantics paper",
        ),
        (
            ["--placer", "cp:semantics=bsp", "--semantics", "wc"],
            "semantics=bsp (in --placer or -o) and as --semantics wc",
        ),
        (
            ["--placer", "cp,heft", "-o", "semantics=wc", "--semantics", "paper"],
            "semantics=wc (in --placer or -o) and as --semantics paper",
        ),
        (
            ["--placer", "etf", "-o", "memory_cap=16e9", "--memory-cap", "8GB"],
            "memory_cap=16000000000 (in --placer or -o) and as --memory-cap 8 GB",
        ),
    ],
)
def test_place_refuses_a_placer_option_that_contradicts_a_command_option(
    capsys, monkeypatch, argv, said
):
    import doppler_lab.placers as placers

    never_runs(monkeypatch, placers, "get_placer")
    # the placer's -o semantics=wc won in silence: it optimised wc, the makespan was paper's
    err = one_error_line(capsys, ["place", "chainmm:scale=0.05", *argv])
    assert said in err and "expected it once: give it once, or the same value in both" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--placer", "cp", "-o", "semantics=paper", "--semantics", "paper"],
        ["--placer", "local-search", "--budget", "3", "-o", "budget=3"],
        ["--placer", "local-search:budget=3", "--budget", "3"],
        ["--placer", "etf", "-o", "memory_cap=8e9", "--memory-cap", "8GB"],
        ["--placer", "etf", "-o", "memory_cap=device", "--memory-cap", "8GB"],
    ],
)
def test_place_takes_one_value_given_twice(capsys, argv):
    # --budget 3 -o budget=3 was "given ... and as --budget; give it once"
    assert main(["place", "chainmm:scale=0.05", "--json", *argv]) == 0
    one = json.loads(capsys.readouterr().out)
    given = dict(a.split("=") for a in argv if "=" in a and ":" not in a)
    for key, value in given.items():
        if value != "device":
            assert str(one["options"][key]).replace("8000000000", "8e9") == value


def test_place_memory_cap_flag_alone_leaves_the_placer_its_default(capsys):
    # --memory-cap is the cluster's: a placer's memory_cap stays "device" (its caps less reserve)
    assert (
        main(["place", "chainmm:scale=0.05", "--json", "--placer", "etf", "--memory-cap", "8GB"])
        == 0
    )
    assert "memory_cap" not in json.loads(capsys.readouterr().out)["options"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--set", "episodes=5", "--episodes", "2"],
            "setting 'episodes' is given in --set episodes=5 and --episodes 2",
        ),
        (
            ["--policy-set", "kind=gdp", "--policy", "placeto"],
            "setting 'kind' is given in --policy-set kind=gdp and --policy placeto",
        ),
    ],
)
def test_train_names_both_values_of_a_setting_given_twice(tmp_path, capsys, argv, said):
    run = ["train", "--graph", "chainmm:scale=0.05", "--out", str(tmp_path / "run"), *argv]
    err = one_error_line(capsys, run)
    assert said in err and "expected it once" in err


@pytest.mark.parametrize(
    "argv", [["--set", "episodes=2", "--episodes", "2"], ["--set", "lr=0.001", "--lr", "1e-3"]]
)
def test_train_takes_one_value_given_twice(tmp_path, monkeypatch, argv):
    import doppler_lab.train.loop as loop
    import doppler_lab.train.pipeline as pipeline

    seen: list = []
    never_runs(monkeypatch, pipeline, "run_pipeline")
    reached(monkeypatch, loop, "Trainer", seen)
    # --set episodes=2 --episodes 2 was refused as given twice
    run = ["train", "--graph", "chainmm:scale=0.05", "--out", str(tmp_path / "run"), *argv]
    with pytest.raises(Reached):
        main([*run, "--no-progress"])
    key, value = argv[1].split("=")
    assert getattr(seen[0][0][0], key) == float(value)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--cluster", "p100x4", "-p", "cluster_name=v100x8"], "given as --cluster p100x4 and"),
        (["--first", "cp", "-p", "first=heft"], "parameter 'first' is given as --first cp and"),
        (["-p", "workload=ffnn"], "parameter 'workload' is given as GRAPH chainmm and"),
    ],
)
def test_explore_refuses_a_parameter_given_by_a_flag_and_p(tmp_path, capsys, argv, said):
    out = tmp_path / "e.ipynb"
    # -p cluster_name=v100x8 won over --cluster p100x4 in silence
    err = one_error_line(capsys, ["explore", "chainmm", *argv, "--print", "--out", str(out)])
    assert said in err and not out.exists()


def test_explore_takes_one_value_given_twice(tmp_path, capsys):
    out = tmp_path / "e.ipynb"
    argv = ["explore", "chainmm", "--first", "heft", "-p", "first=heft", "--cluster", "p100x4"]
    argv += ["-p", "cluster_name=p100x4", "--json", "--out", str(out)]
    assert main(argv) == 0
    capsys.readouterr()
    assert out.exists()


def test_given_once_compares_values_not_their_truth():
    from doppler_lab.house.settings import given_once

    opts = {"flag": True}
    with pytest.raises(ConfigError, match="'flag' is given in a and b"):
        given_once(opts, "flag", 1, "in a", "b", "option")
    given_once(opts, "flag", True, "in a", "b", "option")
    assert opts == {"flag": True}


# -- the learned placer's size -------------------------------------------------------------------
@pytest.mark.parametrize("placer", ["doppler", "cp,doppler"])
def test_the_learned_placer_refuses_ops_times_devices_over_its_limit(capsys, monkeypatch, placer):
    import doppler_lab.placers as placers
    from doppler_lab.house.limits import LIMITS

    never_runs(monkeypatch, placers, "get_placer")
    monkeypatch.setitem(LIMITS, "MAX_LEARNED_PLACER_CELLS", 100)
    # no check: a cluster of 1,024 devices or a 2,000,000-op graph went on to the rollouts
    argv = ["place", "chainmm:scale=0.05", "--placer", placer, "--cluster", "uniform:64"]
    err = one_error_line(capsys, argv)
    assert "compute ops x 64 devices" in err and "the limit is 100" in err
    assert "MAX_LEARNED_PLACER_CELLS" in err and "fewer devices" in err


def test_the_learned_placer_size_check_covers_simulate_and_keeps_other_placers(monkeypatch):
    import doppler_lab.placers.registry as registry
    from doppler_lab.hardware.cluster import make_cluster
    from doppler_lab.house.limits import LIMITS
    from doppler_lab.workloads.specs import graph_from_spec

    graph = graph_from_spec("chainmm:scale=0.05")
    ops = int(graph.compute_nodes.size)
    monkeypatch.setitem(LIMITS, "MAX_LEARNED_PLACER_CELLS", ops * 4)
    never_runs(monkeypatch, registry, "get_placer")
    registry.check_placer_size("doppler", graph, make_cluster("uniform", 4))  # at the limit
    registry.check_placer_size("cp", graph, make_cluster("uniform", 8))  # not a learned placer
    for name in ("doppler", "placeto", "gdp"):
        with pytest.raises(PlacementError, match=f"{ops:,} compute ops x 8 devices"):
            registry.place(name, graph, make_cluster("uniform", 8))


# -- lists of specs ------------------------------------------------------------------------------
def test_a_graph_list_parameter_after_a_spec_without_parameters_is_named():
    from doppler_lab.workloads.specs import split_graph_specs

    # 'chainmm,scale=0.1' was read as one workload named 'chainmm,scale=0.1' ("unknown workload")
    with pytest.raises(ConfigError, match="parameter 'scale=0.1' has no spec before it to contin"):
        split_graph_specs("chainmm,scale=0.1")
    # a value with a colon continues its spec (it started a spec of its own)
    assert split_graph_specs("hf-llama:layers=2,path=a:b,ffnn") == [
        "hf-llama:layers=2,path=a:b",
        "ffnn",
    ]


def test_placeto_refuses_a_graph_whose_node_by_node_arrays_would_not_fit(monkeypatch):
    import doppler_lab.placers.registry as registry
    from doppler_lab.hardware.cluster import make_cluster
    from doppler_lab.house.limits import LIMITS
    from doppler_lab.workloads.specs import graph_from_spec

    graph = graph_from_spec("chainmm:scale=0.05")
    ops = int(graph.compute_nodes.size)
    # placeto's (3, n, n) arrays: 4.8 GB at 20,000 ops, which only the cells limit let through
    monkeypatch.setitem(LIMITS, "MAX_PLACETO_OPS", ops - 1)
    never_runs(monkeypatch, registry, "get_placer")
    with pytest.raises(PlacementError, match="MAX_PLACETO_OPS"):
        registry.place("placeto", graph, make_cluster("uniform", 2))
    registry.check_placer_size("gdp", graph, make_cluster("uniform", 2))  # linear in the ops
