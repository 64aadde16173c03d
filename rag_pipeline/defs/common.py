"""Names shared by the Dagster layer: owners, the store's pool, run tags."""

import dagster as dg

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
# Set by Dagster on the runs of a backfill.
BACKFILL_TAG = "dagster/backfill"


def tag_trigger(context: dg.AssetExecutionContext) -> None:
    """Give a run launched without our trigger tag one: `backfill` for the runs of a backfill (the
    UI launches asset backfills with no tags of ours), `manual` for a run launched by hand."""
    tags = context.run.tags
    if TRIGGER_TAG not in tags:
        trigger = "backfill" if BACKFILL_TAG in tags else "manual"
        context.instance.add_run_tags(context.run.run_id, {TRIGGER_TAG: trigger})
