"""The night as the evaluation and monitoring sensors see it: what the Dagster instance records of
ingestion and evaluation, read through its public API into core's `NightFacts`
(`core/evaluation/due.py` decides from them).

- **What each source serves**: the manifest hash (and index settings) on the latest materialization
  of its `search_index` partition, or on the observation a switch records when
  `lifecycle.failed_documents_fail_partition` marks the partition failed.
- **Its latest attempt**: Dagster's own status of the partition (materialized, failed, in progress,
  or none: never attempted).
- **Ingestion in flight**, whatever launched it: runs queued or running of `ingest_sources`, of any
  job or asset selection that includes an ingestion asset (`__ASSET_JOB` of a UI backfill), of
  the command line (its `rag_pipeline/source` tag), or of a configured source's partition; a purge;
  and backfills of the ingestion assets still requesting runs.
- **What was evaluated**: the latest full-suite evaluation of this index (`golden_eval`'s metadata).
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from rag_pipeline.config import PipelineConfig
from rag_pipeline.core.evaluation.due import FAILED, IN_PROGRESS, MATERIALIZED, NEVER, EvaluatedState, NightFacts, SourceState
from rag_pipeline.core.evaluation.golden.cases import file_revision
from rag_pipeline.core.ingestion.inputs import settings_fingerprint
from rag_pipeline.defs.common import (
    EVALUATE_JOB,
    IN_FLIGHT,
    INGEST_JOB,
    MONITOR_JOB,
    PARTITION_TAG,
    PURGE_JOB,
    SOURCE_TAG,
)
from rag_pipeline.defs.partitions import source_partitions
from rag_pipeline.defs.resources import embedder_for

INGESTION_ASSETS = frozenset(dg.AssetKey(name) for name in (
    "source_documents", "parsed_documents", "document_chunks", "chunk_embeddings", "search_index"))
SEARCH_INDEX = dg.AssetKey("search_index")
GOLDEN_EVAL = dg.AssetKey("golden_eval")
# Backfills looked at, newest first: one still requesting runs is among the latest.
RECENT_BACKFILLS = 50
# Evaluations looked back over for the latest full-suite one of this index (pull-request subsets between).
RECENT_EVALUATIONS = 20
_ATTEMPTS = {dg.AssetPartitionStatus.MATERIALIZED: MATERIALIZED, dg.AssetPartitionStatus.FAILED: FAILED,
             dg.AssetPartitionStatus.IN_PROGRESS: IN_PROGRESS}


def night_facts(instance: dg.DagsterInstance, config: PipelineConfig,
                requested: EvaluatedState | None = None) -> NightFacts:
    """Everything `decide` needs, for the configured golden set, sources and settings. `requested`:
    the state the sensor last asked to evaluate (its cursor)."""
    source_ids = config.source_ids
    attempts = _attempts(instance, source_ids)
    sources = [_source_state(instance, source_id, attempts.get(source_id, NEVER)) for source_id in source_ids]
    in_flight = [f"{s} in progress" for s, attempt in attempts.items() if attempt == IN_PROGRESS]
    in_flight += ingestion_in_flight(instance, source_ids)
    evaluated = [state for state in (latest_evaluated(instance), requested) if state is not None]
    return NightFacts(
        revision=file_revision(config.golden_set), config=config.retrieval_fingerprint(), mode=config.retrieval.mode,
        settings=settings_fingerprint(config.chunking, embedder_for(config.embedding).identity),
        sources=sources, ingestion_in_flight=list(dict.fromkeys(in_flight)),
        evaluations_in_flight=evaluations_in_flight(instance), evaluated=evaluated,
    )


def _attempts(instance: dg.DagsterInstance, source_ids: Sequence[str]) -> dict[str, str]:
    """Each source partition's latest attempt at `search_index`, as Dagster's partition status says."""
    if not source_ids:
        return {}
    statuses = instance.get_status_by_partition(SEARCH_INDEX, list(source_ids), source_partitions) or {}
    return {source_id: _ATTEMPTS.get(statuses.get(source_id), NEVER) for source_id in source_ids}


def _source_state(instance: dg.DagsterInstance, source_id: str, attempt: str) -> SourceState:
    """What the source's latest recorded switch serves: the newest materialization of its partition,
    or a newer observation carrying a manifest hash (a switch whose partition was marked failed)."""
    scope = dg.AssetRecordsFilter(asset_key=SEARCH_INDEX, asset_partitions=[source_id])
    records = list(instance.fetch_materializations(scope, limit=1).records)
    records += [r for r in instance.fetch_observations(scope, limit=10).records
                if "manifest_hash" in r.asset_observation.metadata][:1]
    if not records:
        return SourceState(source_id, attempt)
    latest = max(records, key=lambda r: r.storage_id)
    metadata = latest.asset_event.metadata
    settings = metadata.get("index_settings")
    return SourceState(source_id, MATERIALIZED if attempt == NEVER else attempt, str(metadata["manifest_hash"].value),
                       str(settings.value) if settings is not None else None)


def _ingests(run: dg.DagsterRun, source_ids: Sequence[str]) -> bool:
    """Whether a run can change what a source serves."""
    if run.job_name in (INGEST_JOB, PURGE_JOB) or SOURCE_TAG in run.tags:
        return True
    if run.asset_selection and run.asset_selection & INGESTION_ASSETS:
        return True
    return run.tags.get(PARTITION_TAG) in source_ids and run.job_name not in (EVALUATE_JOB, MONITOR_JOB)


def ingestion_in_flight(instance: dg.DagsterInstance, source_ids: Sequence[str]) -> list[str]:
    """Ingestion runs queued or running and ingestion backfills still requesting runs, in a few words each."""
    found = [f"run {run.run_id[:8]} of {run.job_name}"
             + (f" for {run.tags[PARTITION_TAG]}" if PARTITION_TAG in run.tags else "")
             for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)) if _ingests(run, source_ids)]
    for backfill in instance.get_backfills(limit=RECENT_BACKFILLS):
        if backfill.status.value != "REQUESTED":
            continue
        assets = set(backfill.asset_selection or ())
        if assets & INGESTION_ASSETS or backfill.job_name == INGEST_JOB \
                or set(backfill.partition_names or ()) & set(source_ids):
            found.append(f"backfill {backfill.backfill_id} still requesting runs")
    return found


def evaluations_in_flight(instance: dg.DagsterInstance) -> list[str]:
    """Evaluation runs queued or running (of the job, or of any selection with `golden_eval`)."""
    return [f"run {run.run_id[:8]} of {run.job_name}"
            for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT))
            if run.job_name == EVALUATE_JOB or (run.asset_selection and GOLDEN_EVAL in run.asset_selection)]


def latest_evaluated(instance: dg.DagsterInstance) -> EvaluatedState | None:
    """What the latest full-suite evaluation of this index measured (pull-request subsets and other
    systems' run files measure something else), read from its `golden_eval` materialization."""
    for record in instance.fetch_materializations(GOLDEN_EVAL, limit=RECENT_EVALUATIONS).records:
        materialization = record.asset_materialization
        metadata = materialization.metadata
        if not {"config_fingerprint", "mode", "index_state"} <= set(metadata) or materialization.partition is None:
            continue
        suite = str(metadata["suite"].value).split(" ")[0] if "suite" in metadata else "full"
        mode = str(metadata["mode"].value)
        if suite != "full" or mode == "run":
            continue
        index = metadata["index_state"].value
        return EvaluatedState(materialization.partition, str(metadata["config_fingerprint"].value), mode,
                              {str(k): str(v) for k, v in (index if isinstance(index, dict) else {}).items()})
    return None
