"""A backfill of the ingestion assets over source partitions, through a real Dagster deployment.

For each backend, starts `dagster-webserver` and `dagster-daemon` on a fresh instance and a fresh
store (tools/local_deployment.py), launches an asset backfill of every source partition through
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
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.local_deployment import deployment, pipeline_config, postgres_server  # noqa: E402

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
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sources = {f"httpx_{i:02d}": HTTPX for i in range(args.copies)} if args.copies else None
    raw = pipeline_config(Path(args.config).resolve(), sources)
    if args.embedder == "hashing":
        raw["embedding"] = {"kind": "hashing"}
    work = Path(tempfile.mkdtemp(prefix="backfill-"))
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
