"""A Dagster run read as the pipeline's outcomes (`core/outcomes.py`): the one place that knows
the shape of a run's events.

A step's outcome is the one its asset recorded (`OUTCOME_KEY`, on its materialization or on its
failure); a step that failed with none recorded was stopped by an interrupt, by a blocking check,
or by a bug, whose stack trace comes with the result.
"""

from __future__ import annotations

import dagster as dg

from rag_pipeline.core.outcomes import BUG, DONE, OUTCOME_KEY, CheckOutcome, RunResult, Status, StepOutcome

# Dagster stops a step on SIGINT or SIGTERM with its own error, which carries no metadata: the one
# case where a class name tells what happened.
_INTERRUPTIONS = frozenset({"DagsterExecutionInterruptedError", "KeyboardInterrupt"})
INTERRUPTED = "interrupted (Ctrl-C or a termination signal)"


def run_result(result: dg.ExecuteInProcessResult) -> RunResult:
    """The run's outcomes, materialized values and checks; why it failed, if it did."""
    outcomes: dict[str, StepOutcome] = {}
    values: dict[str, dict[str, object]] = {}
    for event in result.get_asset_materialization_events():
        materialization = event.event_specific_data.materialization
        asset = materialization.asset_key.to_user_string()
        values[asset] = {key: entry.value for key, entry in materialization.metadata.items()}
        recorded = values[asset].get(OUTCOME_KEY)
        outcomes[asset] = StepOutcome.from_json(recorded) if isinstance(recorded, dict) else DONE
    checks = {e.check_name: CheckOutcome(e.passed, e.severity == dg.AssetCheckSeverity.ERROR)
              for e in result.get_asset_check_evaluations()}
    blocked = {e.asset_key.to_user_string() for e in result.get_asset_check_evaluations()
               if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR}
    interrupted, bug_report = False, None
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        failure = event.step_failure_data
        recorded = failure.user_failure_data.metadata.get(OUTCOME_KEY) if failure.user_failure_data else None
        if recorded is not None:
            outcomes[event.step_key] = StepOutcome.from_json(recorded.value)
            if outcomes[event.step_key].status == Status.INCOMPLETE:
                # Its work landed (the switch committed): its values are on the failure, not on a materialization.
                values.setdefault(event.step_key, {k: e.value for k, e in failure.user_failure_data.metadata.items()})
        elif _innermost(failure.error).cls_name in _INTERRUPTIONS:
            interrupted = True
            outcomes[event.step_key] = StepOutcome(Status.FAILED, INTERRUPTED, "interrupted")
        elif event.step_key in blocked:
            failed = sorted(name for name, check in checks.items() if not check.passed and check.blocking)
            outcomes[event.step_key] = StepOutcome(Status.FAILED, f"blocking check failed: {', '.join(failed)}", "check")
        else:
            outcomes[event.step_key] = StepOutcome(Status.FAILED, f"unexpected error: {_innermost(failure.error).message.strip()}",
                                                   BUG)
            bug_report = bug_report or f"step {event.step_key} failed with an unexpected error:\n{failure.error.to_string()}"
    return RunResult(outcomes, values, checks, interrupted, bug_report)


def _innermost(error):
    """The user's error under the ones Dagster wraps it in."""
    while error.cause is not None:
        error = error.cause
    return error
