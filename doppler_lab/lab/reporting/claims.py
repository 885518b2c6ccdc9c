"""The paper's claims, the page that tests each, and its verdict: the index's claims table.

Each :class:`Claim` of the DOPPLER paper names the notebook page that tests it. Its verdict is
the one that page's findings made with :func:`~doppler_lab.lab.reporting.findings.judge` (a
headline result whose value is ``supports``, ``contradicts`` or ``inconclusive``, found by its
``claim`` key or by a word of its label); its numbers are the page's headline results that the
claim names. A page that ran without judging the claim by an interval gives ``inconclusive``
(and says so); a claim whose page did not run, or that no page tests, is ``not tested``.

Example:
    >>> page = {"07": [{"label": "dual policy against the best half (95% interval)",
    ...                 "value": "contradicts"},
    ...                {"label": "the dual policy: makespan below cp's", "value": 0.262,
    ...                 "unit": "%"}]}
    >>> row = claim_rows(page)[0]
    >>> row["page"], row["verdict"], row["numbers"]
    ('07', 'contradicts', "dual policy against the best half (95% interval); the dual policy: makespan below cp's 26.2 %")
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ...viz.tables import format_value

#: the verdicts of :func:`~doppler_lab.lab.reporting.findings.judge`, and the word for a claim no
#: page has tested
VERDICTS: tuple[str, ...] = ("supports", "contradicts", "inconclusive")
NOT_TESTED = "not tested"
#: headline results shown as a claim's numbers, at most
MAX_NUMBERS = 4


@dataclass(frozen=True)
class Claim:
    """One claim of the paper and where the site tests it.

    Attributes:
        key: a short name (a headline result may name it under ``claim``).
        text: the claim, as the paper makes it.
        page: the notebook number of the page that tests it (None: no page does).
        words: words of the label of the page's judged headline result (lower case; any one
            matches at the start of a word of the label).
        numbers: words of the labels of the page's headline results shown beside the verdict.
        also: words of the labels of the page's other verdicts shown beside it (a second
            setting's verdict on the same claim), ``label: verdict``.
        elsewhere: other pages whose verdict on the claim is shown beside it, not taken for
            it (e.g. one trained policy's verdict where the claim's page pairs training
            seeds), ``page NN, label: verdict``; found by the claim's key, as on its page.
    """

    key: str
    text: str
    page: str | None
    words: tuple[str, ...] = ()
    numbers: tuple[str, ...] = ()
    also: tuple[str, ...] = ()
    elsewhere: tuple[str, ...] = ()


#: the paper's claims (abstract and summary), each with the page that tests it
CLAIMS: tuple[Claim, ...] = (
    Claim(
        "dual",
        "The dual policy (SEL + PLC) beats SEL-only and PLC-only, most on complex graphs",
        "07",
        ("dual",),
        ("dual policy", "sel only", "plc only"),
        ("best learner: dual policy beats",),
    ),
    Claim(
        "stages",
        "Each training stage helps: Stages I+II+III beat their subsets",
        "08",
        ("i+ii+iii against", "subsets"),
        ("i+ii+iii:", "best variant"),
    ),
    # judged over training seeds on page 08 (Stage III against the policy it started from);
    # page 06 trains one policy, its interval holds measurement noise only: shown beside
    Claim(
        "sim-to-real",
        "Stages I+II make Stage III on the real system converge fast and stably (Stage III "
        "improves on the simulator-trained policy)",
        "08",
        ("i+ii+iii against i+ii",),
        ("i+ii+iii:", "i+ii:"),
        elsewhere=("06",),
    ),
    Claim(
        "real-alone",
        "Training on the real system alone is slow and unstable",
        "08",
        ("real system alone", "iii alone"),
        ("iii:", "i+ii+iii:"),
    ),
    Claim(
        "baselines",
        "DOPPLER places better than its baselines: up to 78.2% below Critical Path, 52.7% "
        "below GDP (the strongest), 13.8% below the enumerative optimizer, and PLACETO",
        "03",
        ("doppler", "gdp", "placeto"),
        ("doppler", "gdp", "placeto", "best on"),
    ),
    Claim(
        "transfer",
        "A policy trained on FFNN fine-tunes to unseen Llama graphs and from 4 x P100 to "
        "8 x V100 in 2k-4k episodes, faster than training from scratch",
        "09",
        ("transfer", "fine-tun"),
        ("final policy", "fine-tuned", "scratch"),
    ),
    Claim(
        "linear",
        "Training and inference time per episode grow linearly with graph size",
        "10",
        ("linear",),
        ("time ~ nodes", "fitted range"),
    ),
    Claim(
        "placeto-speed",
        "An episode takes about half as long as PLACETO's",
        "10",
        ("faster than placeto",),
        ("speed-up over placeto",),
    ),
)


def _label(h: Mapping[str, Any]) -> str:
    return str(h.get("label", "")).lower()


def _with_detail(h: Mapping[str, Any], verdict: bool = False) -> str:
    """A verdict's label with the numbers behind it (its ``detail``: mean, interval, pairs),
    and its verdict after a colon with ``verdict``."""
    text = str(h["label"]) + (f": {h['value']}" if verdict else "")
    return f"{text} ({h['detail']})" if h.get("detail") else text


def _names(label: str, words: Sequence[str]) -> bool:
    """Whether ``label`` has one of ``words`` at the start of a word (``iii:`` is not in
    ``i+ii+iii:``)."""
    return any(f" {w}" in f" {label}" for w in words)


def judged(claim: Claim, headline: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The page's headline result that holds ``claim``'s verdict: one whose ``claim`` is the
    claim's key, else the first verdict whose label has one of its :attr:`Claim.words`."""
    verdicts = [h for h in headline if h.get("value") in VERDICTS]
    tagged = [h for h in verdicts if h.get("claim") == claim.key]
    if tagged:
        return tagged[0]
    return next((h for h in verdicts if _names(_label(h), claim.words)), None)


def claim_numbers(claim: Claim, headline: Sequence[Mapping[str, Any]]) -> str:
    """The page's headline results that ``claim`` names (not verdicts), ``label value``;
    at most :data:`MAX_NUMBERS`."""
    shown = [
        f"{h['label']} {format_value(h.get('value'), h.get('unit'))}".strip()
        for h in headline
        if h.get("value") not in VERDICTS and _names(_label(h), claim.numbers)
    ]
    return "; ".join(shown[:MAX_NUMBERS])


def claim_rows(
    headlines: Mapping[str, Sequence[Mapping[str, Any]]],
    claims: Sequence[Claim] = CLAIMS,
) -> list[dict[str, Any]]:
    """One row per claim: ``claim``, ``page`` (its number, or None), ``verdict`` and
    ``numbers``, from ``headlines`` (a page's number -> its headline results, for the pages
    that ran: a claim whose page is not there is :data:`NOT_TESTED`)."""
    rows = []
    for c in claims:
        row: dict[str, Any] = {"claim": c.text, "key": c.key, "page": c.page}
        if c.page is None or c.page not in headlines:
            why = "no page tests it" if c.page is None else f"page {c.page} has not run"
            rows.append({**row, "verdict": NOT_TESTED, "numbers": why})
            continue
        head = headlines[c.page]
        found = judged(c, head)
        numbers = claim_numbers(c, head)
        if found is None:
            verdict = "inconclusive"
            numbers = "; ".join(x for x in ("the page judges it by no interval", numbers) if x)
        else:
            verdict = str(found["value"])
            also = [
                _with_detail(h, verdict=True)
                for h in head
                if h is not found and h.get("value") in VERDICTS and _names(_label(h), c.also)
            ]
            numbers = "; ".join(x for x in (_with_detail(found), *also, numbers) if x)
        beside = [
            f"page {p}, {_with_detail(h, verdict=True)}"
            for p in c.elsewhere
            if p in headlines and (h := judged(c, headlines[p])) is not None
        ]
        numbers = "; ".join(x for x in (numbers, *beside) if x)
        rows.append({**row, "verdict": verdict, "numbers": numbers})
    return rows
