"""What a step of the pipeline did, said once, in a typed record every caller reads the same way.

Each asset's step records a `StepOutcome` under the metadata key `OUTCOME_KEY`: on its
materialization when it ran to the end, on its failure when a `DomainError` stopped it, when its
switch was refused, or when the gate found a regression. A run is summed up as a `RunResult`
(the Dagster layer builds it from the run's events: `defs/run_results.py`). The command line,
the demo and the tests read outcomes and run results, never error text or class names; a step
that failed without an outcome failed on a bug, and its stack trace comes with it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from rag_pipeline.core.errors import EXIT_FAILED, EXIT_INPUT, DomainError

OUTCOME_KEY = "outcome"


class Status(StrEnum):
    DONE = "done"  # the step ran to the end
    FAILED = "failed"  # a DomainError stopped it (`fault` says which kind), or a bug did (`fault` "bug")
    REFUSED = "refused"  # the switch refused the new version: the previous one stays served
    REGRESSED = "regressed"  # measured, and the gate found a regression: the measurement stands
    # switched, but documents of the source failed and lifecycle.failed_documents_fail_partition
    # marks its partition failed: the switch stands
    INCOMPLETE = "incomplete"


# Kinds of fault: the DomainError kinds (`errors.py`), and a bug (any other exception).
BUG = "bug"


@dataclass(frozen=True)
class StepOutcome:
    """One step's outcome: its status, and for anything but DONE the reason in the pipeline's words."""

    status: Status
    reason: str = ""
    fault: str = ""

    @classmethod
    def of_error(cls, error: DomainError, reason: str) -> StepOutcome:
        return cls(Status.FAILED, reason, error.fault)

    @property
    def exit_code(self) -> int:
        """0 for a step that ran to the end, 2 for bad input, 1 for anything else."""
        if self.status == Status.DONE:
            return 0
        return EXIT_INPUT if self.fault == "input" else EXIT_FAILED

    def to_json(self) -> dict[str, str]:
        return {"status": str(self.status), "reason": self.reason, "fault": self.fault}

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> StepOutcome:
        return cls(Status(str(value["status"])), str(value.get("reason") or ""), str(value.get("fault") or ""))


DONE = StepOutcome(Status.DONE)


@dataclass(frozen=True)
class CheckOutcome:
    """An asset check's result: whether it passed, and whether a failure blocks (ERROR) or only warns."""

    passed: bool
    blocking: bool


@dataclass(frozen=True)
class RunResult:
    """A run of a job, summed up: each step's outcome and materialized values, the checks, and why it failed."""

    # Asset name -> the outcome of its step (the failure's, when it failed after materializing).
    outcomes: dict[str, StepOutcome] = field(default_factory=dict)
    # Asset name -> its materialization's metadata values (numbers, text, tables as recorded).
    values: dict[str, dict[str, object]] = field(default_factory=dict)
    checks: dict[str, CheckOutcome] = field(default_factory=dict)
    # Stopped by Ctrl-C or a termination signal.
    interrupted: bool = False
    # The stack of a bug that failed a step (no outcome), for a bug report.
    bug_report: str | None = None

    @property
    def failure(self) -> StepOutcome | None:
        """The first step's outcome that is not DONE (in the order of the run), or None."""
        return next((o for o in self.outcomes.values() if o.status != Status.DONE), None)

    @property
    def error(self) -> str | None:
        """`step: reason` of the first step that did not end DONE (the stage that failed, and why), or None."""
        return next((f"{step}: {o.reason}" for step, o in self.outcomes.items() if o.status != Status.DONE), None)

    @property
    def failed_checks(self) -> list[str]:
        """Checks that failed and block (ERROR): they fail the run."""
        return [name for name, check in self.checks.items() if not check.passed and check.blocking]

    @property
    def warned_checks(self) -> list[str]:
        """Checks that failed with severity WARN: shown, but they do not fail the run."""
        return [name for name, check in self.checks.items() if not check.passed and not check.blocking]

    @property
    def success(self) -> bool:
        return self.failure is None and not self.failed_checks and not self.interrupted

    def value(self, asset: str, key: str, default: object = None) -> object:
        return self.values.get(asset, {}).get(key, default)
