"""Pages 06 and 08 say "supports" / "contradicts" / "inconclusive" by the paired interval."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.lab.reporting.claims import claim_rows
from doppler_lab.lab.reporting.findings import (
    SEEDED_STAGE_VERDICTS,
    STAGE3_ONE_POLICY,
    page_findings,
)


def _verdicts(f) -> dict:
    return {h["label"]: h["value"] for h in f.headline}


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
    assert f.headline[-1]["label"] == STAGE3_ONE_POLICY
    verb = "is inconclusive on" if word == "inconclusive" else word
    assert f"this {verb} the claim that Stage III on the real system improves" in f.text
    # one trained policy: the page says what its interval does not hold
    assert "not how differently Stage III trains from one seed to the next" in f.text


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
    assert _verdicts(f)["I+II+III against its subsets (95% intervals)"] == word
    assert "Paired by seed" in f.text and f"{seeds} seeds" in f.text
    assert ("a verdict needs 5 or more seeds" in f.text) == (seeds < 5)


@pytest.mark.parametrize(
    ("gap", "word"), [(0.003, "supports"), (-0.003, "contradicts"), (0.0, "inconclusive")]
)
def test_the_claims_table_judges_stage3_over_seeds_not_one_trained_policy(gap, word) -> None:
    """Stage III's gain over the policy it starts from (the claim "sim-to-real") and the real
    system alone ("real-alone") are judged on page 08 by training seed, each under its claim's
    key; page 06's verdict (one trained policy, measuring rounds) is shown beside, not taken."""
    eight = page_findings("08", _stages_summary({"I+II": gap, "III": -gap}, 8))
    label, key = SEEDED_STAGE_VERDICTS["I+II"]
    assert _verdicts(eight)[label] == word
    assert next(h for h in eight.headline if h["label"] == label)["claim"] == key == "sim-to-real"
    other = {"supports": "contradicts", "contradicts": "supports"}.get(word, word)
    assert _verdicts(eight)[SEEDED_STAGE_VERDICTS["III"][0]] == other
    six = page_findings("06", _stage3_summary(0.002))  # one policy: supports by rounds
    assert _verdicts(six)[STAGE3_ONE_POLICY] == "supports"
    rows = {r["key"]: r for r in claim_rows({"06": six.headline, "08": eight.headline})}
    assert (rows["sim-to-real"]["page"], rows["sim-to-real"]["verdict"]) == ("08", word)
    assert f"page 06, {STAGE3_ONE_POLICY}: supports" in rows["sim-to-real"]["numbers"]
    assert (rows["real-alone"]["page"], rows["real-alone"]["verdict"]) == ("08", other)
    # without page 08 the claim is not tested, whatever page 06 says
    alone = {r["key"]: r for r in claim_rows({"06": six.headline})}["sim-to-real"]
    assert alone["verdict"] == "not tested"


def test_transfer_is_judged_by_the_policy_fine_tuning_ends_with():
    """Page 09 said '6 of 6' where the fine-tuned policy matched scratch at some point but its
    final policy matched in 3 of 6: the claim is judged on the final policy."""
    from doppler_lab.lab.reporting.findings import transfer

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


def _ablation_summary(gaps: dict, seeds: int, graphs=("g1", "g2")) -> dict:
    """Per (graph, seed) a dual-policy makespan and each other method ``gap`` (a fraction;
    a list: by seed, in turn) above it, with noise well below the gaps."""
    rng = np.random.default_rng(7)
    runs = []
    for g in graphs:
        for seed in range(seeds):
            base = 100.0 * (1 + rng.normal(0.0, 0.05))
            runs.append({"graph": g, "method": "doppler", "seed": seed, "makespan": base})
            for m, gap in gaps.items():
                g_s = gap[seed % len(gap)] if isinstance(gap, list) else gap
                noisy = base * (1 + g_s + rng.normal(0.0, 0.002))
                runs.append({"graph": g, "method": m, "seed": seed, "makespan": noisy})
    methods = ["doppler", *gaps]
    rows = [{"graph": g, "method": m, "vs_cp": 0.1} for g in graphs for m in methods]
    return {"rows": rows, "runs": runs}


@pytest.mark.parametrize(
    ("gaps", "seeds", "word"),
    [
        ({"sel-only": 0.05, "plc-only": 0.03}, 8, "supports"),
        ({"sel-only": 0.05, "plc-only": -0.03}, 8, "contradicts"),
        ({"sel-only": 0.05, "plc-only": [0.04, -0.04]}, 8, "inconclusive"),  # stuck half the time
        ({"sel-only": 0.05, "plc-only": 0.03}, 2, "inconclusive"),  # 2 graphs x 2 seeds: too few
    ],
)
def test_page_07_judges_the_dual_policy_against_each_half_by_graph_and_seed(
    gaps: dict, seeds: int, word: str
) -> None:
    f = page_findings("07", _ablation_summary(gaps, seeds))
    assert f.headline[-1]["value"] == word and f.headline[-1]["claim"] == "dual"
    verb = {"supports": "support", "contradicts": "contradict"}.get(word, "are inconclusive on")
    assert (
        f"the runs {verb} the claim that the dual policy beats learning SEL or PLC alone" in f.text
    )
    assert f"over {2 * seeds} pairs" in f.text  # paired by graph and seed


def test_page_07_counts_the_runs_that_reach_the_best_known_placement() -> None:
    """Run by run against YARDSTICK's best known (``vs_best_known``; generated workloads have
    none): the method with the most runs within 2% leads, by graph; the verdict stays last."""
    summary = _ablation_summary({"sel-only": 0.05, "doppler-II-only": -0.01}, 4)
    for r in summary["runs"]:
        near = {"doppler-II-only": -0.01, "doppler": -0.05, "sel-only": -0.021}[r["method"]]
        r["vs_best_known"] = near if r["seed"] or r["method"] != "doppler-II-only" else -0.1
    summary["runs"].append({"graph": "gen", "method": "doppler", "seed": 0, "makespan": 1.0,
                            "vs_best_known": None})  # fmt: skip
    f = page_findings("07", summary)
    by = {h["label"]: h["value"] for h in f.headline}
    assert by["runs within 2% of the best known: Stage II only"] == "6 of 8"
    assert "in 6 of 8 runs of Stage II only, the most of any method (g1 3/4, g2 3/4)" in f.text
    assert "the dual policy 0 of 8; SEL only 0 of 8." in f.text  # 2.1% above is not within 2%
    assert f.headline[-1]["claim"] == "dual"
    plain = page_findings("07", _ablation_summary({"sel-only": 0.05}, 4))
    assert "best known" not in plain.text


def test_page_07_without_per_seed_runs_cannot_say() -> None:
    f = page_findings("07", {"rows": [{"graph": "g", "method": "doppler", "vs_cp": 0.1}]})
    assert "The run cannot say whether the dual policy beats" in f.text


@pytest.mark.parametrize(
    ("gap", "word"), [(0.04, "supports"), (-0.04, "contradicts"), ([0.04, -0.04], "inconclusive")]
)
def test_page_09_judges_fine_tuned_against_scratch_by_case_and_seed(gap, word) -> None:
    from doppler_lab.lab.reporting.findings import transfer

    rng = np.random.default_rng(9)
    runs = []
    for case in ("a", "b"):
        for seed in range(6):
            g = gap[seed % 2] if isinstance(gap, list) else gap
            scratch = 100.0 * (1 + rng.normal(0.0, 0.05))
            runs.append({"case": case, "seed": seed, "label": "scratch", "makespan": scratch})
            mine = scratch * (1 - g + rng.normal(0.0, 0.002))
            runs.append({"case": case, "seed": seed, "label": "fine-tuned", "makespan": mine})
    row = {"budget": 100, "seeds": 6, "matched": 6, "final_matched": 6, "episodes_to_match": 0.0,
           "fraction_of_budget": 0.0, "zero-shot_vs_cp": 0.2, "fine-tuned_vs_cp": 0.2,
           "scratch_vs_cp": 0.2}  # fmt: skip
    f = transfer({"transfer": [{**row, "case": c} for c in ("a", "b")], "runs": runs})
    assert f.headline[-1]["value"] == word and f.headline[-1]["claim"] == "transfer"
    verb = "is inconclusive on" if word == "inconclusive" else word
    assert "over 12 pairs" in f.text and f"this {verb} the claim that fine-tuning" in f.text


@pytest.mark.parametrize(
    ("gaps", "word"), [({"gdp": 0.05}, "supports"), ({"gdp": -0.05}, "contradicts")]
)
def test_page_03_judges_doppler_against_gdp_and_placeto_by_graph_and_seed(gaps, word) -> None:
    from doppler_lab.lab.reporting.findings import baselines

    runs = _ablation_summary({**gaps, "placeto": [0.04, -0.04]}, 4)["runs"]
    f = baselines({"per_placer": [], "rows": [], "learned": {"runs": runs}})
    verdicts = {h["label"]: h["value"] for h in f.headline}
    assert verdicts == {
        "doppler against gdp (95% interval)": word,
        "doppler against placeto (95% interval)": "inconclusive",
        "doppler beats gdp and placeto (95% intervals)": "contradicts"
        if word == "contradicts"
        else "inconclusive",
    }
    assert f.headline[-1]["claim"] == "baselines"  # the index's claims table reads it
    assert "paired by graph and seed: over 8 pairs" in f.text


@pytest.mark.parametrize(
    ("gaps", "word"),
    [
        ({"sel-only": 0.05, "plc-only": 0.03}, "supports"),
        ({"sel-only": -0.05, "plc-only": -0.03}, "contradicts"),
        ({"sel-only": 0.05, "plc-only": [0.04, -0.04]}, "inconclusive"),
    ],
)
def test_page_07_judges_the_best_learner_arm_on_its_own(gaps: dict, word: str) -> None:
    paper = _ablation_summary({"sel-only": -0.05, "plc-only": -0.03}, 8)  # contradicts
    best = _ablation_summary(gaps, 8)["runs"]
    summary = {
        **paper,
        "best_learner": {"imitation_episodes": 400, "sim_episodes": 3600, "graphs": ["a", "b"],
                         "runs": best},
    }  # fmt: skip
    f = page_findings("07", summary)
    by = {h["label"]: h for h in f.headline}
    assert by["dual policy beats both halves (95% intervals)"]["value"] == "contradicts"
    assert by["dual policy beats both halves (95% intervals)"]["claim"] == "dual"
    both = by["best learner: dual policy beats both halves (95% intervals)"]
    assert both["value"] == word and "claim" not in both  # the paper's settings judge the claim
    assert "With the workbench's best learner (Stage I 400 episodes, Stage II 3600)" in f.text


def test_page_12_credits_what_produced_the_best_and_shows_the_policy_alone() -> None:
    rows = [
        {"placer": "cp", "makespan": 1.0e-3, "ratio_lb": 1.8, "vs_cp": 0.0, "produced_by": []},
        {
            "placer": "doppler",
            "makespan": 0.8e-3,
            "ratio_lb": 1.4,
            "vs_cp": 0.2,
            "produced_by": ["proposal clustering"],
        },
        {
            "placer": "doppler:proposals=none",
            "makespan": 0.9e-3,
            "ratio_lb": 1.6,
            "vs_cp": 0.1,
            "produced_by": ["sample 3"],
        },
    ]
    graph = {"compute_nodes": 105, "edges": 161}
    text = page_findings("12", {"spec": "hf-llama", "graph": graph, "placers": rows}).text
    assert (
        "The best placer is doppler at 800 us (its placements from the proposal clustering)" in text
    )
    assert "The policy alone (doppler:proposals=none" in text and "10.0% below cp's" in text


def test_a_missed_speed_target_does_not_decide_the_generalization_claim():
    """Page 13: the ms-per-graph target is timed on the machine that builds the page; the claim
    about placements is judged on the placement targets alone."""
    from doppler_lab.lab.reporting.findings import generalization

    def summary(quality_ok: bool, speed_ok: bool) -> dict:
        return {
            "tasks": ["a", "b"],
            "targets": [
                {"target": "zero-shot: geometric mean below CP", "value": 0.2,
                 "threshold": ">= 15%", "passed": quality_ok},
                {"target": "zero-shot: ms per graph of 200-320 nodes (slowest, one core)",
                 "value": 150.0, "threshold": "<= 100", "passed": speed_ok},
            ],
        }  # fmt: skip

    text = generalization(summary(True, False)).text
    assert "1 of 2 targets met, 1 missed" in text and "Missed: zero-shot: ms per graph" in text
    assert "does not decide the claim" in text and "This is consistent with the claim" in text
    text = generalization(summary(False, True)).text
    assert "does not decide" not in text and "This does not support the claim" in text
    assert "This is consistent" in generalization(summary(True, True)).text


def test_each_verdicts_numbers_name_their_difference() -> None:
    """A verdict's ``detail`` says which difference its mean and interval are of, so a sign
    reads one way (page 08: each subset minus I+II+III; page 06: Stage II minus Stage III)."""
    eight = page_findings("08", _stages_summary({"I+II": 0.003, "III": 0.004}, 8))
    by = {h["label"]: h.get("detail") for h in eight.headline}
    assert by[SEEDED_STAGE_VERDICTS["I+II"][0]].startswith("I+II minus I+II+III: 3")
    assert by[SEEDED_STAGE_VERDICTS["III"][0]].startswith("III minus I+II+III: 4")
    combined = by["I+II+III against its subsets (95% intervals)"]
    assert combined.count(" minus I+II+III: ") == 2 and combined.count("8 pairs") == 2
    six = page_findings("06", _stage3_summary(0.002))
    detail = six.headline[-1]["detail"]
    assert detail.startswith("stage II minus stage III: 1.9") and detail.endswith("15 pairs")
