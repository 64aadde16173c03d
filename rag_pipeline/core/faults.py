"""Named points where a test can make the process kill itself (to prove the run protocol survives)
or wait (to keep a run in flight while others are launched).

A test sets `RAG_PIPELINE_KILL_AT=<point>` for one process; when that process reaches the point
it sends itself SIGKILL: no cleanup, no `finally`, no flush, exactly as an OOM kill or a pulled
plug would. Unset (always, outside such tests) a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import time

KILL_AT_ENV = "RAG_PIPELINE_KILL_AT"

# Every point, in the order a run reaches them (the fault-injection test walks this list).
KILL_POINTS: tuple[str, ...] = (
    "discovered",          # discovery wrote its staged manifest and ledger rows
    "parse:batch",         # the first batch of parsed documents is written, others are not
    "parsed",
    "chunk:batch",         # the first batch of chunks is written, others are not
    "chunked",
    "embed:batch",         # the first batch of vectors is cached, others are not
    "embedded",
    "switch:begin",        # inside the switch transaction, nothing changed yet
    "switch:replaced",     # the source's served rows are replaced, not yet verified
    "switch:verified",     # probes and checks passed, not yet committed
    "switch:committed",    # committed; the Dagster materialization is not yet recorded
)
# The switch writes the ledger, the manifest and the served-count history inside its transaction,
# so "committed, ledger and manifest not yet written" cannot happen: switch:verified and
# switch:committed are the two sides of that one commit.

# Points of the commands that change records and the golden set, by command (the fault-injection
# test of those commands walks them).
COMMAND_KILL_POINTS: dict[str, tuple[str, ...]] = {
    "eval": (
        "eval:scored",         # every case scored, nothing stored
        "eval:half-saved",     # inside the transaction: the run row written, its cases not
        "eval:saved",          # committed; report and Dagster materialization not yet written
    ),
    "promote": (
        "promote:decided",     # the gate said PROMOTE; the baseline not yet stored
        "promote:stored",      # the baseline stored; the Dagster check not yet recorded
    ),
    "index restore": (
        "restore:begin",       # inside the transaction, nothing changed yet
        "restore:swapped",     # the served rows swapped, the ledger, state and pin not yet written
        "restore:committed",   # committed; the Dagster observation not yet written
    ),
    "index disable": ("disable:begin", "disable:swapped", "disable:committed"),
    "golden accept": (
        "accept:recorded",     # the old and new revisions' texts and the change recorded; the file not replaced
        "accept:written",      # the new file's text on disk beside the old one, not yet renamed over it
    ),
}


def kill_point(name: str) -> None:
    """SIGKILL this process if the environment names `name` as the kill point."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


# Hold points: a test that needs a run to stay in flight (holding its pool while others are
# launched) names the point in the file that RAG_PIPELINE_HOLD_FILE points to; a process reaching
# it waits while the file exists and names it, at most HOLD_MAX_SECONDS.
HOLD_FILE_ENV = "RAG_PIPELINE_HOLD_FILE"
HOLD_POINTS: tuple[str, ...] = ("evaluation", "monitoring")
HOLD_MAX_SECONDS = 900.0


def hold_point(name: str) -> None:
    """Wait here while the hold file (if this process has one) names `name`."""
    path = os.environ.get(HOLD_FILE_ENV)
    if not path:
        return
    deadline = time.monotonic() + HOLD_MAX_SECONDS
    while time.monotonic() < deadline and _holds(path, name):
        time.sleep(0.2)


def _holds(path: str, name: str) -> bool:
    try:
        with open(path) as handle:
            return name in handle.read().split()
    except OSError:
        return False
