"""The ``simulated`` dispatch rule: CPU workers replay a simulated run's memory events, so the
measured peak per device is the simulated one.

Asserted: on every generated workload, several placements and two cluster sizes, the replayed
run's measured peak equals the simulated peak (the generated workloads' ``out_bytes`` are the
tensors' real sizes, so exactly), each device launches its ops in the simulated order, and the
outputs are those of a FIFO run; random placements never stall; the errors name what is wrong
(no schedule, a schedule of another placement, a backend that cannot replay); a schedule that
cannot be played times out naming what each device waits for; and ``execute --dispatch
simulated --json`` reports the simulated peak beside the measured one with a zero gap.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from doppler_lab.cli import main
from doppler_lab.executor import Executor
from doppler_lab.executor.plan import make_plan
from doppler_lab.executor.replay import START, ReplaySchedule, simulated_schedule
from doppler_lab.house.errors import ConfigError, ExecutorError, PlacementError
from doppler_lab.ir.placement import Placement, random_placement, round_robin
from doppler_lab.placers import place
from doppler_lab.workloads import build

from executor_helpers import TINY_WORKLOADS

SCALE = 0.02


def placements(graph, cluster):
    d = cluster.num_devices
    return {
        "round-robin": round_robin(graph, d),
        "random": random_placement(graph, d, np.random.default_rng(3)),
        "cp": place("cp", graph, cluster, seed=0),
    }


@pytest.mark.parametrize("devices", [2, 3])
@pytest.mark.parametrize("name", TINY_WORKLOADS)
def test_replay_measures_the_simulated_peak(name, devices):
    g = build(name, scale=SCALE)
    with Executor(g, "cpu", num_devices=devices) as ex:
        for label, pl in placements(g, ex.cluster).items():
            schedule = simulated_schedule(g, ex.cluster, pl)
            result = ex.run(
                pl, dispatch="simulated", schedule=schedule, keep_outputs=True, warmup=1
            )
            simulated = schedule.trace.peak_memory_bytes
            assert simulated is not None and (simulated > 0).all(), label
            np.testing.assert_allclose(
                result.trace.peak_memory_bytes, simulated, rtol=1e-12, err_msg=label
            )
            launched = np.array(result.trace.meta["dispatch_order"])
            for d in range(devices):
                starts = [v for k, v, _ in schedule.events[d] if k == START]
                on_d = [v for v in np.argsort(launched) if launched[v] >= 0]
                assert [v for v in on_d if pl.device[v] == d] == starts, (label, d)
            fifo = ex.run(pl, keep_outputs=True)
            for v, out in fifo.outputs.items():
                torch.testing.assert_close(result.outputs[v], out, rtol=0, atol=0)


def test_random_placements_never_stall():
    g = build("llama_layer", scale=SCALE)
    with Executor(g, "cpu", num_devices=3, timeout_s=30) as ex:
        for seed in range(8):
            pl = random_placement(g, 3, np.random.default_rng(seed))
            schedule = simulated_schedule(g, ex.cluster, pl)
            got = ex.run(pl, dispatch="simulated", schedule=schedule).trace.peak_memory_bytes
            np.testing.assert_allclose(got, schedule.trace.peak_memory_bytes, rtol=1e-12)


def test_executor_simulates_the_schedule_when_none_is_given():
    g = build("ffnn", scale=SCALE)
    with Executor(g, "cpu", num_devices=2) as ex:
        pl = round_robin(g, 2)
        got = ex.run(pl, dispatch="simulated").trace.peak_memory_bytes
        want = simulated_schedule(g, ex.cluster, pl).trace.peak_memory_bytes
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_errors_name_what_is_wrong():
    g = build("llama_block", scale=SCALE)
    with Executor(g, "cpu", num_devices=2) as ex:
        pl = round_robin(g, 2)
        with pytest.raises(ConfigError, match="needs the simulated run"):
            make_plan(g, pl, 2, "simulated")
        other = Placement(np.where(g.is_input, -1, 1 - pl.device))
        schedule = simulated_schedule(g, ex.cluster, other)
        with pytest.raises(PlacementError, match=r"the simulated run puts op '.*' on device"):
            ex.run(pl, dispatch="simulated", schedule=schedule)
        with pytest.raises(ConfigError, match="replayed by dispatch='simulated', not 'fifo'"):
            make_plan(g, pl, 2, "fifo", schedule=schedule)
    with (
        Executor(g, "inline", num_devices=2) as ex,
        pytest.raises(
            ConfigError, match="cpu backend only; the 'inline' backend takes 'fifo' or 'priority'"
        ),
    ):
        ex.run(round_robin(g, 2), dispatch="simulated")


def test_an_unplayable_schedule_times_out_naming_the_waits():
    g = build("chainmm", scale=SCALE)
    with Executor(g, "cpu", num_devices=2, timeout_s=1.0) as ex:
        pl = round_robin(g, 2)
        good = simulated_schedule(g, ex.cluster, pl)
        ev = list(good.events[0])
        starts = [i for i, e in enumerate(ev) if e[0] == START]
        # device 0's last op first: it waits for operands made after it
        i, j = starts[0], starts[-1]
        ev[i], ev[j] = ev[j], ev[i]
        bad = ReplaySchedule((tuple(ev), *good.events[1:]), good.trace)
        with pytest.raises(ExecutorError, match=r"device 0 waits for start of op"):
            ex.run(pl, dispatch="simulated", schedule=bad)


def test_execute_reports_the_simulated_peak(capsys):
    spec = f"llama_block:scale={SCALE}"
    code = main(["execute", spec, "--devices", "2", "--placement", "cp", "--dispatch",
                 "simulated", "--repeats", "1", "--json", "--no-progress"])  # fmt: skip
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["dispatch"] == "simulated"
    assert out["peak_memory_gap"] == 0.0
    assert out["simulated_peak_memory_bytes"] == out["peak_memory_bytes"]
    main(["execute", spec, "--devices", "2", "--placement", "cp", "--repeats", "1", "--json",
          "--no-progress"])  # fmt: skip
    fifo = json.loads(capsys.readouterr().out)
    assert len(fifo["simulated_peak_memory_bytes"]) == 2 and fifo["peak_memory_gap"] >= 0


def test_bench_memory_fidelity_quick(tmp_path):
    code = main(["bench", "memory-fidelity", "--quick", "--out", str(tmp_path), "--no-progress"])
    record = json.loads((tmp_path / "memory-fidelity.json").read_text())
    rows = record["tables"]["Peaks per workload, placement and dispatch rule"]
    assert code == 0 and {r["dispatch"] for r in rows} == {"fifo", "simulated"}
    assert all(r["worst_gap"] == 0 for r in rows if r["dispatch"] == "simulated")
    assert record["summary"]["target"].startswith("pass")
