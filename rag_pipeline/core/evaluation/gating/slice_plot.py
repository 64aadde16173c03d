"""The evaluation's picture: each slice's metrics against the baseline, with the gate's intervals."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from rag_pipeline.core.evaluation.gating.significance import SignificanceConfig, paired_significance
from rag_pipeline.core.plots import label, pyplot, save


def slice_comparison(
    candidate: Mapping, baseline: Mapping | None, metrics: Sequence[str], significance: SignificanceConfig, path: Path,
) -> Path:
    """Each slice's headline metrics against the baseline, as a forest plot of paired differences.

    One panel per metric, one row per slice: the point is the mean paired difference (candidate -
    baseline) over the slice's cases scored in both, the whiskers its bootstrap interval (the
    gate's method and alpha), labelled with both values. Without a baseline, the candidate's
    values are drawn as bars. `candidate` and `baseline` are evaluation records (`cases`,
    `case_slices`).
    """
    plt = pyplot()
    # Slices with scored cases only (an unanswerable slice has answer metrics, no retrieval ones).
    slices = sorted({candidate["case_slices"][c] for c, values in candidate["cases"].items()
                     if any(m in values for m in metrics)})
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.2 * len(metrics), 0.45 * len(slices) + 1.6), sharey=True,
                             squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        for row, name in enumerate(slices):
            ids = [c for c, s in candidate["case_slices"].items() if s == name and metric in candidate["cases"].get(c, {})]
            cand = [candidate["cases"][c][metric] for c in ids]
            if baseline is None:
                ax.barh(row, sum(cand) / len(cand) if cand else 0, color="tab:blue", alpha=0.7)
                continue
            shared = [c for c in ids if metric in baseline["cases"].get(c, {})]
            b = [baseline["cases"][c][metric] for c in shared]
            c = [candidate["cases"][i][metric] for i in shared]
            if not shared:
                continue
            low, high, _ = paired_significance(b, c, significance)
            delta = (sum(c) - sum(b)) / len(shared)
            color = "tab:red" if high < 0 else "tab:green" if low > 0 else "tab:gray"
            if not math.isnan(low):
                ax.plot([low, high], [row, row], color=color, linewidth=2)
            ax.plot([delta], [row], "o", color=color)
            ax.annotate(f"{sum(b) / len(b):.2f}→{sum(c) / len(c):.2f}", (delta, row), textcoords="offset points",
                        xytext=(0, 6), ha="center", fontsize=7)
        if baseline is None:
            ax.set_xlim(0, 1)
            ax.set_xlabel(metric)
        else:
            ax.axvline(0, color="black", linewidth=0.8)
            ax.set_xlabel(f"Δ {metric} (candidate − baseline)")
        ax.set_yticks(range(len(slices)), [label(s) for s in slices])
        ax.invert_yaxis()
    title = ("by slice, against the promoted baseline: mean paired difference and its "
             f"{1 - significance.alpha:.0%} interval" if baseline is not None else "by slice (no baseline promoted yet)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return save(fig, path)
