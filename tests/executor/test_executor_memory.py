"""Measured memory: the CPU executor's peak bytes of live tensors per device, against the
simulator's memory model.

What is stable and asserted here:
- the executor counts the tensors the model counts: its measured peak equals the model applied
  to the measured trace (same schedule, same rules), within 10% (in practice exactly);
- on one CPU worker the schedule is the simulator's (FIFO on one device is deterministic), so
  the simulated peak equals the measured one, within 10% (in practice exactly).
On several workers the peak depends on the schedule, which under FIFO differs from the cost
model's and from run to run: there the simulated peak is a prediction (``doppler-lab execute
--json`` reports both sides; ``doppler-lab bench memory-fidelity`` measures the gaps). The
``simulated`` dispatch rule replays the simulated order, and its peak equals the simulated one
(``test_replay.py``).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from doppler_lab.cli import main
from doppler_lab.executor import Executor
from doppler_lab.ir.placement import round_robin, single_device
from doppler_lab.timing.memory import static_peak_bound, tensor_bytes
from doppler_lab.timing.sim import Simulator
from doppler_lab.timing.sim.footprint import peak_memory
from doppler_lab.workloads import build

WORKLOADS = ("chainmm", "ffnn", "llama_block", "llama_layer", "moe_layer")


def rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1.0))


def footprint(graph, device: np.ndarray, d: int) -> np.ndarray:
    """Per device, the largest output + distinct inputs of one op placed there."""
    size = tensor_bytes(graph)
    need = np.zeros(d)
    for v in graph.compute_nodes.tolist():
        total = size[v] + size[np.unique(graph.predecessors(v))].sum()
        need[device[v]] = max(need[device[v]], total)
    return need


@pytest.mark.parametrize("name", WORKLOADS)
def test_measured_peak_counts_what_the_model_counts(name):
    g = build(name, scale=0.1)
    pl = round_robin(g, 2)
    with Executor(g, "cpu", num_devices=2) as ex:
        trace = ex.run(pl, repeats=1).trace
    measured = trace.peak_memory_bytes
    assert measured is not None and measured.shape == (2,)
    assert rel(measured, peak_memory(g, trace)) <= 0.10
    assert (measured <= static_peak_bound(g, pl.device) * (1 + 1e-12)).all()
    assert (measured >= footprint(g, pl.device, 2) * (1 - 1e-12)).all()
    again = type(trace).from_dict(json.loads(json.dumps(trace.to_dict())))
    np.testing.assert_array_equal(again.peak_memory_bytes, measured)


@pytest.mark.parametrize("name", WORKLOADS)
def test_simulated_peak_equals_measured_on_one_worker(name):
    g = build(name, scale=0.1)
    pl = single_device(g, 1)
    with Executor(g, "cpu", num_devices=1) as ex:
        measured = ex.run(pl, repeats=1).trace.peak_memory_bytes
        simulated = Simulator(g, ex.cluster, "wc").run(pl).peak_memory_bytes
    assert rel(simulated, measured) <= 0.10


def test_execute_json_reports_measured_memory(capsys):
    assert main(["execute", "chainmm:scale=0.01", "--devices", "2", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["peak_memory_bytes"]) == 2 and min(doc["peak_memory_bytes"]) > 0
    assert len(doc["memory_bytes"]) == 2 and doc["feasible"] is True
    assert main(["execute", "chainmm:scale=0.01", "--devices", "2"]) == 0
    assert "measured peak/memory" in capsys.readouterr().out


def test_backends_without_tracking_leave_the_peak_unset():
    g = build("chainmm", scale=0.01)
    with Executor(g, "inline", num_devices=2) as ex:
        trace = ex.run(round_robin(g, 2)).trace
    assert trace.peak_memory_bytes is None
