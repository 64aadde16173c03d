"""Paired significance of a metric's change over the same cases: a bootstrap or randomization
interval and p-value, and the minimum detectable effect of that many cases."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

# The power at which the minimum detectable effect is stated (the usual 80%).
MDE_POWER = 0.8


class SignificanceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["paired_bootstrap", "randomization"] = "paired_bootstrap"
    samples: int = Field(default=5000, ge=100)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    seed: int = 13


@dataclass(frozen=True)
class Delta:
    """Baseline and candidate values of one metric, the paired difference and its significance."""

    metric: str
    baseline: float
    candidate: float
    ci_low: float
    ci_high: float
    p_value: float
    cases: int
    # The smallest true difference these cases detect at MDE_POWER (two-sided, at alpha).
    mde: float = math.nan

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline

    def describe(self, alpha: float) -> str:
        """The change in words that cannot read as contradictory: `fell by 0.125 (95% CI -0.219 to
        -0.031); significant at p = 0.012`. The interval and p say the same thing: an interval that
        reaches 0 goes with "not significant"."""
        change = "unchanged" if self.delta == 0 else f"{'fell' if self.delta < 0 else 'rose'} by {abs(self.delta):.3f}"
        significant = "significant" if self.p_value < alpha else "not significant"
        return (f"{change} ({1 - alpha:.0%} CI {self.ci_low:+.3f} to {self.ci_high:+.3f}); "
                f"{significant} at {p_text(self.p_value)}")


def p_text(p_value: float) -> str:
    """`p = 0.012`, `p < 0.001` (a bootstrap of a few thousand samples cannot say less)."""
    if math.isnan(p_value):
        return "p = –"
    return "p < 0.001" if p_value < 0.001 else f"p = {p_value:.3f}"


def paired_significance(
    baseline: Sequence[float], candidate: Sequence[float], config: SignificanceConfig
) -> tuple[float, float, float]:
    """(ci_low, ci_high, p_value) of the mean paired difference candidate - baseline over cases.

    paired_bootstrap: resample cases with replacement `samples` times; the CI is the central
    (1 - alpha) interval of the resampled mean differences (the percentile interval); p = 2 *
    min(P(mean <= 0), P(mean >= 0)) over the resamples.
    randomization: flip the sign of each case's difference at random (the null of no difference);
    p = (flipped means at least as extreme as the observed one + 1) / (samples + 1); the CI is the
    bootstrap's.
    Both draw from NumPy's generator seeded with `config.seed`: the same inputs give the same answer.
    """
    if len(baseline) != len(candidate):
        raise ValueError(f"paired values differ in number: {len(baseline)} baseline, {len(candidate)} candidate")
    diffs = np.asarray(candidate, dtype=np.float64) - np.asarray(baseline, dtype=np.float64)
    n = len(diffs)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    rng = np.random.default_rng(config.seed)
    means = np.sort(np.concatenate([diffs[rng.integers(0, n, size=(rows, n))].mean(axis=1)
                                    for rows in _blocks(config.samples, n)]))
    low = float(means[int(math.floor(config.alpha / 2 * (config.samples - 1)))])
    high = float(means[int(math.ceil((1 - config.alpha / 2) * (config.samples - 1)))])
    if not diffs.any():
        return low, high, 1.0
    if config.method == "randomization":
        observed = abs(diffs.mean()) - 1e-12
        extreme = sum(int((np.abs(np.where(rng.random((rows, n)) < 0.5, diffs, -diffs).mean(axis=1)) >= observed).sum())
                      for rows in _blocks(config.samples, n))
        return low, high, (extreme + 1) / (config.samples + 1)
    at_or_below = float((means <= 0).mean())
    at_or_above = float((means >= 0).mean())
    return low, high, min(1.0, 2 * min(at_or_below, at_or_above))


def _blocks(samples: int, cases: int, cells: int = 1 << 21) -> list[int]:
    """Resamples drawn a block at a time, each of at most `cells` draws (about 16 MB of indices),
    so that a golden set of many thousand cases does not hold samples x cases at once."""
    rows = max(1, cells // max(cases, 1))
    return [min(rows, samples - start) for start in range(0, samples, rows)]


def minimum_detectable_effect(baseline: Sequence[float], candidate: Sequence[float], alpha: float,
                              power: float = MDE_POWER) -> float:
    """The smallest true mean difference a paired two-sided test at `alpha` detects with probability
    `power` over these cases: (z(1 - alpha/2) + z(power)) * sd(differences) / sqrt(n), the spread
    estimated from this comparison; NaN under two cases or without any spread."""
    diffs = [c - b for b, c in zip(baseline, candidate, strict=True)]
    if len(diffs) < 2:
        return math.nan
    spread = statistics.stdev(diffs)
    if spread == 0:
        return math.nan
    z = statistics.NormalDist()
    return (z.inv_cdf(1 - alpha / 2) + z.inv_cdf(power)) * spread / math.sqrt(len(diffs))


def paired_delta(metric: str, baseline: Sequence[float], candidate: Sequence[float], config: SignificanceConfig) -> Delta:
    """The Delta of one metric over paired case values (means, interval, p, MDE)."""
    low, high, p = paired_significance(baseline, candidate, config)
    return Delta(metric, _mean(baseline), _mean(candidate), low, high, p, len(baseline),
                 minimum_detectable_effect(baseline, candidate, config.alpha))


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")
