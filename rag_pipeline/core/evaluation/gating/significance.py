"""Paired significance of a metric's change over the same cases: a bootstrap or randomization
interval and p-value, and the minimum detectable effect of that many cases."""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

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
    (1 - alpha) interval of the resampled mean differences; p = 2 * min(P(mean <= 0), P(mean >= 0)).
    randomization: flip the sign of each case's difference at random (the null of no difference);
    p = share of flipped means at least as extreme as the observed one; the CI is the bootstrap's.
    """
    diffs = [c - b for b, c in zip(baseline, candidate, strict=True)]
    n = len(diffs)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(config.seed)
    observed = sum(diffs) / n
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(config.samples))
    low = means[int(math.floor(config.alpha / 2 * (config.samples - 1)))]
    high = means[int(math.ceil((1 - config.alpha / 2) * (config.samples - 1)))]
    if all(d == 0 for d in diffs):
        return low, high, 1.0
    if config.method == "randomization":
        extreme = sum(
            1 for _ in range(config.samples)
            if abs(sum(d if rng.random() < 0.5 else -d for d in diffs) / n) >= abs(observed) - 1e-12
        )
        return low, high, (extreme + 1) / (config.samples + 1)
    at_or_below = sum(1 for m in means if m <= 0) / config.samples
    at_or_above = sum(1 for m in means if m >= 0) / config.samples
    return low, high, min(1.0, 2 * min(at_or_below, at_or_above))


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
