"""Where a model errs: per placement its imbalance and its copies (``placement_shape``), and the
rank correlation of a model's log error with them (``error_correlation``), as ``bench fidelity``
reports them (``error_vs_imbalance``, ``error_vs_copies``)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from doppler_lab.executor.fidelity_runs import error_correlation, placement_shape
from doppler_lab.house.errors import PlacementError
from doppler_lab.ir.graph import GraphBuilder, cost_graph
from doppler_lab.ir.placement import Placement

ROOT = Path(__file__).parents[2]
RAW = ROOT / "tests" / "data" / "fidelity_raw_quick.json.gz"


def diamond():
    """0 -> 1, 0 -> 2, 1 -> 3, 2 -> 3; compute costs 1, 2, 3, 4."""
    return cost_graph(np.array([1.0, 2.0, 3.0, 4.0]), np.ones(4), [0, 0, 1, 2], [1, 2, 3, 3])


def test_imbalance_is_the_busiest_devices_load_over_the_mean():
    g = diamond()
    pls = [[0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 1], np.array([1, 1, 1, 0])]
    counted = placement_shape(g, pls, num_devices=2)  # each op counts 1
    assert counted["imbalance"].tolist() == [2.0, 1.0, 1.0, 1.5]
    costed = placement_shape(g, pls, costs=g.compute_cost, num_devices=2)
    # loads 10|0, 4|6, 3|7, 6|4 over a mean of 5
    assert costed["imbalance"] == pytest.approx([2.0, 1.2, 1.4, 1.2])
    per_device = np.array([[1.0, 2.0], [2.0, 2.0], [3.0, 1.0], [4.0, 4.0]])  # (N, D)
    got = placement_shape(g, [[0, 1, 1, 0]], costs=per_device)  # D from the costs' columns
    assert got["imbalance"] == pytest.approx([5.0 / 4.0])  # loads 5|3
    assert placement_shape(g, [[0, 0, 0, 0]], num_devices=4)["imbalance"].tolist() == [4.0]
    assert placement_shape(g, [Placement(np.array([0, 1, 0, 1]))])["imbalance"].tolist() == [1.0]


def test_copies_are_one_per_producer_and_receiving_device():
    g = diamond()
    got = placement_shape(g, [[0, 0, 0, 0], [0, 1, 0, 1], [0, 0, 1, 1], [0, 1, 1, 0]], None, 2)
    # [0,1,0,1]: 0->1 and 2->3 cross; [0,0,1,1]: 0->2 and 1->3; [0,1,1,0]: node 0's tensor
    # goes once to device 1 for both 1 and 2, then 1->3 and 2->3 come back
    assert got["copies"].tolist() == [0, 2, 2, 3]
    # inputs are resident wherever they are read: no copies, no load
    b = GraphBuilder("with-inputs")
    x = b.add_input("x", (4,))
    a = b.add_elementwise("a", "relu", [x])
    b.add_elementwise("c", "add", [a, x])
    gi = b.build()
    shape = placement_shape(gi, [[1, 0, 0], [0, 0, 1]], num_devices=2)
    assert shape["copies"].tolist() == [0, 1] and shape["imbalance"].tolist() == [2.0, 1.0]


def test_bad_placements_are_named():
    g = diamond()
    with pytest.raises(PlacementError, match="placement 1 has 3 devices for 4 nodes"):
        placement_shape(g, [[0, 0, 0, 0], [0, 0, 0]], num_devices=2)
    with pytest.raises(PlacementError, match=r"a device outside \[0, 2\)"):
        placement_shape(g, [[0, 2, 0, 0]], num_devices=2)
    with pytest.raises(ValueError, match=r"costs have shape \(3,\); expected \(4,\)"):
        placement_shape(g, [[0, 0, 0, 0]], costs=np.ones(3), num_devices=2)


def test_error_correlation_has_the_known_answers():
    measured = np.full(5, 2.0)
    imbalance = np.array([1.0, 1.2, 1.5, 1.8, 2.0])
    copies = np.array([9, 7, 4, 2, 0])
    slower = measured * np.exp([0.0, 0.1, 0.15, 0.3, 0.4])  # log error rises with imbalance
    got = error_correlation(slower, measured, {"imbalance": imbalance, "copies": copies})
    assert got == {"imbalance": pytest.approx(1.0), "copies": pytest.approx(-1.0)}
    partly = measured * np.exp([0.0, 0.2, 0.1, 0.3, 0.4])
    assert error_correlation(partly, measured, {"imbalance": imbalance})[
        "imbalance"
    ] == pytest.approx(0.9)
    with warnings.catch_warnings():  # no ConstantInputWarning: NaN, not an error
        warnings.simplefilter("error")
        assert np.isnan(error_correlation(slower, measured, {"c": np.ones(5)})["c"])
        assert np.isnan(error_correlation(measured, measured, {"i": imbalance})["i"])
        two = error_correlation(slower[:2], measured[:2], {"i": imbalance[:2]})
        assert np.isnan(two["i"])
        # a non-positive makespan has no log error: left out, and 2 placements remain
        cut = error_correlation([1.0, 0.0, -1.0, 2.0], [1.0] * 4, {"i": [1, 2, 3, 4]})
        assert np.isnan(cut["i"])
    with pytest.raises(ValueError, match="one value per placement"):
        error_correlation(slower, measured, {"imbalance": imbalance[:4]})


def test_bench_fidelity_reports_where_the_host_model_errs(tmp_path):
    """The per-workload table has the two columns, each a rank correlation of the host
    model's log error (or empty), and the page shows them."""
    from doppler_lab.lab.bench import fidelity as fidelity_bench

    fidelity_bench.run(tmp_path / "a", from_raw=RAW, progress=False)
    rows = json.loads((tmp_path / "a" / "fidelity.json").read_text())["tables"]["Per workload"]
    for row in rows:
        for key in ("error_vs_imbalance", "error_vs_copies"):
            assert row[key] is None or -1.0 <= row[key] <= 1.0, (row["workload"], key)
    assert any(r["error_vs_imbalance"] is not None for r in rows)
    assert "error_vs_imbalance" in fidelity_bench.COLUMNS
    assert "error_vs_copies" in (tmp_path / "a" / "fidelity.md").read_text()


def test_the_shapes_are_those_of_the_notes():
    """``reports/notes/bench_notes.md`` ("Where the host model is wrong", run-3 of
    ``reports/bench/fidelity-r12``) correlated the host model's log error with the busier
    device's share of the calibrated compute (+0.02 chainmm, +0.46 ffnn, +0.66 llama_block,
    +0.62 llama_layer, +0.76 moe_layer) and with the copies (chainmm +0.18, the others -0.39 to
    -0.52), by Pearson: placement_shape's imbalance and copies give those numbers."""
    from scipy.stats import pearsonr

    from doppler_lab.timing.raw_data import read_raw
    from doppler_lab.timing.sim import Simulator
    from doppler_lab.workloads.specs import graph_from_spec

    path = ROOT / "reports/bench/fidelity-r12/run-3/fidelity_raw.json.gz"
    if not path.exists():
        pytest.skip("the kept run-3 of reports/bench/fidelity-r12 is not in this checkout")
    doc = read_raw(path)
    profile = doc["calibration"].fit()
    imbalance, copies = {}, {}
    for name, w in doc["workloads"].items():
        g = graph_from_spec(w["spec"])
        pls = [Placement(np.asarray(p["device"]), placer=p["placer"]) for p in w["placements"]]
        cm = profile.cost_model(g)
        err = np.log(
            Simulator(g, profile.cluster, "wc", cost_model=cm).makespans(pls)
            / np.median(np.asarray(w["measured_s"]), axis=1)
        )
        shape = placement_shape(g, pls, cm.compute, profile.num_devices)
        imbalance[name] = round(float(pearsonr(err, shape["imbalance"])[0]), 2)
        copies[name] = round(float(pearsonr(err, shape["copies"])[0]), 2)
    assert imbalance == {
        "chainmm": 0.02,
        "ffnn": 0.46,
        "llama_block": 0.66,
        "llama_layer": 0.62,
        "moe_layer": 0.76,
    }
    assert copies.pop("chainmm") == 0.18
    assert min(copies.values()) == -0.52 and max(copies.values()) == -0.39
