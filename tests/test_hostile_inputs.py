"""Hostile and unlucky inputs: nothing of the user's is destroyed without consent, special
files are refused by name, and each odd input gets one error line (doppler_lab.house.userfiles).

Each case is what a user could type; each fails on the code before its fix."""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import doppler_lab.house.limits
from doppler_lab.cli import main
from doppler_lab.house.errors import ConfigError, FormatError
from doppler_lab.house.runfolder import MARKER_NAME
from doppler_lab.house.userfiles import check_output, input_file, read_input_bytes
from doppler_lab.house.validate import read_json_file

ROOT = Path(__file__).resolve().parents[1]


def one_error_line(capsys, argv: list[str]) -> str:
    """Run the CLI; it must exit 2 with one line on stderr and no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    # a learned placer's one note before it first loads torch (only in a fresh process) is
    # progress, not part of the error
    err = re.sub(r"^\w+: loading torch and the learned policy [^\n]*\n", "", err)
    assert "\n" not in err and "Traceback" not in err, err
    return err


@pytest.fixture
def graph_json(tmp_path, capsys) -> Path:
    path = tmp_path / "G.json"
    assert main(["workloads", "build", "chainmm:scale=0.05", "--out", str(path)]) == 0
    capsys.readouterr()
    return path


# -- 1. outputs never destroy an input or a file the command did not write -------------------------
def test_place_out_over_its_input_graph_is_refused(graph_json, capsys):
    before = graph_json.read_bytes()
    err = one_error_line(
        capsys, ["place", str(graph_json), "--placer", "cp", "--out", str(graph_json)]
    )
    assert f"--out {str(graph_json)!r} is the input" in err
    assert graph_json.read_bytes() == before


def test_simulate_trace_over_its_input_graph_is_refused_through_a_link(
    graph_json, tmp_path, capsys
):
    link = tmp_path / "link.json"
    link.symlink_to(graph_json)
    before = graph_json.read_bytes()
    err = one_error_line(capsys, ["simulate", str(graph_json), "--trace", str(graph_json)])
    assert "--trace" in err and "is the input" in err
    # a link to the input is the input too (--force never writes over an input)
    err = one_error_line(capsys, ["simulate", str(link), "--gantt", str(graph_json), "--force"])
    assert "is the input" in err
    assert graph_json.read_bytes() == before


def test_gantt_and_trace_do_not_overwrite_a_users_file(graph_json, tmp_path, capsys):
    notes = tmp_path / "notes.html"
    notes.write_text("my notes")
    err = one_error_line(capsys, ["simulate", str(graph_json), "--gantt", str(notes)])
    assert f"--gantt {str(notes)!r} exists and is not a file doppler-lab writes there" in err
    err = one_error_line(capsys, ["simulate", str(graph_json), "--trace", str(notes)])
    assert "--trace" in err and "--force" in err
    assert notes.read_text() == "my notes"
    # with consent it is replaced
    assert main(["simulate", str(graph_json), "--gantt", str(notes), "--force"]) == 0
    assert notes.read_text() != "my notes"


def test_outputs_of_the_same_kind_are_replaced(graph_json, tmp_path, capsys):
    out, page, trace = tmp_path / "p.json", tmp_path / "g.html", tmp_path / "t.json"
    argv = ["place", str(graph_json), "--placer", "cp", "--out", str(out), "--gantt", str(page)]
    assert main(argv) == 0
    assert main(argv) == 0  # its own placement and page: replaced without --force
    assert main(["simulate", str(graph_json), "--trace", str(trace)]) == 0
    assert main(["simulate", str(graph_json), "--trace", str(trace)]) == 0
    # a trace is not a placement: place --out does not take it
    err = one_error_line(capsys, ["place", str(graph_json), "--placer", "cp", "--out", str(trace)])
    assert "exists and is not a file doppler-lab writes there" in err


def test_an_output_that_is_a_link_or_a_device_is_refused(graph_json, tmp_path, capsys):
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    link = tmp_path / "out.json"
    link.symlink_to(target)
    err = one_error_line(capsys, ["place", str(graph_json), "--placer", "cp", "--out", str(link)])
    assert "is a symbolic link" in err
    err = one_error_line(
        capsys, ["place", str(graph_json), "--placer", "cp", "--gantt", "/dev/null"]
    )
    assert "'/dev/null' is a character device" in err
    assert target.read_text() == "keep"


def test_two_outputs_on_one_path_are_refused(graph_json, tmp_path, capsys):
    same = tmp_path / "x.json"
    err = one_error_line(
        capsys, ["simulate", str(graph_json), "--trace", str(same), "--gantt", str(same)]
    )
    assert "are both" in err


def test_import_sidecar_is_never_silently_replaced(tmp_path):
    from doppler_lab.commands.import_ import guard_graph_outputs

    out = tmp_path / "m.json"
    sidecar = tmp_path / "m.tensors.pt"
    sidecar.write_bytes(b"the user's own tensors")
    args = argparse.Namespace(spec="mlp", out=str(out), force=False)
    with pytest.raises(
        ConfigError, match=r"--out's tensors file \(beside .*m\.json\) .*m\.tensors\.pt' exists"
    ):
        guard_graph_outputs(args)
    # beside a graph that import wrote, the sidecar is that graph's: replaced
    out.write_text(json.dumps({"format": "doppler_lab.graph", "version": 1}))
    guard_graph_outputs(args)
    out.write_text("{}")
    with pytest.raises(ConfigError, match=r"--out .*m\.json' exists"):
        guard_graph_outputs(args)
    guard_graph_outputs(argparse.Namespace(spec="mlp", out=str(out), force=True))


def test_import_names_its_sidecar(tmp_path, capsys):
    out = tmp_path / "m.json"
    argv = ["import", "mlp:layers=1,hidden=8,batch=2,weights=stored", "--out", str(out)]
    assert main(argv) == 0
    line = capsys.readouterr().out
    assert "m.tensors.pt" in line
    assert main([*argv, "--json"]) == 0  # its own graph and sidecar: replaced, and named
    doc = json.loads(capsys.readouterr().out)
    assert doc["tensors_path"].endswith("m.tensors.pt")


def test_report_out_is_a_locked_and_marked_run_folder(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("x")
    err = one_error_line(capsys, ["report", "--out", str(mine), "--only", "00"])
    assert "did not mark as its run (thesis.tex)" in err
    link = tmp_path / "link"
    link.symlink_to(mine)
    err = one_error_line(capsys, ["report", "--out", str(link), "--only", "00"])
    assert "is a symbolic link" in err
    # a site built before the marker existed is report's own: marked, then used
    site = tmp_path / "site"
    site.mkdir()
    (site / "site.json").write_text(json.dumps({"format": "doppler_lab.report_site"}))
    err = one_error_line(capsys, ["report", "--out", str(site), "--only", "no_such_notebook"])
    assert "no_such_notebook" in err
    assert json.loads((site / MARKER_NAME).read_text())["command"] == "report"


def test_report_folder_in_use_is_refused(tmp_path, capsys):
    from doppler_lab.house.runfolder import run_folder

    with run_folder(tmp_path / "site", "report"):
        err = one_error_line(capsys, ["report", "--out", str(tmp_path / "site"), "--only", "00"])
    assert "is in use by doppler-lab report" in err


def test_check_output_rules(tmp_path):
    new = tmp_path / "new.json"
    assert check_output(new) == new
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError, match="is a folder"):
        check_output(tmp_path / "d", force=True)


# -- 2. special files are refused by name, without being opened --------------------------------
def test_a_fifo_as_a_graph_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "g.json"
    os.mkfifo(fifo)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "doppler_lab.cli", "simulate", str(fifo)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail("a FIFO given as a graph hangs")
    assert proc.returncode == 2
    assert (
        f"graph file {str(fifo)!r} is a FIFO (named pipe); expected a regular file" in proc.stderr
    )


@pytest.mark.parametrize("command", ["simulate", "place"])
def test_a_link_to_dev_zero_is_refused(tmp_path, capsys, command):
    link = tmp_path / "g.json"
    link.symlink_to("/dev/zero")
    extra = ["--placer", "cp"] if command == "place" else []
    err = one_error_line(capsys, [command, str(link), *extra])
    assert f"graph file {str(link)!r} is a character device; expected a regular file" in err


def test_special_files_as_every_kind_of_input(tmp_path, graph_json, capsys):
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    for argv, what in (
        (["simulate", str(graph_json), "--cluster", str(zero)], "cluster file"),
        (["simulate", str(graph_json), "--placement", str(zero)], "placement file"),
        (
            [
                "place",
                str(graph_json),
                "--placer",
                "doppler",
                "--checkpoint",
                str(tmp_path / "z.pt"),
            ],
            "checkpoint",
        ),
    ):
        if what == "checkpoint":
            (tmp_path / "z.pt").symlink_to("/dev/zero")
        err = one_error_line(capsys, argv)
        assert what in err and "is a character device" in err, err


def test_a_socket_and_a_folder_are_named(tmp_path):
    sock_path = tmp_path / "s.json"
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(sock_path))
        with pytest.raises(ConfigError, match="is a socket; expected a regular file"):
            input_file(sock_path, "graph file")
    finally:
        sock.close()
    with pytest.raises(ConfigError, match="is a folder; expected a regular file"):
        input_file(tmp_path, "graph file")


def test_a_symlink_loop_is_not_called_missing(tmp_path, capsys):
    loop = tmp_path / "loop.json"
    loop.symlink_to(loop)
    err = one_error_line(capsys, ["simulate", str(loop)])
    assert "is a symbolic link loop" in err
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "gone.json")
    err = one_error_line(capsys, ["simulate", str(dangling)])
    assert "is a symbolic link to" in err and "which does not exist" in err


def test_readers_check_the_size_limit_before_reading(tmp_path, monkeypatch, graph_json):
    monkeypatch.setitem(doppler_lab.house.limits.LIMITS, "MAX_FILE_BYTES", 100)
    with pytest.raises(FormatError, match=r"has [0-9,]+ bytes; the limit is 100 .*MAX_FILE_BYTES"):
        read_json_file(graph_json)
    # a file whose size the system does not report is cut at the limit
    proc_file = Path("/proc/self/status")
    if proc_file.is_file() and proc_file.stat().st_size == 0:
        with pytest.raises(ConfigError, match="the limit is 100"):
            read_input_bytes(proc_file)


# -- 3. size and progress -----------------------------------------------------------------------
def test_heft_finds_a_gap_without_scanning_the_whole_timeline():
    """HEFT was quadratic: each node scanned every busy slot of each device (minutes on a
    100,000-op chain). A node ready after the slots visits only the slots that can matter."""
    from doppler_lab.hardware.cluster import make_cluster
    from doppler_lab.ir.graph import GraphBuilder
    from doppler_lab.placers.heft import InsertionTimeline
    from doppler_lab.timing.cost_model import CostModel

    b = GraphBuilder("g")
    b.add_node("a", cost=1.0)
    graph = b.build()
    tl = InsertionTimeline(graph, CostModel(graph, make_cluster("uniform", 1)))

    class Counted(list):
        seen = 0

        def __getitem__(self, i):
            Counted.seen += 1
            return super().__getitem__(i)

        def __iter__(self):
            for x in super().__iter__():
                Counted.seen += 1
                yield x

    tl.busy[0] = Counted((2.0 * i, 2.0 * i + 1.0) for i in range(10_000))
    assert tl.earliest_start(0, 0, ready=20_000.0) == 20_000.0
    assert Counted.seen < 100
    # the gaps still count: one between the slots, one at the start
    assert tl.earliest_start(0, 0, ready=5.0) == 5.0  # [5, 6) fits between (4, 5) and (6, 7)
    tl.busy[0] = [(0.5, 1.0), (1.2, 3.0)]
    assert tl.earliest_start(0, 0, ready=0.0) == 3.0  # no gap of 1.0 before 3


def test_a_quadratic_placer_refuses_a_graph_over_its_limit(monkeypatch, capsys):
    monkeypatch.setitem(doppler_lab.house.limits.LIMITS, "MAX_QUADRATIC_PLACER_OPS", 10)
    err = one_error_line(capsys, ["place", "chainmm", "--placer", "clustering"])
    assert "placer 'clustering' on graph 'chainmm': 72 compute ops; the limit is 10" in err
    assert "MAX_QUADRATIC_PLACER_OPS" in err and "heft, etf, cp" in err
    err = one_error_line(capsys, ["simulate", "chainmm", "--placement", "m-sct"])
    assert "placer 'm-sct'" in err
    assert main(["place", "chainmm", "--placer", "heft", "--json"]) == 0  # no limit for heft


def test_a_delayed_timer_is_silent_for_quick_work_and_shows_long_work(capsys, monkeypatch):
    import doppler_lab.house.progress as progress

    with progress.timer("quick", delay_s=60.0):
        pass
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(progress, "TICK_S", 0.01)
    import time

    with progress.timer("slow", delay_s=0.05):
        time.sleep(0.5)
    assert "slow: " in capsys.readouterr().err


def test_weights_none_allocates_no_large_weight():
    import torch

    from doppler_lab.importers.weights import params_on_meta

    with params_on_meta():
        big = torch.nn.Linear(2**20, 2**20, bias=False)  # 4 TiB if it were allocated
        small = torch.empty(3)
    assert big.weight.device.type == "meta"
    assert small.device.type == "cpu"


def test_weights_stored_checks_memory_before_allocating(monkeypatch, capsys):
    import doppler_lab.importers.weights as weights

    monkeypatch.setattr(weights, "available_memory_bytes", lambda: 1000.0)
    err = one_error_line(capsys, ["import", "mlp:layers=1,hidden=64"])
    assert "model 'mlp': its stored weights need" in err and "of memory is available" in err
    assert "weights=none" in err
    assert main(["import", "mlp:layers=1,hidden=64,weights=none", "--json"]) == 0


# -- 4. a user's model code is contained -----------------------------------------------------------
USER_MODEL = """
import os, sys
import torch
print("module output")


class Stop(BaseException):
    pass


class Loud(torch.nn.Module):
    def forward(self, x):
        print("forward output")
        return x * 2


def ok():
    print("function output")
    os.write(1, b"raw output\\n")
    return Loud(), (torch.ones(2, 2),)


def exit0():
    sys.exit(0)


def hard_exit():
    os._exit(0)


def interrupt():
    raise KeyboardInterrupt


def base():
    raise Stop("stopped")
"""


@pytest.fixture
def user_model(tmp_path) -> Path:
    path = tmp_path / "user_model.py"
    path.write_text(USER_MODEL)
    return path


def test_user_model_output_goes_to_stderr(user_model, capfd):
    assert main(["import", f"{user_model}:ok", "--json"]) == 0
    out, err = capfd.readouterr()
    doc = json.loads(out)  # stdout is the JSON document alone
    assert doc["compute_nodes"] == 1
    for line in ("module output", "function output", "raw output", "forward output"):
        assert line in err


@pytest.mark.parametrize(
    ("func", "message"),
    [
        ("exit0", "called sys.exit(0)"),
        ("hard_exit", "called os._exit(0)"),
        ("interrupt", "raised KeyboardInterrupt"),
        ("base", "raised Stop: stopped"),
    ],
)
def test_user_model_exits_become_one_error_line(user_model, capsys, func, message):
    assert main(["import", f"{user_model}:{func}", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    # the user's own output, then one error line
    assert err.splitlines()[-1].endswith(
        f"{user_model}:{func} {message}; expected it to return"
        + (" (model, example_args)" if "exit" in message else "")
    )
    assert os._exit.__module__ in ("posix", "nt")  # put back


# -- 5. the other defects ----------------------------------------------------------------------------
def test_resuming_with_a_metrics_file_that_is_not_utf8(tmp_path):
    from doppler_lab.house.errors import CheckpointError
    from doppler_lab.train.metrics import MetricsLog

    path = tmp_path / "metrics.csv"
    path.write_bytes(b"update,episode,graph\n1,2,\xff\xfe\n")
    with pytest.raises(CheckpointError, match=r"not UTF-8 text .*move it away to resume"):
        MetricsLog(path, ["update", "episode", "graph"], keep_rows=1)
    path.unlink()  # moved away: the run resumes without its rows
    assert MetricsLog(path, ["update", "episode", "graph"], keep_rows=1).rows == []


def test_report_without_progress_still_says_why_a_notebook_failed(tmp_path, monkeypatch, capsys):
    import doppler_lab.commands.report as report
    from doppler_lab.lab.reporting.site import NotebookResult, Site

    failed = NotebookResult("03_x", "t", "q", status="failed", error="ValueError: bad scale")

    def fake_build(args, out, overrides):
        return Site(Path(args.out), Path(args.out) / "index.html", [failed], ["03_x"])

    monkeypatch.setattr(report, "_build", fake_build)
    assert main(["report", "--out", str(tmp_path / "site"), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "03_x: ValueError: bad scale" in err


def test_execute_threads_over_the_limit(capsys):
    err = one_error_line(capsys, ["execute", "chainmm", "--threads", "100000"])
    assert "--threads must be <= 256" in err and "MAX_THREADS" in err


def test_a_deeply_nested_graph_spec(capsys):
    err = one_error_line(capsys, ["simulate", "paper_costs:" * 5000 + "chainmm"])
    assert "is nested more than 8 deep" in err
    err = one_error_line(capsys, ["simulate", "model:" * 5000 + "mlp"])
    assert "is nested more than 8 deep" in err


def test_identical_nan_outputs_match():
    import torch

    from doppler_lab.executor.runner import compare_outputs
    from doppler_lab.workloads import build

    graph = build("chainmm", scale=0.05)
    v = int(graph.compute_nodes[-1])
    nan = torch.tensor([1.0, float("nan"), float("inf")])
    check = compare_outputs(graph, {v: nan.clone()}, {v: nan.clone()})
    assert check.ok and check.max_abs_error == 0.0
    other = torch.tensor([1.0, 2.0, float("inf")])
    check = compare_outputs(graph, {v: other}, {v: nan})
    assert not check.ok and check.max_abs_error == float("inf")


def test_a_failed_export_says_one_line(tmp_path, capfd):
    model = tmp_path / "branchy.py"
    model.write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def forward(self, x):\n"
        "        if x.sum() > 0:\n"
        "            return x * 2\n"
        "        return x\n"
        "def make():\n"
        "    return M(), (torch.ones(2, 2),)\n"
    )
    assert main(["import", f"{model}:make", "--no-progress"]) == 2
    err = capfd.readouterr().err.strip()
    assert err.count("\n") == 0, err  # torch's partial graph is not printed before it
    assert "torch.export cannot export M" in err


def test_control_bytes_of_names_never_reach_the_terminal(tmp_path, capsys, monkeypatch):
    import io

    hostile = {"name": "a\x1b[2J\x07", "kind": "input", "flops": 0, "out_bytes": 4}
    doc = {"format": "doppler_lab.graph", "version": 1, "name": "g\x1b[2J\u202e"}
    doc.update(nodes=[hostile, dict(hostile)], edges=[])  # a name twice: an error naming it
    path = tmp_path / "g.json"
    path.write_text(json.dumps(doc))
    err = one_error_line(capsys, ["simulate", str(path)])  # errors: escaped
    assert "\x1b" not in err and "\x07" not in err and "\\x1b" in err
    doc["nodes"][1] = {"name": "b", "kind": "compute", "flops": 1e6, "out_bytes": 4}
    doc["edges"] = [[0, 1]]
    path.write_text(json.dumps(doc))

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    screen = Terminal()
    monkeypatch.setattr(sys, "stdout", screen)
    assert main(["simulate", str(path)]) == 0
    shown = screen.getvalue()
    assert "\x1b" not in shown and "\u202e" not in shown
    assert "g\\x1b[2J\\u202e: 2 nodes" in shown


@pytest.mark.parametrize("cap", ["16XB", "-1GB", "abc"])
def test_a_bad_memory_cap_is_echoed_as_typed(capsys, cap):
    err = one_error_line(capsys, ["simulate", "chainmm", f"--memory-cap={cap}"])
    assert f"got {cap!r}" in err and "16GB" in err


@pytest.mark.parametrize("command", [["simulate"], ["place", "--placer", "cp"]])
def test_an_empty_cluster_is_not_the_default(capsys, command):
    err = one_error_line(capsys, [command[0], "chainmm", "--cluster", "", *command[1:]])
    assert "cluster ''; expected a preset" in err


def test_adapter_files_that_are_devices_are_refused(tmp_path):
    from doppler_lab.search.adapter import _read_state, load_adapter

    zero = tmp_path / "adapter.pt"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match="adapter .* is a character device"):
        load_adapter(zero, None, None)
    with pytest.raises(ConfigError, match="adapt state .* is a character device"):
        _read_state(zero, {})


def test_a_site_index_that_is_a_device_or_not_an_object(tmp_path):
    from doppler_lab.lab.reporting.site import read_site

    (tmp_path / "site.json").symlink_to("/dev/zero")
    with pytest.raises(FormatError, match="is a character device"):
        read_site(tmp_path)
    (tmp_path / "site.json").unlink()
    (tmp_path / "site.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="is not a report site index"):
        read_site(tmp_path)


@pytest.mark.parametrize(
    "argv",
    [
        ["place", "chainmm", "--placer", "doppler", "--checkpoint", ""],
        ["adapt", "chainmm", "--checkpoint", "", "--out", "{out}"],
        ["train", "--graph", "chainmm", "--init", "", "--out", "{out}"],
    ],
)
def test_an_empty_checkpoint_is_not_the_default(tmp_path, capsys, argv):
    argv = [a.replace("{out}", str(tmp_path / "run")) for a in argv]
    err = one_error_line(capsys, argv)
    assert "is empty; expected a checkpoint file or a shipped name" in err


def test_a_params_file_that_is_a_link_loop(tmp_path, capsys):
    loop = tmp_path / "params.json"
    loop.symlink_to(loop)
    err = one_error_line(capsys, ["report", "--params-file", str(loop), "--out", str(tmp_path)])
    assert "is a symbolic link loop" in err


def test_render_out_never_replaces_its_notebook_or_a_users_file(tmp_path, capsys):
    import nbformat

    notebook = tmp_path / "nb.ipynb"
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# T")]), notebook)
    before = notebook.read_bytes()
    err = one_error_line(capsys, ["report", "--render", str(notebook), "--out", str(notebook)])
    assert "is the input" in err and notebook.read_bytes() == before
    mine = tmp_path / "mine.html"
    mine.write_text("<html>my page</html>")
    err = one_error_line(capsys, ["report", "--render", str(notebook), "--out", str(mine)])
    assert "exists and is not a file doppler-lab writes there" in err
    page = tmp_path / "page.html"
    assert main(["report", "--render", str(notebook), "--out", str(page)]) == 0
    assert main(["report", "--render", str(notebook), "--out", str(page)]) == 0  # its own page
