"""The explorer says what produced each placement that records it (issue: attribution)."""

from __future__ import annotations

from doppler_lab.viz.explorer import (
    PlacerChoice,
    Scenario,
    compare,
    metrics_html,
    provenance_line,
)

TINY = Scenario("chainmm", scale="tiny", cluster="p100x4", semantics="wc")


def test_the_explorer_names_what_produced_a_learned_placement():
    doppler = PlacerChoice("doppler", "chainmm", {"samples": 2, "partitions": 0})
    cmp = compare(TINY, "cp", doppler)
    made = cmp.placements[doppler.label].meta.produced_by
    assert made.startswith(("greedy rollout", "sample ", "proposal clustering"))
    # cp says nothing of it: only the learned placer (and its policy alone) is named
    alone = f"{doppler.label} (policy alone)"
    by_alone = cmp.placements[alone].meta.produced_by
    assert by_alone.startswith(("greedy rollout", "sample "))  # its own rollouts, no proposal
    assert provenance_line(cmp) == (
        f"produced by: {doppler.label}: the {made}; {alone}: the {by_alone}"
    )
    assert "produced by: doppler [chainmm" in metrics_html(cmp)
    # the table: the two placers first (the improvement is theirs), then the policy alone,
    # each with what produced it; the charts show the two
    m = cmp.metrics
    assert list(m.index) == ["cp", doppler.label, alone]
    assert list(m["produced_by"]) == ["", made, by_alone]
    assert cmp.improvement == (m.makespan.iloc[0] - m.makespan.iloc[1]) / m.makespan.iloc[0]
    assert doppler.label in cmp.figure.to_json() and "(policy alone)" not in cmp.figure.to_json()


def test_only_a_doppler_choice_with_its_proposals_gets_a_policy_alone_row():
    assert PlacerChoice("cp").policy_alone() is None
    assert PlacerChoice("doppler", "c", {"proposals": "none"}).policy_alone() is None
    alone = PlacerChoice("doppler", "c", {"samples": 2}).policy_alone()
    assert alone == PlacerChoice("doppler", "c", {"samples": 2, "proposals": "none"})
