"""Running the pipeline in process, for the command line and the demo (same assets as the UI)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field

import dagster as dg

from rag_pipeline.config import ConfigError, PipelineConfig
from rag_pipeline.core.evaluation.golden.cases import file_revision
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.inputs import settings_fingerprint
from rag_pipeline.core.ingestion.source_runs import SourceRun, skipped_files, unchanged_run
from rag_pipeline.core.outcomes import RunResult, Status
from rag_pipeline.core.storage import SourceBusyError, open_store
from rag_pipeline.definitions import build_definitions
from rag_pipeline.defs.automation import golden_eval_job, ingest_sources_job, monitoring_job
from rag_pipeline.defs.common import DAY_TAG, GOLDEN_TAG, IN_FLIGHT, SOURCE_TAG, TRIGGER_TAG
from rag_pipeline.defs.partitions import golden_partitions, source_partitions
from rag_pipeline.defs.resources import EmbedderResource, embedder_for
from rag_pipeline.defs.run_results import run_result
from rag_pipeline.defs.runs import close_dead_runs, process_tags

# The command line prints each run's outcome and reason itself, so Dagster's console logger stays
# quiet; a bug's stack trace comes with the run's result and is printed to stderr (`_executed`).
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
CLI_TAGS = {TRIGGER_TAG: "cli"}
# A forced run proves the whole source (core/ingestion/proof_scope.py).
FULL_PROOF = {"ops": {"search_index": {"config": {"full_proof": True}}}}


def ingest(
    config: PipelineConfig,
    instance: dg.DagsterInstance,
    source_ids: list[str] | None = None,
    embedder: EmbedderResource | None = None,
    overrides: dict[str, str] | None = None,
    force: bool = False,
    walks: dict | None = None,
) -> list[SourceRun]:
    """Materialize the ingestion assets for each source partition; one failing source does not stop the others.

    A source whose inputs have not changed since its last committed switch (`inputs.py`) is not
    run, unless `force` (a forced run's switch proves the whole source). `config` must already include the `overrides` (`name -> path`), which
    are passed on to the assets. `walks`: each source's walk, when the caller made them just now
    (listing a web site again is a request per page).
    """
    source_ids = source_ids or config.source_ids
    # A run of these sources left STARTED by a process that died would read as in flight for ever.
    close_dead_runs(instance, source_ids)
    existing = set(instance.get_dynamic_partitions(source_partitions.name))
    new = [s for s in source_ids if s not in existing]
    if new:
        instance.add_dynamic_partitions(source_partitions.name, new)
    store = open_store(config.storage)
    settings = settings_fingerprint(config.chunking, (embedder.get() if embedder else embedder_for(config.embedding)).identity)
    runs, job = [], None
    for source_id in source_ids:
        try:
            # Another process ingesting the same source would overwrite this run's staging. Held
            # for the decision too: its release then tells the next command that no run of the
            # source is left open (`Database.run_left_open`).
            with store.source_lock(source_id):
                unchanged = None if force else unchanged_run(config.source(source_id), store, settings,
                                                             (walks or {}).get(source_id),
                                                             open_elsewhere=lambda s: _run_in_flight(instance, s))
                if unchanged is not None:
                    runs.append(unchanged)
                    continue
                job = job or _job(config, ingest_sources_job.name, embedder, overrides)
                result = job.execute_in_process(
                    instance=instance, partition_key=source_id, raise_on_error=False,
                    run_config=FULL_PROOF | QUIET_LOGS if force else QUIET_LOGS,
                    tags={**CLI_TAGS, SOURCE_TAG: source_id, **process_tags()},
                )
        except SourceBusyError as busy:
            runs.append(SourceRun(source_id, False, error=str(busy)))
            continue
        run = _executed(result)
        # What this run's discovery skipped; a discovery that failed staged nothing (the rows are an earlier run's).
        skipped = skipped_files(store.staging.discovery_rows(source_id)) if "source_documents" in run.values else []
        runs.append(SourceRun.from_run(source_id, run, coverage_report(store, source_id).failed, skipped))
        if run.interrupted:
            # Ctrl-C or a termination signal: Dagster ends the run it lands in and returns; the
            # person who pressed it wants the command to stop, not the next source to start.
            reason = f"not run: the command was interrupted during {source_id}'s run"
            runs += [SourceRun(s, False, error=reason, interrupted=True) for s in source_ids[len(runs):]]
            break
    return runs


def _run_in_flight(instance: dg.DagsterInstance, source_id: str) -> bool:
    """Whether a Dagster run of the source is open (this command's run then waits its turn)."""
    return bool(instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT, tags={"dagster/partition": source_id}),
                                  limit=1))


def _job(config: PipelineConfig, name: str, embedder: EmbedderResource | None = None,
         overrides: dict[str, str] | None = None) -> dg.JobDefinition:
    """One of the named jobs the UI shows, wired to this config, so command-line runs carry its name."""
    return build_definitions(config, embedder, overrides).resolve_job_def(name)


def _executed(result: dg.ExecuteInProcessResult) -> RunResult:
    """The run's result; a bug's stack trace goes to stderr, for a bug report."""
    run = run_result(result)
    if run.bug_report:
        print(run.bug_report, file=sys.stderr)
    return run


@dataclass
class EvalRun:
    """The outcome of one golden evaluation run through Dagster: what it measured (whenever the
    measurement landed, also when the gate then failed), and whether the gate passed."""

    revision: str
    success: bool
    summary: dict = field(default_factory=dict)
    slice_table: str = ""
    golden_summary: str = ""
    report: str = ""
    checks: dict[str, bool] = field(default_factory=dict)
    # Why nothing was measured (a bad golden file, an index that cannot be read): the run failed.
    error: str | None = None
    # The blocking gate check failed (a regression); the measurement above stands.
    gate_failed: bool = False
    # The command's exit code for a run that failed: 2 for bad input (the golden file, the config), else 1.
    exit_code: int = 0

    @property
    def measured(self) -> bool:
        return bool(self.summary)


def evaluate_golden(
    config: PipelineConfig,
    instance: dg.DagsterInstance,
    mode: str | None = None,
    embedder: EmbedderResource | None = None,
    overrides: dict[str, str] | None = None,
    suite: str = "full",
    run_file: str | None = None,
    gate: bool = True,
) -> EvalRun:
    """Materialize golden_set and golden_eval (the `suite`) for the revision of the configured golden
    file: retrieval from this index, or the rankings of `run_file` (another system's). `gate`
    False: the gate check only warns that it did not gate."""
    if config.golden_set is None:
        raise ConfigError("no golden set: set golden_set in the config or pass --golden")
    revision = file_revision(config.golden_set)
    if revision not in set(instance.get_dynamic_partitions(golden_partitions.name)):
        instance.add_dynamic_partitions(golden_partitions.name, [revision])
    op_config = {"mode": mode or "", "suite": suite, "run_file": str(run_file or ""), "gate": gate}
    run_config = {**QUIET_LOGS, "ops": {"golden_eval": {"config": op_config}}}
    close_dead_runs(instance, [revision])
    run = _executed(_job(config, golden_eval_job.name, embedder, overrides).execute_in_process(
        instance=instance, partition_key=revision, raise_on_error=False, run_config=run_config,
        tags={**CLI_TAGS, GOLDEN_TAG: revision, **process_tags()},
    ))
    checks = {name: check.passed for name, check in run.checks.items()}
    evaluation = run.values.get("golden_eval")
    failure = run.failure
    if evaluation is None:
        return EvalRun(revision, False, checks=checks, error=run.error or "run failed",
                       exit_code=failure.exit_code if failure else 1)
    # The gate's outcome comes after the materialization: a failed gate fails the step, but what
    # was measured is recorded and shown.
    gate_failed = "gate_vs_baseline" in run.failed_checks
    failed_otherwise = failure is not None and failure.status != Status.REGRESSED
    store = open_store(config.storage)
    # Read as the evaluation read it: document paths resolved against what the sources hold.
    golden_summary = load_golden_set(config.golden_set, known_documents=store.ledger.document_history() or None).summary()
    summary = store.records.evaluation_summary(evaluation["eval_id"])
    if summary.get("suite", "full") != "full":
        golden_summary += f"\nsuite {summary['suite']}: {summary['cases']} of these cases evaluated (no holdout)"
    return EvalRun(revision, run.success and not gate_failed, summary, evaluation["slice_table"], golden_summary,
                   evaluation["report_file"], checks, error=run.error if failed_otherwise else None,
                   gate_failed=gate_failed, exit_code=failure.exit_code if failed_otherwise else 0)


@dataclass
class MonitorRun:
    day: str
    success: bool
    metadata: dict = field(default_factory=dict)
    checks: dict[str, bool] = field(default_factory=dict)
    error: str | None = None

    @property
    def drifted(self) -> bool:
        """The drift check warned (False when it did not run)."""
        return self.checks.get("drift_within_threshold") is False


def monitor(
    config: PipelineConfig,
    instance: dg.DagsterInstance,
    day: str,
    embedder: EmbedderResource | None = None,
) -> MonitorRun:
    """Materialize production_sample and drift_report for one day partition."""
    close_dead_runs(instance, [day])
    run = _executed(_job(config, monitoring_job.name, embedder).execute_in_process(
        instance=instance, partition_key=day, raise_on_error=False, run_config=QUIET_LOGS,
        tags={**CLI_TAGS, DAY_TAG: day, **process_tags()},
    ))
    metadata = {key: value for values in run.values.values() for key, value in values.items()}
    return MonitorRun(day, run.success, metadata, {name: c.passed for name, c in run.checks.items()}, run.error)
