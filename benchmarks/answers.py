"""The extractive generator on SQuAD 2.0 (500 questions, 258 unanswerable): the 2x2 abstention
table and the answer metrics, through the project's BEIR ingestion, dense retrieval and checks.

    python benchmarks/answers.py [--dataset ../shared/datasets/squad2-sample500] [--k 3]

The no-result threshold is calibrated on the first half of the questions (best dense cosine that
best separates answerable from unanswerable) and applied to the second half, which is reported.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.config import PROJECT_ROOT, ChunkingConfig, EmbeddingConfig, LifecycleConfig, RetrievalConfig, SourceConfig  # noqa: E402
from rag_pipeline.core.evaluation.answer_checks import abstention_table, check_answer  # noqa: E402
from rag_pipeline.core.evaluation.answers import ExtractiveGenerator  # noqa: E402
from rag_pipeline.core.evaluation.retrieval import Retriever  # noqa: E402
from rag_pipeline.core.ingestion.embedding import make_embedder  # noqa: E402
from rag_pipeline.core.ingestion.stages import ingest_source  # noqa: E402
from rag_pipeline.core.models import SearchFilters  # noqa: E402
from rag_pipeline.core.storage import duckdb_store  # noqa: E402


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _threshold(points: list[tuple[float, bool]]) -> float:
    scores = sorted({s for s, _ in points})
    candidates = [(a + b) / 2 for a, b in zip(scores, scores[1:])] or [0.0]
    return max(candidates, key=lambda t: sum(1 for s, a in points if (s >= t) == a))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=PROJECT_ROOT.parent / "shared" / "datasets" / "squad2-sample500")
    parser.add_argument("--k", type=int, default=3)
    args = parser.parse_args()
    work = PROJECT_ROOT / "benchmarks" / "out" / "answers"
    work.mkdir(parents=True, exist_ok=True)
    store = duckdb_store(work / "index.duckdb")
    embedder = make_embedder(EmbeddingConfig())
    source = SourceConfig(name="squad", path=args.dataset / "corpus.jsonl", kind="beir")
    ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "answers-benchmark")

    queries = [json.loads(line) for line in (args.dataset / "queries.jsonl").open()]
    answers = {r["_id"]: r for r in map(json.loads, (args.dataset / "answers.jsonl").open())}
    retriever = Retriever(store, embedder, RetrievalConfig(mode="dense", k=args.k))
    results = retriever.search_many([q["text"] for q in queries], [SearchFilters()] * len(queries), "dense", args.k)
    best = [max((h.score for h in r.hits), default=0.0) for r in results]
    half = len(queries) // 2
    threshold = _threshold([(best[i], not answers[q["_id"]]["is_impossible"]) for i, q in enumerate(queries[:half])])
    generator = ExtractiveGenerator(threshold)

    rows, metrics = [], {"answer_citations_valid": [], "answer_faithful": [], "answer_contains_gold": []}
    for query, result, score in list(zip(queries, results, best))[half:]:
        truth = answers[query["_id"]]
        answerable = not truth["is_impossible"]
        answer = generator.generate(query["text"], result.hits, score)
        rows.append((answerable, answer.abstained))
        check = check_answer(answer, {h.chunk_id: h.text for h in result.hits}, " ".join(truth["answers"]), answerable)
        metrics["answer_citations_valid"].append(float(check.citations_valid))
        metrics["answer_faithful"].append(float(check.faithful))
        if answerable and not answer.abstained:
            metrics["answer_contains_gold"].append(float(any(_norm(a) in _norm(answer.text) for a in truth["answers"] if a)))
    table = abstention_table(rows)
    print(f"SQuAD 2.0 sample: {len(queries)} questions; threshold {threshold:.4f} calibrated on the first {half}, "
          f"reported on the other {len(queries) - half}; dense top {args.k}, extractive generator (2 sentences)")
    print()
    print("|  | answerable | unanswerable |")
    print("|---|---|---|")
    print(f"| answered | {table['answered_answerable']} | {table['answered_unanswerable']} |")
    print(f"| abstained | {table['abstained_answerable']} | {table['abstained_unanswerable']} |")
    print()
    for name, values in metrics.items():
        if values:
            print(f"{name}: {sum(values) / len(values):.3f} over {len(values)} answers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
