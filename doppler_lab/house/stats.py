"""Verdicts on paired measurements: is A better than B, does a run support a claimed direction.

One rule for every caller (Stage III, ``execute --against``, the report pages): take the paired
differences (same seed, graph or interleaved run), bootstrap a 95% interval of their mean, and
let the interval decide -- never the mean alone. An interval that excludes zero on one side
gives a verdict; one that holds zero says "cannot tell" / "inconclusive". With fewer than
:data:`MIN_PAIRS` pairs there is no verdict whatever the numbers: a bootstrap of three points
excludes zero whenever they share a sign, which happens by chance one time in four.

The interval is the bias-corrected and accelerated (BCa) bootstrap of the mean, seeded, so a
verdict is reproducible. Beside it: the Wilcoxon signed-rank p-value (two-sided; scipy) and two
effect sizes, the standardised mean difference ``d_z = mean / sd`` and the matched-pairs
rank-biserial correlation (in [-1, 1]).

Example:
    >>> r = compare([10.0, 11.0, 10.5, 9.8, 10.2, 10.1], [11.0, 12.1, 11.4, 10.9, 11.0, 11.3])
    >>> r.verdict, round(r.mean, 2), r.high < 0
    ('better', -1.02, True)
    >>> judge_claim([0.3, -0.2, 0.1, -0.4, 0.2, 0.0], direction=+1).verdict
    'inconclusive'
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from .errors import ConfigError

__all__ = [
    "CONFIDENCE",
    "MIN_PAIRS",
    "PairedStats",
    "bootstrap_interval",
    "combined_verdict",
    "compare",
    "judge_claim",
    "paired_differences",
    "paired_stats",
]

#: the confidence of every interval that decides a verdict
CONFIDENCE = 0.95
#: fewer pairs than this give no verdict (see the module docstring)
MIN_PAIRS = 5
#: bootstrap resamples of the mean
RESAMPLES = 10_000

#: verdict words for "A against B" (by the sign the interval excludes zero on)
AB_WORDS = {+1: "better", -1: "worse", 0: "cannot tell"}
#: verdict words for a claimed direction
CLAIM_WORDS = {+1: "supports", -1: "contradicts", 0: "inconclusive"}


@dataclass(frozen=True)
class PairedStats:
    """What paired differences say.

    Attributes:
        n: number of pairs.
        mean: mean difference.
        low, high: the bootstrap interval of the mean (``confidence``).
        confidence: the interval's confidence.
        p_value: Wilcoxon signed-rank, two-sided (1.0 when every difference is zero; None with
            fewer than two non-zero differences).
        effect_size: ``d_z = mean / sd`` of the differences (0 when all are equal and zero,
            +-inf when all are equal and not zero).
        rank_biserial: matched-pairs rank-biserial correlation, in [-1, 1].
        sign: +1 when the interval lies above zero, -1 below, 0 when it holds zero or there
            are fewer than ``min_pairs`` pairs.
        verdict: the verdict word (set by :func:`compare` / :func:`judge_claim`).
    """

    n: int
    mean: float
    low: float
    high: float
    confidence: float
    p_value: float | None
    effect_size: float
    rank_biserial: float
    sign: int
    verdict: str = ""

    def to_dict(self) -> dict[str, float | int | str | None]:
        """Plain numbers, for JSON summaries."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    def describe(self, unit: str = "", scale: float = 1.0) -> str:
        """One line: ``mean -1.2 ms [95% CI -2.0, -0.4], Wilcoxon p=0.016, d_z=-1.30, n=8``
        (values times ``scale``, e.g. 1e3 with ``unit="ms"``)."""
        u = f" {unit}" if unit else ""
        p = "n/a" if self.p_value is None else f"{self.p_value:.3g}"
        return (
            f"mean {self.mean * scale:+.4g}{u} [{self.confidence:.0%} CI "
            f"{self.low * scale:+.4g}, {self.high * scale:+.4g}], Wilcoxon p={p}, "
            f"d_z={self.effect_size:+.2f}, n={self.n}"
        )


def _differences(values: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    d = np.asarray(values, dtype=np.float64).ravel()
    if d.size == 0:
        raise ConfigError(f"{what}: no values, expected at least one pair")
    bad = np.flatnonzero(~np.isfinite(d))
    if bad.size:
        raise ConfigError(f"{what}: value {bad[0]} is {d[bad[0]]}, expected a finite number")
    return d


def bootstrap_interval(
    differences: Sequence[float] | np.ndarray,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[float, float]:
    """The BCa bootstrap interval of the mean of ``differences`` (seeded; falls back to the
    percentile interval where the bias correction is undefined). All-equal values give a
    zero-width interval at their value."""
    if not 0.0 < confidence < 1.0:
        raise ConfigError(f"confidence = {confidence}, expected a number in (0, 1)")
    if resamples < 100:
        raise ConfigError(f"resamples = {resamples}, expected at least 100")
    d = _differences(differences, "bootstrap_interval")
    n, theta = d.size, float(d.mean())
    if n == 1 or np.all(d == d[0]):
        return theta, theta
    from scipy.special import ndtr, ndtri

    rng = np.random.default_rng(seed)
    chunk = max(1, 2_000_000 // n)
    means = np.concatenate(
        [
            d[rng.integers(0, n, size=(min(chunk, resamples - i), n))].mean(axis=1)
            for i in range(0, resamples, chunk)
        ]
    )
    alpha = (1.0 - confidence) / 2.0
    qs = np.array([alpha, 1.0 - alpha])
    below = (np.count_nonzero(means < theta) + 0.5 * np.count_nonzero(means == theta)) / resamples
    if 0.0 < below < 1.0:
        z0 = float(ndtri(below))
        jack = (d.sum() - d) / (n - 1)
        dev = jack.mean() - jack
        den = 6.0 * float(np.sum(dev**2)) ** 1.5
        acc = float(np.sum(dev**3)) / den if den > 0 else 0.0
        z = ndtri(qs)
        qs = ndtr(z0 + (z0 + z) / (1.0 - acc * (z0 + z)))
    low, high = np.quantile(means, qs)
    return float(low), float(high)


def _wilcoxon(d: np.ndarray) -> tuple[float | None, float]:
    """(two-sided p-value, rank-biserial correlation) of the signed-rank test."""
    nz = d[d != 0]
    if nz.size == 0:
        return 1.0, 0.0
    from scipy.stats import rankdata, wilcoxon

    ranks = rankdata(np.abs(nz))
    plus, total = float(ranks[nz > 0].sum()), float(ranks.sum())
    rb = (2.0 * plus - total) / total
    if nz.size < 2:
        return None, rb
    return float(wilcoxon(nz).pvalue), rb


def paired_stats(
    differences: Sequence[float] | np.ndarray,
    *,
    confidence: float = CONFIDENCE,
    resamples: int = RESAMPLES,
    seed: int = 0,
    min_pairs: int = MIN_PAIRS,
) -> PairedStats:
    """Mean, bootstrap interval, Wilcoxon p-value and effect sizes of paired ``differences``;
    ``sign`` says which side of zero the interval lies on (0: neither, or too few pairs)."""
    d = _differences(differences, "paired_stats")
    low, high = bootstrap_interval(d, confidence, resamples, seed)
    mean = float(d.mean())
    sd = float(d.std(ddof=1)) if d.size > 1 else 0.0
    effect = mean / sd if sd > 0 else (0.0 if mean == 0 else math.copysign(math.inf, mean))
    p, rb = _wilcoxon(d)
    sign = 0
    if d.size >= min_pairs:
        sign = 1 if low > 0 else -1 if high < 0 else 0
    return PairedStats(d.size, mean, low, high, confidence, p, effect, rb, sign)


def compare(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    *,
    lower_is_better: bool = True,
    **options: float | int,
) -> PairedStats:
    """A against B over paired measurements (``a[i]`` with ``b[i]``): the statistics of
    ``a - b`` and the verdict for A, ``better``, ``worse`` or ``cannot tell``.

    Args:
        a, b: paired measurements (e.g. makespans of interleaved runs), equal lengths.
        lower_is_better: makespans and costs (default); False for speed-ups, accuracies.
        options: :func:`paired_stats`'s keywords (confidence, resamples, seed, min_pairs).
    """
    xa, xb = _differences(a, "compare: A"), _differences(b, "compare: B")
    if xa.size != xb.size:
        raise ConfigError(f"compare: {xa.size} values of A and {xb.size} of B, expected pairs")
    s = paired_stats(xa - xb, **options)  # type: ignore[arg-type]
    return replace(s, verdict=AB_WORDS[-s.sign if lower_is_better else s.sign])


def judge_claim(
    differences: Sequence[float] | np.ndarray, *, direction: int = +1, **options: float | int
) -> PairedStats:
    """Whether paired ``differences`` support a claim that they are positive (``direction``
    +1) or negative (-1): ``supports`` when the interval excludes zero on the claimed side,
    ``contradicts`` on the other, ``inconclusive`` otherwise."""
    if direction not in (1, -1):
        raise ConfigError(f"direction = {direction!r}, expected +1 or -1")
    s = paired_stats(differences, **options)  # type: ignore[arg-type]
    return replace(s, verdict=CLAIM_WORDS[s.sign * direction])


def paired_differences(
    records: Sequence[Mapping[str, object]],
    a: str,
    b: str,
    *,
    key: str = "method",
    value: str = "makespan",
    on: Sequence[str] = ("graph", "seed"),
    relative: bool = True,
) -> tuple[np.ndarray, list[tuple[object, ...]]]:
    """The pairs of runs ``a`` and ``b`` (their ``key``, e.g. two methods) that share ``on``
    (e.g. graph and seed), and per pair how much lower A's ``value`` is than B's: ``(b - a) /
    b`` with ``relative`` (a fraction of B's, comparable across graphs), else ``b - a``.
    Positive: A is lower (a shorter makespan). Runs without a partner are left out.

    Returns:
        The differences and the ``on`` values of each pair, in the order of A's runs.

    Example:
        >>> runs = [{"method": m, "graph": "g", "seed": s, "makespan": v}
        ...         for m, s, v in [("a", 0, 9.0), ("b", 0, 10.0), ("a", 1, 8.0), ("b", 1, 10.0)]]
        >>> paired_differences(runs, "a", "b")[0].tolist()
        [0.1, 0.2]
    """

    def pair_key(r: Mapping[str, object]) -> tuple[object, ...]:
        return tuple(r.get(k) for k in on)

    def number(r: Mapping[str, object]) -> float:
        v = r.get(value)
        return math.nan if v is None else float(v)  # type: ignore[arg-type]

    of_b = {pair_key(r): number(r) for r in records if r.get(key) == b}
    diffs, keys = [], []
    for r in records:
        k = pair_key(r)
        if r.get(key) != a or k not in of_b:
            continue
        va, vb = number(r), of_b[k]
        if not (math.isfinite(va) and math.isfinite(vb)) or (relative and vb == 0):
            continue
        diffs.append((vb - va) / vb if relative else vb - va)
        keys.append(k)
    return np.asarray(diffs, dtype=np.float64), keys


def combined_verdict(verdicts: Sequence[str]) -> str:
    """One claim verdict from the verdicts of its parts (e.g. the dual policy against each
    half): ``contradicts`` when one part does, ``supports`` when every part does (and there
    is one), else ``inconclusive``.

    Example:
        >>> combined_verdict(["supports", "inconclusive"]), combined_verdict(["supports"] * 2)
        ('inconclusive', 'supports')
    """
    if "contradicts" in verdicts:
        return "contradicts"
    return "supports" if verdicts and set(verdicts) == {"supports"} else "inconclusive"
