"""Hostile and unlucky inputs, second round: each case is what a user could type, and each
failed on the code before its fix (a traceback, a silent wrong result, an error after the work
was done, or a message that did not say what was wrong)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
from test_hostile_inputs import one_error_line  # one place for the rule: exit 2, one line

from doppler_lab.cli import main
from doppler_lab.house.errors import CheckpointError, ClusterError, ConfigError


@pytest.fixture
def notes(tmp_path) -> Path:
    """A file of the user's own."""
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    return path


def never_runs(monkeypatch, module, name: str) -> None:
    """Make ``module.name`` fail the test if it is called (the work a check must come before)."""

    def never(*args, **kwargs):
        raise AssertionError(f"{name} ran before the bad input was refused")

    monkeypatch.setattr(module, name, never)


# -- cluster specs ---------------------------------------------------------------------------------
def test_a_device_count_of_thousands_of_digits_is_an_error_not_a_traceback(capsys):
    # int() of 5,001 digits raised ValueError ("Exceeds the limit (4300 digits)")
    err = one_error_line(
        capsys, ["simulate", "chainmm", "--cluster", "uniform:" + "0" * 5000 + "1"]
    )
    assert "device count" in err and "expected uniform:N with N an integer >= 1" in err
    assert len(err) < 400


def test_a_multihost_parameter_given_twice_is_refused():
    from doppler_lab.workloads.specs import cluster_from_spec

    # the second 'hosts' won silently: 6 devices where the user may have meant 4
    with pytest.raises(ClusterError, match="parameter 'hosts' is given twice"):
        cluster_from_spec("multihost:hosts=2,hosts=3")
    assert cluster_from_spec("multihost:hosts=3").num_devices == 6


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_bandwidth_near_zero_says_one_line_without_a_numpy_warning(tmp_path, capsys):
    from doppler_lab.hardware.cluster import make_cluster

    doc = make_cluster("p100x4").to_dict()
    doc["bandwidth_bytes_per_s"] = [[0.0 if i == j else 1e-308 for j in range(4)] for i in range(4)]
    path = tmp_path / "slow.json"
    path.write_text(json.dumps(doc))
    # numpy's "overflow encountered in scalar multiply" came on stderr before the error line
    err = one_error_line(capsys, ["simulate", "chainmm:scale=0.05", "--cluster", str(path)])
    assert "bandwidth 0->1 1e-308 B/s" in err and "infinite transfer time" in err


# -- memory options --------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["--memory-cap", "--memory-reserve"])
def test_a_memory_size_that_overflows_is_refused_as_typed(capsys, option):
    # 1e300GB was inf: --memory-cap became 'none' (no cap) in silence, and --memory-reserve's
    # error read "--memory-reserve none: ... memory reserve = inf"
    err = one_error_line(capsys, ["simulate", "chainmm", f"{option}=1e300GB"])
    assert f"{option} must be a number of bytes" in err and "got '1e300GB' (too large)" in err


# -- JSON ------------------------------------------------------------------------------------------
def test_a_json_integer_of_thousands_of_digits_names_the_limit(tmp_path, capsys):
    path = tmp_path / "g.json"
    path.write_text('{"format": "doppler_lab.graph", "version": ' + "9" * 5000 + "}")
    err = one_error_line(capsys, ["simulate", str(path)])
    assert "an integer of 5,000 digits is out of range" in err
    assert "set_int_max_str_digits" not in err  # Python's advice, not the user's to take


# -- torch files -----------------------------------------------------------------------------------
def test_a_checkpoint_that_is_no_torch_file_says_so(tmp_path):
    from doppler_lab.policies.checkpoint import read_checkpoint

    # torch's paragraph ("Weights only load failed. In PyTorch 2.6, we changed the default
    # value of the `weights_only` argument ...") was the message
    graph = tmp_path / "g.json"
    graph.write_text('{"format": "doppler_lab.graph"}')
    for path in (graph, tmp_path / "empty.pt"):
        path.touch()
        with pytest.raises(CheckpointError) as info:
            read_checkpoint(path)
        text = str(info.value)
        assert "cannot be read: it is not a file torch.save wrote; expected a policy" in text
        assert "weights_only" not in text


def test_a_pickle_of_other_objects_is_named(tmp_path):
    import torch

    from doppler_lab.policies.checkpoint import read_checkpoint
    from doppler_lab.search.adapter import load_adapter

    path = tmp_path / "other.pt"
    torch.save({"when": argparse.Namespace(a=1)}, path)
    with pytest.raises(CheckpointError, match="holds objects other than tensors and plain data"):
        read_checkpoint(path)
    with pytest.raises(ConfigError, match=r"unreadable \(it holds objects other than") as info:
        load_adapter(path, None, None)
    assert "weights_only" not in str(info.value)


# -- import options --------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["2", "0", "yes"])
def test_the_merge_option_takes_true_or_false_only(capsys, value):
    # merge=2 and merge=yes were read as true, merge=0 as false, in silence
    err = one_error_line(capsys, ["import", f"mlp:layers=1,hidden=8,merge={value}"])
    assert "import option merge=" in err and "expected true or false" in err


# -- output folders --------------------------------------------------------------------------------
def test_a_file_where_a_folder_should_be_is_named(notes, capsys):
    # mkdir said "file exists (EEXIST)" of the path to write, not which file was in the way
    err = one_error_line(capsys, ["workloads", "build", "chainmm", "--out", f"{notes}/g.json"])
    assert f"{notes} is a file, not a folder" in err
    err = one_error_line(capsys, ["train", "--graph", "chainmm", "--out", f"{notes}/run"])
    assert f"{notes} is a file, not a folder" in err
    assert notes.read_text() == "mine"


def test_bench_out_that_is_a_file_is_refused_before_the_bench_runs(notes, capsys, monkeypatch):
    import doppler_lab.lab.bench.sim as sim_bench

    never_runs(monkeypatch, sim_bench, "run")
    # the bench ran for its full time, then failed with "notes.txt: File exists"
    err = one_error_line(capsys, ["bench", "sim", "--quick", "--out", str(notes)])
    assert f"--out {str(notes)!r} is a regular file; expected a folder" in err
    err = one_error_line(capsys, ["bench", "sim", "--quick", "--out", f"{notes}/b"])
    assert f"{str(notes)!r} above it is a regular file" in err
    err = one_error_line(capsys, ["bench", "sim", "--quick", "--out", ""])
    assert "--out '' is empty; expected a folder path" in err


def test_an_empty_run_folder_is_not_the_current_folder(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # --out '' was '.': "run folder . holds files ..." or, in an empty folder, a run there
    err = one_error_line(capsys, ["train", "--graph", "chainmm", "--out", "", "--episodes", "1"])
    assert "run folder '' is empty; expected a folder (--out DIR)" in err
    assert list(tmp_path.iterdir()) == []


def test_train_general_checks_what_ship_needs_before_training(tmp_path, notes, capsys, monkeypatch):
    import doppler_lab.train.general_policy as g

    never_runs(monkeypatch, g, "train_general")
    out = str(tmp_path / "run")
    # both were found only after the whole training, when the result was shipped
    for name in ("nope", "doppler/", "doppler/..", "doppler/../../x"):
        err = one_error_line(capsys, ["train-general", "--out", out, "--name", name])
        assert f"checkpoint name {name!r}: expected doppler/NAME" in err
    err = one_error_line(capsys, ["train-general", "--out", out, "--ship", str(notes)])
    assert f"--ship {str(notes)!r} is a regular file; expected a folder" in err
    assert g.check_general_name("doppler/mine") == "doppler/mine"


# -- explore ---------------------------------------------------------------------------------------
def test_explore_names_a_missing_graph_file_and_an_unknown_placer(tmp_path, capsys):
    out = str(tmp_path / "e.ipynb")
    # each wrote a notebook that could only fail when run (exit 0)
    for graph, what in (
        (str(tmp_path / "nope.json"), "graph file"),
        (f"{tmp_path / 'nope.py'}:make", "model file"),
        (f"paper_costs:{tmp_path / 'nope.json'}", "graph file"),
    ):
        err = one_error_line(capsys, ["explore", graph, "--print", "--out", out])
        assert what in err and "does not exist" in err
    for option in ("--first", "--second"):
        err = one_error_line(
            capsys, ["explore", "chainmm", "--print", "--out", out, option, "nope"]
        )
        assert "unknown placer 'nope'" in err
    assert not Path(out).exists()


def test_explore_makes_a_model_files_path_absolute(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "m.py").write_text("def make():\n    pass\n")
    (tmp_path / "g.json").write_text("{}")
    for spec, want in (
        ("m.py:make", f"{tmp_path}/m.py:make"),
        ("model:m.py:make:width=8", f"model:{tmp_path}/m.py:make:width=8"),
        ("paper_costs:g.json", f"paper_costs:{tmp_path}/g.json"),
    ):
        assert main(["explore", spec, "--json", "--out", "e.ipynb"]) == 0
        # the notebook's kernel runs in the notebooks folder: 'm.py' was not found there
        assert json.loads(capsys.readouterr().out)["parameters"]["workload"] == want


# -- sizes and progress ----------------------------------------------------------------------------
def test_a_sample_count_beyond_memory_is_refused_before_allocating(capsys):
    # numpy's _ArrayMemoryError traceback ("Unable to allocate 53.6 GiB ...")
    argv = ["place", "chainmm:scale=0.05", "--placer", "doppler", "-o", "samples=100000000"]
    err = one_error_line(capsys, argv)
    assert "100,000,000 rollouts of 72 steps on 4 devices need" in err
    assert "of memory;" in err and "is available; expected fewer rollouts at once" in err


def test_an_unchecked_memory_error_is_one_line(capsys, monkeypatch):
    import doppler_lab.workloads.specs as specs

    def huge(*args, **kwargs):
        raise MemoryError("Unable to allocate 53.6 GiB for an array")

    monkeypatch.setattr(specs, "graph_from_spec", huge)
    err = one_error_line(capsys, ["simulate", "chainmm"])
    assert "out of memory (Unable to allocate 53.6 GiB for an array)" in err


def test_the_learned_placers_rollouts_show_a_line_while_they_run(capsys, monkeypatch):
    import doppler_lab.house.progress as progress
    import doppler_lab.search.learned as learned

    def at_once(desc, **kwargs):  # the line from the start, not after 2 s
        return progress.timer(desc, **{**kwargs, "delay_s": 0.0})

    # the protocol's rollouts (no budget) had no bar: 15 minutes in silence on 1,024 devices
    monkeypatch.setattr(learned, "timer", at_once)
    assert main(["place", "chainmm:scale=0.05", "--placer", "doppler"]) == 0
    assert "doppler: rollouts on 72 ops x 4 devices" in capsys.readouterr().err


def test_a_multihost_bandwidth_that_overflows_is_named_as_typed():
    from doppler_lab.workloads.specs import cluster_from_spec

    # it read "multihost intra_bytes_per_s is inf", a name the user never typed
    with pytest.raises(ClusterError, match=r"parameter intra_gbps=1e\+308 is too large"):
        cluster_from_spec("multihost:kind=gpu,intra_gbps=1e308")


# -- demo, report, data ----------------------------------------------------------------------------
def test_demo_does_not_write_into_a_users_folder(tmp_path, capsys, monkeypatch):
    import doppler_lab.lab.reporting.demo_job as demo_job

    never_runs(monkeypatch, demo_job, "run_demo")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "index.html").write_text("<html>my page</html>")
    # demo wrote its index.html and summary.json over the user's files of those names
    err = one_error_line(capsys, ["demo", "--quick", "--out", str(mine)])
    assert "did not mark as its run (index.html)" in err and "--force" in err
    assert (mine / "index.html").read_text() == "<html>my page</html>"


def test_demo_refuses_a_paper_graph_folder_without_graphs(tmp_path, notes, capsys, monkeypatch):
    import doppler_lab.lab.reporting.demo_job as demo_job

    never_runs(monkeypatch, demo_job, "run_demo")
    # the report said "Not found" and the command exited 0
    for folder in (str(tmp_path / "nope"), str(notes), ""):
        argv = ["demo", "--quick", "--out", str(tmp_path / "d"), "--paper-graphs", folder]
        err = one_error_line(capsys, argv)
        assert f"--paper-graphs {folder!r} holds no paper graph (*.txt)" in err


def test_report_refuses_an_unknown_notebook_parameter_before_running(tmp_path, capsys, monkeypatch):
    import doppler_lab.lab.reporting.site as site

    never_runs(monkeypatch, site, "run_one")
    params = tmp_path / "params.json"
    params.write_text(json.dumps({"00_quickstart": {"scael": 0.1}}))
    # the notebook ran and failed: "failed or not run: 00_quickstart", nothing said why
    argv = ["report", "--only", "00", "--params-file", str(params), "--out", str(tmp_path / "s")]
    err = one_error_line(capsys, argv)
    assert "parameters for notebook 00_quickstart: 'scael' not in its parameters cell" in err
    assert "scale" in err


@pytest.mark.parametrize("url", ["not a url", "ftp://example.org", "example.org/raw"])
def test_a_download_url_that_urllib_cannot_take(tmp_path, capsys, url):
    # ValueError traceback: "unknown url type: 'not a url/xinyuyao/...'"
    argv = ["data", "paper-graphs", "--base-url", url, "--dest", str(tmp_path / "pg")]
    err = one_error_line(capsys, argv)
    assert f"--base-url {url!r}: expected a URL starting with https://" in err


@pytest.mark.parametrize(
    ("param", "said"),
    [
        ("cluster_name=nope", "unknown cluster 'nope'"),
        ("semantics=nope", "parameter semantics='nope'; expected one of paper, wc, bsp"),
        ("workload=/nope/g.json", "graph file '/nope/g.json' does not exist"),
        ("first=nope", "unknown placer 'nope'"),
    ],
)
def test_explore_checks_its_graph_cluster_and_placers_given_by_p(tmp_path, capsys, param, said):
    # -p set what GRAPH, --cluster, --first and --second check, without their checks
    out = tmp_path / "e.ipynb"
    err = one_error_line(capsys, ["explore", "chainmm", "-p", param, "--print", "--out", str(out)])
    assert said in err and not out.exists()


# -- names --------------------------------------------------------------------------------------
def test_a_file_with_another_extension_is_not_an_unknown_name(tmp_path, capsys):
    from doppler_lab.hardware.cluster import make_cluster

    graph, cluster, placement = tmp_path / "g.JSON", tmp_path / "c.JSON", tmp_path / "p.JSON"
    graph.write_text("{}")
    cluster.write_text(json.dumps(make_cluster("p100x4").to_dict()))
    placement.write_text("{}")
    # each was "unknown workload/cluster/placement ..." followed by every name there is
    err = one_error_line(capsys, ["simulate", str(graph)])
    assert f"graph spec {str(graph)!r} is a file whose name ends in neither .json nor .txt" in err
    err = one_error_line(capsys, ["simulate", "chainmm", "--cluster", str(cluster)])
    assert f"cluster {str(cluster)!r} is a file whose name does not end in .json" in err
    err = one_error_line(capsys, ["simulate", "chainmm", "--placement", str(placement)])
    assert f"placement {str(placement)!r} is a file whose name does not end in .json" in err
    err = one_error_line(capsys, ["simulate", "chainmm", "--cluster", str(tmp_path)])
    assert "is a folder whose name does not end in .json" in err


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", "does not appear to be JSON"),
        ("not json", "not json"),
        ('{"nbformat": 3}', "worksheets"),
    ],
)
def test_a_notebook_nbformat_cannot_read_is_one_line(tmp_path, capsys, text, said):
    notebook = tmp_path / "nb.ipynb"
    notebook.write_text(text)
    # nbformat's NotJSONError and jsonschema's ValidationError were tracebacks
    out = str(tmp_path / "nb.html")
    err = one_error_line(capsys, ["report", "--render", str(notebook), "--out", out])
    assert f"{notebook}: not a notebook nbformat can read" in err and said in err
    err = one_error_line(capsys, ["report", "--notebooks", str(tmp_path), "--list"])
    assert "not a notebook nbformat can read" in err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--set", "episodes=5", "--episodes", "2"], "--set episodes=5 and --episodes 2"),
        (["--set", "semantics=wc", "--semantics", "paper"], "--set semantics=wc and --semantics"),
        (["--policy-set", "kind=gdp", "--policy", "placeto"], "--policy-set kind=gdp and --policy"),
    ],
)
def test_train_refuses_a_setting_given_twice(tmp_path, capsys, monkeypatch, argv, said):
    import doppler_lab.train.loop as loop
    import doppler_lab.train.pipeline as pipeline

    never_runs(monkeypatch, pipeline, "run_pipeline")
    never_runs(monkeypatch, loop, "Trainer")
    # --set episodes=5 won over --episodes 2 in silence (5 episodes ran)
    run = ["train", "--graph", "chainmm:scale=0.05", "--out", str(tmp_path / "run"), *argv]
    err = one_error_line(capsys, run)
    assert said in err and "expected it once" in err


@pytest.mark.parametrize(
    ("placer", "extra", "said"),
    [
        ("local-search", ["--budget", "5", "-o", "budget=7"], "budget=7 (in --placer or -o)"),
        ("local-search:budget=5", ["--budget", "7"], "budget=5 (in --placer or -o)"),
        ("exact:time_limit=1", ["--time-limit", "2"], "time_limit=1 (in --placer or -o)"),
    ],
)
def test_place_refuses_an_option_given_as_a_flag_too(capsys, monkeypatch, placer, extra, said):
    import doppler_lab.placers as placers

    never_runs(monkeypatch, placers, "get_placer")
    # the flag won in silence: --budget 5 -o budget=7 ran 5 calls
    err = one_error_line(capsys, ["place", "chainmm:scale=0.05", "--placer", placer, *extra])
    assert said in err and "give it once" in err


@pytest.mark.parametrize(
    "extra",
    [["--runner", "ray"], ["--jobs", "8"], ["--distill-budget", "50"], ["--no-distill-proposals"]],
)
def test_train_general_refuses_distillation_options_without_distill(
    tmp_path, capsys, monkeypatch, extra
):
    import doppler_lab.train.general_policy as g

    never_runs(monkeypatch, g, "train_general")
    # Stages I + II ran with them ignored: --runner ray trained on this machine
    err = one_error_line(capsys, ["train-general", "--out", str(tmp_path / "run"), *extra])
    assert f"{extra[0]} is an option of search distillation; expected it with --distill" in err
