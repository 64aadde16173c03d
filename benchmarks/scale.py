"""The cost curve: a full build, a no-change run, a one-document edit and a 1% deletion on a corpus
of N documents, with peak memory and the store's size on disk.

    python benchmarks/scale.py --docs N [--backend duckdb|postgres] [--rounds R] [--json] [--page]

The corpus is made from the shared datasets' texts (SciFact abstracts, SQuAD and PubMedQA
contexts) under /tmp/rag-scale/ (never in the repository): document i is a title and a run of
three to six consecutive sentences of one passage, as `.md` (a `#` heading) or `.txt`; start and
length vary, so no two documents (and no two chunks) share a text and the embedding cache finds
nothing to reuse on a full build. A thousand documents per folder.

Every case runs in a fresh process (`--phase`), as a user's run would, through the core stages the
Dagster assets call (`stages.ingest_source`) with the real embedder (ONNX Runtime, the bundled
MiniLM). The full build's process then encodes the same chunk texts again, straight through the
embedder (`raw_encode_s`): the floor a build cannot go below. Peak RSS is the largest of the
processes' own peaks (the parser workers' are not counted). `--raw-sample F` encodes every
(1/F)-th chunk instead and scales the time up (the page says so), for sizes where encoding every
chunk twice does not fit the time there is. After the full build, each incremental case runs
`--rounds` times (3 unless told), each round in a fresh process timed whole (wall, and CPU seconds of
its process tree, on PostgreSQL with the server's CPU meanwhile added): the no-change run, then an
edit of another document each round, then a deletion of
another 1% each round; the row keeps the round of the median seconds and the page every round, with
the load before and after each case. The store's size is the DuckDB file, or
the PostgreSQL schema's relations. Results are appended to benchmarks/results/scale.jsonl, kept in
the repository (a row at 100k documents costs hours to make again); `--page` draws the curve from
that file (docs/performance-scale.png) and writes the section of docs/performance.md (scale_page.py). The code
measured is the `rag_pipeline` the interpreter imports (this checkout's, through the editable
install); to measure an older checkout, set PYTHONPATH to it and add `--before`: the row records
that checkout's commit and the page shows it beside the current row of the same size.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

ROOT = Path(__file__).resolve().parent.parent
# ../shared/datasets from the repository; from a worktree nested deeper, the nearest one above it.
DATASETS = next((p / "shared" / "datasets" for p in ROOT.parents if (p / "shared" / "datasets").is_dir()),
                ROOT.parent / "shared" / "datasets")
# RAG_SCALE_WORK: another folder, for sessions measuring on one machine at once (each its own copies).
WORK = Path(os.environ.get("RAG_SCALE_WORK", "/tmp/rag-scale"))
RESULTS = ROOT / "benchmarks" / "results" / "scale.jsonl"
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z(])")
PER_FOLDER = 1000


# --- The corpus ---------------------------------------------------------------------------------


def _passages() -> list[tuple[str, list[str]]]:
    """(title, sentences) of every passage of the three datasets, in a fixed order."""
    passages = []
    for name in ("beir-scifact", "squad2-sample500", "pubmedqa-pqal"):
        with open(DATASETS / name / "corpus.jsonl") as handle:
            for line in handle:
                record = json.loads(line)
                sentences = [s.strip() for s in _SENTENCE.split(record["text"]) if s.strip()]
                if len(sentences) >= 3:
                    title = record["title"].strip() or " ".join(sentences[0].split()[:8])
                    passages.append((title, sentences))
    return passages


def _documents(count: int) -> list[tuple[str, list[str]]]:
    """`count` distinct (title, body sentences): runs of 3 to 6 sentences, every start of every
    passage before any passage is used twice with another length."""
    passages = _passages()
    runs = [(p, start, length) for length in (4, 3, 5, 6) for p, (_, s) in enumerate(passages)
            for start in range(len(s) - length + 1)]
    if count > len(runs):
        raise SystemExit(f"--docs {count}: the datasets give {len(runs)} distinct documents at most")
    picked = runs[:count]
    random.Random(27).shuffle(picked)
    return [(passages[p][0], passages[p][1][start:start + length]) for p, start, length in picked]


def corpus_folder(count: int) -> Path:
    """The corpus folder of `count` documents (made once, reused while its marker is there)."""
    folder, marker = WORK / f"corpus-{count}", WORK / f"corpus-{count}.complete"
    if marker.exists():
        return folder
    shutil.rmtree(folder, ignore_errors=True)
    for index, (title, sentences) in enumerate(_documents(count)):
        sub = folder / f"part-{index // PER_FOLDER:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        body = " ".join(sentences)
        if index % 2:
            (sub / f"doc-{index:06d}.md").write_text(f"# {title}\n\n{body}\n")
        else:
            (sub / f"doc-{index:06d}.txt").write_text(f"{title}\n\n{body}\n")
    marker.write_text("")
    return folder


# --- One case, in its own process ---------------------------------------------------------------


def _store(spec: str):
    from rag_pipeline.api import Store, duckdb_store

    if spec.startswith("postgresql://"):
        from rag_pipeline.core.storage.postgres import PostgresDatabase

        dsn, schema = spec.rsplit("#", 1)
        return Store(PostgresDatabase(dsn, schema=schema))
    return duckdb_store(spec)


def run_phase(phase: str, corpus: Path, store_spec: str, raw_sample: float = 1.0, embedder_kind: str = "minilm") -> dict:
    """One ingestion of the corpus into the store; for `full`, then the raw encode of its chunks
    (of every `1 / raw_sample`-th chunk, scaled up, when `raw_sample` < 1)."""
    from rag_pipeline.api import ChunkingConfig, EmbeddingConfig, LifecycleConfig, SourceConfig, ingest_source, make_embedder

    store = _store(store_spec)
    embedder = make_embedder(EmbeddingConfig(kind="hashing") if embedder_kind == "hashing" else EmbeddingConfig())
    source = SourceConfig(name="scale", path=corpus)
    started = time.perf_counter()
    reports = ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), f"scale-{phase}")
    result = {"phase": phase, "seconds": time.perf_counter() - started,
              "stages_s": {name: round(report.seconds, 2) for name, report in reports.items()},
              "counts": {name: report.counts for name, report in reports.items()}}
    if phase == "full":
        # The chunk texts as the embedder got them.
        texts = [row[0] for row in store.db.rows("SELECT embed_text FROM staged_chunks")]
        sample = texts[:: max(round(1 / raw_sample), 1)]
        started = time.perf_counter()
        embedder.encode(sample)
        result["raw_encode_s"] = (time.perf_counter() - started) * len(texts) / len(sample)
        result["raw_encoded"] = len(sample)
        result["chunks"] = len(texts)
        result["distinct_chunk_texts"] = len(set(texts))
    store.close()
    result["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return result


def _phase_process(phase: str, corpus: Path, store_spec: str, raw_sample: float, embedder: str,
                   server: int | None = None) -> dict:
    """One phase in a fresh process, timed whole; with `server` (the PostgreSQL server's pid), the
    CPU the server spent meanwhile is added to the process tree's (`server_cpu_s` alone)."""
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--corpus", str(corpus),
               "--store", store_spec, "--raw-sample", str(raw_sample), "--embedder", embedder]
    from performance_page import server_cpu_s, timed

    server_before = server_cpu_s(server) if server is not None else 0.0
    run = timed(command, capture_output=True, text=True, cwd=ROOT)
    server_spent = server_cpu_s(server) - server_before if server is not None else None
    if run.done.returncode != 0:
        raise SystemExit(f"{phase} failed:\n{run.done.stderr[-3000:]}")
    result = json.loads(run.done.stdout.strip().splitlines()[-1])
    # The process as a user waits for it (imports included), and the CPU of its whole tree (parser workers too).
    result["process_s"], result["cpu_s"] = round(run.wall_s, 2), round(run.cpu_s + (server_spent or 0.0), 2)
    if server_spent is not None:
        result["server_cpu_s"] = round(server_spent, 2)
    print(f"  {phase}: {result['seconds']:.1f} s (process {run.wall_s:.1f} s wall, {run.cpu_s:.1f} CPU s) "
          f"{result['stages_s']}", file=sys.stderr)
    return result


# --- A whole measurement ------------------------------------------------------------------------


def _edit_one(corpus: Path, round_: int = 0) -> Path:
    """Append a sentence to the `round_`-th document: each round edits another one."""
    target = sorted(corpus.glob("part-*/doc-*"))[round_]
    with open(target, "a") as handle:
        handle.write(f"\nThis sentence was added to measure a one-document edit (round {round_ + 1}).\n")
    return target


def _delete_share(corpus: Path, share: float, round_: int = 0) -> int:
    """Delete `share` of the documents there are, every (1/share)-th from the `round_`-th: each
    round deletes others."""
    files = sorted(corpus.glob("part-*/doc-*"))
    step = max(int(1 / share), 1)
    doomed = files[round_ % step:: step][: max(int(len(files) * share), 1)]
    for path in doomed:
        path.unlink()
    return len(doomed)


def _cases(phase: str, rounds: int, run, before_each=None) -> tuple[dict, dict]:
    """`rounds` runs of one incremental case (`before_each(round)` first changes the corpus): the
    round of the median seconds (its stages are the page's), and every round's figures."""
    load_before = os.getloadavg()
    results = []
    for round_ in range(rounds):
        if before_each is not None:
            before_each(round_)
        results.append(run())
    median = sorted(results, key=lambda r: r["seconds"])[(rounds - 1) // 2]  # the low median: a real round
    return median, {"rounds": rounds, "seconds": [round(r["seconds"], 2) for r in results],
                    "process_s": [r["process_s"] for r in results], "cpu_s": [r["cpu_s"] for r in results],
                    **({"server_cpu_s": [r["server_cpu_s"] for r in results]} if "server_cpu_s" in results[0] else {}),
                    "rss_mb": round(max(r["rss_mb"] for r in results), 1),
                    "load_before": [round(x, 2) for x in load_before],
                    "load_after": [round(x, 2) for x in os.getloadavg()]}


def _working_copy(count: int) -> Path:
    """A copy of the corpus that the edit and the deletion may change."""
    copy = WORK / f"work-{count}"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(corpus_folder(count), copy)
    return copy


def _size_mb(store_spec: str) -> float:
    if store_spec.startswith("postgresql://"):
        store = _store(store_spec)
        schema = store_spec.rsplit("#", 1)[1]
        size = store.db.value("SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                              "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ? "
                              "AND c.relkind IN ('r', 'm')", [schema])
        store.close()
        return int(size) / 2**20
    path = Path(store_spec)
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20


def measure(count: int, backend: str, raw_sample: float = 1.0, embedder: str = "minilm", rounds: int = 1) -> dict:
    """The full build, then `rounds` no-change runs, `rounds` one-document edits (another document
    each) and `rounds` 1% deletions (other documents each), each run in a fresh process."""
    corpus = _working_copy(count)
    folder = WORK / f"store-{backend}-{embedder}-{count}"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    server, server_pid = None, None
    if backend == "postgres":
        import pgserver

        server = pgserver.get_server(folder / "postgres", cleanup_mode="stop")
        store_spec = f"{server.get_uri()}#scale_{count}"
        server_pid = int((folder / "postgres" / "postmaster.pid").read_text().split()[0])
    else:
        store_spec = str(folder / "index.duckdb")
    load_start = os.getloadavg()
    try:
        full = _phase_process("full", corpus, store_spec, raw_sample, embedder, server_pid)
        cases, deleted_counts = {}, []

        def phase(name: str):
            return lambda: _phase_process(name, corpus, store_spec, 1.0, embedder, server_pid)

        no_change, cases["no_change"] = _cases("no_change", rounds, phase("no_change"))
        edit, cases["edit"] = _cases("edit", rounds, phase("edit"), lambda r: _edit_one(corpus, r))
        delete, cases["delete_1pct"] = _cases("delete_1pct", rounds, phase("delete_1pct"),
                                              lambda r: deleted_counts.append(_delete_share(corpus, 0.01, r)))
        deleted = deleted_counts[0]
        index_mb = _size_mb(store_spec)
    finally:
        if server is not None:
            server.cleanup()
    phases = [full, no_change, edit, delete]
    docs = full["counts"]["parsed"].get("parsed", 0)
    return {
        "docs": docs, "backend": backend, "embedder": embedder, "chunks": full["chunks"],
        "distinct_chunk_texts": full["distinct_chunk_texts"],
        "full_s": round(full["seconds"], 2), "raw_encode_s": round(full["raw_encode_s"], 2),
        "raw_encoded_chunks": full["raw_encoded"],
        "full_over_raw_encode": round(full["seconds"] / full["raw_encode_s"], 3),
        "docs_per_s": round(docs / full["seconds"], 2), "chunks_per_s": round(full["chunks"] / full["seconds"], 2),
        "raw_encode_chunks_per_s": round(full["chunks"] / full["raw_encode_s"], 2),
        "no_change_s": round(no_change["seconds"], 2), "edit_s": round(edit["seconds"], 2),
        "delete_1pct_s": round(delete["seconds"], 2), "deleted_docs": deleted,
        "no_change_share_pct": round(100 * no_change["seconds"] / full["seconds"], 2),
        "edit_share_pct": round(100 * edit["seconds"] / full["seconds"], 2),
        "peak_rss_mb": round(max([p["rss_mb"] for p in phases] + [c["rss_mb"] for c in cases.values()]), 1),
        "index_mb": round(index_mb, 1),
        "stages_s": {p["phase"]: p["stages_s"] for p in phases},
        "load_avg_start": [round(x, 1) for x in load_start], "load_avg_end": [round(x, 1) for x in os.getloadavg()],
        "full_process_s": full["process_s"], "full_cpu_s": full["cpu_s"], "full_server_cpu_s": full.get("server_cpu_s"),
        "rounds": rounds, "incremental": cases,
    }


def _revision() -> str:
    """The commit of the checkout whose `rag_pipeline` the phases import (`+changes` when its working
    tree differs from it): PYTHONPATH may point at another checkout than this script's."""
    import importlib.util

    checkout = Path(importlib.util.find_spec("rag_pipeline").origin).parent.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=checkout)
        return done.stdout.strip() if done.returncode == 0 else ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    return commit + ("+changes" if git("status", "--porcelain", "--untracked-files=no", "rag_pipeline") else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int)
    parser.add_argument("--backend", choices=("duckdb", "postgres"), default="duckdb")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--page", action="store_true", help="draw the curve and write docs/performance.md")
    parser.add_argument("--raw-sample", type=float, default=1.0,
                        help="raw-encode this share of the chunks (every k-th) and scale the time up")
    parser.add_argument("--embedder", choices=("minilm", "hashing"), default="minilm",
                        help="hashing: the deterministic test embedder, to measure what is not encoding "
                             "(no-change, edit, deletion, memory, size) at sizes the real model cannot reach here")
    parser.add_argument("--before", action="store_true",
                        help="mark the row as measured on code before a fix (shown beside the current one)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="runs of each incremental case (no change, one edit, 1%% deleted), each on other "
                             "documents; the row gives the median, the page every round")
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results file to append to and draw from")
    parser.add_argument("--phase", help=argparse.SUPPRESS)
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(run_phase(args.phase, args.corpus, args.store, args.raw_sample, args.embedder)))
        return 0
    from scale_page import BEFORE, _latest, write_page

    if args.docs:
        if args.rounds < 1:
            parser.error("--rounds must be at least 1")
        result = measure(args.docs, args.backend, args.raw_sample, args.embedder, args.rounds)
        result["docs_asked"] = args.docs
        result["revision"] = _revision()
        if args.before:
            result[BEFORE] = True
        args.results.parent.mkdir(parents=True, exist_ok=True)
        with open(args.results, "a") as handle:
            handle.write(json.dumps(result) + "\n")
        if args.json:
            print(json.dumps(result))
        else:
            for key, value in result.items():
                print(f"{key}: {value}")
    if args.page:
        results = [json.loads(line) for line in args.results.read_text().splitlines() if line.strip()]
        write_page([r for r in _latest(results) if r["docs_asked"] >= 1000], results)  # not the smoke runs
    if not args.docs and not args.page:
        parser.error("give --docs N, --page, or both")
    return 0


if __name__ == "__main__":
    sys.exit(main())
