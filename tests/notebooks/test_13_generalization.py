from __future__ import annotations

from doppler_lab.lab.bench.general import BUDGET_METHODS, doppler_takes_budget
from doppler_lab.policies.checkpoint import make_policy, save_checkpoint
from doppler_lab.train.general_policy import general_policy_config


def test_generalization(run_notebook, tmp_path):
    pol = make_policy(general_policy_config().replace(hidden=16, mp_steps=1), 2, seed=3)
    ckpt = str(save_checkpoint(tmp_path / "general.pt", pol))
    s = run_notebook(
        "13_generalization.ipynb",
        checkpoint=ckpt,
        quick=True,
        seeds=1,
        cp_seeds=1,
        samples=1,
        partitions=2,
        budget=10,
        curve="5,10",
        finetune_episodes=14,
        finetune_set={"batch": 4, "temperature": 2.0},
        scratch_episodes=16,
        scratch_imitation_episodes=4,
        runs_dir=None,
    )
    assert len(s["tasks"]) == 2
    methods = tuple(m for m in BUDGET_METHODS if m != "doppler" or doppler_takes_budget())
    assert [r["task"] for r in s["zero_shot"]] == s["tasks"] + ["geometric mean"]
    assert all(r["ratio_lb"] >= 1 - 1e-9 for r in s["zero_shot"][:-1])
    assert {(c["method"], c["sim_calls"]) for c in s["curve"] if c["task"] == "geometric mean"} == {
        (m, n) for m in methods for n in (5, 10)
    }
    assert [r["method"] for r in s["training"]] == [
        "zero-shot", "fine-tuned", "fine-tuned, network", "scratch"
    ]  # fmt: skip
    assert s["finetune_long"] is True
    # the two zero-shot targets once more for the policy's rollouts alone
    assert len(s["targets"]) == 9 and s["partitions"] == 2
    assert all(r["general"] <= r["policy"] * (1 + 1e-9) for r in s["zero_shot"][:-1])
    # fine-tuning by the adapter (the default) with the notebook's settings on the bench's
    assert s["finetune_method"] == "adapter"
    assert (s["finetune_adapter"]["batch"], s["finetune_adapter"]["temperature"]) == (4, 2.0)
    assert s["finetune_adapter"]["episodes"] == 14 and s["finetune_adapter"]["partitions"] == 2
    tuned = next(r for r in s["training"] if r["method"] == "fine-tuned")
    assert tuned["found"] is not None and tuned["makespan"] <= tuned["found"] * (1 + 1e-9)
