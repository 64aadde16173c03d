"""What kept index states cost: 30 nightly states of a 10k-document source, and the time a restore takes.

    python benchmarks/states.py [--docs 10000] [--nights 30] [--churn 0.01] [--rounds 3] [--page]

The corpus is benchmarks/scale.py's (shared datasets' texts under /tmp/rag-scale). Two stores are
built side by side with the hashing embedder (384 dimensions, the model's; the model itself does not
change what is stored): one keeping history (`lifecycle.keep_states` = nights + 1) and one keeping
none (`keep_states: 0`). Each night edits `churn` of the documents, deletes a tenth of that and adds
as many, then ingests both stores. Reported: each store's size on disk and the rows states hold,
the cost of one night's state, and the wall time of restoring the state of the night before, of the
first night, and the latest state again (a no-op), each inside its own transaction (`index restore`
does the same plus a ledger write and a pin). Every timing is on the wall and in CPU seconds of the
process tree (performance_page.tree_cpu); the whole measure runs `--rounds` times from a fresh copy,
medians over the rounds, with the load average at each round's start.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
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


def measure(docs: int, nights: int, churn: float, round_: int, tree) -> dict:
    """One round: both stores built night by night in a fresh folder (which store ingests first
    alternates by night and round), then three restores, each timed on the wall and in CPU seconds
    of this process tree (`tree.so_far()` differences)."""
    work = WORK / f"states-{docs}"
    shutil.rmtree(work, ignore_errors=True)
    corpus = work / "corpus"
    shutil.copytree(corpus_folder(docs), corpus)
    embedder = make_embedder(EmbeddingConfig(kind="hashing"))
    stores = {"history": (duckdb_store(work / "history" / "index.duckdb"), LifecycleConfig(keep_states=nights + 1,
                                                                                          keep_state_days=0)),
              "none": (duckdb_store(work / "none" / "index.duckdb"), LifecycleConfig(keep_states=0, keep_state_days=0))}
    source = SourceConfig(name="scale", path=corpus)
    night_seconds: dict[str, list[float]] = {name: [] for name in stores}
    night_cpu: dict[str, list[float]] = {name: [] for name in stores}
    for night in range(nights + 1):
        if night:
            _night(corpus, night, churn)
        order = list(stores) if (night + round_) % 2 == 0 else list(reversed(stores))
        for name in order:
            store, lifecycle = stores[name]
            started, cpu_started = time.perf_counter(), tree.so_far()
            report = ingest_source(source, store, embedder, ChunkingConfig(), lifecycle, f"night-{night}")["indexed"]
            night_seconds[name].append(time.perf_counter() - started)
            night_cpu[name].append(tree.so_far() - cpu_started)
            assert report.switched, report.refusal
        print(f"round {round_ + 1}, night {night}: {night_seconds['history'][-1]:.1f} s with history, "
              f"{night_seconds['none'][-1]:.1f} s without", file=sys.stderr)
    history = stores["history"][0]
    states = history.states.list("scale")
    rows = history.states.storage_rows()
    restores = {}
    for label, state in (("the night before", states[-2]), ("the first night", states[0]), ("the latest again", states[-1])):
        started, cpu_started = time.perf_counter(), tree.so_far()
        with history.transaction():
            swap = history.states.restore("scale", state)
        restores[label] = {"seconds": time.perf_counter() - started, "cpu_s": tree.so_far() - cpu_started,
                           "restored": len(swap.arrived), "removed": len(swap.removed)}
        with history.transaction():
            history.states.restore("scale", states[-1])  # back to the latest for the next measure
    for store, _ in stores.values():
        store.close()
    result = {"docs": docs, "nights": nights, "churn": churn, "states": len(states),
              "documents": states[-1].documents, "chunks": states[-1].chunks,
              "size_mb": {name: round(_size_mb(work / name / "index.duckdb"), 1) for name in stores},
              "rows": rows, "restores": restores,
              # the first night is the full build: the nights after it are the ones compared
              "night_s_median": {name: round(statistics.median(v[1:]), 2) for name, v in night_seconds.items()},
              "night_cpu_s_median": {name: round(statistics.median(v[1:]), 2) for name, v in night_cpu.items()}}
    shutil.rmtree(work, ignore_errors=True)
    return result


def combine(rounds: list[dict], cpu_method: str, load: list[list[float]]) -> dict:
    """The rounds as one result: the rows and states of the first round (the same in every round: the
    data and the nights are seeded), the medians over the rounds of the sizes and timings, each round's."""
    first = rounds[0]
    timings = {"night_s_median": {}, "night_cpu_s_median": {}}
    for key in timings:
        for name in first[key]:
            timings[key][name] = statistics.median(r[key][name] for r in rounds)
    restores = {label: {"seconds": statistics.median(r["restores"][label]["seconds"] for r in rounds),
                        "cpu_s": statistics.median(r["restores"][label]["cpu_s"] for r in rounds),
                        "rounds": [(r["restores"][label]["seconds"], r["restores"][label]["cpu_s"]) for r in rounds],
                        "restored": first["restores"][label]["restored"], "removed": first["restores"][label]["removed"]}
                for label in first["restores"]}
    same = all((r["rows"], r["states"], r["chunks"]) == (first["rows"], first["states"], first["chunks"]) for r in rounds)
    # A DuckDB file's size varies a little from build to build (its blocks' allocation): the median.
    size_mb = {name: statistics.median(r["size_mb"][name] for r in rounds) for name in first["size_mb"]}
    return {**first, **timings, "size_mb": size_mb, "restores": restores, "rounds": len(rounds), "same_in_every_round": same,
            "night_rounds": [(r["night_s_median"], r["night_cpu_s_median"]) for r in rounds],
            "size_mb_rounds": [r["size_mb"] for r in rounds], "cpu_method": cpu_method, "load": load}


def section(result: dict) -> str:
    sizes, rows = result["size_mb"], result["rows"]
    extra = sizes["history"] - sizes["none"]
    nights = "; ".join(f"{s['history']:.2f}, {c['history']:.2f} / {s['none']:.2f}, {c['none']:.2f}"
                       for s, c in result["night_rounds"])
    lines = [
        f"A source of {result['docs']:,} documents ({result['chunks']:,} chunks) and {result['nights']} nights, each editing "
        f"{result['churn']:.0%} of the documents and deleting and adding a tenth of that many (hashing embedder, 384 "
        "dimensions), ingested into a store keeping every state and into one keeping none, on DuckDB. "
        f"{result['rounds']} rounds, each from a fresh copy (which store ingests first alternates by night and round); "
        f"timings are medians over the rounds, CPU seconds those of this process tree, measured by {result['cpu_method']}.",
        "",
        "| | kept states | store on disk | one night's state |",
        "|---|---:|---:|---:|",
        f"| history kept | {result['states']} | {sizes['history']:,.1f} MB | {extra / result['nights']:,.2f} MB |",
        f"| no history (`keep_states: 0`) | 1 | {sizes['none']:,.1f} MB | |",
        "",
        "Store sizes: the median of the rounds (each round, with history / without: "
        + "; ".join(f"{s['history']:,.1f} / {s['none']:,.1f} MB" for s in result["size_mb_rounds"])
        + f"). States, spans and kept versions the same in every round: {'yes' if result['same_in_every_round'] else 'no'}.",
        "",
        f"The {result['states']} states hold {rows['served_spans']:,} spans (one per document version served, not per "
        f"state and document) and {rows['history_documents']:,} kept versions ({rows['history_chunks']:,} chunks, their "
        f"vectors and postings): {extra:,.1f} MB, {extra / sizes['none']:.1%} of the store without history.",
        "",
        "| a night's ingestion (median of the nights, then of the rounds) | wall s | CPU s |",
        "|---|---:|---:|",
        f"| history kept | {result['night_s_median']['history']:.2f} | {result['night_cpu_s_median']['history']:.2f} |",
        f"| no history | {result['night_s_median']['none']:.2f} | {result['night_cpu_s_median']['none']:.2f} |",
        "",
        f"Each round (wall s, CPU s with history / without): {nights}.",
        "",
        "| restore to | documents brought back | removed | wall s | CPU s | each round (wall, CPU s) |",
        "|---|---:|---:|---:|---:|---|",
        *[f"| {label} | {r['restored']:,} | {r['removed']:,} | {r['seconds']:.2f} | {r['cpu_s']:.2f} | "
          + "; ".join(f"{w:.2f}, {c:.2f}" for w, c in r["rounds"]) + " |" for label, r in result["restores"].items()],
        "",
        "Load average of the machine (1, 5, 15 min) at the start of each round, and at the end: "
        + "; ".join(", ".join(f"{x:.1f}" for x in load) for load in result["load"]) + ".",
    ]
    return "\n".join(lines)


def main() -> int:
    from performance_page import tree_cpu

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=10_000)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--churn", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=3, help="whole measures, each from a fresh copy (medians)")
    parser.add_argument("--page", action="store_true", help="write the section of docs/performance.md")
    args = parser.parse_args()
    rounds, load = [], []
    with tree_cpu("states") as tree:
        for round_ in range(args.rounds):
            load.append(list(os.getloadavg()))
            rounds.append(measure(args.docs, args.nights, args.churn, round_, tree))
    load.append(list(os.getloadavg()))
    result = combine(rounds, tree.method, load)
    print(json.dumps(result, indent=2))
    if args.page:
        from performance_page import write_section

        write_section("Index states: 30 nights kept, and a restore", section(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
