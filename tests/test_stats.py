"""The verdict helper: the interval decides, both ways, and says so when it cannot."""

from __future__ import annotations

import numpy as np
import pytest

from doppler_lab.house.errors import ConfigError
from doppler_lab.house.stats import (
    MIN_PAIRS,
    bootstrap_interval,
    compare,
    judge_claim,
    paired_stats,
)


def _pairs(shift: float, n: int = 12, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = 10.0 + rng.normal(0.0, 1.0, n)  # a noisy shared base: the pairing removes it
    a = b + shift + rng.normal(0.0, 0.1, n)
    return a, b


def test_a_clearly_faster_is_better_and_clearly_slower_is_worse() -> None:
    a, b = _pairs(-0.5)
    r = compare(a, b)
    assert r.verdict == "better" and r.high < 0 and r.low <= r.mean <= r.high
    assert r.p_value is not None and r.p_value < 0.01 and r.rank_biserial == -1.0
    assert compare(b, a).verdict == "worse"
    # higher is better (a speed-up): the words swap
    assert compare(a, b, lower_is_better=False).verdict == "worse"


def test_noise_alone_cannot_tell() -> None:
    a, b = _pairs(0.0, n=20, seed=3)
    r = compare(a, b)
    assert r.low < 0 < r.high and r.verdict == "cannot tell"


def test_claims_supported_contradicted_inconclusive() -> None:
    up = np.array([0.4, 0.5, 0.45, 0.6, 0.38, 0.52, 0.41])
    assert judge_claim(up, direction=+1).verdict == "supports"
    assert judge_claim(up, direction=-1).verdict == "contradicts"
    assert judge_claim(-up, direction=-1).verdict == "supports"
    mixed = np.array([0.4, -0.5, 0.45, -0.6, 0.38, -0.52, 0.1])
    assert judge_claim(mixed, direction=+1).verdict == "inconclusive"


def test_a_large_mean_with_a_wide_interval_is_not_a_verdict() -> None:
    """The mean is clearly positive but one pair points the other way strongly: the interval,
    not the mean, decides."""
    d = np.array([5.0, 4.0, 6.0, 5.0, -20.0, 7.0])
    s = paired_stats(d)
    assert s.mean > 0 and s.low < 0 and s.sign == 0
    assert judge_claim(d).verdict == "inconclusive"


def test_too_few_pairs_give_no_verdict() -> None:
    d = np.ones(MIN_PAIRS - 1)
    assert paired_stats(d).sign == 0 and judge_claim(d).verdict == "inconclusive"
    assert judge_claim(np.ones(MIN_PAIRS)).verdict == "supports"


def test_seeded_and_reproducible() -> None:
    d = np.random.default_rng(0).normal(0.2, 1.0, 15)
    assert bootstrap_interval(d, seed=4) == bootstrap_interval(d, seed=4)
    lo, hi = bootstrap_interval(d)
    assert lo < float(d.mean()) < hi


def test_degenerate_differences() -> None:
    s = paired_stats(np.zeros(8))
    assert (s.low, s.high, s.p_value, s.effect_size, s.sign) == (0.0, 0.0, 1.0, 0.0, 0)
    assert paired_stats(np.full(6, 2.0)).effect_size == np.inf


def test_bootstrap_covers_the_true_mean_about_95_percent() -> None:
    rng = np.random.default_rng(11)
    hits = sum(
        lo <= 1.0 <= hi
        for lo, hi in (
            bootstrap_interval(rng.exponential(1.0, 20), resamples=2000, seed=k) for k in range(200)
        )
    )
    assert 170 <= hits <= 200  # BCa on skewed data, n = 20: about 0.93


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        ([], [], "no values"),
        ([1.0, np.nan], [1.0, 2.0], "value 1 is nan"),
        ([1.0], [1.0, 2.0], "pairs"),
    ],
)
def test_bad_input_is_one_clear_error(a: list, b: list, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        compare(a, b)


def test_bad_options() -> None:
    with pytest.raises(ConfigError, match="direction"):
        judge_claim([1.0, 2.0], direction=0)
    with pytest.raises(ConfigError, match="confidence"):
        bootstrap_interval([1.0, 2.0], confidence=95)


@pytest.mark.parametrize(
    ("shift", "word", "verb"),
    [
        (+0.3, "supports", "supports"),
        (-0.3, "contradicts", "contradicts"),
        (0.0, "inconclusive", "is inconclusive on"),
    ],  # fmt: skip
)
def test_the_pages_one_verdict_both_ways_and_inconclusive(
    shift: float, word: str, verb: str
) -> None:
    """Synthetic paired results (seed by seed): a method better by 0.3, worse by 0.3, or equal
    under noise; the page's sentence carries the interval and the verdict."""
    from doppler_lab.lab.reporting.findings import judge

    a, b = _pairs(shift, n=10, seed=7)
    st, text = judge(a - b, "the method improves on its baseline", unit="s")
    assert st.verdict == word
    assert f"this {verb} the claim that the method improves on its baseline." in text
    assert "95% interval" in text and "Wilcoxon p" in text
