"""``doppler-lab bench import``: its fit, and a quick smoke run (slow)."""

from __future__ import annotations

import json

import pytest

from doppler_lab.cli import main
from doppler_lab.lab.bench.importing import linear_fit, llama_spec


def test_linear_fit_and_spec():
    rows = [{"layers": n, "granularity": "op", "t": 1.0 + 2.0 * n} for n in (2, 8, 32)]
    fit = linear_fit(rows, "t", "op")
    assert fit["a"] == pytest.approx(1.0) and fit["b"] == pytest.approx(2.0)
    assert fit["r2"] == pytest.approx(1.0)
    assert linear_fit(rows[:1], "t", "op")["b"] != linear_fit(rows[:1], "t", "op")["b"]  # nan
    assert llama_spec(8) == "hf-llama:layers=8,hidden=64,heads=4,granularity=scope"


@pytest.mark.slow
def test_bench_import_quick(tmp_path, capsys):
    assert main(["bench", "import", "--quick", "--out", str(tmp_path)]) == 0
    record = json.loads((tmp_path / "import.json").read_text())
    scaling = record["tables"]["Import time and nodes vs layers (hf-llama, hidden 64)"]
    assert {(r["layers"], r["granularity"]) for r in scaling} == {
        (n, g) for n in (1, 2) for g in ("scope", "op")
    }
    s = record["summary"]
    assert s["nodes_2_layers_scope"] == 52 and s["nodes_2_layers_op"] == 132
    assert {"cp", "heft", "etf", "local-search", "doppler"} <= {
        k.rsplit("_", 1)[1] for k in s if k.startswith("narrow_ratio_lb_")
    }
    assert all(v >= 1 - 1e-9 for k, v in s.items() if "_ratio_lb_" in k)
