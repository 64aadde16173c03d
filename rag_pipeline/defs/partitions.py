"""Partitions: one dynamic partition per configured source, one per golden-set revision."""

import dagster as dg

# Keys are slugged source ids ([a-z0-9_]), valid as partition keys.
source_partitions = dg.DynamicPartitionsDefinition(name="sources")
# Keys are golden-set revisions: the first 12 hex digits of the file's sha256.
golden_partitions = dg.DynamicPartitionsDefinition(name="golden_revisions")
# One partition per day of production traffic.
daily_partitions = dg.DailyPartitionsDefinition(start_date="2026-11-01", end_offset=1)
