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
