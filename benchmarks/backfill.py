"""A backfill of the ingestion assets over source partitions, through a real Dagster daemon.

Starts `dagster-daemon` and `dagster-webserver` on a fresh instance (the repository's
dagster.yaml) and a fresh index, launches an asset backfill of every configured source partition
through the webserver's GraphQL API (what the UI's "Materialize all" does), and waits for it:
prints the wall time from launch to the last run's end, each run's start and end (so the overlap
shows), and the runs' statuses.

    python benchmarks/backfill.py [--config data/pipeline.yaml] [--project .] [--json]

`--project` points at another checkout (the code location is loaded from there), so that an
older version can be measured with the same script.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
ASSETS = ["source_documents", "parsed_documents", "document_chunks", "chunk_embeddings", "search_index"]
LAUNCH = """
mutation($params: LaunchBackfillParams!) {
  launchPartitionBackfill(backfillParams: $params) {
    __typename
    ... on LaunchBackfillSuccess { backfillId }
    ... on PythonError { message }
  }
}"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def graphql(port: int, query: str, variables: dict | None = None) -> dict:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql", data=json.dumps({"query": query, "variables": variables or {}}).encode(),
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


def _start(command: list[str], env: dict, cwd: Path, log: Path) -> subprocess.Popen:
    # Default signal handlers: a process started from a non-interactive shell inherits "ignore SIGINT".
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), start_new_session=True)


def _wait_for_webserver(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            graphql(port, "{ version }")
            return
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(1)
    raise TimeoutError("dagster-webserver did not answer")


def _step_seconds(instance, run_id: str) -> dict[str, float]:
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


def run(config_path: Path, project: Path, timeout_s: float, launch_after_s: float = 0.0) -> dict:
    work = Path(tempfile.mkdtemp(prefix="backfill-"))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(project / "dagster.yaml", home / "dagster.yaml")
    raw = yaml.safe_load(config_path.read_text())
    raw["storage"] = {"path": str(work / "index" / "index.duckdb")}
    for source in raw["sources"]:
        source["path"] = str((config_path.parent / source["path"]).resolve())
    for key in ("golden_set", "gate_policy"):
        if raw.get(key):
            raw[key] = str((config_path.parent / raw[key]).resolve())
    if raw.get("monitoring", {}).get("query_log"):
        raw["monitoring"]["query_log"] = str((config_path.parent / raw["monitoring"]["query_log"]).resolve())
    config = work / "pipeline.yaml"
    config.write_text(yaml.safe_dump(raw))
    env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_PIPELINE_CONFIG": str(config), "PYTHONPATH": str(project),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "UNSTRUCTURED_DISABLE_NOTICE": "1",
           **({"OMP_NUM_THREADS": os.environ["BENCH_OMP"]} if os.environ.get("BENCH_OMP") else {})}
    port = _free_port()
    bin_dir = Path(sys.executable).parent
    workspace = project / "workspace.yaml"
    # Automation runs by default; stopped here, so that only the backfill's runs are timed.
    for kind, name in (("sensor", "source_change_sensor"), ("sensor", "golden_eval_sensor"),
                       ("sensor", "monitoring_after_evaluation"), ("schedule", "nightly_full_suite")):
        subprocess.run([str(bin_dir / "dagster"), kind, "stop", name, "-w", str(workspace)], env=env, cwd=project,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    webserver = _start([str(bin_dir / "dagster-webserver"), "-w", str(workspace), "-p", str(port), "-h", "127.0.0.1"],
                       env, project, work / "webserver.log")
    daemon = _start([str(bin_dir / "dagster-daemon"), "run", "-w", str(workspace)], env, project, work / "daemon.log")
    try:
        daemon_started = time.monotonic()
        _wait_for_webserver(port, time.monotonic() + 180)
        # The backfill daemon loops every 30 s from its start: launching right away meets the worst
        # phase; a backfill launched from the UI at a random time waits 15 s on average.
        time.sleep(max(0.0, launch_after_s - (time.monotonic() - daemon_started)))
        sources = [s["name"] for s in raw["sources"]]
        import dagster as dg

        os.environ["DAGSTER_HOME"] = str(home)
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("sources", sources)
        started = time.time()
        result = graphql(port, LAUNCH, {"params": {
            "partitionNames": sources, "assetSelection": [{"path": [a]} for a in ASSETS], "fromFailure": False,
        }})["launchPartitionBackfill"]
        if result["__typename"] != "LaunchBackfillSuccess":
            raise RuntimeError(result)
        backfill_id = result["backfillId"]
        with dg.DagsterInstance.get() as instance:
            while True:
                backfill = instance.get_backfill(backfill_id)
                if backfill.status.value not in ("REQUESTED",):
                    break
                if time.time() - started > timeout_s:
                    raise TimeoutError(f"backfill {backfill_id} still {backfill.status.value} after {timeout_s:.0f} s")
                time.sleep(1)
            records = instance.get_run_records(filters=dg.RunsFilter(tags={"dagster/backfill": backfill_id}))
            runs = sorted(
                ({"partition": r.dagster_run.tags.get("dagster/partition"), "status": r.dagster_run.status.value,
                  "job": r.dagster_run.job_name, "created_s": round(r.create_timestamp.timestamp() - started, 1),
                  "start_s": round(r.start_time - started, 1),
                  "end_s": round(r.end_time - started, 1), "steps_s": _step_seconds(instance, r.dagster_run.run_id)}
                 for r in records if r.start_time and r.end_time),
                key=lambda r: r["start_s"],
            )
        ended = max((r["end_s"] for r in runs), default=time.time() - started)
        overlap = any(a["end_s"] > b["start_s"] for i, a in enumerate(runs) for b in runs[i + 1:])
        return {"backfill_status": backfill.status.value, "sources": len(sources), "wall_s": round(ended, 1),
                "runs_overlap": overlap, "runs": runs}
    finally:
        for process in (daemon, webserver):
            os.killpg(process.pid, signal.SIGINT)
        for process in (daemon, webserver):
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "data" / "pipeline.yaml"))
    parser.add_argument("--project", default=str(REPO), help="checkout whose code location is loaded")
    parser.add_argument("--timeout", type=float, default=900)
    parser.add_argument("--launch-after", type=float, default=0.0,
                        help="seconds after the daemon's start to launch the backfill (its loop phase)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [run(Path(args.config).resolve(), Path(args.project).resolve(), args.timeout, args.launch_after)
               for _ in range(args.repeat)]
    if args.json:
        print(json.dumps(results if args.repeat > 1 else results[0], indent=2))
        return 0
    for result in results:
        first_created = min((r["created_s"] for r in result["runs"]), default=0.0)
        print(f"backfill of {result['sources']} source partitions: {result['backfill_status']} in {result['wall_s']} s "
              f"from launch ({first_created} s until the daemon created its runs; runs overlap: {result['runs_overlap']})")
        for r in result["runs"]:
            print(f"  {r['partition']:<14} {r['job']:<24} {r['status']:<8} created {r['created_s']:>5} s, "
                  f"ran {r['start_s']:>5} s -> {r['end_s']:>5} s  "
                  + ", ".join(f"{step} {s} s" for step, s in r["steps_s"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
