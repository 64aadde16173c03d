"""Partitions: one dynamic partition per configured source, one per golden-set revision, one per day."""

from datetime import date

import dagster as dg

from rag_pipeline.config import MonitoringConfig

# Keys are slugged source ids ([a-z0-9_]), valid as partition keys.
source_partitions = dg.DynamicPartitionsDefinition(name="sources")
# Keys are golden-set revisions: the first 12 hex digits of the file's sha256.
golden_partitions = dg.DynamicPartitionsDefinition(name="golden_revisions")


def daily_partitions(monitoring: MonitoringConfig, today: date | None = None) -> dg.DailyPartitionsDefinition:
    """One partition per day of production traffic, from `monitoring.start_date` (without a query
    log, today); end_offset=1 makes today a partition too (watched while it fills)."""
    start = monitoring.start_date or today or date.today()
    return dg.DailyPartitionsDefinition(start_date=start.isoformat(), end_offset=1)
