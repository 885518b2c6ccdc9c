from __future__ import annotations

from doppler_lab.lab.reporting.notebook_runs import NOTEBOOKS_DIR, notebook_parameters
from doppler_lab.lab.reporting.site import quick_parameters

NOTEBOOK = NOTEBOOKS_DIR / "14_memory.ipynb"
#: the notebook's quick profile (what ``doppler-lab report --quick`` runs)
QUICK = quick_parameters(NOTEBOOK)


def test_memory(run_notebook):
    s = run_notebook("14_memory.ipynb", **QUICK)
    assert s["spec"].endswith(",layers=2") and not s["facts"]["fits_one_device"]
    assert s["facts"]["cap_gb"] == QUICK["memory_cap_gb"]
    by = {r["placer"]: r for r in s["placers"]}
    assert {"m-etf", "m-sct", "pipeline", "doppler", "doppler-budget"} <= set(by)
    for r in s["placers"]:
        if r["fits"]:
            assert r["max_peak_gb"] <= QUICK["memory_cap_gb"] + 1e-9
    v = s["verdict"]
    assert v["doppler_fits"] and v["doppler_no_worse"] and v["doppler-budget_no_worse"]
    caps = [b["cap_gb"] for b in s["sweep"]]
    assert caps == sorted(caps, reverse=True) and len(caps) == len(QUICK["caps_gb"].split(","))
    swept = notebook_parameters(NOTEBOOK)["sweep_placers"].split(",")
    assert {c["placer"] for c in s["curve"]} == set(swept)
    assert not s["sweep"][0]["changed"]
    measured = s["measured"]
    assert {(r["placement"], r["dispatch"]) for r in measured} == {
        (p, d) for p in ("cp", "random") for d in ("fifo", "simulated")
    }
    assert all(r["worst_gap"] == 0 for r in measured if r["dispatch"] == "simulated")
