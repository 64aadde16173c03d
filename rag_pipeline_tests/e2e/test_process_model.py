"""Every command in its own process, as users run them: nothing outlives a killed ingest, every
finished ingest exits 0, and a no-change run is decided before Dagster with a persistent instance."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.faults import KILL_AT_ENV
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import OFFLINE, run_cli

pytestmark = pytest.mark.slow

PAGES = {
    "guide/start.md": "# Start\n\nInstall the client and make a first request with a timeout of five seconds.\n",
    "guide/auth.md": "# Auth\n\nBasic authentication takes a user name and a password.\n",
    "notes.txt": "Release notes: the proxy settings moved to the transport.\n",
    "index.html": "<html><body><h1>Home</h1><p>Welcome to the client's documentation.</p></body></html>",
}
# A page that keeps a parser busy for many seconds: HTML goes through `unstructured` and spaCy
# (Markdown and plain text are parsed by their structure, far too fast to be caught at work).
SLOW_PAGE = "<html><body><h1>Long</h1>" + "".join(
    f"<p>Paragraph {i} holds a sentence for the parser.</p>" for i in range(20000)) + "</body></html>"


def _config(tmp_path: Path, embedding: dict | None = None, **source) -> Path:
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "docs", "path": str(tmp_path / "docs"), **source}],
        "embedding": embedding or {},
        "storage": {"path": str(tmp_path / "store" / "index.duckdb")},
    }))
    return config


def _children(pid: int) -> list[tuple[int, str]]:
    """(pid, command line) of the processes whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                command = cmdline.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError, IndexError):
            continue
        if parent == pid:
            found.append((int(entry), command))
    return found


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has ended; only its exit status waits to be collected)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_after_kill_9_of_an_ingest_no_parser_worker_is_left_running(tmp_path):
    write_tree(tmp_path / "docs", {**PAGES, "long-a.html": SLOW_PAGE, "long-b.html": SLOW_PAGE.replace("Long", "Longer")})
    # Two workers: the first is started by the main thread, the second by a thread of the parse stage.
    config = _config(tmp_path, {"kind": "hashing"}, parse_workers=2)
    env = {**os.environ, **OFFLINE}
    env.pop("DAGSTER_HOME", None)
    ingest = subprocess.Popen([sys.executable, "-m", "rag_pipeline.cli", "ingest", "--config", str(config)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        workers: list[int] = []
        while len(workers) < 2 and time.monotonic() < deadline and ingest.poll() is None:
            workers = [pid for pid, command in _children(ingest.pid) if "parse_worker" in command]
            time.sleep(0.2)
        assert len(workers) == 2, f"the ingest did not start two parser workers: {ingest.stderr.read()[-2000:] if ingest.poll() is not None else ''}"
        time.sleep(3)  # at work on the long pages (a worker that hit its memory limit is replaced)
        workers = sorted({*workers, *(pid for pid, command in _children(ingest.pid) if "parse_worker" in command)})
        assert any(_running(pid) for pid in workers), "no parser worker was at work when the ingest was killed"
        os.kill(ingest.pid, signal.SIGKILL)
        ingest.wait()
        deadline = time.monotonic() + 30
        while any(_running(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not [pid for pid in workers if _running(pid)], "a parser worker outlived its killed ingest"
    finally:
        ingest.kill()
        ingest.wait()


# Real ingests in a row (thirty until the suite had to fit in 15 minutes; each takes about 5 s).
RUNS = 10


def test_ten_ingests_that_finish_their_work_all_exit_0(tmp_path):
    """The real model and parser, an edit before each run, so that every run parses, embeds, writes
    and switches: then exits. A crash at exit (SIGABRT after the JSON was printed) shows here."""
    root = write_tree(tmp_path / "docs", PAGES)
    config = _config(tmp_path)
    page = root / "guide" / "auth.md"
    outcomes = []
    for run in range(RUNS):
        page.write_text(page.read_text() + f"\nEdit {run}: a token can replace the password.\n")
        done = run_cli("ingest", "--config", str(config), "--json")
        report = json.loads(done.stdout)["sources"]["docs"] if done.stdout.strip().startswith("{") else None
        outcomes.append((done.returncode, report is not None and report["success"], done.stderr[-500:]))
    assert [code for code, _, _ in outcomes] == [0] * RUNS, [o for o in outcomes if o[0] != 0][:2]
    assert all(success for _, success, _ in outcomes)


def _imports_dagster(stderr: str) -> bool:
    """Whether `python -X importtime` lines name a dagster module."""
    return bool(re.search(r"^import time:.*\|\s+dagster(\.|$)", stderr, re.M))


def test_a_no_change_run_is_decided_before_dagster_with_a_persistent_instance(tmp_path):
    write_tree(tmp_path / "docs", PAGES)
    config = _config(tmp_path, {"kind": "hashing"})
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {"DAGSTER_HOME": str(home)}

    assert run_cli("ingest", "--config", str(config), env=env).returncode == 0
    again = run_cli("ingest", "--config", str(config), "--json", env=env, python_options=["-X", "importtime"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert "inputs unchanged" in json.loads(again.stdout)["sources"]["docs"]["not_run"]
    assert not _imports_dagster(again.stderr)

    # A forced run killed after its switch committed: the files still match what is served, but
    # its Dagster run is left STARTED. The next command goes to the runner, which closes it...
    killed = run_cli("ingest", "--config", str(config), "--force", env={**env, KILL_AT_ENV: "switch:committed"})
    assert killed.returncode == -9
    closing = run_cli("ingest", "--config", str(config), "--json", env=env, python_options=["-X", "importtime"])
    assert closing.returncode == 0, closing.stderr[-3000:]
    assert _imports_dagster(closing.stderr)
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        statuses = [run.status for run in instance.get_runs()]
    assert dg.DagsterRunStatus.STARTED not in statuses and dg.DagsterRunStatus.FAILURE in statuses

    # ...and the one after it is decided before Dagster again.
    settled = run_cli("ingest", "--config", str(config), "--json", env=env, python_options=["-X", "importtime"])
    assert settled.returncode == 0 and not _imports_dagster(settled.stderr), settled.stderr[-3000:]
