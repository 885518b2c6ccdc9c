"""``bench fidelity`` judges its targets only on a machine quiet enough: it measures the parallel
capacity again while the machine is loaded, and a run that stays loaded says so."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.hardware.host import Host
from doppler_lab.lab.bench import fidelity
from doppler_lab.timing.calibration import Profile


def _backend(name="cpu", d=2):
    return SimpleNamespace(name=name, num_devices=d)


def test_a_loaded_machine_is_measured_again_then_given_up(monkeypatch):
    seen = iter([0.9, 1.2, 1.7, 1.9])
    slept = []
    monkeypatch.setattr(fidelity, "parallel_capacity", lambda d: next(seen))
    monkeypatch.setattr(fidelity.time, "sleep", slept.append)
    assert fidelity._wait_for_capacity(_backend(), 3) == [0.9, 1.2, 1.7]
    assert slept == [fidelity.CAPACITY_WAIT_S] * 2
    assert fidelity._wait_for_capacity(_backend(), 3) == [1.9]  # quiet at once: no wait
    assert fidelity._wait_for_capacity(_backend("cuda"), 3) == []  # devices that share no cores


def _rows(spearman_host, mre_host):
    return [
        {
            "spearman_calibrated": 0.8,
            "mre_calibrated": 0.2,
            "spearman_calibrated_best": 0.8,
            "spearman_host": s,
            "mre_host": m,
        }
        for s, m in zip(spearman_host, mre_host)
    ]


@pytest.mark.parametrize(
    ("capacity", "spear", "mre", "judged", "met"),
    [
        ([1.9, 1.7], [0.95, 0.92], [0.05, 0.08], True, True),
        ([1.9, 1.7], [0.95, 0.85], [0.05, 0.08], True, False),
        ([1.9, 1.7], [0.95, 0.92], [0.05, 0.12], True, False),
        ([1.9, 1.2], [0.95, 0.92], [0.05, 0.08], False, None),
    ],
)
def test_the_targets_are_judged_only_on_a_quiet_run(capacity, spear, mre, judged, met):
    c = make_cluster("cpu", 2)
    prof = Profile("p", "cpu", c.devices, c.bandwidth_bytes_per_s, c.latency_s, host=Host())
    s = fidelity._summary(_rows(spear, mre), _backend(), capacity, prof, 0.0)
    assert s["target_judged"] is judged and s["target_met"] is met
    assert s["parallel_capacity"] == min(capacity)
    notes = fidelity._notes(s, fidelity.Passes(3, 1, 4), prof, "raw.json.gz")
    assert notes[0].startswith("NOT JUDGED") is (not judged)


def test_the_median_runs_per_op_times_are_kept_for_the_raw_file():
    """``measure_placements(op_traces=[])`` keeps, per placement, the per-op and per-copy times
    of its median timed run: the run's makespan is its latest op end, inputs have no times,
    and only the placement that crosses devices has copies (from one device to another)."""
    import numpy as np

    from doppler_lab.executor import make_backend
    from doppler_lab.executor.fidelity_runs import (
        TRACE_RESOLUTION_S,
        measure_placements,
    )
    from doppler_lab.ir.placement import round_robin, single_device
    from doppler_lab.workloads.specs import graph_from_spec

    g = graph_from_spec("chainmm:scale=0.02")
    be = make_backend("cpu", 2)
    try:
        pls = [single_device(g, 2), round_robin(g, 2)]
        kept: list = []
        samples, _ = fidelity.measure_placements(
            g, be, pls, fidelity.Passes(3, 0, 1), np.random.default_rng(0), op_traces=kept
        )
    finally:
        be.close()
    assert measure_placements is fidelity.measure_placements
    assert len(kept) == 2
    for rec, times in zip(kept, samples, strict=True):
        assert sorted(times)[1] == times[rec["run"]]  # the median of 3 runs
        ends = [e for e in rec["end"] if e is not None]
        assert len(rec["start"]) == len(rec["end"]) == g.num_nodes
        assert all(rec["end"][v] is None for v in np.flatnonzero(g.is_input))
        assert abs(max(ends) - times[rec["run"]]) <= TRACE_RESOLUTION_S
    single, spread = (r["copies"] for r in kept)
    assert single["src"] == [] and len(spread["src"]) > 0
    assert all(a != b for a, b in zip(spread["src_device"], spread["dst_device"], strict=True))
    assert all(e >= s for s, e in zip(spread["start"], spread["end"], strict=True))
