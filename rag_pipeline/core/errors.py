"""The faults the pipeline expects: of the data, the configuration or the deployment, never of
the code.

A `DomainError`'s message is the whole story: what is wrong, where (the file and line, the
document, the case or the day) and what to do. The Dagster layer shows it as the step's failure
with that reason and no stack trace, and does not retry it (`defs/failures.py`); the command line
prints it and exits with its `exit_code`. Every other exception is a bug: it keeps its stack
trace, on the terminal and in the run's log.
"""

from __future__ import annotations

from typing import ClassVar

# Exit codes of every command (docs/architecture.md, "The command line").
EXIT_FAILED = 1  # a run failed, or the gate found a regression
EXIT_INPUT = 2  # bad input: flags, the config, a file given to read


class DomainError(Exception):
    """A fault the pipeline expects and explains; subclasses say which kind (`fault`)."""

    #: `input` (a file, the config or a flag the user must fix) or `unavailable` (a source, a
    #: store or a lock that cannot be used now; the run failed and a later one may succeed).
    fault: ClassVar[str] = "unavailable"
    exit_code: ClassVar[int] = EXIT_FAILED


class InputError(DomainError, ValueError):
    """Input the user must fix before running again: the message names the file, line or flag."""

    fault = "input"
    exit_code = EXIT_INPUT


class UnavailableError(DomainError, RuntimeError):
    """Something the run needs cannot be used now (a vanished source, a busy store): the run fails,
    what is served stays served, and a later run may succeed."""
