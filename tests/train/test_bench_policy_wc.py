"""``bench policy-wc`` (quick): trained DOPPLER and the general policy with a budget, each
against local search at the same simulator calls."""

from __future__ import annotations

import json

from doppler_lab.cli import main


def test_policy_wc_quick(tmp_path, capsys):
    assert main(["bench", "policy-wc", "--quick", "--out", str(tmp_path), "--no-progress"]) == 0
    rec = json.loads((tmp_path / "policy-wc.json").read_text())
    rows = rec["tables"]["Workloads (mean over seeds)"]
    by = {r["method"]: r for r in rows}
    assert set(by) == {"cp", "local-search", "doppler", "doppler-general-search"}
    # every contender spent the calls the trained policy did
    calls = by["doppler"]["sim_calls"]
    assert by["local-search"]["sim_calls"] == calls == by["doppler-general-search"]["sim_calls"]
    verdict = rec["tables"]["Against local search at the same calls (>=: within 0.5% or better)"]
    assert verdict[0]["graph"] == "chainmm"
    assert "doppler-general-search >= local-search (of 1)" in rec["summary"]
    assert "policy-wc.md" in capsys.readouterr().out
