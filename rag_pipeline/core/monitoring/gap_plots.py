"""Gap traffic over days: the share of each day's questions every listed gap held (the largest few)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path

from rag_pipeline.core.plots import label, pyplot, save

# Gaps drawn, by their largest day: more lines than this are unreadable.
SHOWN_GAPS = 8


def gap_traffic_plot(traffic: Sequence[Mapping], path: Path) -> Path | None:
    """A line per gap (open days; the day it closed marked with an x) from `GapRecords.traffic` rows;
    None when no day listed a gap."""
    if not traffic:
        return None
    plt = pyplot()
    from matplotlib import dates

    peak: dict[str, float] = {}
    for row in traffic:
        peak[row["gap_id"]] = max(peak.get(row["gap_id"], 0.0), float(row["share"]))
    shown = sorted(peak, key=lambda g: (-peak[g], g))[:SHOWN_GAPS]
    fig, ax = plt.subplots(figsize=(10, 4))
    for gap_id in shown:
        rows = [r for r in traffic if r["gap_id"] == gap_id]
        opened = [r for r in rows if r["status"] == "open"]
        line, = ax.plot([r["day"] for r in opened], [r["share"] for r in opened], marker="o",
                        label=label(rows[-1]["label"]))
        for r in rows:
            if r["status"] == "closed":
                ax.plot([r["day"]], [r["share"]], marker="x", markersize=10, color=line.get_color())
    days = [r["day"] for r in traffic]
    ax.set_xlim(min(days) - timedelta(days=1), max(days) + timedelta(days=1))
    ax.xaxis.set_major_formatter(dates.DateFormatter("%m-%d"))
    ax.set_ylabel("share of the day's questions")
    ax.set_title("Coverage gaps: traffic by day (x: closed)")
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    return save(fig, path)
