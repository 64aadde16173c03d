"""Drift and coverage gaps on the sample query log, day by day: the production sample, the coverage
gaps and the drift report of each day partition, as the monitoring assets compute them (run
`make demo` first: it builds the index).

    python benchmarks/drift.py [--start 2026-11-12] [--end 2026-11-29]

Prints per day: MMD² against the golden set, the golden-calibrated threshold, the verdict, the
no-result rate, the smallest share a new topic needs to be seen, the weak questions and the
largest gap; then the top candidates of the last day and every gap listed over the days. Reports
and PNGs go to .rag_pipeline/reports/.
"""

from __future__ import annotations

import argparse
import os
import sys
from datetime import date, timedelta

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.api import (  # noqa: E402
    coverage_gaps_day,
    drift_day,
    load_config,
    make_embedder,
    open_store,
    sample_day,
)
from rag_pipeline.config import PROJECT_ROOT  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--start", type=date.fromisoformat, default=date(2026, 11, 12))
    parser.add_argument("--end", type=date.fromisoformat, default=date(2026, 11, 29))
    args = parser.parse_args()
    config = load_config(PROJECT_ROOT / "data" / "pipeline.yaml")
    store = open_store(config.storage)
    embedder = make_embedder(config.embedding)
    folder = config.storage.reports
    print("| day | MMD² | threshold | verdict | no-result rate | sampled | smallest visible topic | weak | largest gap |")
    print("|---|---|---|---|---|---|---|---|---|")
    day, report, listed = args.start, None, []
    while day <= args.end:
        sample, measures, _ = sample_day(config, store, embedder, day)
        gaps = coverage_gaps_day(config, store, embedder, day)
        drift = drift_day(config, store, embedder, day, folder)
        report, markdown = drift.report, drift.path
        largest = max(gaps.open_gaps, key=lambda g: g.share, default=None)
        print(f"| {day} | {report.distance:.4f} | {report.threshold:.4f} | {'DRIFT' if report.drifted else 'ok'} | "
              f"{measures['no_result_rate']:.2f} | {len(sample.results)} | {report.min_detectable_share:.0%} | "
              f"{gaps.weak}/{gaps.examined} | "
              + (f"{largest.label} ({largest.count}, {largest.share:.0%})" if largest else "–") + " |")
        listed += [(day, g) for g in gaps.gaps]
        day += timedelta(days=1)
    if report is not None:
        print(f"\nreport: {markdown}\ntop candidates on {report.day}:")
        for candidate in report.candidates[:8]:
            print(f"  {candidate['excess_density']:.3f}  {candidate['distance']:.3f}  {candidate['query']}")
    print(f"\ncoverage gaps (weak-evidence threshold: {gaps.threshold.value:.4f}, {gaps.threshold.rule}):")
    for day, gap in listed:
        state = f"closed by {gap.closed_by}" if gap.closed_by else f"first seen {gap.first_seen}"
        print(f"  {day}  {gap.count:>2} ({gap.share:.0%})  {gap.label}  [{state}]  "
              + " | ".join(m.question.text for m in gap.members[:3]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
