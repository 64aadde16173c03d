"""What kept index states cost: 30 nightly states of a 10k-document source, and the time a restore takes.

    python benchmarks/states.py [--docs 10000] [--nights 30] [--churn 0.01] [--page]

The corpus is benchmarks/scale.py's (shared datasets' texts under /tmp/rag-scale). Two stores are
built side by side with the hashing embedder (384 dimensions, the model's; the model itself does not
change what is stored): one keeping history (`lifecycle.keep_states` = nights + 1) and one keeping
none (`keep_states: 0`). Each night edits `churn` of the documents, deletes a tenth of that and adds
as many, then ingests both stores. Reported: each store's size on disk and the rows states hold,
the cost of one night's state, and the wall time of restoring the state of the night before, of the
first night, and the latest state again (a no-op), each inside its own transaction (`index restore`
does the same plus a ledger write and a pin).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from scale import WORK, corpus_folder  # noqa: E402  (benchmarks/scale.py, beside this script)

from rag_pipeline.api import (  # noqa: E402
    ChunkingConfig,
    EmbeddingConfig,
    LifecycleConfig,
    SourceConfig,
    duckdb_store,
    ingest_source,
    make_embedder,
)


def _night(corpus: Path, night: int, churn: float) -> None:
    """Edit `churn` of the documents, delete a tenth of that many and add as many new ones."""
    rng = random.Random(night)
    files = sorted(corpus.glob("part-*/doc-*"))
    edited = max(int(len(files) * churn), 1)
    for path in rng.sample(files, edited):
        with open(path, "a") as handle:
            handle.write(f"\nNight {night} added this sentence to {path.stem}.\n")
    moved = max(edited // 10, 1)
    for path in rng.sample(files, moved):
        path.unlink()
    extra = corpus / "part-new"
    extra.mkdir(exist_ok=True)
    for i in range(moved):
        (extra / f"new-{night:03d}-{i:03d}.md").write_text(f"# New page {night}-{i}\n\nA page added on night {night}, "
                                                          f"number {i}, about topic {rng.randrange(10_000)}.\n")


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.parent.glob(path.name + "*")) / 2**20


def measure(docs: int, nights: int, churn: float) -> dict:
    work = WORK / f"states-{docs}"
    shutil.rmtree(work, ignore_errors=True)
    corpus = work / "corpus"
    shutil.copytree(corpus_folder(docs), corpus)
    embedder = make_embedder(EmbeddingConfig(kind="hashing"))
    stores = {"history": (duckdb_store(work / "history" / "index.duckdb"), LifecycleConfig(keep_states=nights + 1,
                                                                                          keep_state_days=0)),
              "none": (duckdb_store(work / "none" / "index.duckdb"), LifecycleConfig(keep_states=0, keep_state_days=0))}
    source = SourceConfig(name="scale", path=corpus)
    night_seconds = {name: [] for name in stores}
    for night in range(nights + 1):
        if night:
            _night(corpus, night, churn)
        for name, (store, lifecycle) in stores.items():
            started = time.perf_counter()
            report = ingest_source(source, store, embedder, ChunkingConfig(), lifecycle, f"night-{night}")["indexed"]
            night_seconds[name].append(time.perf_counter() - started)
            assert report.switched, report.refusal
        print(f"night {night}: {night_seconds['history'][-1]:.1f} s with history, {night_seconds['none'][-1]:.1f} s without",
              file=sys.stderr)
    history = stores["history"][0]
    states = history.states.list("scale")
    rows = history.states.storage_rows()
    restores = {}
    for label, state in (("the night before", states[-2]), ("the first night", states[0]), ("the latest again", states[-1])):
        started = time.perf_counter()
        with history.transaction():
            swap = history.states.restore("scale", state)
        restores[label] = {"seconds": time.perf_counter() - started, "restored": len(swap.arrived),
                           "removed": len(swap.removed)}
        with history.transaction():
            history.states.restore("scale", states[-1])  # back to the latest for the next measure
    for store, _ in stores.values():
        store.close()
    return {"docs": docs, "nights": nights, "churn": churn, "states": len(states),
            "documents": states[-1].documents, "chunks": states[-1].chunks,
            "size_mb": {name: round(_size_mb(work / name / "index.duckdb"), 1) for name in stores},
            "rows": rows, "restores": restores,
            "night_s_median": {name: round(sorted(v[1:])[len(v[1:]) // 2], 2) for name, v in night_seconds.items()}}


def section(result: dict) -> str:
    sizes, rows = result["size_mb"], result["rows"]
    extra = sizes["history"] - sizes["none"]
    lines = [
        f"A source of {result['docs']:,} documents ({result['chunks']:,} chunks) and {result['nights']} nights, each editing "
        f"{result['churn']:.0%} of the documents and deleting and adding a tenth of that many (hashing embedder, 384 "
        "dimensions), ingested into a store keeping every state and into one keeping none, on DuckDB.",
        "",
        "| | kept states | store on disk | one night's state |",
        "|---|---:|---:|---:|",
        f"| history kept | {result['states']} | {sizes['history']:,.1f} MB | {extra / result['nights']:,.2f} MB |",
        f"| no history (`keep_states: 0`) | 1 | {sizes['none']:,.1f} MB | |",
        "",
        f"The {result['states']} states hold {rows['served_spans']:,} spans (one per document version served, not per "
        f"state and document) and {rows['history_documents']:,} kept versions ({rows['history_chunks']:,} chunks, their "
        f"vectors and postings): {extra:,.1f} MB, {extra / sizes['none']:.1%} of the store without history. A night's "
        f"ingestion took {result['night_s_median']['history']:.2f} s with history and "
        f"{result['night_s_median']['none']:.2f} s without (medians).",
        "",
        "| restore to | documents brought back | removed | wall |",
        "|---|---:|---:|---:|",
        *[f"| {label} | {r['restored']:,} | {r['removed']:,} | {r['seconds']:.2f} s |" for label, r in result["restores"].items()],
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--churn", type=float, default=0.01)
    parser.add_argument("--page", action="store_true", help="write the section of docs/performance.md")
    args = parser.parse_args()
    result = measure(args.docs, args.nights, args.churn)
    print(json.dumps(result, indent=2))
    if args.page:
        from performance_page import write_section

        write_section("Index states: 30 nights kept, and a restore", section(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
