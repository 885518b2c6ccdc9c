"""Pages 06 and 08 say "supports" / "contradicts" / "inconclusive" by the paired interval."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.reporting.findings import page_findings


def _stage3_summary(shift: float) -> dict:
    rng = np.random.default_rng(6)
    base = 0.03 + rng.normal(0.0, 0.003, 15)  # the machine's load drifts over the rounds
    after = base - shift + rng.normal(0.0, 0.0002, 15)
    return {
        "parallel_capacity": 1.9,
        "devices": 2,
        "measured_runs": {"stage II": base.tolist(), "stage III": after.tolist()},
    }


@pytest.mark.parametrize(
    ("shift", "word"), [(0.002, "supports"), (-0.002, "contradicts"), (0.0, "inconclusive")]
)
def test_page_06_judges_stage3_by_paired_rounds(shift: float, word: str) -> None:
    f = page_findings("06", _stage3_summary(shift))
    assert f.headline[-1]["value"] == word
    verb = "is inconclusive on" if word == "inconclusive" else word
    assert f"this {verb} the claim that Stage III on the real system improves" in f.text


def test_page_06_without_paired_runs_cannot_say() -> None:
    f = page_findings("06", {"parallel_capacity": 1.9, "devices": 2})
    assert "The run cannot say whether Stage III" in f.text


def _stages_summary(gaps: dict[str, float], seeds: int) -> dict:
    rng = np.random.default_rng(2)
    runs = []
    for seed in range(seeds):
        base = 0.05 + rng.normal(0.0, 0.004)
        runs.append({"variant": "I+II+III", "seed": seed, "measured": base})
        for v, gap in gaps.items():
            runs.append({"variant": v, "seed": seed, "measured": base + gap + rng.normal(0, 1e-4)})
    variants = ["I+II+III", *gaps]
    return {"rows": [{"variant": v} for v in variants], "variants": variants, "runs": runs}


@pytest.mark.parametrize(
    ("gaps", "seeds", "word"),
    [
        ({"I+II": 0.003, "III": 0.004}, 6, "supports"),
        ({"I+II": 0.003, "III": -0.004}, 6, "contradicts"),
        ({"I+II": 0.003, "III": 0.0}, 6, "inconclusive"),
        ({"I+II": 0.003, "III": 0.004}, 3, "inconclusive"),  # too few seeds to judge
    ],
)
def test_page_08_judges_the_full_pipeline_against_each_subset_by_seed(
    gaps: dict, seeds: int, word: str
) -> None:
    f = page_findings("08", _stages_summary(gaps, seeds))
    assert f.headline[-1]["value"] == word
    assert "Paired by seed" in f.text and f"{seeds} seeds" in f.text
    assert ("a verdict needs 5 or more seeds" in f.text) == (seeds < 5)


def test_transfer_is_judged_by_the_policy_fine_tuning_ends_with():
    """Page 09 said '6 of 6' where the fine-tuned policy matched scratch at some point but its
    final policy matched in 3 of 6: the claim is judged on the final policy."""
    from doppler_lab.reporting.findings import transfer

    row = {"budget": 100, "seeds": 2, "matched": 2, "episodes_to_match": 0.0,
           "fraction_of_budget": 0.0, "zero-shot_vs_cp": 0.2, "fine-tuned_vs_cp": 0.2,
           "scratch_vs_cp": 0.22}  # fmt: skip
    rows = [{**row, "case": c, "final_matched": f} for c, f in (("a", 0), ("b", 2), ("c", 1))]
    f = transfer({"transfer": rows, "episodes": 100})
    assert (
        "in 6 of 6 seeds" in f.text and "still matches scratch's final makespan in 3 of 6" in f.text
    )
    assert "does not support the claim" in f.text
    every = [{**r, "final_matched": 2} for r in rows]
    assert "consistent with the claim" in transfer({"transfer": every, "episodes": 100}).text
