"""Ingestion assets, one partition per source: discover, parse, chunk, embed, then the verified switch."""

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.ingestion import stages
from rag_pipeline.core.ingestion.inputs import settings_fingerprint
from rag_pipeline.core.ingestion.lifecycle import freshness_report
from rag_pipeline.core.ingestion.parsing import parser_version
from rag_pipeline.defs import checks
from rag_pipeline.defs.common import OWNERS, STORE_POOL
from rag_pipeline.defs.metadata import stage_metadata
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource
from rag_pipeline.defs.runs import close_abandoned_runs, free_slots_of_dead_runs

_common = dict(partitions_def=source_partitions, group_name="ingestion", owners=OWNERS)


class DiscoveryConfig(dg.Config):
    """Run-time switch for a deliberate mass deletion (the fail-safe refuses it otherwise)."""

    allow_mass_delete: bool = False


def _materialized(context: dg.AssetExecutionContext, report: stages.StageReport, **metadata) -> dg.MaterializeResult:
    """The stage's counts as metadata, and one warning line per document that failed it in this run."""
    for failure in report.failures:
        context.log.warning(
            f"document failed at {failure.stage}: {render.printable(failure.doc_id)}: {render.printable(failure.reason)}"
        )
    return dg.MaterializeResult(metadata={**metadata, **stage_metadata(report)})


@dg.asset(kinds={"python", "duckdb"}, **_common)
def source_documents(
    context: dg.AssetExecutionContext, config: DiscoveryConfig, settings: PipelineSettings, store: StoreResource,
    embedder: EmbedderResource,
) -> dg.MaterializeResult:
    """Every file of the source with its hash and metadata (links resolved inside the root only),
    diffed against the manifest the served index was built from."""
    for run_id in close_abandoned_runs(context.instance, context.partition_key, context.run.run_id):
        context.log.warning(f"closed run {run_id} of this source, left STARTED by a process that died")
    for run_id in free_slots_of_dead_runs(context.instance, context.run.run_id):
        context.log.warning(f"freed the pool slot of run {run_id}, whose process died or which ended without freeing it")
    pipeline = settings.load()
    source = pipeline.source(context.partition_key)
    lifecycle = pipeline.lifecycle.model_copy(update={"allow_mass_delete": True}) if config.allow_mass_delete \
        else pipeline.lifecycle
    report = stages.discover_source(source, store.get(), lifecycle, context.run.run_id,
                                    settings_fingerprint(pipeline.chunking, embedder.get().identity))
    return _materialized(context, report, root=dg.MetadataValue.path(str(source.path)))


@dg.asset(deps=[source_documents], kinds={"unstructured", "duckdb"}, **_common)
def parsed_documents(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource
) -> dg.MaterializeResult:
    """unstructured elements of the added and changed documents, parsed in a worker process under the
    source's limits; failures recorded per document with the parser's reason."""
    source = settings.load().source(context.partition_key)
    report = stages.parse_source(source, store.get(), context.run.run_id, embedder=embedder.get(), progress=context.log.info)
    return _materialized(context, report, parser=parser_version())


@dg.asset(deps=[parsed_documents], kinds={"python", "duckdb"}, **_common)
def document_chunks(context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource) -> dg.MaterializeResult:
    """Chunks of the configured strategy for documents whose content or chunking changed."""
    config = settings.load()
    source = config.source(context.partition_key)
    report = stages.chunk_source(source, store.get(), config.chunking, context.run.run_id, progress=context.log.info)
    chunking = source.effective_chunking(config.chunking)
    return _materialized(context, report, strategy=chunking.strategy, chunking_fingerprint=chunking.fingerprint())


@dg.asset(deps=[document_chunks], kinds={"pytorch", "duckdb"}, **_common)
def chunk_embeddings(context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource) -> dg.MaterializeResult:
    """Vectors of new chunk texts, through the cache keyed by model identity and text hash."""
    model = embedder.get()
    report = stages.embed_source(context.partition_key, store.get(), model, context.run.run_id, progress=context.log.info)
    return _materialized(context, report, model=model.identity)


@dg.asset(
    deps=[chunk_embeddings], check_specs=checks.specs("search_index", source_partitions), kinds={"duckdb"},
    pool=STORE_POOL, **_common,
)
def search_index(context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource, embedder: EmbedderResource):
    """The served rows of the source, switched in one transaction only when coverage and deletion
    propagation are proven on the new version; otherwise the previous version stays served."""
    config = settings.load()
    source, db = config.source(context.partition_key), store.get()
    report = stages.index_source(source, db, embedder.get(), context.run.run_id)
    proofs = [checks.result("coverage", report.coverage.verdict()),
              checks.result("deletions_propagated", report.deletions.verdict())]
    if not report.switched:
        yield from proofs
        raise dg.Failure(description=f"switch refused, the previous version of {source.source_id!r} stays served: "
                                     f"{render.printable(report.refusal)}")
    yield _materialized(context, report, manifest_hash=db.served.manifest_hash(source.source_id))
    yield from proofs
    yield checks.result("sources_fresh", freshness_report(db, source, config.lifecycle.max_staleness_hours).verdict())
    yield checks.result("no_failed_documents", report.coverage.failed_documents_verdict(context.run.run_id))


ingestion_assets = [source_documents, parsed_documents, document_chunks, chunk_embeddings, search_index]
