"""Ingestion assets, one partition per source: discover, parse, chunk, embed, index."""


import dagster as dg

from rag_pipeline.core import ingestion, render
from rag_pipeline.core.coverage import CoverageReport
from rag_pipeline.core.lifecycle import (
    DeletionReport,
    FreshnessReport,
    freshness_report,
)
from rag_pipeline.core.parsing import parser_version
from rag_pipeline.defs.metadata import (
    coverage_metadata,
    deletion_metadata,
    freshness_metadata,
    md_table,
    stage_metadata,
)
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import (
    EmbedderResource,
    PipelineSettings,
    StoreResource,
)
from rag_pipeline.defs.runs import close_abandoned_runs

# Every step that touches the DuckDB file is in one pool: DuckDB allows a single writing process.
DUCKDB_POOL = "duckdb"
COVERAGE_CHECK = "coverage"
DELETIONS_CHECK = "deletions_propagated"
FRESHNESS_CHECK = "sources_fresh"
FAILED_DOCUMENTS_CHECK = "no_failed_documents"

_common = dict(partitions_def=source_partitions, group_name="ingestion", pool=DUCKDB_POOL, kinds={"duckdb"})


class DiscoveryConfig(dg.Config):
    """Run-time switch for a deliberate mass deletion (the fail-safe refuses it otherwise)."""

    allow_mass_delete: bool = False


@dg.asset(**_common)
def source_documents(
    context: dg.AssetExecutionContext, config: DiscoveryConfig, settings: PipelineSettings, store: StoreResource
) -> dg.MaterializeResult:
    """Files of the source with hashes and metadata, diffed against the manifest the index was built from."""
    for run_id in close_abandoned_runs(context.instance, context.partition_key, context.run.run_id):
        context.log.warning(f"closed run {run_id} of this source, left STARTED by a process that died")
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
        dg.AssetCheckSpec(FAILED_DOCUMENTS_CHECK, asset="search_index"),
    ],
    **_common,
)
def search_index(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
):
    """The served rows of the source: switched in one transaction only when coverage and deletion
    propagation are proven on the new version; otherwise the previous version stays served."""
    config = settings.load()
    source = config.source(context.partition_key)
    db = store.get()
    report = ingestion.index_source(source, db, embedder.get(), context.run.run_id)
    coverage_result, deletions_result = coverage_check(report.coverage), deletions_check(report.deletions)
    if not report.switched:
        yield coverage_result
        yield deletions_result
        raise dg.Failure(
            description=f"switch refused, the previous version of {source.source_id!r} stays served: {report.refusal}",
            metadata={**coverage_metadata(report.coverage), **deletion_metadata(report.deletions)},
        )
    yield dg.MaterializeResult(metadata={"manifest_hash": db.manifest_hash(source.source_id), **stage_metadata(report)})
    yield coverage_result
    yield deletions_result
    yield freshness_check(freshness_report(db, source, config.lifecycle.max_staleness_hours))
    yield failed_documents_check(report.coverage, context.run.run_id, context.log)


def coverage_check(coverage: CoverageReport) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=COVERAGE_CHECK,
        passed=coverage.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            "every supported document is queryable or has a recorded failure"
            if coverage.passed
            else f"{len(coverage.uncovered)} document(s) neither queryable nor failed with a reason: "
            + ", ".join(render.printable(d) for d in coverage.uncovered[:5])
        ),
        metadata=coverage_metadata(coverage),
    )


def deletions_check(deletions: DeletionReport) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=DELETIONS_CHECK,
        passed=deletions.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            f"{len(deletions.checked)} deleted document(s) fully gone and not retrievable"
            if deletions.passed
            else "; ".join(f"{render.printable(p['doc_id'])}: {p['problem']}" for p in deletions.problems()[:5])
        ),
        metadata=deletion_metadata(deletions),
    )


def freshness_check(freshness: FreshnessReport) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=FRESHNESS_CHECK,
        passed=freshness.passed,
        severity=dg.AssetCheckSeverity.ERROR,
        description=(
            f"{len(freshness.stale)} unindexed change(s), oldest {freshness.oldest_stale_hours:.1f} h "
            f"(limit {freshness.max_staleness_hours:g} h)"
            + ("" if freshness.passed else ": " + ", ".join(render.printable(s["doc_id"]) for s in freshness.stale[:5]))
        ),
        metadata=freshness_metadata(freshness),
    )


def failed_documents_check(coverage: CoverageReport, run_id: str, log) -> dg.AssetCheckResult:
    """WARN: the documents whose current version failed a stage, each also logged as a warning."""
    new = [f for f in coverage.failed if f.get("run_id") == run_id]
    for failure in coverage.failed:
        log.warning(f"document failed at {failure['stage']}: {render.printable(failure['doc_id'])}: "
                    f"{render.printable(failure['reason'])}")
    return dg.AssetCheckResult(
        check_name=FAILED_DOCUMENTS_CHECK,
        passed=not coverage.failed,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            "no document failed" if not coverage.failed
            else f"{len(coverage.failed)} document(s) failed ({len(new)} in this run): "
            + "; ".join(f"{render.printable(f['doc_id'])} at {f['stage']}" for f in coverage.failed[:5])
        ),
        metadata={
            "failed_documents": dg.MetadataValue.int(len(coverage.failed)),
            "failed_in_this_run": dg.MetadataValue.int(len(new)),
            "failures": md_table(coverage.failed, ["doc_id", "stage", "reason", "since"]),
        },
    )


ingestion_assets = [source_documents, parsed_documents, document_chunks, chunk_embeddings, search_index]
