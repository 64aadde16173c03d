"""Ingestion assets, one partition per source: discover, parse, chunk, embed, then the verified switch."""

from collections.abc import Iterator
from typing import NoReturn

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.ingestion import stages, switch
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.inputs import chunking_fingerprint, settings_fingerprint
from rag_pipeline.core.ingestion.lifecycle import freshness_report
from rag_pipeline.core.ingestion.parsing import parser_version
from rag_pipeline.core.ingestion.reports import IndexReport, StageReport
from rag_pipeline.core.ingestion.source_runs import failure_recorded
from rag_pipeline.core.outcomes import Status, StepOutcome
from rag_pipeline.core.retrieval.lexical import analyzer_identity
from rag_pipeline.core.storage import Store
from rag_pipeline.core.verdicts import Verdict
from rag_pipeline.defs import checks
from rag_pipeline.defs.common import (
    FAILED_DOCUMENTS_TAG,
    OWNERS,
    REVISION_TAG,
    STORE_POOL,
    TRIGGER_TAG,
    tag_failure,
    tag_trigger,
)
from rag_pipeline.defs.failures import explained
from rag_pipeline.defs.metadata import outcome, stage_metadata, table
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource

_common = dict(partitions_def=source_partitions, group_name="ingestion", owners=OWNERS)


class DiscoveryConfig(dg.Config):
    """Run-time switch for a deliberate mass deletion (the fail-safe refuses it otherwise)."""

    allow_mass_delete: bool = False


def _materialized(context: dg.AssetExecutionContext, report: StageReport, **metadata) -> dg.MaterializeResult:
    """The stage's counts as metadata, and one warning line per document that failed it in this run."""
    for failure in report.failures:
        context.log.warning(
            f"document failed at {failure.stage}: {render.printable(failure.doc_id)}: {render.plain_text(failure.reason)}"
        )
    return dg.MaterializeResult(metadata={**metadata, **stage_metadata(report), **outcome()})


def _served_state(db: Store, source_id: str, root: object = None) -> dict[str, dg.MetadataValue]:
    """What a failed run leaves served for the source, for its failure's metadata."""
    last = db.ledger.last_success(source_id)
    state = {"still_served_documents": dg.MetadataValue.int(len(db.served.indexed_documents(source_id))),
             "last_committed_switch": dg.MetadataValue.text(last.isoformat(timespec="seconds") if last else "never")}
    if root is not None:
        state["root"] = dg.MetadataValue.path(str(root))
    return state


@dg.asset(kinds={"python", "duckdb"}, **_common)
def source_documents(
    context: dg.AssetExecutionContext, config: DiscoveryConfig, settings: PipelineSettings, store: StoreResource,
    embedder: EmbedderResource,
) -> dg.MaterializeResult:
    """Every file of the source with its hash and metadata (links resolved inside the root only),
    diffed against the manifest the served index was built from."""
    tag_trigger(context)
    db = store.get()
    with (explained(context, lambda: _served_state(db, context.partition_key, settings.load().source(context.partition_key).path)),
          failure_recorded(db, context.partition_key, context.run.run_id)):
        pipeline = settings.load()
        source = pipeline.source(context.partition_key)
        lifecycle = pipeline.lifecycle.model_copy(update={"allow_mass_delete": True}) if config.allow_mass_delete \
            else pipeline.lifecycle
        report = stages.discover_source(source, db, lifecycle, context.run.run_id,
                                        settings_fingerprint(pipeline.chunking, embedder.get().identity),
                                        progress=context.log.info)
    where = {"root": dg.MetadataValue.path(str(source.path))} if source.is_folder else \
        {"location": dg.MetadataValue.text(source.location)}
    if report.revision:
        where["revision"] = dg.MetadataValue.text(report.revision)
        # On the run too, so that the runs list shows (and filters by) the commit each run served.
        context.instance.add_run_tags(context.run.run_id, {REVISION_TAG: report.revision})
    return _materialized(context, report, **where)


@dg.asset(deps=[source_documents], kinds={"unstructured", "duckdb"}, **_common)
def parsed_documents(
    context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource
) -> dg.MaterializeResult:
    """unstructured elements of the added and changed documents, parsed in a worker process under the
    source's limits; failures recorded per document with the parser's reason."""
    with (explained(context, lambda: _served_state(store.get(), context.partition_key)),
          failure_recorded(store.get(), context.partition_key, context.run.run_id)):
        source = settings.load().source(context.partition_key)
        report = stages.parse_source(source, store.get(), context.run.run_id, progress=context.log.info)
    return _materialized(context, report, parser=parser_version())


@dg.asset(deps=[parsed_documents], kinds={"python", "duckdb"}, **_common)
def document_chunks(context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource) -> dg.MaterializeResult:
    """Chunks of the configured strategy, with their BM25 postings, for documents whose content,
    chunking or lexical analyzer changed."""
    with (explained(context, lambda: _served_state(store.get(), context.partition_key)),
          failure_recorded(store.get(), context.partition_key, context.run.run_id)):
        config = settings.load()
        source = config.source(context.partition_key)
        report = stages.chunk_source(source, store.get(), config.chunking, context.run.run_id, progress=context.log.info)
    chunking = source.effective_chunking(config.chunking)
    return _materialized(context, report, strategy=chunking.strategy, chunking_fingerprint=chunking_fingerprint(chunking),
                         analyzer=analyzer_identity())


@dg.asset(deps=[document_chunks], kinds={"pytorch", "duckdb"}, **_common)
def chunk_embeddings(context: dg.AssetExecutionContext, store: StoreResource, embedder: EmbedderResource) -> dg.MaterializeResult:
    """Vectors of new chunk texts, through the cache keyed by model identity and text hash."""
    model = embedder.get()
    with (explained(context, lambda: _served_state(store.get(), context.partition_key)),
          failure_recorded(store.get(), context.partition_key, context.run.run_id)):
        report = stages.embed_source(context.partition_key, store.get(), model, context.run.run_id,
                                     progress=context.log.info)
    return _materialized(context, report, model=model.identity)


class IndexConfig(dg.Config):
    """Run-time switch for a full proof of the source (`rag-pipeline ingest --force` sets it)."""

    full_proof: bool = False


def _full_proof_asked(context: dg.AssetExecutionContext, config: IndexConfig) -> str | None:
    """Why this run must prove the whole source, if it was asked to: its config, or the nightly schedule."""
    if config.full_proof:
        return "asked for by the run (full_proof: true; rag-pipeline ingest --force sets it)"
    if context.run.tags.get(TRIGGER_TAG) == "schedule":
        return "the nightly schedule's run"
    return None


@dg.asset(
    deps=[chunk_embeddings], check_specs=checks.specs("search_index", source_partitions), kinds={"duckdb"},
    pool=STORE_POOL, **_common,
)
def search_index(context: dg.AssetExecutionContext, config: IndexConfig, settings: PipelineSettings, store: StoreResource,
                 embedder: EmbedderResource):
    """The served rows of the source, switched in one transaction only when coverage and deletion
    propagation are proven on the new version; otherwise the previous version stays served. The
    proofs cover what the run changed, or the whole source when a full proof is due or asked for
    (each check's `proof` and `proof_reason` say which)."""
    db = store.get()
    with (explained(context, lambda: _served_state(db, context.partition_key)),
          failure_recorded(db, context.partition_key, context.run.run_id)):
        pipeline = settings.load()
        source = pipeline.source(context.partition_key)
        model = embedder.get()
        report = switch.index_source(source, db, model, context.run.run_id, pipeline.lifecycle,
                                     settings_fingerprint(pipeline.chunking, model.identity), progress=context.log.info,
                                     full_proof=_full_proof_asked(context, config))
        if report.pinned:
            yield from _left_alone(context, db, source.source_id, report)
            return
        # All four are evaluated whether the switch committed or not: a refused switch leaves the
        # previous version served, and freshness and failed documents say what that means.
        proofs = [checks.result("coverage", report.proof.stated(report.coverage.verdict())),
                  checks.result("deletions_propagated", report.proof.stated(report.deletions.verdict())),
                  checks.result("sources_fresh", freshness_report(db, source, pipeline.lifecycle.max_staleness_hours).verdict()),
                  checks.result("no_failed_documents", report.coverage.failed_documents_verdict(context.run.run_id)),
                  checks.result("served_as_configured", Verdict(True, "served from the source's files, as configured"))]
    failed = len(report.coverage.failed)
    if failed:
        # The runs list shows tags: a green run with failed documents is visible there, not only in its log.
        context.instance.add_run_tags(context.run.run_id, {FAILED_DOCUMENTS_TAG: str(failed)})
    if not report.switched:
        yield from proofs
        refusal = f"switch refused, the previous version of {source.source_id!r} stays served: {render.plain_text(report.refusal)}"
        tag_failure(context, refusal)
        raise dg.Failure(
            description=refusal,
            metadata={**_served_state(db, source.source_id), **outcome(StepOutcome(Status.REFUSED, refusal))},
            allow_retries=False,
        )
    failures = {"failed_documents": table(report.coverage.failed, ["doc_id", "stage", "reason", "since"])} if failed else {}
    # What the source serves now, and the settings its chunks and vectors were built with: the
    # evaluation sensor compares them with what the last evaluation measured (defs/night_state.py).
    served = {"manifest_hash": dg.MetadataValue.text(report.manifest_hash or db.served.manifest_hash(source.source_id)),
              "index_settings": dg.MetadataValue.text(settings_fingerprint(pipeline.chunking, model.identity)),
              "index_state": dg.MetadataValue.text(report.state or ""),
              "proof": dg.MetadataValue.text(report.proof.name),
              "proof_reason": dg.MetadataValue.text(render.plain_text(report.proof.reason))}
    if failed and pipeline.lifecycle.failed_documents_fail_partition:
        yield from proofs
        _fail_partition(context, source.source_id, report, {**served, **failures})
    yield _materialized(context, report, **served, **failures)
    yield from proofs


def _fail_partition(context: dg.AssetExecutionContext, source_id: str, report: IndexReport, metadata: dict) -> NoReturn:
    """lifecycle.failed_documents_fail_partition: the switch committed, and the partition is marked
    failed (a step failure with no materialization is what Dagster counts as a failed partition), so
    that the UI's "Failed" selection and a backfill's re-execution retry it. An observation records
    what is served, as a materialization would."""
    failed = len(report.coverage.failed)
    reason = (f"{failed} document(s) of {source_id!r} failed (failed_documents below); the switch committed: every "
              "other document is served, and the failed ones keep their last good version. The partition is marked "
              "failed by lifecycle.failed_documents_fail_partition, so that a retry of failed partitions runs it again")
    context.log_event(dg.AssetObservation(asset_key=context.asset_key, partition=context.partition_key,
                                          description=reason, metadata=metadata))
    tag_failure(context, reason)
    raise dg.Failure(description=reason, allow_retries=False, metadata={
        **metadata, **stage_metadata(report), **outcome(StepOutcome(Status.INCOMPLETE, reason, "documents"))})


def _left_alone(context: dg.AssetExecutionContext, db: Store, source_id: str, report) -> Iterator:
    """A pinned or disabled source: its served rows are those of the state it was given, proven when
    that state was first served; the run says so and changes nothing."""
    context.log.warning(render.printable(report.pinned))
    pin = db.states.pinned(source_id)
    not_again = Verdict(True, f"not proven again: {report.pinned}; its served documents were proven when that state was "
                              "first served")
    yield dg.MaterializeResult(metadata={"pinned": dg.MetadataValue.text(report.pinned),
                                         "index_state": dg.MetadataValue.text(pin.state_id if pin else ""),
                                         "manifest_hash": db.served.manifest_hash(source_id), **outcome()})
    coverage = coverage_report(db, source_id)
    yield from [checks.result("coverage", not_again), checks.result("deletions_propagated", not_again),
                checks.result("sources_fresh", not_again),
                checks.result("no_failed_documents", coverage.failed_documents_verdict(context.run.run_id)),
                checks.result("served_as_configured", Verdict(False, report.pinned))]


ingestion_assets = [source_documents, parsed_documents, document_chunks, chunk_embeddings, search_index]
