"""Named points where a test can make the process kill itself, to prove the run protocol survives.

A test sets `RAG_PIPELINE_KILL_AT=<point>` for one process; when that process reaches the point
it sends itself SIGKILL: no cleanup, no `finally`, no flush, exactly as an OOM kill or a pulled
plug would. Unset (always, outside such tests) a point costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal

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
    "golden accept": (
        "accept:recorded",     # the old and new revisions' texts and the change recorded; the file not replaced
        "accept:written",      # the new file's text on disk beside the old one, not yet renamed over it
    ),
}


def kill_point(name: str) -> None:
    """SIGKILL this process if the environment names `name` as the kill point."""
    if os.environ.get(KILL_AT_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
