"""The index's claims table: each claim of the paper, the page that tests it, the verdict its
findings made (by ``judge``) and the numbers behind it; 'not tested' where no page ran it."""

from __future__ import annotations

import json
import re

import pytest

from doppler_lab.lab.reporting.claims import CLAIMS, NOT_TESTED, claim_rows
from doppler_lab.lab.reporting.findings import judge
from doppler_lab.lab.reporting.page_checks import html_problems
from doppler_lab.lab.reporting.site import NotebookResult, write_index


def _verdict(diffs):
    st, _ = judge(diffs, "the dual policy beats its halves", unit="%")
    return st.verdict


def _site(tmp_path, dual_diffs):
    """A fake site: page 07 judged its claim from ``dual_diffs``; page 10 ran without a
    verdict; page 09 failed; no other page ran."""
    seven = NotebookResult(
        "07_ablation_dual_policy", "Dual policy", "q", status="ok", page="07/07.html",
        headline=[
            {"label": "dual policy against the best half (95% interval)",
             "value": _verdict(dual_diffs)},
            {"label": "the dual policy: makespan below cp's", "value": 0.262, "unit": "%"},
            {"label": "SEL only: makespan below cp's", "value": 0.0123456789, "unit": "%"},
            {"label": "best learner: dual policy beats both halves (95% intervals)",
             "value": "inconclusive"},
        ],
    )  # fmt: skip
    ten = NotebookResult(
        "10_scalability", "Scalability", "q", status="ok",
        headline=[{"label": "DOPPLER training: time ~ nodes^k", "value": 1.04}],
    )  # fmt: skip
    nine = NotebookResult("09_transfer_learning", "Transfer", "q", status="failed")
    index = write_index(tmp_path, [seven, nine, ten])
    return index.read_text(), json.loads((tmp_path / "site.json").read_text())["claims"]


@pytest.mark.parametrize(
    ("diffs", "verdict"),
    [([0.02, 0.03, 0.025, 0.04, 0.01, 0.03], "supports"),
     ([-0.02, -0.03, -0.025, -0.04, -0.01, -0.03], "contradicts"),
     ([0.02, -0.03, 0.025, -0.04, 0.01, -0.01], "inconclusive")],
)  # fmt: skip
def test_the_index_shows_each_claim_with_its_page_verdict_and_numbers(tmp_path, diffs, verdict):
    page, claims = _site(tmp_path, diffs)
    by = {c["key"]: c for c in claims}
    assert [c["key"] for c in claims] == [c.key for c in CLAIMS]
    dual = by["dual"]
    assert (dual["page"], dual["verdict"]) == ("07", verdict)
    assert "26.2 %" in dual["numbers"] and "SEL only" in dual["numbers"]
    # the second setting's verdict is shown beside it, not taken for the claim's
    assert (
        "best learner: dual policy beats both halves (95% intervals): inconclusive"
        in (dual["numbers"])
    )
    # a page that ran without judging the claim by an interval: inconclusive, and it says why
    assert by["linear"]["verdict"] == "inconclusive"
    assert "no interval" in by["linear"]["numbers"] and "1.04" in by["linear"]["numbers"]
    # a failed page and a page that never ran test nothing
    assert by["transfer"]["verdict"] == NOT_TESTED and "09 has not run" in by["transfer"]["numbers"]
    assert by["stages"]["verdict"] == NOT_TESTED
    # the table on the index: its verdict badge, the page's link, and a page that passes the checks
    assert "The paper&#x27;s claims" in page or "The paper's claims" in page
    row = re.search(r"<td class='title'>The dual policy.*?</tr>", page, re.S).group(0)
    assert f'class="status {verdict}"' in row and 'href="07/07.html"' in row
    assert html_problems(page, [str(tmp_path)]) == []


def test_a_headline_result_can_name_its_claim():
    rows = claim_rows(
        {"10": [{"label": "scaling verdict", "value": "supports", "claim": "linear"}]}
    )
    assert {r["key"]: r["verdict"] for r in rows}["linear"] == "supports"
    assert {r["key"]: r["verdict"] for r in rows}["placeto-speed"] == "inconclusive"


@pytest.mark.parametrize(("power", "verdict"), [(1.0, "supports"), (1.6, "contradicts")])
def test_page_10_findings_judge_linear_scaling_for_the_claims_table(power, verdict):
    """Page 10's verdict on linear scaling comes from judge over the local exponents of the
    fitted range, and lands in the claims table under its claim's key, both ways."""
    from doppler_lab.lab.experiments import scaling_fit, scaling_key_numbers
    from doppler_lab.lab.reporting.findings import page_findings

    wobble = [1.0, 1.04, 0.97, 1.02, 0.99, 1.03, 0.98, 1.01]
    rows = [
        {"method": "doppler", "nodes": n, "inference_ms": w * 1e-3 * n**power,
         "train_ms": w * 3e-3 * n**power, "inference_us_per_node": w * n ** (power - 1),
         "train_us_per_node": 3 * w * n ** (power - 1)}
        for n, w in zip((100, 200, 400, 800, 1600, 3200, 6400, 12800), wobble)
    ]  # fmt: skip
    s = {"rows": rows, "fit": scaling_fit(rows), "key_numbers": scaling_key_numbers(rows)}
    found = page_findings("10_scalability", s)
    row = {r["key"]: r for r in claim_rows({"10": found.headline})}["linear"]
    assert row["verdict"] == verdict and "fitted range" in row["numbers"]
    assert "100-12,800 nodes" in found.text
