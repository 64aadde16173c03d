"""Partitions: one dynamic partition per configured source (keys are slugged source ids)."""

import dagster as dg

source_partitions = dg.DynamicPartitionsDefinition(name="sources")
