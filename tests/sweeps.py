"""A tiny sweep of training runs shared by the runner tests (tests/test_runners.py, with Ray, and
tests/test_run_cache.py, without): Stage I (2 episodes) + Stage II (8 episodes, 4 updates of 2,
a checkpoint each) on a small chain of matrix products, three seeds."""

from __future__ import annotations

from doppler_lab.lab.bench.policy import PolicyBenchConfig

TINY_SWEEP = PolicyBenchConfig(
    paper_graphs=(),
    workloads=("chainmm:matrices=3,scale=0.01",),
    methods=("doppler",),
    ablations=(),
    design_ablations=(),
    seeds=3,
    episodes=10,
    imitation_episodes=2,
    samples=2,
    jobs=1,
    policy={"hidden": 16, "mp_steps": 1},
    train={"episodes_per_update": 2, "checkpoint_every": 1},
)
