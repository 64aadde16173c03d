"""The note a test's process leaves when it starts a Dagster deployment, for the test loop's `slow`
rule (rag_pipeline_tests/loop_plugin.py). The folder comes from the environment, so a deployment
started by a process the test started (the night's) is seen too; outside a test run it is a no-op."""

from __future__ import annotations

import os
from pathlib import Path

PROBE_ENV = "RAG_PIPELINE_TEST_PROBE"
DEPLOYMENT_NOTE = "deployment"


def note_deployment(what: str) -> None:
    """Record that `what` (a deployment, a webserver, a daemon) started, when a test run asks."""
    folder = os.environ.get(PROBE_ENV)
    if folder and Path(folder).is_dir():
        with open(Path(folder) / DEPLOYMENT_NOTE, "a", encoding="utf-8") as note:
            note.write(what + "\n")
