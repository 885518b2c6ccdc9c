"""A job for ``torchrun`` (tests/executor/test_torchrun.py): every rank joins; rank 0 runs a few
placements of a small graph, checks the outputs against the single-device reference and prints
one JSON line per placement (measured vs simulated makespan, transfers across hosts).

Usage: ``torchrun ... tests/executor/torchrun_job.py SPEC PLACEMENT [PLACEMENT ...]``.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np


def main(spec: str, placements: list[str]) -> int:
    from doppler_lab.commands._common import resolve_placement
    from doppler_lab.executor import Executor
    from doppler_lab.executor.runner import compare_outputs
    from doppler_lab.executor.torch_ops import reference_outputs
    from doppler_lab.executor.torchrun import join_torchrun
    from doppler_lab.timing.sim import simulate
    from doppler_lab.workloads import build_from_spec

    backend = join_torchrun()
    if backend.rank != 0:
        return backend.serve()
    try:
        graph = build_from_spec(spec)
        cluster = backend.cluster
        reference = reference_outputs(graph)
        per_host = int(os.environ["LOCAL_WORLD_SIZE"])  # devices a host
        with Executor(graph, backend, timeout_s=60) as ex:
            for name in placements:
                placement = resolve_placement(name, graph, cluster, seed=0)
                result = ex.run(placement, repeats=3, warmup=1, keep_outputs=True)
                match = compare_outputs(graph, result.outputs or {}, reference)
                sim = simulate(graph, cluster, placement, semantics="wc")
                tr = result.trace
                hosts_a = tr.transfer_src_device // per_host
                hosts_b = tr.transfer_dst_device // per_host
                across = hosts_a != hosts_b
                mb_all = graph.out_bytes[tr.transfer_src] / 1e6
                secs_all = tr.transfer_end - tr.transfer_start
                mb, secs = mb_all[across], secs_all[across]
                mb_in, secs_in = mb_all[~across], secs_all[~across]
                print(
                    json.dumps(
                        {
                            "placement": name,
                            "outputs_match": match.ok,
                            "max_abs_error": match.max_abs_error,
                            "measured_s": result.makespan,
                            "simulated_wc_s": sim.makespan,
                            "transfers": int(tr.num_transfers),
                            "transfers_across_hosts": int(across.sum()),
                            "mb_across_hosts": float(mb.sum()),
                            "s_per_mb_across_hosts": float(secs.sum() / mb.sum())
                            if mb.sum() > 0
                            else None,
                            "median_transfer_s_across_hosts": float(np.median(secs))
                            if secs.size
                            else None,
                            "s_per_mb_within_hosts": float(secs_in.sum() / mb_in.sum())
                            if mb_in.sum() > 0
                            else None,
                        }
                    ),
                    flush=True,
                )
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2:]))
