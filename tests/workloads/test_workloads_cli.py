"""``doppler-lab workloads list|build``."""

from __future__ import annotations

import json

import pytest

from doppler_lab.cli import main
from doppler_lab.io.documents import load_graph


def test_list_table(capsys):
    assert main(["workloads", "list"]) == 0
    out = capsys.readouterr().out
    for name in ("chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer", "random_dag"):
        assert name in out
    assert "nodes" in out.splitlines()[0]


def test_list_json(capsys):
    assert main(["workloads", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)["workloads"]}
    assert rows["chainmm"]["nodes"] == 100 and rows["chainmm"]["depth"] == 6
    assert rows["llama_block"]["params"]["seq"] == 2048


def test_build_writes_a_graph(tmp_path, capsys):
    out = tmp_path / "g.json"
    assert (
        main(
            [
                "workloads",
                "build",
                "llama_block:scale=1/256",
                "--param",
                "layers=2",
                "-p",
                "dtype=float64",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    assert "wrote" in capsys.readouterr().out
    g = load_graph(out)
    assert g.meta["params"]["layers"] == 2 and g.meta["params"]["dtype"] == "float64"
    assert g.is_executable


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["workloads", "build", "nope", "--out", "x.json"], "unknown workload"),
        (["workloads", "build", "chainmm", "--param", "bogus=1", "--out", "x.json"], "bogus"),
        (["workloads", "build", "chainmm", "--param", "n", "--out", "x.json"], "key=value"),
        (["workloads", "build", "chainmm:n=4", "--param", "n=8", "--out", "x.json"], "twice"),
        (["workloads", "build", "chainmm", "--out", "x.txt"], ".json"),
    ],
)
def test_bad_input_exits_2(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_missing_out_is_a_usage_error(capsys):
    assert main(["workloads", "build", "chainmm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--out" in err and "\n" not in err
