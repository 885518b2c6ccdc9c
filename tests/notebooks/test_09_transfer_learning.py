from __future__ import annotations

TINY = dict(
    cases=(
        "chainmm:matrices=3,scale=0.01@p100x4 -> ffnn:layers=2,scale=tiny@p100x4; "
        "chainmm:matrices=3,scale=0.01@p100x4 -> chainmm:matrices=3,scale=0.01@v100x8"
    ),
    source_init=None,
    source_imitation_episodes=8,
    source_sim_episodes=16,
    episodes=32,
    imitation_episodes=8,
    seeds=2,
    eval_every=1,
    samples=2,
    hidden=16,
    mp_steps=2,
    jobs=1,
)


def test_transfer_learning(run_notebook):
    s = run_notebook("09_transfer_learning.ipynb", **TINY)
    assert len(s["cases"]) == 2 and s["cases"][1].endswith("@v100x8")
    assert all(how.startswith("trained here") for how in s["sources"].values())
    assert len(s["sources"]) == 1  # both cases share their source: trained once
    assert [t["case"] for t in s["transfer"]] == s["cases"]
    for t in s["transfer"]:
        assert t["budget"] == 32 and t["seeds"] == 2
        assert 0 <= t["final_matched"] <= t["matched"] <= 2
    for m in s["matches"]:
        n = m["finetune_episodes_to_match"]
        assert n is None or 0 <= n <= 32
        assert m["zero_shot_greedy"] > 0 and m["scratch_final_greedy"] > 0
    labels = {(r["case"], r["label"]) for r in s["rows"]}
    assert labels == {
        (c, k) for c in s["cases"] for k in ("cp", "zero-shot", "fine-tuned", "scratch")
    }
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in s["rows"])
    # each (case, policy) cell: a mean inside its 95% interval over the seeds
    assert {(c["case"], c["label"]) for c in s["cells"]} == {
        (c, k) for c in s["cases"] for k in ("zero-shot", "fine-tuned", "scratch")
    }
    assert all(c["vs_cp_low"] <= c["vs_cp"] <= c["vs_cp_high"] for c in s["cells"])
    # fine-tuned against scratch, paired by case and seed: per case and over all cases
    assert [p["pairs"] for p in s["paired"]] == [2, 2, 4]
    assert all(p["verdict"] == "inconclusive" for p in s["paired"])  # too few pairs to judge
