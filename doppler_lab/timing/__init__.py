"""The timing wing: how long a placement takes.

- :mod:`~doppler_lab.timing.cost_model`: op and transfer times on a cluster, the lower bound;
- :mod:`~doppler_lab.timing.calibration`: cost models fitted to measured profiles;
- :mod:`~doppler_lab.timing.contention`: logical devices that share one GPU;
- :mod:`~doppler_lab.timing.schedule` and :mod:`~doppler_lab.timing.episode`: the incremental
  list-scheduling state every placer and policy steps, and its estimates of a semantics;
- :mod:`~doppler_lab.timing.sim`: the work-conserving simulator (compiled kernels and a Python
  twin), semantics ``paper``, ``wc`` and ``bsp``;
- :mod:`~doppler_lab.timing.heaps`: the binary heap that compiled clocks share (the simulator
  kernels, the clustering placer's timing model);

The transfer rule is the cluster's (:mod:`doppler_lab.hardware.rules`). No torch.
"""
