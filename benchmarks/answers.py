"""The extractive generator on SQuAD 2.0 (500 questions, 258 unanswerable): the 2x2 abstention
table and the answer metrics, through the project's BEIR ingestion, dense retrieval and checks.

    python benchmarks/answers.py [--dataset ../shared/datasets/squad2-sample500] [--k 3] [--resamples 20]

Two ways to decide "the corpus cannot answer", both fitted on the first half of the questions and
reported on the second half: the single no-result threshold (the best dense cosine that best
separates answerable from unanswerable), and the abstention model (`abstention.py`: a logistic
model of several signals, dense and BM25 retrieval, their agreement, term coverage, the best
sentence's cosine and answer type). The context is dense top k for both; the BM25 list comes
from the same hybrid search. The model's full curve is written to benchmarks/out/answers/curve.json.
Then both are refitted on `--resamples` random halvings, and the spread of their held-out
balanced accuracy is printed: one split is one sample.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

import numpy as np

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from rag_pipeline.api import (  # noqa: E402
    ChunkingConfig,
    EmbeddingConfig,
    LifecycleConfig,
    RetrievalConfig,
    Retriever,
    SearchFilters,
    SourceConfig,
    duckdb_store,
    ingest_source,
    make_embedder,
)
from rag_pipeline.config import PROJECT_ROOT  # noqa: E402
from rag_pipeline.core.evaluation.answers import abstention  # noqa: E402
from rag_pipeline.core.evaluation.answers import features as abstention_features  # noqa: E402
from rag_pipeline.core.evaluation.answers.checks import check_answer  # noqa: E402
from rag_pipeline.core.evaluation.answers.generators import ExtractiveGenerator  # noqa: E402


def _norm(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def _threshold(points: list[tuple[float, bool]]) -> float:
    scores = sorted({s for s, _ in points})
    candidates = [(a + b) / 2 for a, b in zip(scores, scores[1:])] or [0.0]
    return max(candidates, key=lambda t: sum(1 for s, a in points if (s >= t) == a))


def resampled_balanced_accuracy(best: list[float], features: list[dict], answerable: list[bool],
                                 resamples: int) -> dict[str, list[float]]:
    """Held-out balanced accuracy of both methods fitted on the second half and scored on the first,
    then over `resamples` random halvings (seeds 0..n-1): fit on one half, score the other. One fixed split can flatter a method whose features were
    chosen by looking at it; the spread over many says how much the split decides."""
    out: dict[str, list[float]] = {"single threshold": [], "abstention model": []}
    half = len(answerable) // 2
    # First the fixed split the other way round (fit on the second half), then random halvings.
    splits = [(np.arange(half, len(answerable)), np.arange(half))]
    splits += [(order[:half], order[half:]) for order in
               (np.random.default_rng(seed).permutation(len(answerable)) for seed in range(resamples))]
    for fit, held in splits:
        threshold = _threshold([(best[i], answerable[i]) for i in fit])
        model = abstention.fit([features[i] for i in fit], [answerable[i] for i in fit])
        scores = model.scores([features[i] for i in held])
        truth = [answerable[i] for i in held]
        out["single threshold"].append(abstention.balanced_accuracy(
            abstention.two_by_two(truth, [best[i] < threshold for i in held])))
        out["abstention model"].append(abstention.balanced_accuracy(
            abstention.two_by_two(truth, [bool(p < model.threshold) for p in scores])))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, default=PROJECT_ROOT.parent / "shared" / "datasets" / "squad2-sample500")
    parser.add_argument("--k", type=int, default=3)
    parser.add_argument("--resamples", type=int, default=20, help="random halvings for the spread of balanced accuracy")
    args = parser.parse_args()
    work = PROJECT_ROOT / "benchmarks" / "out" / "answers"
    work.mkdir(parents=True, exist_ok=True)
    store = duckdb_store(work / "index.duckdb")
    embedder = make_embedder(EmbeddingConfig())
    source = SourceConfig(name="squad", path=args.dataset / "corpus.jsonl", kind="beir")
    ingest_source(source, store, embedder, ChunkingConfig(), LifecycleConfig(), "answers-benchmark")

    queries = [json.loads(line) for line in (args.dataset / "queries.jsonl").open()]
    answers = {r["_id"]: r for r in map(json.loads, (args.dataset / "answers.jsonl").open())}
    retriever = Retriever(store, embedder, RetrievalConfig(mode="hybrid", k=args.k))
    questions = [q["text"] for q in queries]
    results = retriever.search_many(questions, [SearchFilters()] * len(queries), "hybrid", args.k)
    contexts = [r.candidates["dense"][: args.k] for r in results]  # what dense retrieval would return
    best = [max((h.score for h in r.candidates["dense"]), default=0.0) for r in results]
    answerable = [not answers[q["_id"]]["is_impossible"] for q in queries]
    features = [abstention_features.question_features(q, r.candidates, c) for q, r, c in zip(questions, results, contexts)]
    abstention_features.add_sentence_cosines(questions, contexts, features, embedder.encode)
    half = len(queries) // 2
    fit, held = slice(0, half), slice(half, None)

    threshold = _threshold([(best[i], answerable[i]) for i in range(half)])
    model = abstention.fit(features[fit], answerable[fit])
    decisions = {
        "single threshold": [s < threshold for s in best],
        "abstention model": [bool(p < model.threshold) for p in model.scores(features)],
    }
    generator = ExtractiveGenerator(threshold)
    print(f"SQuAD 2.0 sample: {len(queries)} questions; both fitted on the first {half} "
          f"({sum(answerable[fit])} answerable), reported on the other {len(queries) - half} "
          f"({sum(answerable[held])} answerable); dense top {args.k} as context, extractive generator (2 sentences)")
    print(f"single threshold: best dense cosine >= {threshold:.4f}")
    print(f"abstention model: p(answerable) >= {model.threshold:.4f}, l2 {model.l2}; features kept "
          + ", ".join(f"{n} {w:+.3f}" for n, w in zip(model.features, model.weights)))
    print("  fit-split screening (oriented AUC, z): "
          + ", ".join(f"{n} {v['auc']:.3f} ({v['z']:+.1f})" for n, v in model.fitted_on["screening"].items()))
    print()
    print("| held-out half | answered answerable | abstained answerable | answered unanswerable | abstained unanswerable "
          "| abstain rate (unanswerable) | false abstention (answerable) | balanced accuracy | curve area |")
    print("|---|---|---|---|---|---|---|---|---|")
    scores = {"single threshold": best, "abstention model": model.scores(features).tolist()}
    for name, abstained in decisions.items():
        table = abstention.two_by_two(answerable[held], abstained[held])
        area = abstention.area_under_curve(abstention.curve_from_scores(scores[name][held], answerable[held]))
        print(f"| {name} | {table['answered_answerable']} | {table['abstained_answerable']} | {table['answered_unanswerable']} "
              f"| {table['abstained_unanswerable']} | {table['abstain_rate']:.3f} | {table['false_abstain_rate']:.3f} "
              f"| {table['balanced_accuracy']:.3f} | {area:.3f} |")
    if args.resamples:
        spread = resampled_balanced_accuracy(best, features, answerable, args.resamples)
        print()
        print(f"held-out balanced accuracy over {args.resamples} random halvings (fit on one half, scored on the other):")
        for name, (reversed_split, *values) in spread.items():
            print(f"  {name}: mean {np.mean(values):.3f}, min {min(values):.3f}, max {max(values):.3f}; "
                  f"fitted on the second half, scored on the first: {reversed_split:.3f}")
    points = abstention.curve(model, features[held], answerable[held])
    (work / "curve.json").write_text(json.dumps(points, indent=1))
    print()
    print("abstention model's curve on the held-out half (abstain when p(answerable) < threshold; full curve in curve.json):")
    print()
    print("| threshold | abstain rate (unanswerable) | false abstention (answerable) |")
    print("|---|---|---|")
    grid = sorted({round(0.30 + 0.025 * i, 3) for i in range(17)} | {round(model.threshold, 4)})
    for point in abstention.curve(model, features[held], answerable[held], grid):
        mark = " (the model's)" if abs(point["threshold"] - model.threshold) < 5e-5 else ""
        print(f"| {point['threshold']:.4f}{mark} | {point['abstain_rate_unanswerable']:.3f} "
              f"| {point['false_abstain_rate_answerable']:.3f} |")
    print()
    for name, abstained in decisions.items():
        metrics = {"answer_citations_valid": [], "answer_faithful": [], "answer_contains_gold": []}
        for i in range(half, len(queries)):
            truth = answers[queries[i]["_id"]]
            answer = generator.generate(questions[i], contexts[i], best[i], abstain=abstained[i])
            check = check_answer(answer, {h.chunk_id: h.text for h in contexts[i]}, " ".join(truth["answers"]), answerable[i])
            metrics["answer_citations_valid"].append(float(check.citations_valid))
            metrics["answer_faithful"].append(float(check.faithful))
            if answerable[i] and not answer.abstained:
                metrics["answer_contains_gold"].append(float(any(_norm(a) in _norm(answer.text) for a in truth["answers"] if a)))
        print(f"{name}: " + "; ".join(f"{k} {sum(v) / len(v):.3f} over {len(v)} answers" for k, v in metrics.items() if v))
    return 0


if __name__ == "__main__":
    sys.exit(main())
