"""Names shared by the Dagster layer: owners, the store's pool, run tags."""

OWNERS = ["team:rag-platform"]

# The steps that hold the store for long (a source's switch, evaluations, monitoring) queue in this
# pool. Its limit is the backend's, set in the instance config: 1 with DuckDB (dagster.yaml: one
# writer per file; the other ingestion steps share the file through short connections), several
# with PostgreSQL (deploy/dagster-postgres.yaml: sources switch in parallel).
STORE_POOL = "store"

# Run tags, so that the UI can filter runs by what started them and what they work on.
TRIGGER_TAG = "rag_pipeline/trigger"  # cli | schedule | sensor | backfill
SOURCE_TAG = "rag_pipeline/source"
GOLDEN_TAG = "rag_pipeline/golden_revision"
DAY_TAG = "rag_pipeline/day"
