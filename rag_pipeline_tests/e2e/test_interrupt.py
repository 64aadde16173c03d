"""Ctrl-C in the middle of an ingestion: the command stops, and the next run builds the index an
uninterrupted run builds, every page with its own content."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
import yaml

from rag_pipeline.core.ingestion.source_runs import SUMMARY_COLUMNS
from rag_pipeline_tests.conftest import HTTPX_V023, HTTPX_V028, require
from rag_pipeline_tests.e2e.cli import OFFLINE, run_cli

pytestmark = pytest.mark.slow


def _two_sources(folder: Path) -> Path:
    shutil.copytree(require(HTTPX_V023), folder / "v023")
    shutil.copytree(require(HTTPX_V028), folder / "v028")
    config = folder / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        # v028 first: its 23 pages are enough for progress lines (v023's 13 are not).
        "sources": [{"name": "v028", "path": str(folder / "v028")}, {"name": "v023", "path": str(folder / "v023")}],
        "embedding": {"kind": "hashing"},
        "storage": {"path": str(folder / "index.duckdb")},
    }))
    return config


def _index(db: Path) -> dict[str, list[str]]:
    """doc id -> its chunks' texts in order: what search serves of each page."""
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT doc_id, text FROM chunks ORDER BY doc_id, ordinal").fetchall()
    index: dict[str, list[str]] = {}
    for doc_id, text in rows:
        index.setdefault(doc_id, []).append(text)
    return index


def test_ctrl_c_while_parsing_stops_the_command_and_the_next_run_builds_the_right_index(tmp_path):
    interrupted_config = _two_sources(tmp_path / "interrupted")
    env = {**os.environ, **OFFLINE}
    env.pop("DAGSTER_HOME", None)
    command = subprocess.Popen([sys.executable, "-m", "rag_pipeline.cli", "ingest", "--config", str(interrupted_config)],
                               env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Progress lines come on stderr (without --json): the first source's parsing has begun.
    for line in command.stderr:
        if line.startswith("v028: parsing"):
            break
    else:
        pytest.fail("no progress line of v028's parsing")
    command.send_signal(signal.SIGINT)
    out, _ = command.communicate(timeout=300)

    assert command.returncode == 130, out[-2000:]
    assert "RUN FAILED v028: parsed_documents: interrupted (Ctrl-C or a termination signal)" in out
    assert "RUN FAILED v023: not run: the command was interrupted during v028's run" in out
    summary = {line.split()[0]: line.split()[1:] for line in out.splitlines() if line.startswith(("v023 ", "v028 "))}
    assert summary["v023"] == ["0"] * len(SUMMARY_COLUMNS), "the next source started after Ctrl-C"

    again = run_cli("ingest", "--config", str(interrupted_config), "--json")
    assert again.returncode == 0, again.stderr[-2000:]
    uninterrupted_config = _two_sources(tmp_path / "uninterrupted")
    assert run_cli("ingest", "--config", str(uninterrupted_config)).returncode == 0
    assert _index(tmp_path / "interrupted" / "index.duckdb") == _index(tmp_path / "uninterrupted" / "index.duckdb")
