"""``bench policy-wc`` (quick): trained DOPPLER and the general policy with a budget, each
against local search at the same simulator calls."""

from __future__ import annotations

import json

from doppler_lab.cli import main


def test_policy_wc_quick(tmp_path, capsys):
    argv = ["bench", "policy-wc", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--checkpoint", "doppler/general"]) == 0
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
    # the general policy of its rows is the one asked for, in the recorded command
    assert rec["command"].endswith("--quick --checkpoint doppler/general")
    assert "the general policy doppler/general with" in " ".join(rec["notes"])
    # bench general's other options are refused by name
    assert main([*argv, "--finetune-episodes", "10"]) == 2
    assert "--finetune-episodes is an option of bench general" in capsys.readouterr().err
