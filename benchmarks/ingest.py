"""Ingestion speed on the sample corpus and the httpx docs: parse docs/s, embed chunks/s against a
raw `model.encode` of the same texts in the same process, and a no-change re-run against the full run.

    python benchmarks/ingest.py [--json]

Runs the core stages directly (the Dagster assets call the same functions), each corpus into a
fresh DuckDB file under benchmarks/out/ingest/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.config import PROJECT_ROOT, EmbeddingConfig, load_config  # noqa: E402
from rag_pipeline.core.ingestion.embedding import make_embedder  # noqa: E402
from rag_pipeline.core.ingestion.stages import ingest_source  # noqa: E402
from rag_pipeline.core.storage import duckdb_store  # noqa: E402

HTTPX = PROJECT_ROOT.parent / "shared" / "datasets" / "httpx-docs" / "v0.23.0"


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    embedder = make_embedder(EmbeddingConfig())
    embedder.encode(["warm-up: load the model before timing"])
    sample = load_config(PROJECT_ROOT / "data" / "pipeline.yaml")
    httpx = sample.model_copy(update={"sources": ()}).with_sources({"httpx": HTTPX})
    out = PROJECT_ROOT / "benchmarks" / "out" / "ingest"
    rows = [bench_corpus("sample corpus", sample, out / "sample", embedder), bench_corpus("httpx 0.23 docs", httpx, out / "httpx", embedder)]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print("| corpus | docs | chunks | parse docs/s | embed stage chunks/s | raw encode chunks/s | embed overhead | full run s | no-change re-run s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['corpus']} | {r['documents']} | {r['chunks']} | {r['parse_docs_per_s']:.1f} | {r['embed_stage_chunks_per_s']:.1f} | "
              f"{r['raw_encode_chunks_per_s']:.1f} | {r['embed_overhead_pct']:+.1f}% | {r['full_run_s']:.1f} | "
              f"{r['no_change_rerun_s']:.2f} ({r['rerun_share_pct']:.1f}%, embedded {r['rerun_embedded']}) |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
