"""The one Definitions object of the code location, built from the pipeline config when loaded."""

from __future__ import annotations

import os
from datetime import timedelta

import dagster as dg

from rag_pipeline.config import ConfigError, PipelineConfig, load_config
from rag_pipeline.defs.automation import automation_for, automation_jobs
from rag_pipeline.defs.evaluation import evaluation_assets
from rag_pipeline.defs.ingestion import ingestion_assets, search_index
from rag_pipeline.defs.monitoring import monitoring_assets
from rag_pipeline.defs.partitions import daily_partitions
from rag_pipeline.defs.resources import EmbedderResource, resources_for
from rag_pipeline.defs.undo import undo_jobs

EXECUTOR_ENV_VAR = "RAG_PIPELINE_EXECUTOR"


def assets_for(config: PipelineConfig) -> list[dg.AssetsDefinition]:
    """Every asset, with what depends on the deployment: the day partitions (from the query log's
    first day), search_index's freshness policy (lifecycle.max_staleness_hours), the store's kind."""
    fail_window = timedelta(hours=config.lifecycle.max_staleness_hours)

    def deployment(spec: dg.AssetSpec) -> dg.AssetSpec:
        # The UI names the engine the asset lives in.
        if "duckdb" in spec.kinds and config.storage.backend != "duckdb":
            spec = spec.replace_attributes(kinds=(spec.kinds - {"duckdb"}) | {config.storage.backend})
        # The policy is Dagster's own, per asset: some source indexed within the window. The
        # `sources_fresh` check is the per-source, content-based proof (what is served is what the
        # source holds); the policy makes a stalled nightly suite visible even when no run fails.
        if spec.key != search_index.key:
            return spec
        return spec.replace_attributes(freshness_policy=dg.FreshnessPolicy.time_window(fail_window=fail_window))

    assets = [*ingestion_assets, *evaluation_assets, *monitoring_assets(daily_partitions(config.monitoring))]
    return dg.with_source_code_references(dg.map_asset_specs(deployment, assets))


def build_definitions(
    config: PipelineConfig, embedder: EmbedderResource | None = None, overrides: dict[str, str] | None = None
) -> dg.Definitions:
    """Definitions wired to one config (and the command line's `--source` overrides); tests pass a
    fast embedder, production the configured one."""
    schedules, sensors = automation_for(config.automation)
    return dg.Definitions(
        assets=assets_for(config),
        jobs=[*automation_jobs, *undo_jobs],
        sensors=sensors,
        schedules=schedules,
        resources=resources_for(config, embedder, overrides),
        executor=executor_for(config),
    )


def executor_for(config: PipelineConfig) -> dg.ExecutorDefinition:
    """Where a run's steps execute. DuckDB: in the run's process (one writer per file; the model
    and the parser load once per run). PostgreSQL: a process per step, so that steps of parallel
    runs and of one run share nothing but the database. RAG_PIPELINE_EXECUTOR overrides the
    choice: `k8s` (set by deploy/helm/values.yaml) runs a pod per step with dagster-k8s's
    executor; `celery` sends each step to Celery workers (deploy/celery/); `multiprocess` and
    `in_process` name Dagster's own."""
    chosen = os.environ.get(EXECUTOR_ENV_VAR) or ("multiprocess" if config.storage.parallel_writers else "in_process")
    if chosen == "k8s":
        import dagster_k8s  # in the deployment image only (the `k8s` extra)

        return dagster_k8s.k8s_job_executor
    if chosen == "celery":
        if not config.storage.parallel_writers:
            raise ConfigError(f"{EXECUTOR_ENV_VAR}=celery needs storage.backend: postgres (a DuckDB file has one writer)")
        from rag_pipeline.defs.celery_executor import celery_executor

        return celery_executor(os.environ)
    executors = {"multiprocess": dg.multiprocess_executor, "in_process": dg.in_process_executor}
    if chosen not in executors:
        raise ConfigError(f"{EXECUTOR_ENV_VAR}={chosen!r}: use k8s, celery, multiprocess or in_process")
    if chosen == "multiprocess" and not config.storage.parallel_writers:
        raise ConfigError(f"{EXECUTOR_ENV_VAR}=multiprocess needs storage.backend: postgres (a DuckDB file has one writer)")
    return executors[chosen]


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions(load_config())
