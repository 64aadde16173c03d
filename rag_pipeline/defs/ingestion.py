"""Ingestion assets, one partition per source: discover, parse, chunk, embed, index."""


import dagster as dg

from rag_pipeline.core import ingestion
from rag_pipeline.core.coverage import coverage_report
from rag_pipeline.core.parsing import parser_version
from rag_pipeline.defs.metadata import coverage_metadata, stage_metadata
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource

# Every step that touches the DuckDB file is in one pool: DuckDB allows a single writing process.
DUCKDB_POOL = "duckdb"
COVERAGE_CHECK = "coverage"

_common = dict(partitions_def=source_partitions, group_name="ingestion", pool=DUCKDB_POOL, kinds={"duckdb"})


@dg.asset(**_common)
def source_documents(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource
) -> dg.MaterializeResult:
    """Files of the source with hashes and metadata, diffed against the previous manifest."""
    source = settings.load().source(context.partition_key)
    report = ingestion.discover_source(source, store.get(), settings.load().lifecycle, context.run.run_id)
    return dg.MaterializeResult(metadata={"root": dg.MetadataValue.path(str(source.path)), **stage_metadata(report)})


@dg.asset(deps=[source_documents], **_common)
def parsed_documents(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource
) -> dg.MaterializeResult:
    """unstructured elements of the added and changed documents; failures recorded per document."""
    source = settings.load().source(context.partition_key)
    report = ingestion.parse_source(source, store.get(), context.run.run_id)
    return dg.MaterializeResult(metadata={"parser": parser_version(), **stage_metadata(report)})


@dg.asset(deps=[parsed_documents], **_common)
def document_chunks(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource
) -> dg.MaterializeResult:
    """Chunks of the configured strategy for documents whose content or chunking changed."""
    config = settings.load()
    report = ingestion.chunk_source(config.source(context.partition_key), store.get(), config.chunking, context.run.run_id)
    return dg.MaterializeResult(
        metadata={"strategy": config.chunking.strategy, "chunking_fingerprint": config.chunking.fingerprint(),
                  **stage_metadata(report)}
    )


@dg.asset(deps=[document_chunks], **_common)
def chunk_embeddings(
    context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """Vectors of new chunk texts, through the cache keyed by model identity and text hash."""
    model = embedder.get()
    report = ingestion.embed_source(context.partition_key, store.get(), model, context.run.run_id)
    return dg.MaterializeResult(metadata={"model": model.identity, **stage_metadata(report)})


@dg.asset(
    deps=[chunk_embeddings],
    check_specs=[dg.AssetCheckSpec(COVERAGE_CHECK, asset="search_index", blocking=True)],
    **_common,
)
def search_index(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
):
    """The served DuckDB rows of the source, replaced in one transaction, then proven queryable."""
    source = settings.load().source(context.partition_key)
    db = store.get()
    report = ingestion.index_source(source, db, embedder.get(), context.run.run_id)
    yield dg.MaterializeResult(metadata={"manifest_hash": db.manifest_hash(source.source_id), **stage_metadata(report)})
    coverage = coverage_report(db, source.source_id)
    yield dg.AssetCheckResult(
        check_name=COVERAGE_CHECK,
        passed=coverage.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            "every supported document is queryable or has a recorded failure"
            if coverage.passed
            else f"{len(coverage.uncovered)} document(s) neither queryable nor failed with a reason"
        ),
        metadata=coverage_metadata(coverage),
    )


ingestion_assets = [source_documents, parsed_documents, document_chunks, chunk_embeddings, search_index]
