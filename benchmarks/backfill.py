"""A backfill of the ingestion assets over source partitions, through a real Dagster deployment.

For each backend, starts `dagster-webserver` and `dagster-daemon` on a fresh instance and a fresh
store (rag_pipeline_tests/harness/local_deployment.py), launches an asset backfill of every source partition through
the webserver's GraphQL API (what the UI's "Materialize all" does), and waits for it. Prints the
wall time from launch to the last run's end, each run's timeline (so the overlap shows) and the
ratio between the backends, measured in the same invocation:

    duckdb    instance in SQLite files (dagster.yaml), store in one DuckDB file: one writer, so
              the sources' switches take turns; steps in the run's process.
    postgres  instance in PostgreSQL (deploy/dagster-postgres.yaml), store in PostgreSQL with
              pgvector: sources run side by side, a process per step.

    python benchmarks/backfill.py [--backends duckdb,postgres,postgres:in_process] [--copies 12] [--json]

A backend may name its executor after a colon (RAG_PIPELINE_EXECUTOR): `postgres:in_process` runs
the PostgreSQL deployment with every step in the run's process, to tell what the store changes
from what a process per step costs.

`--copies N` makes N sources, each a copy of the httpx 0.23 docs (../shared/datasets); without it,
the config's own sources. `--project` points at another checkout (an older version measured with
the same script; DuckDB only). `--launch-after S` waits S seconds after the daemon's start (the
backfill daemon loops every 30 s from its start).

    python benchmarks/backfill.py --executor celery --workers 3 [--embedder hashing] [--json]

runs the same backfill twice in one invocation: on the in-process DuckDB path (`duckdb`), then
with the instance and the store in PostgreSQL and every step sent to Celery workers (a Redis
broker and N `dagster-celery` workers started here, rag_pipeline_tests/harness/celery_deployment.py). Without
`--copies`, the sources are 12 small folders made from the shared datasets. It prints the steps
and runs each worker took, both wall times, and whether the Celery build serves exactly what the
DuckDB build serves (`equal_to_serial`), and writes them into docs/performance.md unless `--no-page`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path

from rag_pipeline_tests.harness.celery_deployment import (
    broker_env,
    celery_workers,
    redis_server,
    split_sources,
    steps_by_worker,
    worker_figures,
)
from rag_pipeline_tests.harness.local_deployment import REPO, deployment, pipeline_config, postgres_server

HTTPX = REPO.parent / "shared" / "datasets" / "httpx-docs" / "v0.23.0"


def run(shape: str, raw: dict, work: Path, project: Path, timeout_s: float, launch_after_s: float,
        dsn: str | None) -> dict:
    backend, _, executor = shape.partition(":")
    extra = {"OMP_NUM_THREADS": os.environ["BENCH_OMP"]} if os.environ.get("BENCH_OMP") else {}
    if executor:
        extra["RAG_PIPELINE_EXECUTOR"] = executor
    sources = [s["name"] for s in raw["sources"]]
    with deployment(work, raw, backend, dsn, project=project, extra_env=extra) as running:
        time.sleep(launch_after_s)
        result = running.backfill(sources, timeout_s=timeout_s)
    return {"backend": shape, **result}


def run_celery(raw: dict, work: Path, dsn: str, workers: int, timeout_s: float) -> dict:
    """The backfill with every step on `workers` Celery workers (PostgreSQL instance and store)."""
    with redis_server(work / "redis") as redis_url:
        with deployment(work / "deployment", raw, "postgres", dsn, extra_env=broker_env(redis_url)) as running:
            names = [f"worker{i + 1}" for i in range(workers)]
            with celery_workers(running.env, work / "workers", names):
                result = running.backfill([s["name"] for s in raw["sources"]], timeout_s=timeout_s)
                with running.instance() as instance:
                    taken = steps_by_worker(instance, [r["run_id"] for r in result["runs"]])
            config = running.config
    return {"backend": f"postgres:celery x{workers}", **result, **worker_figures(taken), "config": config}


def equal_to_serial(celery_config: Path, duckdb_config: Path, dsn: str) -> tuple[bool, list[str]]:
    """Whether the Celery build's store serves exactly what the in-process DuckDB build's serves."""
    from rag_pipeline.api import load_config, open_store
    from rag_pipeline.core.storage.contents import content_differences

    os.environ["RAG_PIPELINE_PG_DSN"] = dsn
    left, right = (open_store(load_config(path).storage, read_only=True) for path in (celery_config, duckdb_config))
    try:
        differences = content_differences(left, right)
    finally:
        left.close()
        right.close()
    return not differences, differences


def main_celery(args, raw: dict, work: Path) -> int:
    """`--executor celery`: the in-process DuckDB backfill and the Celery backfill, compared."""
    with postgres_server(work / "pgdata") as dsn:
        # The machine is shared: the 1-minute load average before and after each path goes with its figure.
        load = {"duckdb": [round(os.getloadavg()[0], 1)]}
        serial = run("duckdb", raw, work / "duckdb", REPO, args.timeout, args.launch_after, None)
        load["duckdb"].append(round(os.getloadavg()[0], 1))
        serial_config = work / "duckdb" / "pipeline.yaml"
        load["celery"] = [round(os.getloadavg()[0], 1)]
        distributed = run_celery(raw, work / "celery", dsn, args.workers, args.timeout)
        load["celery"].append(round(os.getloadavg()[0], 1))
        equal, differences = equal_to_serial(distributed.pop("config"), serial_config, dsn)
    summary = {
        "executor": "celery", "workers": args.workers, "sources": len(raw["sources"]),
        "embedder": raw.get("embedding", {}).get("kind", "sentence-transformers"),
        "steps_per_worker": distributed["steps_per_worker"], "runs_per_worker": distributed["runs_per_worker"],
        "equal_to_serial": equal, "differences": differences,
        "wall_s": distributed["wall_s"], "backfill_status": distributed["backfill_status"],
        "in_process_duckdb": {"wall_s": serial["wall_s"], "backfill_status": serial["backfill_status"],
                              "runs": len(serial["runs"]), "steps": sum(len(r["steps_s"]) for r in serial["runs"])},
        "runs": len(distributed["runs"]), "steps": sum(len(r["steps_s"]) for r in distributed["runs"]),
        "load_average_before_after": load,
    }
    if not args.no_page:
        write_page(summary, args)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0 if equal and distributed["backfill_status"] == "COMPLETED_SUCCESS" else 1
    print(f"{summary['sources']} source partitions, embedder {summary['embedder']}")
    print(f"in-process DuckDB: {serial['backfill_status']} in {serial['wall_s']} s, {summary['in_process_duckdb']['runs']} runs, "
          f"{summary['in_process_duckdb']['steps']} steps, every step in its run's process")
    print(f"Celery x{args.workers} on PostgreSQL: {distributed['backfill_status']} in {distributed['wall_s']} s, "
          f"{summary['runs']} runs, {summary['steps']} steps")
    for worker, steps in summary["steps_per_worker"].items():
        print(f"  {worker:<28} {steps:>3} steps of {summary['runs_per_worker'][worker]} runs")
    print(f"equal to the serial DuckDB build: {equal}" + "".join(f"\n  {d}" for d in differences))
    return 0 if equal and distributed["backfill_status"] == "COMPLETED_SUCCESS" else 1


def load_text(summary: dict, path: str) -> str:
    before, after = summary["load_average_before_after"][path]
    return f"{before}, {after}"


def write_page(summary: dict, args) -> None:
    """The figures as the Celery section of docs/performance.md."""
    from performance_page import write_section

    serial = summary["in_process_duckdb"]
    rows = "\n".join(f"| `{w}` | {s} | {summary['runs_per_worker'][w]} |" for w, s in summary["steps_per_worker"].items())
    body = (
        f"An asset backfill of {summary['sources']} "
        f"source partitions ({'copies of the httpx 0.23 docs' if args.copies else 'small folders: the httpx 0.23 pages and SciFact abstracts dealt round-robin'}), launched "
        f"through GraphQL as the UI launches it; embedder: "
        f"{'the hashing embedder' if summary['embedder'] == 'hashing' else 'the bundled MiniLM'}.\n\n"
        f"| path | wall time from launch | runs | steps | load average before, after |\n| --- | --- | --- | --- | --- |\n"
        f"| in-process, DuckDB store, SQLite instance | {serial['wall_s']} s | {serial['runs']} | {serial['steps']} | "
        f"{load_text(summary, 'duckdb')} |\n"
        f"| Celery, {args.workers} workers, Redis broker, PostgreSQL store and instance | {summary['wall_s']} s | "
        f"{summary['runs']} | {summary['steps']} | {load_text(summary, 'celery')} |\n\n"
        f"| Celery worker | steps | of runs |\n| --- | --- | --- |\n{rows}\n\n"
        f"Served content of the Celery build equal to the in-process DuckDB build's (manifest, documents, chunks, "
        f"postings, vectors, embedding cache, ledger; run ids and times left out): "
        f"**{'yes' if summary['equal_to_serial'] else 'no: ' + '; '.join(summary['differences'])}**. "
        f"Both paths use the instance's run queue: with PostgreSQL up to 4 runs at once, each handing its steps "
        f"to the workers; with DuckDB one source's switch at a time and every step in its run's process. All "
        f"of it shares one machine's 2 cores (the workers, the daemon, the run processes, PostgreSQL), so "
        f"this measures the distributed path's overhead and correctness here, not what more machines gain; "
        f"other work on the machine moves the load, so compare the two rows only at similar loads."
    )
    write_section("Steps on Celery workers", body, script="benchmarks/backfill.py --executor celery",
                  command="python benchmarks/backfill.py " + shlex.join(sys.argv[1:]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(REPO / "data" / "pipeline.yaml"))
    parser.add_argument("--backends", default="duckdb,postgres")
    parser.add_argument("--copies", type=int, default=0, help="N copies of the httpx docs as the sources")
    parser.add_argument("--embedder", choices=("config", "hashing"), default="config",
                        help="the config's model (default) or the fast hashing embedder")
    parser.add_argument("--project", default=str(REPO), help="checkout whose code location is loaded")
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--launch-after", type=float, default=0.0)
    parser.add_argument("--executor", choices=("default", "celery"), default="default",
                        help="celery: the in-process DuckDB path against Celery workers (see above)")
    parser.add_argument("--workers", type=int, default=3, help="Celery workers (with --executor celery)")
    parser.add_argument("--no-page", action="store_true", help="with --executor celery: leave docs/performance.md alone")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="backfill-"))
    sources = {f"httpx_{i:02d}": HTTPX for i in range(args.copies)} if args.copies else None
    if sources is None and args.executor == "celery":
        sources = split_sources(work / "sources")
    raw = pipeline_config(Path(args.config).resolve(), sources)
    if args.embedder == "hashing":
        raw["embedding"] = {"kind": "hashing"}
    if args.executor == "celery":
        return main_celery(args, raw, work)
    results = []
    with postgres_server(work / "pgdata") as dsn:
        for shape in args.backends.split(","):
            results.append(run(shape, raw, work / shape.replace(":", "_"), Path(args.project).resolve(), args.timeout,
                               args.launch_after, dsn if shape.startswith("postgres") else None))
    walls = {r["backend"]: r["wall_s"] for r in results}
    summary = {"sources": len(raw["sources"]), "embedder": raw.get("embedding", {}).get("kind", "sentence-transformers"),
               "results": results}
    if "duckdb" in walls and "postgres" in walls and walls["postgres"]:
        summary["duckdb_over_postgres"] = round(walls["duckdb"] / walls["postgres"], 2)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0
    for result in results:
        first_created = min((r["created_s"] for r in result["runs"]), default=0.0)
        print(f"{result['backend']}: backfill of {result['partitions']} source partitions {result['backfill_status']} "
              f"in {result['wall_s']} s from launch ({first_created} s until the daemon created its runs; "
              f"runs overlap: {result['runs_overlap']})")
        for r in result["runs"]:
            print(f"  {r['partition']:<14} {r['status']:<8} created {r['created_s']:>6} s, ran {r['start_s']:>6} s -> "
                  f"{r['end_s']:>6} s  " + ", ".join(f"{step} {s} s" for step, s in r["steps_s"].items()))
    if "duckdb_over_postgres" in summary:
        print(f"DuckDB (serial) / PostgreSQL (parallel) wall time: {summary['duckdb_over_postgres']}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
