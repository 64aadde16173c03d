"""Whether a topic's questions score lower, as a group, than the questions the corpus answers.

One question's best cosine is weak evidence: on a corpus whose documents resemble one another most
questions of a missing topic still find a chunk that looks close, and few fall under the per-question
threshold. Together they are plainer: their scores sit lower than those of the golden set's
answerable cases. For each topic of the day,

    p = Mann-Whitney U, one-sided: the topic's best scores stochastically less than the golden
        set's answerable cases' best scores (`scipy.stats.mannwhitneyu(..., alternative="less")`);

then the day's p-values are adjusted together by Benjamini-Hochberg
(`scipy.stats.false_discovery_control(..., method="bh")`), so that at most `alpha` of the topics a
day calls low are expected to be false: a day with many topics does not call one low by chance.
A question whose caller may see nothing scores 0, as in the golden calibration.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def lower_pvalue(scores: Sequence[float], golden: Sequence[float]) -> float:
    """One-sided Mann-Whitney p-value that `scores` sit lower than `golden` (1.0 when either is empty)."""
    if not len(scores) or not len(golden):
        return 1.0
    from scipy.stats import mannwhitneyu

    return float(mannwhitneyu(np.asarray(scores, dtype=float), np.asarray(golden, dtype=float),
                              alternative="less").pvalue)


def adjusted_pvalues(groups: Sequence[Sequence[float]], golden: Sequence[float]) -> list[float]:
    """Each group's `lower_pvalue`, Benjamini-Hochberg adjusted over all the groups."""
    if not groups:
        return []
    from scipy.stats import false_discovery_control

    raw = [lower_pvalue(group, golden) for group in groups]
    return [float(p) for p in false_discovery_control(raw, method="bh")]


def is_low(scores: Sequence[float], golden: Sequence[float], alpha: float) -> bool:
    """One group tested alone (no other group to adjust with): significantly lower at `alpha`."""
    return lower_pvalue(scores, golden) <= alpha
