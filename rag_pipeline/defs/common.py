"""Names shared by the Dagster layer: owners, the DuckDB pool, run tags."""

OWNERS = ["team:rag-platform"]

# The step that holds the DuckDB file for long (the switch) and the evaluation and monitoring steps
# (which search it) queue in this pool (limit 1 in dagster.yaml); the other ingestion steps share the
# file through the store's short connections, which wait for DuckDB's lock.
DUCKDB_POOL = "duckdb"

# Run tags, so that the UI can filter runs by what started them and what they work on.
TRIGGER_TAG = "rag_pipeline/trigger"  # cli | schedule | sensor | backfill
SOURCE_TAG = "rag_pipeline/source"
GOLDEN_TAG = "rag_pipeline/golden_revision"
DAY_TAG = "rag_pipeline/day"
