"""Partitions: one dynamic partition per configured source, one per golden-set revision."""

import dagster as dg

# Keys are slugged source ids ([a-z0-9_]), valid as partition keys.
source_partitions = dg.DynamicPartitionsDefinition(name="sources")
# Keys are golden-set revisions: the first 12 hex digits of the file's sha256.
golden_partitions = dg.DynamicPartitionsDefinition(name="golden_revisions")
# One partition per day of production traffic.
# Starts early enough for real logs (a day before the start cannot be materialized); end_offset=1
# makes today a partition too, so that a day can be watched while it fills.
daily_partitions = dg.DailyPartitionsDefinition(start_date="2020-01-01", end_offset=1)
