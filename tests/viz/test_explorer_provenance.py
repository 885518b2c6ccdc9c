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
    # cp says nothing of it: only the learned placer is named
    assert provenance_line(cmp) == f"produced by: {doppler.label}: the {made}"
    assert "produced by: doppler [chainmm" in metrics_html(cmp)
