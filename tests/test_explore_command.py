"""``doppler-lab explore GRAPH``: the explorer notebook with the graph's parameters injected, and
the exact command that opens it; no server is ever started here (``subprocess.call`` is
replaced)."""

from __future__ import annotations

import json
import shlex

import pytest

from doppler_lab.cli import main
from doppler_lab.commands import explore


@pytest.fixture
def no_server(monkeypatch):
    """Record what would have been started instead of starting it."""
    started: list[list[str]] = []

    def fake_call(command, *a, **k):
        started.append(list(command))
        return 0

    monkeypatch.setattr(explore.subprocess, "call", fake_call)
    return started


def _injected(path) -> dict:
    nb = json.loads(path.read_text())
    cells = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(cells) == 1
    ns: dict = {}
    exec("".join(cells[0]["source"]), ns)  # the cell papermill writes: plain assignments
    return {k: v for k, v in ns.items() if not k.startswith("__")}


def test_without_a_display_it_prints_the_exact_command(capsys, tmp_path, monkeypatch, no_server):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.delenv("WAYLAND_DISPLAY", raising=False)
    monkeypatch.setattr(explore.sys, "platform", "linux")
    assert main(["explore", "llama_block", "--cluster", "v100x8"]) == 0
    out = capsys.readouterr().out.splitlines()
    path = tmp_path / "reports" / "explore" / "explorer-llama_block-v100x8.ipynb"
    assert out[0].startswith("wrote reports/explore/explorer-llama_block-v100x8.ipynb")
    assert out[1] == "no browser here; open it with: " + shlex.join(
        explore.lab_command(path.relative_to(tmp_path))
    )
    assert explore.lab_command(path)[-1] == str(path) and "lab" in " ".join(out[1:])
    assert _injected(path) == {"workload": "llama_block", "cluster_name": "v100x8"}
    assert no_server == []


def test_print_and_json_start_nothing(capsys, tmp_path, monkeypatch, no_server):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(explore, "has_browser", lambda: True)
    graph = tmp_path / "g.json"
    assert main(["workloads", "build", "chainmm:scale=0.05", "--out", str(graph)]) == 0
    capsys.readouterr()
    nb = tmp_path / "mine.ipynb"
    argv = ["explore", "g.json", "--second", "heft", "-p", "noise=0", "--out", str(nb)]
    assert main([*argv, "--print"]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith("open it with: ")
    assert main([*argv, "--json"]) == 0  # an earlier explore's notebook may be replaced
    doc = json.loads(capsys.readouterr().out)
    assert doc["command"] == explore.lab_command(nb) and doc["notebook"] == str(nb)
    # a file is given to the kernel as an absolute path (it runs in another folder)
    assert _injected(nb) == {
        "workload": str(graph),
        "second_checkpoint": "",
        "second": "heft",
        "noise": 0,
    }
    assert no_server == []


def test_with_a_browser_it_starts_jupyterlab_on_the_notebook(
    capsys, tmp_path, monkeypatch, no_server
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(explore, "has_browser", lambda: True)
    assert main(["explore", "paper:ffnn_192nodes"]) == 0
    path = "reports/explore/explorer-paper_ffnn_192nodes-p100x4.ipynb"
    assert no_server == [explore.lab_command(explore.Path(path))]
    assert "starting JupyterLab" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["llama_block", "-p", "nosuch=1"], "the explorer has no parameter 'nosuch'"),
        (["nosuch_workload"], "nosuch_workload"),
        (["llama_block", "--cluster", "p100x99x"], "p100x99x"),
        (["llama_block", "--out", "taken.ipynb"], "--out taken.ipynb: a file this command did not"),
    ],
)
def test_bad_input_is_one_line_and_touches_no_file(
    capsys, tmp_path, monkeypatch, no_server, argv, message
):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "taken.ipynb").write_text("{}")
    assert main(["explore", *argv, "--print"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert (tmp_path / "taken.ipynb").read_text() == "{}"
    assert not (tmp_path / "reports").exists() and no_server == []
