"""Learned placers place on one torch thread and give the caller's setting back."""

from __future__ import annotations

import torch

from doppler_lab.hardware.cluster import make_cluster
from doppler_lab.placers import get_placer
from doppler_lab.placers.placer_base import make_rng
from doppler_lab.search.learned import DopplerPlacer
from doppler_lab.workloads import random_dag


def test_a_learned_placement_runs_on_one_torch_thread(monkeypatch):
    seen = []
    inner = DopplerPlacer._place

    def spy(self, graph, cluster, rng):
        seen.append(torch.get_num_threads())
        return inner(self, graph, cluster, rng)

    monkeypatch.setattr(DopplerPlacer, "_place", spy)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        g = random_dag(num_nodes=20, width=4, seed=1)
        p = get_placer("doppler", semantics="wc", samples=2).place(
            g, make_cluster("uniform", 2), make_rng(0)
        )
        assert seen == [1]
        assert torch.get_num_threads() == 2
        assert p.device.shape == (g.num_nodes,)
    finally:
        torch.set_num_threads(before)
