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
its process tree): the no-change run, then an edit of another document each round, then a deletion of
another 1% each round; the row keeps the round of the median seconds and the page every round, with
the load before and after each case. The store's size is the DuckDB file, or
the PostgreSQL schema's relations. Results are appended to benchmarks/results/scale.jsonl, kept in
the repository (a row at 100k documents costs hours to make again); `--page` draws the curve from
that file (docs/performance-scale.png) and writes the section of docs/performance.md. The code
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
import statistics
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
PLOT = ROOT / "docs" / "performance-scale.png"
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


def _phase_process(phase: str, corpus: Path, store_spec: str, raw_sample: float, embedder: str) -> dict:
    command = [sys.executable, str(Path(__file__).resolve()), "--phase", phase, "--corpus", str(corpus),
               "--store", store_spec, "--raw-sample", str(raw_sample), "--embedder", embedder]
    from performance_page import timed

    run = timed(command, capture_output=True, text=True, cwd=ROOT)
    if run.done.returncode != 0:
        raise SystemExit(f"{phase} failed:\n{run.done.stderr[-3000:]}")
    result = json.loads(run.done.stdout.strip().splitlines()[-1])
    # The process as a user waits for it (imports included), and the CPU of its whole tree (parser workers too).
    result["process_s"], result["cpu_s"] = round(run.wall_s, 2), round(run.cpu_s, 2)
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
    server = None
    if backend == "postgres":
        import pgserver

        server = pgserver.get_server(folder / "postgres", cleanup_mode="stop")
        store_spec = f"{server.get_uri()}#scale_{count}"
    else:
        store_spec = str(folder / "index.duckdb")
    load_start = os.getloadavg()
    try:
        full = _phase_process("full", corpus, store_spec, raw_sample, embedder)
        cases, deleted_counts = {}, []

        def phase(name: str):
            return lambda: _phase_process(name, corpus, store_spec, 1.0, embedder)

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
        "full_process_s": full["process_s"], "full_cpu_s": full["cpu_s"],
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


# --- The page -----------------------------------------------------------------------------------

# Rows measured on the code before a fix, kept to compare with (`"before_fixes": true` in the row):
# the page shows them beside the current rows of the same size, never as the current figure.
BEFORE = "before_fixes"


def _key(row: dict) -> tuple:
    return row.get("embedder", "minilm"), row["backend"], row["docs_asked"]


def _latest(results: list[dict]) -> list[dict]:
    """The latest result of each (embedder, backend, docs), ordered by them."""
    latest = {_key(r): r for r in results if not r.get(BEFORE)}
    return [latest[key] for key in sorted(latest)]


def _before_after(results: list[dict], rows: list[dict]) -> list[str]:
    """A table of the rows measured before the fixes beside the current ones of the same size."""
    current = {_key(r): r for r in rows}
    pairs = [(r, current[_key(r)]) for r in results if r.get(BEFORE) and _key(r) in current]
    if not pairs:
        return []
    lines = ["| embedder | backend | docs | measured on | full build s | no change s | one edit s | 1% deleted s "
             "(switch s) | peak RSS MB | load at start |", "|---|---|---|---|---|---|---|---|---|---|"]
    for before, after in pairs:
        for row in (before, after):
            switch = row["stages_s"]["delete_1pct"].get("indexed", 0.0)
            lines.append(
                f"| {row.get('embedder', 'minilm')} | {row['backend']} | {row['docs']:,} | {row.get('revision', '?')} "
                f"| {row['full_s']:.1f} | {row['no_change_s']:.2f} | {row['edit_s']:.2f} | {row['delete_1pct_s']:.2f} "
                f"({switch:.2f}) | {row['peak_rss_mb']:.0f} | {row['load_avg_start'][0]} |")
    return lines


# The stages whose growth the page tabulates: (phase, stage).
_GROWTH = [("full", "discovered"), ("full", "parsed"), ("full", "chunked"), ("full", "embedded"), ("full", "indexed"),
           ("no_change", "discovered"), ("no_change", "indexed"), ("edit", "discovered"), ("edit", "indexed"),
           ("delete_1pct", "discovered"), ("delete_1pct", "indexed")]


def _growth(rows: list[dict], embedder: str = "hashing", backend: str = "duckdb") -> list[str]:
    """Seconds of each stage at each size of one (embedder, backend), and how much each grew per
    tenfold size: 10 is as fast as the corpus grows, 100 is with its square."""
    mine = sorted((r for r in rows if (r.get("embedder", "minilm"), r["backend"]) == (embedder, backend)),
                  key=lambda r: r["docs"])
    if len(mine) < 2:
        return []
    head = " | ".join(f"{r['docs']:,} docs s" for r in mine)
    steps = " | ".join(f"x ({a['docs']:,} to {b['docs']:,})" for a, b in zip(mine, mine[1:]))
    lines = [f"| run | stage | {head} | {steps} |", "|---|---|" + "---|" * (2 * len(mine) - 1)]
    for phase, stage in _GROWTH:
        seconds = [r["stages_s"][phase].get(stage, 0.0) for r in mine]
        factors = [f"{b / a:.1f}" if a >= 0.05 else "-" for a, b in zip(seconds, seconds[1:])]
        lines.append(f"| {phase.replace('_1pct', ' 1%').replace('_', '-')} | {stage} | "
                     + " | ".join(f"{x:.2f}" for x in seconds) + " | " + " | ".join(factors) + " |")
    lines.append("| load at start | 1 min, 2 cores | " + " | ".join(str(r["load_avg_start"][0]) for r in mine)
                 + " |" + " |" * (len(mine) - 1))
    return lines


def _rounds_flag(row: dict) -> str:
    return f" --rounds {row['rounds']}" if row.get("rounds", 1) > 1 else ""


_CASES = (("no_change", "no change"), ("edit", "one edit"), ("delete_1pct", "1% deleted"))


def _incremental(rows: list[dict]) -> list[str]:
    """Every round of the incremental cases of the rows that kept them: the run, the process's wall
    and the CPU of its process tree, medians first."""
    kept = [r for r in rows if r.get("incremental")]
    if not kept:
        return []
    lines = [
        "The incremental cases round by round (rows measured with `--rounds`; the others, one round each, kept "
        "the run's seconds alone). Each round is a fresh process; an edit round appends to another document, a "
        "deletion round deletes another 1%. run s: the ingestion call, as in the table above; process s: the "
        "whole process as a user waits for it (imports included); CPU s: user + system of its process tree "
        "(parser workers included). Medians, then each round:",
        "",
        "| embedder | backend | docs | case | rounds | run s | process s | CPU s | each round (run, process, CPU s) "
        "| load before / after (1, 5, 15 min) | measured on |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in kept:
        for phase, label in _CASES:
            case = r["incremental"][phase]
            each = "; ".join(f"{a:.2f}, {b:.2f}, {c:.2f}" for a, b, c in zip(case["seconds"], case["process_s"], case["cpu_s"]))
            lines.append(
                f"| {r.get('embedder', 'minilm')} | {r['backend']} | {r['docs']:,} | {label} | {case['rounds']} "
                f"| {statistics.median_low(case['seconds']):.2f} | {statistics.median(case['process_s']):.2f} "
                f"| {statistics.median(case['cpu_s']):.2f} | {each} | {', '.join(map(str, case['load_before']))} / "
                f"{', '.join(map(str, case['load_after']))} | {r.get('revision', '?')} |")
    return lines


def _sample_flag(row: dict) -> str:
    encoded = row.get("raw_encoded_chunks", row["chunks"])
    return "" if encoded >= row["chunks"] else f" --raw-sample {encoded / row['chunks']:.1f}"


def _sampled(row: dict) -> str:
    encoded = row.get("raw_encoded_chunks", row["chunks"])
    return "" if encoded >= row["chunks"] else f", from {encoded:,} chunks"


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    groups = sorted({(r.get("embedder", "minilm"), r["backend"]) for r in rows})
    for embedder, backend in groups:
        mine = [r for r in rows if (r.get("embedder", "minilm"), r["backend"]) == (embedder, backend)]
        docs = [r["docs"] for r in mine]
        marker, style = ("o" if backend == "duckdb" else "s"), ("-" if embedder == "minilm" else ":")
        keys = [("no_change_s", "no change"), ("edit_s", "one document edited"), ("delete_1pct_s", "1% deleted")]
        if embedder == "minilm":
            keys = [("full_s", "full build"), ("raw_encode_s", "raw encode of its chunks"), *keys]
        for key, label in keys:
            left.plot(docs, [r[key] for r in mine], marker=marker, linestyle=style, label=f"{label} ({backend}, {embedder})")
        right.plot(docs, [r["peak_rss_mb"] for r in mine], marker=marker, linestyle=style,
                   label=f"peak RSS ({backend}, {embedder})")
        right.plot(docs, [r["index_mb"] for r in mine], marker=marker, linestyle="--",
                   label=f"store on disk ({backend}, {embedder})")
    for axis, ylabel in ((left, "seconds"), (right, "MB")):
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("documents")
        axis.set_ylabel(ylabel)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    left.set_title("time per run")
    right.set_title("memory and size")
    figure.tight_layout()
    PLOT.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(PLOT, dpi=90)


def _findings(rows: list[dict], results: list[dict]) -> list[str]:
    """What grew faster than the corpus, what was fixed, what still does: the prose around the
    before/after and growth tables (every figure from the rows)."""
    hashing = sorted((r for r in rows if (r.get("embedder"), r["backend"]) == ("hashing", "duckdb")),
                     key=lambda r: r["docs"])
    measured = sorted((r for r in rows if (r.get("embedder", "minilm"), r["backend"]) == ("minilm", "duckdb")),
                      key=lambda r: r["docs"])
    minilm = measured[-1] if measured else None
    lines = [
        "Profiled at 1k, 10k and 100k documents (hashing, DuckDB; each case in its own process), what grew "
        "faster than the corpus, or cost a no-change run more than it must, and what was done:",
        "",
        "- The switch deleted and re-inserted every served row of the source on every run that changed "
        "anything; it rewrites only the documents whose served rows differ from their staged state.",
        "- The deletion proof of the switch (`ServedIndex.remnants`) matched every deleted document against "
        "every row of `staged_postings`, `vectors` and `postings` with a prefix test (a nested-loop join, "
        "documents x rows), and queried the embedding cache once per tombstone. Now one equality join per table "
        "on the chunk id's document part (before its last `#`) and one statement for the cache. The same proof "
        "searched for every document deleted in the run; now only for those still found in `chunks` (none, "
        "unless the switch left something behind): the same verdict.",
        "- The queryable probe of a full build held every query's score against every vector at once (40 GB "
        "at 100k documents); now a block of queries at a time, and one pass over the vectors for 32 questions "
        "or more on every engine. PostgreSQL ran `NOT IN (subquery)` as a scan of the subquery per row: every "
        "anti-join of the store is `NOT EXISTS`.",
        "- Discovery read and hashed every file of the source on every run. A file whose size, modification "
        "and change times and inode equal those an earlier discovery read it with keeps its hash and metadata "
        "(as git's index does; a file changed within two seconds of that read, one with a sidecar, one that "
        "failed, or new metadata defaults: read again). The walk built a `Path` per file to name it; now a "
        "string, and each folder's real path is checked once, not once per file.",
        "",
        "The same commands on the code before a fix and after, at a similar load:",
        "",
        *_before_after(results, rows),
        "",
        "How each stage grew (hashing, DuckDB; seconds, and the factor per tenfold corpus: 10 grows as the "
        "corpus does, 100 as its square; wall times on a shared machine, so a factor within 1.5 of 10 is noise):",
        "",
        *_growth(rows),
    ]
    if measured:
        lines += ["", "With the real model (MiniLM, DuckDB), measured: " + "; ".join(
            f"at {r['docs']:,} documents the full build took {r['full_s']:,.0f} s, {r['full_over_raw_encode']:.2f} times "
            f"the raw encode of its {r['chunks']:,} chunks ({r['raw_encode_s']:,.0f} s{_sampled(r)}), a no-change run "
            f"{r['no_change_s']:.2f} s ({r['no_change_share_pct']:.2f}% of the build) and a one-document edit "
            f"{r['edit_s']:.2f} s ({r['edit_share_pct']:.2f}%)" for r in measured) + "."]
    if hashing and minilm is not None and hashing[-1]["docs"] > minilm["docs"]:
        big = hashing[-1]
        rest = big["full_s"] - big["stages_s"]["full"].get("embedded", 0.0)
        rate = minilm["raw_encode_chunks_per_s"]
        build = rest + big["chunks"] / rate
        lines[-1] += (
            f" At {big['docs']:,} documents the model was not run (its encode alone is about "
            f"{big['chunks'] / rate / 3600:.1f} h here): the hashing build without its encode took {rest:.0f} s, "
            f"and the model encodes {rate:.1f} chunks/s (the raw encode above), so a build with it would take about "
            f"{build:,.0f} s, {build / (build - rest):.2f} times its raw encode; the no-change run "
            f"({big['no_change_s']:.1f} s) would be {100 * big['no_change_s'] / build:.2f}% of it and the edit "
            f"({big['edit_s']:.1f} s) {100 * big['edit_s'] / build:.2f}%. An extrapolation from measured rows, "
            "not a measurement.")
    if hashing and hashing[-1]["docs"] > 10_000:
        big = hashing[-1]
        full_switch = big["stages_s"]["full"].get("indexed", 0.0)
        lines += [
            "",
            "The no-change run follows the full build, which follows the copy of the corpus: files copied within "
            "two seconds of the build's discovery are read again by it (the racy guard above). At 1k and 10k "
            "documents, whose copy takes about that long, its discovery takes as long as the full build's; the "
            "runs after it (the edit, the deletion) read only what changed, hence their shorter discovery.",
            "",
            f"What a no-change run still pays at {big['docs']:,} documents ({big['no_change_s']:.1f} s, "
            f"{big['no_change_share_pct']:.1f}% of the hashing build, whose encode is nearly free): a stat of every "
            "file, and the switch's reads of the source's discovery, manifest, ledger and served rows, with the "
            "coverage and deletion proofs that every run re-establishes on the whole source; each linear.",
            "",
            f"What still grows faster than the corpus: the switch of a full build, {full_switch:.1f} s of the "
            f"{big['full_s']:.1f} s build at {big['docs']:,} documents, most of it the queryable probe. Every "
            "document new to the index is searched for once with its first chunk, and an exact search scores every "
            "vector: documents x vectors, fast per pair but with the square of the corpus in pairs. An engine with "
            "a vector index (PostgreSQL's HNSW) answers each search without scoring every vector; on an exact "
            "engine the search is what proves the served vectors are found, so it stays.",
        ]
    return lines


def write_page(rows: list[dict], results: list[dict]) -> None:
    from performance_page import write_section

    plot(rows)
    lines = [
        "A corpus of N documents made from the shared datasets' texts (`.md` and `.txt`, each a title and three "
        "to six sentences of one SciFact, SQuAD or PubMedQA passage; no two alike), built with the core stages "
        "and the real MiniLM (ONNX Runtime); each case in a fresh process. `raw encode` is the same chunk texts "
        "encoded again in the full build's process: the floor of a full build.",
        "",
        "Rows marked `hashing` use the deterministic test embedder instead of MiniLM (the same stages and "
        "store, 384 dimensions): they measure what is not encoding, at sizes the real model cannot reach on "
        "this machine in the time there was; their full-build and encode columns are not the model's.",
        "",
        "| embedder | backend | docs | chunks | full build s | docs/s | chunks/s | raw encode s (chunks/s) | full / raw encode "
        "| no change s (% of full) | one edit s (% of full) | 1% deleted s | rounds | peak RSS MB | store MB | measured on |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.get('embedder', 'minilm')} | {r['backend']} | {r['docs']:,} | {r['chunks']:,} | {r['full_s']:.1f} | {r['docs_per_s']:.1f} "
            f"| {r['chunks_per_s']:.1f} | {r['raw_encode_s']:.1f} ({r['raw_encode_chunks_per_s']:.1f}){_sampled(r)} "
            f"| {r['full_over_raw_encode']:.2f} | {r['no_change_s']:.2f} ({r['no_change_share_pct']:.1f}%) "
            f"| {r['edit_s']:.2f} ({r['edit_share_pct']:.1f}%) | {r['delete_1pct_s']:.2f} | {r.get('rounds', 1)} "
            f"| {r['peak_rss_mb']:.0f} | {r['index_mb']:.1f} | {r.get('revision', '?')} |")
    lines += ["", *_incremental(rows), "", *_findings(rows, results)]
    lines += ["", "![cost curve](performance-scale.png)", "",
              "Commands, one per row: " + ", ".join(
                  f"`python benchmarks/scale.py --docs {r['docs_asked']} --backend {r['backend']}"
                  f"{' --embedder hashing' if r.get('embedder') == 'hashing' else ''}{_rounds_flag(r)}"
                  f"{_sample_flag(r)}`" for r in rows)
              + "; load average (1, 5, 15 min) at each start: " + "; ".join(
                  f"{r['backend']} {r['docs_asked']:,}: {', '.join(map(str, r['load_avg_start']))}" for r in rows) + "."]
    write_section("The cost curve", "\n".join(lines),
                  command="python benchmarks/scale.py --page  (after the runs listed below)")


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
