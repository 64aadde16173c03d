"""Names shared by the Dagster layer: owners, the store's pool, run tags."""

import dagster as dg

from rag_pipeline.core.render import one_line

OWNERS = ["team:rag-platform"]

# The steps that hold the store for long (a source's switch, evaluations, monitoring) queue in this
# pool. Its limit is the backend's, set in the instance config: 1 with DuckDB (dagster.yaml: one
# writer per file; the other ingestion steps share the file through short connections), several
# with PostgreSQL (deploy/dagster-postgres.yaml: sources switch in parallel).
STORE_POOL = "store"

# Run tags, so that the UI can filter runs by what started them and what they work on.
TRIGGER_TAG = "rag_pipeline/trigger"  # cli | schedule | sensor | backfill | manual
SOURCE_TAG = "rag_pipeline/source"
GOLDEN_TAG = "rag_pipeline/golden_revision"
DAY_TAG = "rag_pipeline/day"
# Documents of the source that fail a stage for their current content (set on runs that have any).
FAILED_DOCUMENTS_TAG = "rag_pipeline/failed_documents"
# The revision (a git commit) the discovery of a listed source read.
REVISION_TAG = "rag_pipeline/revision"
# Why a run failed, in the pipeline's words and without a stack trace: the runs list shows tags.
FAILURE_TAG = "rag_pipeline/failure"
MAX_FAILURE_TAG_CHARS = 200
# Set by Dagster on the runs of a backfill, of a partition, of a schedule's tick.
BACKFILL_TAG = "dagster/backfill"
PARTITION_TAG = "dagster/partition"
TICK_TAG = "dagster/tick"

# The jobs (defs/automation.py), named here so that the readers of runs need not import them.
INGEST_JOB = "ingest_sources"
EVALUATE_JOB = "evaluate_golden_revision"
MONITOR_JOB = "monitor_production"
PURGE_JOB = "purge_removed_sources"

FINISHED = [dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED]
IN_FLIGHT = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
             dg.DagsterRunStatus.STARTED]


def tag_trigger(context: dg.AssetExecutionContext) -> None:
    """Give a run launched without our trigger tag one: `backfill` for the runs of a backfill (the
    UI launches asset backfills with no tags of ours), `manual` for a run launched by hand."""
    tags = context.run.tags
    if TRIGGER_TAG not in tags:
        trigger = "backfill" if BACKFILL_TAG in tags else "manual"
        context.instance.add_run_tags(context.run.run_id, {TRIGGER_TAG: trigger})


def tag_failure(context: dg.AssetExecutionContext, reason: str) -> None:
    """Name the run's failure in a tag: `<asset>: <reason>`, cut to a line the runs list can show.
    (Dagster 1.13 shows every step failure with its stack trace in the run's event log; the tag
    and the partition's observation carry the reason on their own.)"""
    asset = context.asset_key.to_user_string() if len(context.selected_asset_keys) == 1 else context.op_def.name
    text = f"{asset}: {one_line(reason)}"
    if len(text) > MAX_FAILURE_TAG_CHARS:
        text = text[: MAX_FAILURE_TAG_CHARS - 1] + "…"
    context.instance.add_run_tags(context.run.run_id, {FAILURE_TAG: text})
