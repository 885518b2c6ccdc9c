from __future__ import annotations

import math

TINY = dict(
    workload="chainmm:scale=tiny",
    size_param="matrices",
    sizes="2,4,8",
    placeto_max_nodes=40,
    repeats=1,
    batch=2,
    hidden=16,
    mp_steps=2,
)


def test_scalability(run_notebook):
    s = run_notebook("10_scalability.ipynb", **TINY)
    assert s["sizes"] == [2, 4, 8]
    doppler = [r for r in s["rows"] if r["method"] == "doppler"]
    placeto = [r for r in s["rows"] if r["method"] == "placeto"]
    assert [r["size"] for r in doppler] == [2, 4, 8]
    nodes = [r["nodes"] for r in doppler]
    assert nodes == sorted(nodes) and len(set(nodes)) == 3
    # Placeto is timed only up to its cap
    assert placeto and all(r["nodes"] <= 40 for r in placeto) and len(placeto) < 3
    for r in s["rows"]:
        for key in ("inference_ms", "train_ms", "simulate_ms", "inference_us_per_node"):
            assert math.isfinite(r[key]) and r[key] > 0
        assert r["train_batched_ms"] is None or r["method"] == "doppler"
    # PLACETO timed both ways: as published (every row of every step) and incrementally
    dense = [r for r in s["rows"] if r["method"] == "placeto-recompute"]
    assert [r["nodes"] for r in dense] == [r["nodes"] for r in placeto]
    assert {f["method"] for f in s["fit"]} == {"doppler", "placeto", "placeto-recompute"}
    # the fitted range is stated: from where fixed costs stop dominating to the largest size
    fit = next(f for f in s["fit"] if f["method"] == "doppler")
    assert fit["inference_fit_from_nodes"] in nodes and fit["fixed_cost_settled"] == 0.1
    labels = {h["label"]: h["value"] for h in s["headline"]}
    assert labels["inference: fitted range"].endswith(f"{nodes[-1]:,} nodes")
    assert "fitted from the first size" in s["findings"]
    assert [sp["nodes"] for sp in s["speedups"]] == [r["nodes"] for r in placeto]
    assert [sp["nodes"] for sp in s["speedups_recompute"]] == [r["nodes"] for r in placeto]
    # the paper's claim is judged against PLACETO as published
    tagged = [h for h in s["headline"] if h.get("claim") == "placeto-speed"]
    assert len(tagged) <= 1 and all("as published" in h["label"] for h in tagged)
    assert s["key_numbers"]["doppler largest graph nodes"] == nodes[-1]
