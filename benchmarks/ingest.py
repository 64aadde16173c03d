"""Ingestion speed on the sample corpus and the httpx docs: parse docs/s, embed chunks/s against a
raw encode of the same texts in the same process, and what a user waits for in fresh processes.

    python benchmarks/ingest.py [--json] [--parse-only] [--cli-only] [--rounds N] [--cli-rounds N]
                                [--before CHECKOUT] [--no-page]

Runs the core stages directly (the Dagster assets call the same functions), each corpus into a
fresh DuckDB file under benchmarks/out/ingest/. Before that, parse docs/s of the Markdown, HTML
and text files with unstructured's default options (the call before) against the pipeline's path
(Markdown and text read by their structure, HTML with `parsing._PARTITION_OPTIONS`): same pages,
this process, the two calls alternating
in order over N rounds (3 unless told), medians reported; `--parse-only` stops there.

What a user pays is timed too, end to end in fresh processes, as users run the pipeline: with a
persistent Dagster instance (DAGSTER_HOME set to a new folder holding this repository's
dagster.yaml, as `make demo` and the UI have). `rag-pipeline ingest` on a copy of the httpx 0.23
docs (a new store: the full build; again: no change; after appending a paragraph to one page: a
one-page edit), then `rag-pipeline search` of one question; each `--cli-rounds` times (3 unless
told), medians of wall seconds and of CPU seconds of each command's process tree, and each case as a
share of the full build (of the medians, and the median of
each round's own share). `--before CHECKOUT` runs the same rounds with the code of another
checkout of this repository (its `rag_pipeline` first on the path, this interpreter and its
packages), alternating with this code round by round, and shows both side by side. Then,
untimed, the DuckDB connections each case opens with this code (`duckdb.connect` counted).
`--cli-only` runs just that. The figures are written into docs/performance.md
(`performance_page.write_section`) unless `--no-page`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.api import (  # noqa: E402
    EmbeddingConfig,
    duckdb_store,
    ingest_source,
    load_config,
    make_embedder,
)
from rag_pipeline.config import PROJECT_ROOT  # noqa: E402
from rag_pipeline.core.ingestion.discovery import discover_files  # noqa: E402
from rag_pipeline.core.ingestion.parsing import ParseJob, parse_job, warm_up  # noqa: E402

# The shared datasets beside the checkout, or beside a folder holding it (a git worktree's).
DATASETS = next((p / "shared" / "datasets" for p in PROJECT_ROOT.parents if (p / "shared" / "datasets").is_dir()),
                PROJECT_ROOT.parent / "shared" / "datasets")
HTTPX = DATASETS / "httpx-docs" / "v0.23.0"
PARSE_TYPES = ("md", "html", "txt")


def parse_jobs(root: Path) -> list[ParseJob]:
    return [ParseJob(f.doc_id, f.rel_path, f.file_type, Path(f.abs_path).read_bytes(), f.content_hash, f.meta.title)
            for f in discover_files("bench", root) if f.file_type in PARSE_TYPES and not f.skip_reason and not f.error]


def bench_parse_options(name: str, jobs: list[ParseJob], rounds: int) -> dict:
    """docs/s of whole passes over `jobs` with unstructured's defaults and with the pipeline's
    options, alternating which goes first. A pass classifies more distinct texts than
    unstructured's spaCy cache holds (128), so neither call is served from the other's work."""
    seconds: dict[str, list[float]] = {"default": [], "fast": []}
    for round_ in range(rounds):
        for which in ("default", "fast") if round_ % 2 == 0 else ("fast", "default"):
            started = time.perf_counter()
            for job in jobs:
                parse_job(job, parser_defaults=which == "default")
            seconds[which].append(time.perf_counter() - started)
    rates = {which: sorted(len(jobs) / s for s in values) for which, values in seconds.items()}
    default, fast = statistics.median(rates["default"]), statistics.median(rates["fast"])
    return {"corpus": name, "documents": len(jobs), "rounds": rounds, "default_docs_per_s": default,
            "fast_docs_per_s": fast, "speedup": fast / default, "default_rounds": rates["default"],
            "fast_rounds": rates["fast"]}


def parse_option_rows(rounds: int) -> list[dict]:
    corpora = {"httpx 0.23 docs": parse_jobs(HTTPX), "sample corpus (md, html, txt)": parse_jobs(PROJECT_ROOT / "data" / "corpus")}
    # Untimed: import the partitioners, load spaCy, and langdetect for the default call.
    for file_type in PARSE_TYPES:
        warm_up(file_type)
    for jobs in corpora.values():
        for file_type in PARSE_TYPES:
            for job in [j for j in jobs if j.file_type == file_type][:1]:
                parse_job(job, parser_defaults=True)
                parse_job(job)
    return [bench_parse_options(name, jobs, rounds) for name, jobs in corpora.items()]


def parse_worker_rows(rounds: int) -> list[dict]:
    """The pipeline's parse stage (`parse_source`: reading, hashing, the worker round trips, the
    staging writes) with one and with two parser workers, started and warm before timing,
    alternating in one process; medians of docs/s."""
    import tempfile as _tempfile

    from rag_pipeline.api import LifecycleConfig, SourceConfig
    from rag_pipeline.core.ingestion.parse_worker import shared_parsers
    from rag_pipeline.core.ingestion.stages import discover_source, parse_source

    for worker in shared_parsers(2):  # untimed: each worker imports its partitioners and loads spaCy
        worker.parse(ParseJob("w:w.md", "w.md", "md", b"# Warm\n\nup.\n", "h"), 600)
    corpora = {"httpx 0.23 docs": HTTPX, "httpx 0.28 docs": HTTPX.parent / "v0.28.1"}
    rates: dict[tuple[str, int], list[float]] = {}
    for round_ in range(rounds):
        for name, root in corpora.items():
            for workers in (1, 2) if round_ % 2 == 0 else (2, 1):
                with _tempfile.TemporaryDirectory() as folder:
                    store = duckdb_store(Path(folder) / "index.duckdb")
                    source = SourceConfig(name="bench", path=root, parse_workers=workers)
                    discover_source(source, store, LifecycleConfig(), "bench")
                    started = time.perf_counter()
                    report = parse_source(source, store, "bench")
                    rates.setdefault((name, workers), []).append(report.counts["parsed"] / (time.perf_counter() - started))
                    store.close()
    rows = []
    for name in corpora:
        one, two = statistics.median(rates[(name, 1)]), statistics.median(rates[(name, 2)])
        rows.append({"corpus": name, "one_worker_docs_per_s": one, "two_workers_docs_per_s": two, "speedup": two / one})
    return rows


def bench_corpus(name: str, config, out: Path, embedder) -> dict:
    if out.exists():
        shutil.rmtree(out)
    store = duckdb_store(out / "index.duckdb")
    full = {"parse_s": 0.0, "embed_s": 0.0, "total_s": 0.0, "docs": 0, "chunks": 0}
    for source in config.sources:
        started = time.perf_counter()
        reports = ingest_source(source, store, embedder, config.chunking, config.lifecycle, "bench-full")
        full["total_s"] += time.perf_counter() - started
        full["parse_s"] += reports["parsed"].seconds
        full["embed_s"] += reports["embedded"].seconds
        full["docs"] += reports["parsed"].counts["parsed"]
        full["chunks"] += reports["embedded"].counts["embedded"]
    rerun_s = 0.0
    rerun_embedded = 0
    for source in config.sources:
        started = time.perf_counter()
        reports = ingest_source(source, store, embedder, config.chunking, config.lifecycle, "bench-rerun")
        rerun_s += time.perf_counter() - started
        rerun_embedded += reports["embedded"].counts["embedded"]
    with store.db.connection() as con:
        texts = [row[0] for row in con.execute("SELECT embed_text FROM staged_chunks ORDER BY chunk_id").fetchall()]
    started = time.perf_counter()
    embedder.encode(texts)
    raw_s = time.perf_counter() - started
    return {
        "corpus": name,
        "documents": full["docs"],
        "chunks": full["chunks"],
        "parse_docs_per_s": full["docs"] / full["parse_s"] if full["parse_s"] else None,
        "embed_stage_chunks_per_s": full["chunks"] / full["embed_s"] if full["embed_s"] else None,
        "raw_encode_chunks_per_s": len(texts) / raw_s if raw_s else None,
        "embed_overhead_pct": (full["embed_s"] - raw_s) / raw_s * 100 if raw_s else None,
        "full_run_s": full["total_s"],
        "no_change_rerun_s": rerun_s,
        "rerun_embedded": rerun_embedded,
        "rerun_share_pct": rerun_s / full["total_s"] * 100,
    }


def _cli_env(code: Path | None = None) -> dict:
    """The environment of the command-line cases: offline; the code of checkout `code` when given."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1",
           "RAG_PIPELINE_WARM": "0"}  # an older checkout's warm process must not serve its commands
    env.pop("DAGSTER_HOME", None)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(code), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _run_cli(interpreter: Sequence[str], config: Path, env: dict, command: Sequence[str]):
    """Run one `rag-pipeline` command (`ingest` unless told) in a fresh `python *interpreter`, timed
    as a whole process tree (`performance_page.Timed`); an error that quotes its standard error."""
    from performance_page import timed

    command = command or ("ingest",)
    run = timed([sys.executable, *interpreter, command[0], "--config", str(config), *command[1:]], env=env,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=config.parent)
    if run.done.returncode != 0:
        raise RuntimeError(f"rag-pipeline {command[0]} failed: {run.done.stderr[-2000:]}")
    return run


def _cli_ingest(config: Path, env: dict, *command: str) -> tuple[float, float]:
    """Wall seconds and CPU seconds of the process tree of one `rag-pipeline` command in a fresh
    process (`ingest` unless told)."""
    run = _run_cli(["-m", "rag_pipeline.cli"], config, env, command)
    return run.wall_s, run.cpu_s


CLI_CASES = ("full build", "no change", "one page edited", "search, one question")
SEARCH_QUESTION = "how do I set a timeout on a client"


def _cli_round(env: dict, cases: dict[str, list], run=None) -> None:
    """A full build of a fresh copy of the httpx docs with a new Dagster instance, a no-change run,
    a one-page edit, then a search of one question; each case's `run(config, env, *command)` (its
    seconds unless told)."""
    from performance_page import fresh_workspace

    run = run or _cli_ingest
    with tempfile.TemporaryDirectory() as folder:
        config, docs, home = fresh_workspace(Path(folder), HTTPX, "httpx")
        env = {**env, "DAGSTER_HOME": str(home)}
        cases["full build"].append(run(config, env))
        cases["no change"].append(run(config, env))
        page = docs / "quickstart.md"
        page.write_text(page.read_text() + "\n\nA paragraph added to time a one-page edit.\n")
        cases["one page edited"].append(run(config, env))
        cases["search, one question"].append(run(config, env, "search", SEARCH_QUESTION))


# The command line in an interpreter whose `duckdb.connect` is counted; the count is its last line.
_COUNTING_CLI = """
import atexit, runpy, sys, duckdb
opened = []
connect = duckdb.connect
def counted(*args, **kwargs):
    opened.append(1)
    return connect(*args, **kwargs)
duckdb.connect = counted
atexit.register(lambda: print(f"duckdb connects: {len(opened)}", file=sys.stderr))
sys.argv[0] = "rag-pipeline"
runpy.run_module("rag_pipeline.cli", run_name="__main__")
"""


def _cli_connects(config: Path, env: dict, *command: str) -> int:
    """DuckDB connections one `rag-pipeline` command opens (an untimed run)."""
    stderr = _run_cli(["-c", _COUNTING_CLI], config, env, command).done.stderr
    return int(stderr.strip().splitlines()[-1].removeprefix("duckdb connects: "))


def cli_connection_counts() -> dict[str, int]:
    """DuckDB connections each command-line case opens, in one untimed round with this code."""
    cases: dict[str, list] = {name: [] for name in CLI_CASES}
    _cli_round(_cli_env(), cases, run=_cli_connects)
    return {name: counts[0] for name, counts in cases.items()}


def _rows(cases: dict[str, list[tuple[float, float]]]) -> dict[str, dict]:
    """Per case, from its rounds' (wall, CPU) seconds: the medians, each round, and the case's share
    of the full build (wall)."""
    fulls = [wall for wall, _ in cases["full build"]]
    full = statistics.median(fulls)
    rows = {}
    for name, runs in cases.items():
        walls, cpus = [wall for wall, _ in runs], [cpu for _, cpu in runs]
        # Each round's case against the same round's full build: paired, so that a drift of the
        # machine's speed between rounds moves both.
        rows[name] = {"median_s": round(statistics.median(walls), 2), "runs_s": [round(x, 2) for x in walls],
                      "cpu_median_s": round(statistics.median(cpus), 2), "cpu_runs_s": [round(x, 2) for x in cpus],
                      "share_of_full_pct": round(100 * statistics.median(walls) / full, 1),
                      "paired_share_pct": round(100 * statistics.median(x / f for x, f in zip(walls, fulls)), 1)}
    return rows


def bench_cli(rounds: int, before: Path | None = None) -> dict[str, dict[str, dict]]:
    """The command-line cases with this code ("after") and, given `before`, with that checkout's,
    alternating round by round (which goes first alternates too)."""
    versions = {"after": _cli_env()}
    if before is not None:
        versions["before"] = _cli_env(before.resolve())
    cases = {version: {name: [] for name in CLI_CASES} for version in versions}
    names = list(versions)
    for round_ in range(rounds):
        for version in names if round_ % 2 == 0 else names[::-1]:
            _cli_round(versions[version], cases[version])
    return {version: _rows(found) for version, found in cases.items()}


def cli_table(cli: dict[str, dict[str, dict]], before: Path | None) -> str:
    """The command-line figures as markdown: before and after side by side when both ran."""
    versions = [v for v in ("before", "after") if v in cli]
    label = {"before": f"before ({_commit(before)})" if before else "before", "after": f"after ({_commit(PROJECT_ROOT)})"}
    header = "| `rag-pipeline`, httpx 0.23 docs, fresh process, DAGSTER_HOME set | " + " | ".join(
        f"{label[v]}: wall median s | CPU median s | share of the full build (wall) | median of each round's share"
        for v in versions) + " | DuckDB connections (after) | runs (wall, CPU s) |"
    lines = [header, "|---|" + "---|---|---|---|" * len(versions) + "---|---|"]
    for name in CLI_CASES:
        cells = []
        for version in versions:
            row = cli[version][name]
            cells += [f"{row['median_s']:.2f}", f"{row['cpu_median_s']:.2f}", f"{row['share_of_full_pct']:.1f}%",
                      f"{row['paired_share_pct']:.1f}%"]
        runs = "; ".join(f"{v}: " + ", ".join(f"({w}, {c})" for w, c in zip(cli[v][name]["runs_s"], cli[v][name]["cpu_runs_s"]))
                         for v in versions)
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {cli['after'][name].get('duckdb_connects', '')} | {runs} |")
    return "\n".join(lines)


def _commit(checkout: Path) -> str:
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(checkout), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (done.stdout.strip() or str(checkout)) + (", with changes" if dirty else "")


def main() -> int:
    from performance_page import machine_load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--parse-only", action="store_true", help="only the parse options comparison")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the parse options comparison")
    parser.add_argument("--cli-only", action="store_true", help="only the end-to-end command-line timings")
    parser.add_argument("--cli-rounds", type=int, default=3, help="fresh-process rounds of each command-line case")
    parser.add_argument("--before", type=Path, help="a checkout of the code to compare with (e.g. a worktree of main)")
    parser.add_argument("--no-page", action="store_true", help="print only; leave docs/performance.md as it is")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    results: dict = {}
    sections: list[str] = []
    if args.cli_rounds:  # --cli-rounds 0: skip them
        cli = results["cli"] = bench_cli(args.cli_rounds, args.before)
        for name, count in cli_connection_counts().items():
            cli["after"][name]["duckdb_connects"] = count
        sections.append(f"What a user waits for, {args.cli_rounds} rounds, medians; wall seconds, and CPU seconds (user + "
                        "system) of each command's whole process tree:\n\n" + cli_table(cli, args.before))
    if not args.cli_only:
        parse_rows = results["parse_options"] = parse_option_rows(args.rounds)
        lines = [f"| corpus | docs | parse docs/s, unstructured defaults | parse docs/s, pipeline options | speed-up |"
                 f" (median of {args.rounds} alternating rounds, one process)", "|---|---|---|---|---|"]
        lines += [f"| {r['corpus']} | {r['documents']} | {r['default_docs_per_s']:.2f} | {r['fast_docs_per_s']:.2f} | "
                  f"{r['speedup']:.2f}x |" for r in parse_rows]
        worker_rows = results["parse_workers"] = parse_worker_rows(args.rounds)
        lines += ["", f"| corpus | parse stage docs/s, one worker | two workers | speed-up | (median of {args.rounds} "
                      "alternating rounds)", "|---|---|---|---|"]
        lines += [f"| {r['corpus']} | {r['one_worker_docs_per_s']:.2f} | {r['two_workers_docs_per_s']:.2f} | "
                  f"{r['speedup']:.2f}x |" for r in worker_rows]
        sections.append("\n".join(lines))
    if not (args.cli_only or args.parse_only):
        embedder = make_embedder(EmbeddingConfig())
        embedder.encode(["warm-up: load the model before timing"])
        sample = load_config(PROJECT_ROOT / "data" / "pipeline.yaml")
        httpx = sample.model_copy(update={"sources": ()}).with_sources({"httpx": HTTPX})
        out = PROJECT_ROOT / "benchmarks" / "out" / "ingest"
        rows = results["ingest"] = [bench_corpus("sample corpus", sample, out / "sample", embedder),
                                    bench_corpus("httpx 0.23 docs", httpx, out / "httpx", embedder)]
        lines = ["| corpus | docs | chunks | parse docs/s | embed stage chunks/s | raw encode chunks/s | embed overhead | "
                 "full run s | no-change re-run s |", "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['corpus']} | {r['documents']} | {r['chunks']} | {r['parse_docs_per_s']:.1f} | "
                  f"{r['embed_stage_chunks_per_s']:.1f} | {r['raw_encode_chunks_per_s']:.1f} | {r['embed_overhead_pct']:+.1f}% | "
                  f"{r['full_run_s']:.1f} | {r['no_change_rerun_s']:.2f} ({r['rerun_share_pct']:.1f}%, embedded "
                  f"{r['rerun_embedded']}) |" for r in rows]
        sections.append("The core stages in one process (no Dagster):\n\n" + "\n".join(lines))
    body = "\n\n".join(sections)
    body += "\n\n" + machine_load(load_at_start)
    print(json.dumps(results, indent=2) if args.json else body)
    if not args.no_page and sections:
        from performance_page import write_section

        write_section("Ingestion and the command line", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
