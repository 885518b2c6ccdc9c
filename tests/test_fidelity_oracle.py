"""The in-sample oracles of ``bench fidelity`` (``lab/bench/fidelity_oracle.py``): fed the
traces of runs that the model itself produced, each oracle gives those runs back exactly; an op
never traced keeps its table time, scaled like the ops that were; untraced runs give no oracle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from doppler_lab.executor.fidelity_runs import trace_record
from doppler_lab.ir.placement import Placement
from doppler_lab.lab.bench.fidelity_oracle import (
    ORACLES,
    measured_copy_times,
    measured_op_times,
    oracle_scores,
)
from doppler_lab.timing.calibration import Profile
from doppler_lab.timing.sim import Simulator
from doppler_lab.workloads.specs import graph_from_spec

PROFILE = Path(__file__).parent / "data" / "fidelity_quick_profile.json"


@pytest.fixture(scope="module")
def case():
    profile = Profile.load(PROFILE)
    profile = replace(profile, host=None)  # op durations are then the table's, exactly
    g = graph_from_spec("chainmm:matrices=4,scale=0.1")
    rng = np.random.default_rng(0)
    pls = [Placement(np.zeros(g.num_nodes, dtype=np.int64))] + [
        Placement(rng.integers(0, 2, g.num_nodes)) for _ in range(7)
    ]
    sim = Simulator(g, profile.cluster, "wc", cost_model=profile.cost_model(g))
    traces = [trace_record(sim.run(p), 0) for p in pls]
    return g, profile, pls, sim.makespans(pls), traces


def test_the_models_own_runs_come_back_exactly(case):
    g, profile, pls, measured, traces = case
    got = oracle_scores(g, pls, measured, traces, profile)
    assert set(got) == {f"{m}_{o}" for o in ORACLES for m in ("spearman", "mre")}
    for oracle in ORACLES:
        assert got[f"spearman_{oracle}"] == pytest.approx(1.0)
        assert got[f"mre_{oracle}"] < 1e-3  # the traces keep times to 0.1 us
    # the copies: each copied output's measured time on every edge out of it
    copies = measured_copy_times(g, traces)
    cm = profile.cost_model(g)
    assert copies
    for k, t in copies.items():  # the median of copies both ways (the links differ a little)
        ways = sorted(cm.transfer_time(k, a, b) for a, b in ((0, 1), (1, 0)))
        assert ways[0] - 2e-7 <= t <= ways[1] + 2e-7


def test_an_op_never_traced_keeps_its_table_time_scaled_like_the_others(case):
    g, profile, pls, _, traces = case
    table = np.asarray(profile.cost_model(g).compute)
    v = int(np.flatnonzero(~np.asarray(g.is_input))[0])
    slower = []
    for tr in traces:  # every run 1.5x slower, and op v never traced
        start, end = list(tr["start"]), list(tr["end"])
        for u in range(g.num_nodes):
            if start[u] is not None:
                end[u] = start[u] + 1.5 * (end[u] - start[u])
        start[v] = end[v] = None
        slower.append({**tr, "start": start, "end": end})
    got = measured_op_times(g, pls, slower, table)
    np.testing.assert_allclose(got[v], 1.5 * table[v], rtol=1e-3)
    ran = [u for u in range(g.num_nodes) if u != v and not g.is_input[u]]
    on0 = table[ran, 0]
    np.testing.assert_allclose(got[ran, 0], 1.5 * on0, rtol=1e-3, atol=3e-7)
    assert (got[np.asarray(g.is_input)] == 0).all()


def test_runs_without_traces_have_no_oracle(case):
    g, profile, pls, measured, traces = case
    for missing in ([], traces[:-1], [*traces[:-1], {}]):
        got = oracle_scores(g, pls, measured, missing, profile)
        assert all(v is None for v in got.values()) and len(got) == 2 * len(ORACLES)
