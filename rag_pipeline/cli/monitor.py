"""`rag-pipeline monitor`: a day of production queries sampled, its coverage gaps, and its drift against the golden set."""

from __future__ import annotations

import argparse
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING

from rag_pipeline.cli.common import dagster_instance, load_args, print_json
from rag_pipeline.config import ConfigError, PipelineConfig
from rag_pipeline.core.render import printable

if TYPE_CHECKING:  # the runner imports Dagster: only commands that run something pay for it
    from rag_pipeline.cli.runner import MonitorRun

# Refused query-log lines printed one by one (the asset's table and the drift report hold more).
SHOWN_REFUSED = 10


def day_range(config: PipelineConfig, today: date | None = None) -> tuple[date, date]:
    """The first and last day partitions (as `defs/partitions.daily_partitions` makes them: from
    monitoring.start_date, or today without one, to today in UTC)."""
    today = today or datetime.now(timezone.utc).date()
    return config.monitoring.start_date or today, today


def checked_day(config: PipelineConfig, day: str, today: date | None = None) -> str:
    """`--day` as a day partition that exists; ConfigError naming the day and the range otherwise."""
    first, last = day_range(config, today)
    origin = "monitoring.start_date" if config.monitoring.start_date else "no monitoring.start_date: today"
    days = f"the day partitions run from {first} ({origin}) to {last} (today, UTC)"
    try:
        value = date.fromisoformat(day.strip())
    except ValueError:
        raise ConfigError(f"--day {day!r} is not a date: write it as YYYY-MM-DD; {days}") from None
    if not first <= value <= last:
        where = "before the first" if value < first else "after the last"
        raise ConfigError(f"--day {value} is {where} day partition: {days}; pick a day in that range")
    return value.isoformat()


def monitoring_day(config: PipelineConfig, day: str | None) -> str:
    """The requested day (a day partition that exists), or the last day of the query log."""
    from rag_pipeline.core.monitoring.sampling import read_query_log

    if day:
        return checked_day(config, day)
    if config.monitoring.query_log is None:
        raise ConfigError("no monitoring.query_log in the config: nothing to monitor")
    log = read_query_log(config.monitoring.query_log)
    if not log.queries:
        raise ConfigError(f"the query log {config.monitoring.query_log} holds no valid query")
    return log.queries[-1].timestamp.date().isoformat()


def print_monitoring(run: MonitorRun) -> None:
    """What the on-call person reads first: the sample's measures, the drift verdict, the candidates."""
    if run.error:
        print(f"monitoring FAILED: {printable(run.error)}")
        return
    m = run.metadata
    print(f"sampled {m['sampled_queries']:.0f} of {m['window_queries']:.0f} queries | "
          f"no-result rate {m.get('no_result_rate', float('nan')):.2f} | p95 latency {m.get('p95_latency_ms', float('nan')):.0f} ms | "
          f"superseded hits {m.get('superseded_hit_share', 0.0):.2f} | stale hits {m.get('stale_hit_share', 0.0):.2f}")
    print(f"drift: MMD² {m['mmd2_distance']:.4f} against the golden-calibrated threshold {m['drift_threshold']:.4f}: "
          + ("DRIFT (WARN)" if run.drifted else "within threshold"))
    refused = int(m.get("malformed_lines", 0))
    if refused:
        named = [r.data for r in m["malformed"].records if ":" in str(r.data["where"])] if "malformed" in m else []
        print(f"\nquery-log lines refused, left out of the sample: {refused}")
        for row in named[:SHOWN_REFUSED]:
            print(f"  {printable(str(row['where']))}: {printable(str(row['reason']))}")
        if refused > len(named[:SHOWN_REFUSED]):
            print(f"  ... and {refused - len(named[:SHOWN_REFUSED])} more (the drift report names the first "
                  f"{len(named)})")
    print("\ncandidates for new golden cases:")
    for record in m["candidates"].records:
        row = record.data
        print(f"  {row['excess_density']:.3f}  {row['query']}  (nearest golden: {row['nearest_golden']})")
    gaps = m.get("coverage_gaps") or []
    print(f"\ncoverage gaps (questions with best evidence under {m.get('weak_threshold', float('nan')):.3f}): "
          + ("none" if not gaps else ""))
    for gap in gaps:
        state = f"closed by {gap['closed_by']}" if gap["closed_by"] else f"open since {gap['first_seen']}"
        print(f"  {gap['count']:>4}  {gap['share']:.0%}  {printable(gap['label'])}  ({state}; nearest: "
              f"{printable(gap['nearest_doc'])})")
        for query in gap["queries"][:3]:
            print(f"          {printable(query)}")
    print(f"\nreport: {m['report_file']}")


def cmd_monitor(args: argparse.Namespace) -> int:
    from rag_pipeline.cli.runner import monitor

    config, _ = load_args(args)
    day = monitoring_day(config, args.day)
    with dagster_instance() as instance:
        run = monitor(config, instance, day)
    if args.json:
        refused = [r.data for r in run.metadata["malformed"].records] if "malformed" in run.metadata else []
        # Open gaps largest first, then those closed that day; each with all of its questions.
        print_json({"day": day, "success": run.success, "checks": run.checks, "error": run.error,
                    "coverage_gaps": run.metadata.get("coverage_gaps") or [],
                    "metadata": {k: v for k, v in run.metadata.items() if isinstance(v, (int, float, str))},
                    "refused_lines": refused})
    else:
        print(f"== production monitoring, day {day}")
        print_monitoring(run)
    if not run.success:
        return 1
    return 1 if args.fail_on_drift and run.drifted else 0
