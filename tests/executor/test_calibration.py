"""Calibration: fitting, profiles on disk, the calibrated cost model in the simulator."""

from __future__ import annotations

import json

import numpy as np
import pytest

from doppler_lab.executor.backend import make_cpu_cluster
from doppler_lab.executor.profiling import calibrate
from doppler_lab.house.errors import FormatError
from doppler_lab.ir.graph import GraphBuilder
from doppler_lab.ir.ops import OpSpec
from doppler_lab.ir.placement import round_robin
from doppler_lab.lab.bench.fidelity import fidelity_placements, median_rel_error, spearman
from doppler_lab.timing.calibration import (
    LinkSample,
    OpSample,
    Profile,
    fit_devices,
    fit_links,
    fit_profile,
    op_signature,
)
from doppler_lab.timing.sim import Simulator

from executor_helpers import cpu2, toy_graph  # noqa: F401


def test_op_signature_names_the_work():
    a = OpSpec("einsum", "ij,jk->ik", ((4, 8), (8, 2)), (4, 2))
    assert op_signature(a) == op_signature(OpSpec("einsum", "ij,jk->ik", ((4, 8), (8, 2)), (4, 2)))
    assert op_signature(a) != op_signature(OpSpec("einsum", "ij,jk->ik", ((4, 8), (8, 3)), (4, 3)))
    s1 = OpSpec("elementwise", "scale", ((4,),), (4,), params={"factor": 2.0})
    s2 = OpSpec("elementwise", "scale", ((4,),), (4,), params={"factor": 3.0})
    assert op_signature(s1) != op_signature(s2)


def synthetic_ops(rate: float, bw: float, call: float, scale: dict[str, float]) -> list[OpSample]:
    out = []
    for d in range(2):
        for n in (16, 32, 64, 128, 256, 512):
            flops, moved = 2.0 * n**3, 12.0 * n * n
            t = max(flops / rate, moved / bw) * scale["einsum:ij,jk->ik"] + call
            out.append(OpSample(f"mm{n}", "einsum:ij,jk->ik", flops, moved, "float32", d, t))
        for m in (1 << 8, 1 << 12, 1 << 16, 1 << 20):
            moved = 12.0 * m
            t = moved / bw * scale["elementwise:add"] + call
            out.append(OpSample(f"add{m}", "elementwise:add", float(m), moved, "float32", d, t))
    return out


def test_fit_devices_recovers_the_roofline():
    base = make_cpu_cluster(2).devices
    samples = synthetic_ops(50e9, 8e9, 4e-6, {"einsum:ij,jk->ik": 1.0, "elementwise:add": 1.0})
    devices, op_scale, report = fit_devices(base, samples, (2e-6, 3e-6))
    for d, dev in enumerate(devices):
        assert dev.rate("float32") == pytest.approx(50e9, rel=0.05)
        assert dev.mem_bytes_per_s == pytest.approx(8e9, rel=0.05)
        assert dev.launch_overhead_s == pytest.approx(4e-6 + (2e-6, 3e-6)[d], rel=0.05)
    assert op_scale["einsum:ij,jk->ik"] == pytest.approx(1.0, rel=0.05)
    assert report["roofline_median_rel_error"] < 0.05


def test_fit_links_recovers_bandwidth_and_latency():
    samples = []
    for a, b in ((0, 1), (1, 0)):
        for nbytes in (4.0, 4e3, 4e5, 4e6):
            copy = 1e-6 + nbytes / 5e9
            samples.append(LinkSample(a, b, nbytes, copy, copy - 1e-6 + 30e-6 + 2e-6))
    bw, lat = fit_links(samples, 3, (2e-6, 2e-6, 2e-6))
    assert bw[0, 1] == pytest.approx(5e9, rel=0.01) and bw[1, 0] == pytest.approx(5e9, rel=0.01)
    assert lat[0, 1] == pytest.approx(30e-6, rel=0.05)
    assert bw[0, 2] == pytest.approx(5e9, rel=0.01)  # unmeasured pairs: the measured mean
    assert np.all(np.diag(lat) == 0)


def test_profile_round_trip_and_cost_model(tmp_path):
    g = toy_graph(layers=2)
    base = make_cpu_cluster(2)
    samples = [OpSample.of(g.specs[v], d, 1e-3) for v in g.compute_nodes for d in (0, 1)]
    samples += synthetic_ops(50e9, 8e9, 4e-6, {"einsum:ij,jk->ik": 1.0, "elementwise:add": 1.0})
    prof = fit_profile("p", "cpu", base, samples, [], (5e-6, 5e-6), {"note": float("nan")})
    back = Profile.load(prof.save(tmp_path / "p.json"))
    assert back.to_dict() == json.loads((tmp_path / "p.json").read_text())
    assert back.coverage(g) == 1.0 and back.meta["note"] is None
    cm = back.cost_model(g)
    comp = g.compute_nodes
    assert np.allclose(cm.compute[comp], 1e-3 + 5e-6)  # measured time + dispatch gap
    assert np.all(cm.compute[g.is_input] == 0)
    roof = back.cost_model(g, use_op_times=False)
    assert not np.allclose(roof.compute[comp], cm.compute[comp])
    sim = Simulator(g, back.cluster, "wc", cost_model=cm)
    assert sim.makespan(round_robin(g, 2)) > 0


def test_unknown_signatures_fall_back_to_the_roofline():
    g = toy_graph(layers=2)
    b = GraphBuilder("other")
    x = b.add_input("x", (64, 64))
    b.add_elementwise("y", "exp", [x])
    other = b.build()
    samples = [OpSample.of(g.specs[v], d, 1e-3) for v in g.compute_nodes for d in (0, 1)]
    prof = fit_profile("p", "cpu", make_cpu_cluster(2), samples, [], (0.0, 0.0))
    assert prof.coverage(other) == 0.0
    cm = prof.cost_model(other)
    dev = prof.devices[0]
    spec = other.specs[1]
    roof = max(
        spec.flops / dev.rate("float32"), (spec.in_bytes + spec.out_bytes) / dev.mem_bytes_per_s
    )
    assert cm.compute[1, 0] == pytest.approx(
        roof * prof.op_scale.get("elementwise:exp", 1.0) + dev.launch_overhead_s
    )


@pytest.mark.parametrize(
    "doc,needle",
    [
        ({"format": "doppler_lab.cluster"}, "not a calibration profile"),
        ({"format": "doppler_lab.profile", "version": 99}, "version"),
        ({"format": "doppler_lab.profile", "version": 1, "name": "x"}, "lacks the field"),
    ],
)
def test_bad_profiles_are_named(tmp_path, doc, needle):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(FormatError, match=needle):
        Profile.load(path)


def test_calibrate_measures_the_real_devices(cpu2, tmp_path):  # noqa: F811
    g = toy_graph(layers=3, size=32)
    prof = calibrate(cpu2, [g], quick=True)
    assert prof.num_devices == 2 and prof.backend == "cpu" and prof.coverage(g) == 1.0
    assert all(x > 0 for x in prof.dispatch_s)
    off = ~np.eye(2, dtype=bool)
    assert (prof.cluster.bandwidth_bytes_per_s[off] > 0).all() and (prof.latency_s[off] >= 0).all()
    assert all(dev.rate("float32") > 0 and dev.launch_overhead_s > 0 for dev in prof.devices)
    back = Profile.load(prof.save(tmp_path / "cpu.json"))
    sim = Simulator(g, back.cluster, "wc", cost_model=back.cost_model(g))
    assert sim.makespan(round_robin(g, 2)) > 0


def test_fidelity_helpers():
    g = toy_graph(layers=4)
    pls = fidelity_placements(g, make_cpu_cluster(2), np.random.default_rng(0))
    assert len(pls) >= 30
    assert all(p.validate(g, 2) is p for p in pls)
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    assert median_rel_error([1.1, 2.0, 2.7], [1.0, 2.0, 3.0]) == pytest.approx(0.1)
