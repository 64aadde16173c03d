"""Ingestion assets, one partition per source: discover, parse, chunk, embed, index."""


import dagster as dg

from rag_pipeline.core import ingestion
from rag_pipeline.core.coverage import coverage_report
from rag_pipeline.core.parsing import parser_version
from rag_pipeline.core.lifecycle import deletion_report, freshness_report
from rag_pipeline.defs.metadata import coverage_metadata, deletion_metadata, freshness_metadata, stage_metadata
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource

# Every step that touches the DuckDB file is in one pool: DuckDB allows a single writing process.
DUCKDB_POOL = "duckdb"
COVERAGE_CHECK = "coverage"
DELETIONS_CHECK = "deletions_propagated"
FRESHNESS_CHECK = "sources_fresh"

_common = dict(partitions_def=source_partitions, group_name="ingestion", pool=DUCKDB_POOL, kinds={"duckdb"})


class DiscoveryConfig(dg.Config):
    """Run-time switch for a deliberate mass deletion (the fail-safe refuses it otherwise)."""

    allow_mass_delete: bool = False


@dg.asset(**_common)
def source_documents(
    context: dg.AssetExecutionContext, config: DiscoveryConfig, settings: PipelineSettings, store: StoreResource
) -> dg.MaterializeResult:
    """Files of the source with hashes and metadata, diffed against the previous manifest."""
    pipeline = settings.load()
    source = pipeline.source(context.partition_key)
    lifecycle = pipeline.lifecycle
    if config.allow_mass_delete:
        lifecycle = lifecycle.model_copy(update={"allow_mass_delete": True})
    report = ingestion.discover_source(source, store.get(), lifecycle, context.run.run_id)
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
    check_specs=[
        dg.AssetCheckSpec(COVERAGE_CHECK, asset="search_index", blocking=True),
        dg.AssetCheckSpec(DELETIONS_CHECK, asset="search_index", blocking=True),
        dg.AssetCheckSpec(FRESHNESS_CHECK, asset="search_index"),
    ],
    **_common,
)
def search_index(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
):
    """The served DuckDB rows of the source, replaced in one transaction, then proven: coverage,
    deletions propagated, freshness."""
    config = settings.load()
    source = config.source(context.partition_key)
    db, model = store.get(), embedder.get()
    report = ingestion.index_source(source, db, model, context.run.run_id)
    yield dg.MaterializeResult(metadata={"manifest_hash": db.manifest_hash(source.source_id), **stage_metadata(report)})
    coverage = coverage_report(db, source.source_id)
    yield dg.AssetCheckResult(
        check_name=COVERAGE_CHECK,
        passed=coverage.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            "every supported document is queryable or has a recorded failure"
            if coverage.passed
            else f"{len(coverage.uncovered)} document(s) neither queryable nor failed with a reason: "
            + ", ".join(coverage.uncovered[:5])
        ),
        metadata=coverage_metadata(coverage),
    )
    deletions = deletion_report(db, source.source_id, model, context.run.run_id)
    yield dg.AssetCheckResult(
        check_name=DELETIONS_CHECK,
        passed=deletions.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            f"{len(deletions.checked)} deleted document(s) fully gone and not retrievable"
            if deletions.passed
            else "; ".join(f"{p['doc_id']}: {p['problem']}" for p in deletions.problems()[:5])
        ),
        metadata=deletion_metadata(deletions),
    )
    freshness = freshness_report(db, source, config.lifecycle.max_staleness_hours)
    yield dg.AssetCheckResult(
        check_name=FRESHNESS_CHECK,
        passed=freshness.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            f"{len(freshness.stale)} unindexed change(s), oldest {freshness.oldest_stale_hours:.1f} h "
            f"(limit {freshness.max_staleness_hours:g} h)"
            + ("" if freshness.passed else ": " + ", ".join(s["doc_id"] for s in freshness.stale[:5]))
        ),
        metadata=freshness_metadata(freshness),
    )


ingestion_assets = [source_documents, parsed_documents, document_chunks, chunk_embeddings, search_index]
