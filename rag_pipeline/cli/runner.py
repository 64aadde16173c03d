"""Running the pipeline in process, for the command line and the demo (same assets as the UI)."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

import dagster as dg

from rag_pipeline.cli.outcomes import RUN_COUNTS, RUN_DETAILS, SourceRun, skipped_files, unchanged_run
from rag_pipeline.config import PipelineConfig
from rag_pipeline.core.evaluation.golden.cases import file_revision
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.ingestion.coverage import coverage_report
from rag_pipeline.core.ingestion.inputs import settings_fingerprint
from rag_pipeline.core.storage import SourceBusyError, Store, open_store
from rag_pipeline.definitions import build_definitions
from rag_pipeline.defs.automation import golden_eval_job, ingest_sources_job, monitoring_job
from rag_pipeline.defs.common import DAY_TAG, GOLDEN_TAG, SOURCE_TAG, TRIGGER_TAG
from rag_pipeline.defs.partitions import golden_partitions, source_partitions
from rag_pipeline.defs.resources import EmbedderResource, embedder_for
from rag_pipeline.defs.runs import close_dead_runs, process_tags

OPEN_STATUSES = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
                 dg.DagsterRunStatus.STARTED]
# Dagster's console logger at ERROR: the command line prints its own summary (failed documents included).
# The command line prints each run's outcome and reason itself, so Dagster's console logger only
# speaks up for what it alone knows: the stack of an unexpected error (`_show_unexpected_error`).
QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}
# Errors whose message is the whole story (the outcome line shows it): no stack trace for them.
EXPECTED_ERRORS = frozenset({
    "SourceUnavailableError", "SourceBusyError", "DocumentReadError", "GoldenSetError", "EvaluationError",
    "RunFileError", "InputTooLargeError",
    "ConfigError", "HoldoutError", "Failure", "DagsterAssetCheckFailedError", "DagsterExecutionInterruptedError",
    "KeyboardInterrupt",
})
CLI_TAGS = {TRIGGER_TAG: "cli"}


def ingest(
    config: PipelineConfig,
    instance: dg.DagsterInstance,
    source_ids: list[str] | None = None,
    embedder: EmbedderResource | None = None,
    overrides: dict[str, str] | None = None,
    force: bool = False,
) -> list[SourceRun]:
    """Materialize the ingestion assets for each source partition; one failing source does not stop the others.

    A source whose inputs have not changed since its last committed switch (`inputs.py`) is not
    run, unless `force`. `config` must already include the `overrides` (`name -> path`), which
    are passed on to the assets.
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
                                                             open_elsewhere=lambda s: _run_in_flight(instance, s))
                if unchanged is not None:
                    runs.append(unchanged)
                    continue
                job = job or _job(config, ingest_sources_job.name, embedder, overrides)
                result = job.execute_in_process(
                    instance=instance, partition_key=source_id, raise_on_error=False, run_config=QUIET_LOGS,
                    tags={**CLI_TAGS, SOURCE_TAG: source_id, **process_tags()},
                )
        except SourceBusyError as busy:
            runs.append(SourceRun(source_id, False, error=str(busy)))
            continue
        runs.append(_summarise(source_id, result, store))
        if _interrupted(result):
            # Ctrl-C or a termination signal: Dagster ends the run it lands in and returns; the
            # person who pressed it wants the command to stop, not the next source to start.
            runs[-1].interrupted = True
            reason = f"not run: the command was interrupted during {source_id}'s run"
            runs += [SourceRun(s, False, error=reason, interrupted=True) for s in source_ids[len(runs):]]
            break
    return runs


def _interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a step of the run was stopped by an interrupt (SIGINT, or SIGTERM in Dagster's handler)."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error is not None:
                if error.cls_name == "DagsterExecutionInterruptedError":
                    return True
                error = error.cause
    return False


def _run_in_flight(instance: dg.DagsterInstance, source_id: str) -> bool:
    """Whether a Dagster run of the source is open (this command's run then waits its turn)."""
    return bool(instance.get_runs(filters=dg.RunsFilter(statuses=OPEN_STATUSES, tags={"dagster/partition": source_id}),
                                  limit=1))


def _job(config: PipelineConfig, name: str, embedder: EmbedderResource | None = None,
         overrides: dict[str, str] | None = None) -> dg.JobDefinition:
    """One of the named jobs the UI shows, wired to this config, so command-line runs carry its name."""
    return build_definitions(config, embedder, overrides).resolve_job_def(name)


def _summarise(source_id: str, result: dg.ExecuteInProcessResult, store: Store) -> SourceRun:
    metadata = _materialized_metadata(result)
    counts = {}
    for name, (asset, key) in {**RUN_COUNTS, **RUN_DETAILS}.items():
        value = metadata.get(asset, {}).get(key)
        counts[name] = int(value.value) if value is not None else 0
    # Failures come from the ledger: it also holds earlier failures of documents not retried since.
    failures = coverage_report(store, source_id).failed
    success = result.success and not _failed_errors(result)
    return SourceRun(source_id, success, counts, failures, _checks(result), _step_error(result), _failed_warnings(result),
                     skipped=skipped_files(store.staging.discovery_rows(source_id)))


def _materialized_metadata(result: dg.ExecuteInProcessResult) -> dict[str, dict]:
    """Asset key -> metadata of its materialization in this run."""
    metadata: dict[str, dict] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        metadata[materialization.asset_key.to_user_string()] = materialization.metadata
    return metadata


def _step_error(result: dg.ExecuteInProcessResult) -> str | None:
    """`step: innermost error` of the first failed step, or None when the run succeeded; an
    unexpected error's stack goes to stderr as well (`_show_unexpected_error`)."""
    if result.success:
        return None
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is None:
        return "run failed"
    _show_unexpected_error(failure.step_key, failure.step_failure_data.error)
    return f"{failure.step_key}: {_root_cause(failure.step_failure_data.error)}"


def _show_unexpected_error(step_key: str, error) -> None:
    """The full stack of an error the code did not foresee (a bug, to report), on stderr."""
    innermost = error
    while getattr(innermost, "cause", None) is not None:
        innermost = innermost.cause
    if innermost.cls_name not in EXPECTED_ERRORS:
        print(f"step {step_key} failed with an unexpected {innermost.cls_name}; its stack, for a bug report:\n"
              f"{error.to_string()}", file=sys.stderr)


def _checks(result: dg.ExecuteInProcessResult) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def _failed_warnings(result: dg.ExecuteInProcessResult) -> list[str]:
    return [
        e.check_name for e in result.get_asset_check_evaluations()
        if not e.passed and e.severity == dg.AssetCheckSeverity.WARN
    ]


def _failed_errors(result: dg.ExecuteInProcessResult) -> list[str]:
    """Checks that failed with severity ERROR (a WARN shows in the UI but does not fail the run)."""
    return [
        e.check_name for e in result.get_asset_check_evaluations()
        if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR
    ]


INTERRUPTED = "interrupted (Ctrl-C or a termination signal)"


def _root_cause(error) -> str:
    """The innermost error's own words: Dagster wraps the user's exception in its own, and prefixes
    its message with the exception's class path (`dagster._core.definitions.events.Failure: ...`)."""
    while getattr(error, "cause", None) is not None:
        error = error.cause
    if error.cls_name in ("DagsterExecutionInterruptedError", "KeyboardInterrupt"):
        return INTERRUPTED
    message = error.message.strip()
    head, separator, rest = message.partition(": ")
    if separator and head.rsplit(".", 1)[-1] == error.cls_name:
        return rest.strip()
    return message


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
    # The class name of the error that stopped the run (`GoldenSetError`...), when one did.
    error_kind: str | None = None

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
        raise ValueError("no golden set: set golden_set in the config or pass --golden")
    revision = file_revision(config.golden_set)
    if revision not in set(instance.get_dynamic_partitions(golden_partitions.name)):
        instance.add_dynamic_partitions(golden_partitions.name, [revision])
    op_config = {"mode": mode or "", "suite": suite, "run_file": str(run_file or ""), "gate": gate}
    run_config = {**QUIET_LOGS, "ops": {"golden_eval": {"config": op_config}}}
    close_dead_runs(instance, [revision])
    result = _job(config, golden_eval_job.name, embedder, overrides).execute_in_process(
        instance=instance, partition_key=revision, raise_on_error=False, run_config=run_config,
        tags={**CLI_TAGS, GOLDEN_TAG: revision, **process_tags()},
    )
    evaluation = _materialized_metadata(result).get("golden_eval")
    checks = _checks(result)
    gate_failed = "gate_vs_baseline" in _failed_errors(result)
    if evaluation is None:
        return EvalRun(revision, False, checks=checks, error=_plain_error(_step_error(result)),
                       error_kind=_innermost_error_class(result))
    # The gate's blocking check is yielded after the materialization: a failed gate fails the step,
    # but what was measured is recorded and shown.
    failed_otherwise = not result.success and not (gate_failed and _only_check_failures(result))
    run = EvalRun(revision, result.success and not gate_failed, checks=checks, gate_failed=gate_failed,
                  error=_plain_error(_step_error(result)) if failed_otherwise else None)
    run.slice_table = evaluation["slice_table"].value
    run.report = evaluation["report_file"].value
    store = open_store(config.storage)
    run.summary = store.records.evaluation_summary(evaluation["eval_id"].value)
    # Read as the evaluation read it: document paths resolved against what the sources hold.
    run.golden_summary = load_golden_set(config.golden_set, known_documents=store.ledger.document_history() or None).summary()
    if run.summary.get("suite", "full") != "full":
        run.golden_summary += f"\nsuite {run.summary['suite']}: {run.summary['cases']} of these cases evaluated (no holdout)"
    return run


def _innermost_error_class(result: dg.ExecuteInProcessResult) -> str | None:
    """The class name of the innermost error of the first failed step (the user's, under Dagster's).
    A domain error the asset explained as a `dg.Failure` (`defs/failures.py`) names its class in the
    failure's metadata: the Failure itself carries no cause."""
    failure = next((e for e in result.all_events if e.is_step_failure), None)
    if failure is None:
        return None
    explained = failure.step_failure_data.user_failure_data
    if explained is not None and "error" in explained.metadata:
        return str(explained.metadata["error"].value)
    error = failure.step_failure_data.error
    while error.cause is not None:
        error = error.cause
    return error.cls_name


def _only_check_failures(result: dg.ExecuteInProcessResult) -> bool:
    """Every failed step failed because a blocking asset check failed (nothing else went wrong):
    Dagster's own error for it, or the Failure golden_eval raises to name what regressed."""
    for event in result.all_events:
        if event.is_step_failure:
            error = event.step_failure_data.error
            while error.cause is not None:
                error = error.cause
            gate_failure = error.cls_name == "Failure" and "gate_vs_baseline: " in error.message
            if error.cls_name != "DagsterAssetCheckFailedError" and not gate_failure:
                return False
    return True


def _plain_error(text: str | None) -> str | None:
    """An error as a person reads it: without the Python class path Dagster puts in front of the
    message (`rag_pipeline.core.evaluation.golden.GoldenSetError: ...`)."""
    if text is None:
        return None
    return re.sub(r"(^|: )(?:[A-Za-z_][\w]*\.)+[A-Za-z_]\w*(?:Error|Exception|Failure): ", r"\1", text, count=1)


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
    result = _job(config, monitoring_job.name, embedder).execute_in_process(
        instance=instance, partition_key=day, raise_on_error=False, run_config=QUIET_LOGS,
        tags={**CLI_TAGS, DAY_TAG: day, **process_tags()},
    )
    metadata = {k: v.value for asset in _materialized_metadata(result).values() for k, v in asset.items()}
    return MonitorRun(day, result.success, metadata, _checks(result), _step_error(result))
