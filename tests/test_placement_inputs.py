"""Input nodes sit on their first consumer's device (the vectorised fill is the node-order loop)."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.ir.placement import Placement
from doppler_lab.workloads import build_from_spec


def _loop(graph, device):
    dev = device.copy()
    for v in np.flatnonzero(graph.is_input):
        succ = graph.successors(int(v))
        dev[v] = dev[succ[0]] if succ.size else 0
    return dev


@pytest.mark.parametrize(
    "graph",
    [
        build_from_spec("ffnn:layers=2,blocks=2"),
        build_from_spec("llama_block:scale=tiny"),
        build_from_spec("chainmm:matrices=3,scale=0.001"),
    ],
    ids=["ffnn", "llama_block", "chainmm"],
)
def test_inputs_take_their_first_consumers_device(graph):
    rng = np.random.default_rng(0)
    for _ in range(5):
        dev = rng.integers(0, 4, graph.num_nodes)
        got = Placement(dev).with_inputs_filled(graph).device
        np.testing.assert_array_equal(got, _loop(graph, dev))
        assert graph.is_input.any()
        np.testing.assert_array_equal(got[graph.compute_nodes], dev[graph.compute_nodes])
