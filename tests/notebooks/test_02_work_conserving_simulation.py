from __future__ import annotations


def test_work_conserving_simulation(run_notebook):
    s = run_notebook(
        "02_work_conserving_simulation.ipynb", scale=0.05, noise_seeds=5, random_orders=10
    )
    rows = {r["placement"]: r for r in s["semantics"]}
    for r in rows.values():
        assert min(r["paper"], r["wc"], r["bsp"]) >= r["lower_bound"] * (1 - 1e-9)
    assert s["order_random_min"] <= s["order_random_max"]
    sigmas = {r["sigma"] for r in s["noise"]}
    assert 0.0 in sigmas and max(sigmas) > 0
