from __future__ import annotations


def test_quickstart(run_notebook):
    s = run_notebook("00_quickstart.ipynb", scale=0.05, workload="llama_block")
    # the shipped llama_block checkpoint places the (smaller) graph too
    assert set(s["makespans"]) == {"round-robin", "cp", "doppler"}
    assert all(m >= s["lower_bound"] * (1 - 1e-9) for m in s["makespans"].values())
    assert s["best"] in s["makespans"]
