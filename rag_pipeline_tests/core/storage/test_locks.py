"""The per-source ingestion lock: a second process waits, a dead holder frees the source."""

import subprocess
import sys

import pytest

from rag_pipeline.core.storage.locks import SourceBusyError, exclusive_source

HOLD = """
import sys, time
from pathlib import Path
from rag_pipeline.core.storage.locks import exclusive_source
with exclusive_source(Path(sys.argv[1]), "docs"):
    print("held", flush=True)
    time.sleep(120)
"""


def _holder(database):
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(database)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_a_held_source_times_out_with_the_holder_named(tmp_path):
    database = tmp_path / "index.duckdb"
    proc = _holder(database)
    try:
        with pytest.raises(SourceBusyError) as busy:
            with exclusive_source(database, "docs", timeout_s=0.3, poll_s=0.05):
                pass
        assert "'docs'" in str(busy.value) and f"pid {proc.pid}" in str(busy.value)
        # Another source of the same database is not blocked.
        with exclusive_source(database, "handbook", timeout_s=0.3):
            pass
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_holder_releases_the_source(tmp_path):
    database = tmp_path / "index.duckdb"
    proc = _holder(database)
    proc.kill()
    proc.wait()
    entered = False
    with exclusive_source(database, "docs", timeout_s=5):
        entered = True
    assert entered
