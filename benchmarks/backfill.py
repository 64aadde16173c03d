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

    python benchmarks/backfill.py --executor celery --workers 3 [--rounds 3] [--embedder hashing] [--json]

runs the same backfill on two paths, `--rounds` times each (3 unless told; which path goes first
alternates): the in-process DuckDB path (`duckdb`), and the instance and the store in PostgreSQL
with every step sent to Celery workers (a Redis broker and N `dagster-celery` workers started
here, rag_pipeline_tests/harness/celery_deployment.py). Without `--copies`, the sources are 12
small folders made from the shared datasets. Each path of each round is measured whole: wall from
the backfill's launch, and CPU seconds of its process tree (every process it starts, daemons,
PostgreSQL and Redis included: performance_page.tree_cpu) with the load before and after. It
prints the medians, the steps and runs each worker took, and whether each Celery build serves
exactly what the round's DuckDB build serves (`equal_to_serial`), and writes them into
docs/performance.md unless `--no-page`.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from contextlib import ExitStack
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


def _measured(path: str, run_path) -> dict:
    """One path of a round: the 1-minute load before and after, the wall of the whole path (its
    processes started and stopped) and the CPU of its process tree (performance_page.tree_cpu)."""
    from performance_page import tree_cpu

    load_before = round(os.getloadavg()[0], 1)
    started = time.perf_counter()
    with tree_cpu(f"backfill-{path}") as cpu:
        result = run_path()
    return {**result, "path_wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(cpu.cpu_s, 1),
            "cpu_method": cpu.method, "load_before_after": [load_before, round(os.getloadavg()[0], 1)]}


def celery_round(args, raw: dict, work: Path, order: tuple[str, ...]) -> dict:
    """Both paths once, in `order`, each on a fresh instance and store: the in-process DuckDB backfill
    and the Celery one (its PostgreSQL server, Redis and workers started inside its measure); then
    whether the two builds serve the same content."""
    work.mkdir(parents=True, exist_ok=True)  # the server's folder needs its parent, whichever path goes first
    with ExitStack() as stack:
        served: dict[str, str] = {}

        def distributed() -> dict:
            served["dsn"] = stack.enter_context(postgres_server(work / "pgdata"))  # stopped after the comparison
            return run_celery(raw, work / "celery", served["dsn"], args.workers, args.timeout)

        paths = {"duckdb": lambda: run("duckdb", raw, work / "duckdb", REPO, args.timeout, args.launch_after, None),
                 "celery": distributed}
        results = {path: _measured(path, paths[path]) for path in order}
        equal, differences = equal_to_serial(results["celery"].pop("config"), work / "duckdb" / "pipeline.yaml",
                                             served["dsn"])
    return {"order": list(order), **results, "equal_to_serial": equal, "differences": differences}


def _path_figures(rounds: list[dict], path: str) -> dict:
    """Per path: the medians over the rounds and each round's figures."""
    each = [r[path] for r in rounds]
    return {"wall_s": [r["wall_s"] for r in each], "path_wall_s": [r["path_wall_s"] for r in each],
            "cpu_s": [r["cpu_s"] for r in each], "load_before_after": [r["load_before_after"] for r in each],
            "wall_median_s": statistics.median(r["wall_s"] for r in each),
            "path_wall_median_s": statistics.median(r["path_wall_s"] for r in each),
            "cpu_median_s": statistics.median(r["cpu_s"] for r in each),
            "runs": [len(r["runs"]) for r in each], "steps": [sum(len(x["steps_s"]) for x in r["runs"]) for r in each],
            "backfill_status": [r["backfill_status"] for r in each]}


def main_celery(args, raw: dict, work: Path) -> int:
    """`--executor celery`: the in-process DuckDB backfill and the Celery backfill, compared over
    `--rounds` rounds (which path goes first alternates)."""
    rounds = []
    for index in range(args.rounds):
        order = ("duckdb", "celery") if index % 2 == 0 else ("celery", "duckdb")
        rounds.append(celery_round(args, raw, work / f"round-{index + 1}", order))
        print(f"round {index + 1}: " + "; ".join(f"{p} {rounds[-1][p]['wall_s']} s from launch, {rounds[-1][p]['cpu_s']} CPU s"
                                                 for p in order), file=sys.stderr, flush=True)
    summary = {
        "executor": "celery", "workers": args.workers, "sources": len(raw["sources"]), "rounds": len(rounds),
        "embedder": raw.get("embedding", {}).get("kind", "sentence-transformers"),
        "cpu_method": rounds[0]["duckdb"]["cpu_method"], "order": [r["order"] for r in rounds],
        "in_process_duckdb": _path_figures(rounds, "duckdb"), "celery": _path_figures(rounds, "celery"),
        "steps_per_worker": [r["celery"]["steps_per_worker"] for r in rounds],
        "runs_per_worker": [r["celery"]["runs_per_worker"] for r in rounds],
        "equal_to_serial": all(r["equal_to_serial"] for r in rounds),
        "differences": [d for r in rounds for d in r["differences"]],
    }
    ok = summary["equal_to_serial"] and all(s == "COMPLETED_SUCCESS" for s in summary["celery"]["backfill_status"])
    if not args.no_page:
        write_page(summary, args)
    if args.json:
        print(json.dumps(summary, indent=2))
        return 0 if ok else 1
    print(f"{summary['sources']} source partitions, embedder {summary['embedder']}, {len(rounds)} rounds")
    for label, path in (("in-process DuckDB", "in_process_duckdb"), (f"Celery x{args.workers} on PostgreSQL", "celery")):
        figures = summary[path]
        print(f"{label}: {figures['backfill_status']}, medians {figures['wall_median_s']} s from launch, "
              f"{figures['cpu_median_s']} CPU s; rounds {figures['wall_s']} s, {figures['cpu_s']} CPU s")
    print(f"equal to the serial DuckDB build in every round: {summary['equal_to_serial']}"
          + "".join(f"\n  {d}" for d in summary["differences"]))
    return 0 if ok else 1


def _rounds_text(values: list) -> str:
    return ", ".join(str(v) for v in values)


def write_page(summary: dict, args) -> None:
    """The figures as the Celery section of docs/performance.md."""
    from performance_page import write_section

    rows = []
    for label, path in (("in-process, DuckDB store, SQLite instance", "in_process_duckdb"),
                        (f"Celery, {args.workers} workers, Redis broker, PostgreSQL store and instance", "celery")):
        f = summary[path]
        each = "; ".join(f"{w}, {c}" for w, c in zip(f["wall_s"], f["cpu_s"]))
        load = "; ".join(f"{a} / {b}" for a, b in f["load_before_after"])
        rows.append(f"| {label} | {f['wall_median_s']} | {f['cpu_median_s']} | {f['path_wall_median_s']} | "
                    f"{_rounds_text(sorted(set(f['runs'])))} | {_rounds_text(sorted(set(f['steps'])))} | {each} | {load} |")
    workers = sorted({w for taken in summary["steps_per_worker"] for w in taken})
    worker_rows = "\n".join(f"| `{w}` | {_rounds_text([taken.get(w, 0) for taken in summary['steps_per_worker']])} | "
                            f"{_rounds_text([taken.get(w, 0) for taken in summary['runs_per_worker']])} |" for w in workers)
    ratio_cpu = summary["celery"]["cpu_median_s"] / summary["in_process_duckdb"]["cpu_median_s"]
    ratio_wall = summary["celery"]["wall_median_s"] / summary["in_process_duckdb"]["wall_median_s"]
    body = (
        f"An asset backfill of {summary['sources']} "
        f"source partitions ({'copies of the httpx 0.23 docs' if args.copies else 'small folders: the httpx 0.23 pages and SciFact abstracts dealt round-robin'}), launched "
        f"through GraphQL as the UI launches it; embedder: "
        f"{'the hashing embedder' if summary['embedder'] == 'hashing' else 'the bundled MiniLM'}. "
        f"{summary['rounds']} rounds, the two paths alternating (which goes first alternates), each on a fresh "
        f"instance and store; medians. Wall from launch: the backfill's launch to its last run's end. CPU s: user + "
        f"system of the path's whole process tree, from the start of its processes to their stop (the webserver, "
        f"the daemon, the run processes; for Celery also the workers, Redis and PostgreSQL), measured by "
        f"{summary['cpu_method']}. Path wall: that same span on the clock.\n\n"
        f"| path | wall from launch s | CPU s | path wall s | runs | steps | each round (wall from launch, CPU s) | "
        f"load average before / after, each round |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n"
        + "\n".join(rows) + "\n\n"
        f"Celery / in-process (medians): {ratio_wall:.2f}x the wall from launch, {ratio_cpu:.2f}x the CPU.\n\n"
        f"| Celery worker | steps, each round | of runs, each round |\n| --- | --- | --- |\n{worker_rows}\n\n"
        f"Served content of the Celery build equal to the in-process DuckDB build's in every round (manifest, documents, "
        f"chunks, postings, vectors, embedding cache, ledger; run ids and times left out): "
        f"**{'yes' if summary['equal_to_serial'] else 'no: ' + '; '.join(summary['differences'])}**. "
        f"Both paths use the instance's run queue: with PostgreSQL up to 4 runs at once, each handing its steps "
        f"to the workers; with DuckDB one source's switch at a time and every step in its run's process. All "
        f"of it shares one machine's 2 cores, so this measures the distributed path's overhead and correctness "
        f"here, not what more machines gain; the CPU seconds are what a loaded machine moves least."
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
    parser.add_argument("--rounds", type=int, default=3,
                        help="with --executor celery: rounds of both paths, alternating which goes first (medians)")
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
