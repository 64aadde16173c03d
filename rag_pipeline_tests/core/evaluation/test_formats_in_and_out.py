"""Formats in and out, as the tools write them: a RAGAS 0.1 testset, unanswerable cases in RAGAS and
DeepEval shapes, a question asked twice with other labels, bounded reading, exports with ids, and
run files (TREC with qrels, other systems' runs) checked against pytrec_eval."""

import csv
import json
from collections import Counter

import numpy as np
import pytest
import pytrec_eval

from rag_pipeline.config import RetrievalConfig
from rag_pipeline.core.bounded import InputTooLargeError
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.golden import lines as golden_lines
from rag_pipeline.core.evaluation.golden.cases import GoldenSetError
from rag_pipeline.core.evaluation.golden.doc_refs import Resolver
from rag_pipeline.core.evaluation.golden.formats import import_cases, import_from_store
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring.external_runs import score_run
from rag_pipeline.core.evaluation.scoring.ragas_export import export_ragas
from rag_pipeline.core.evaluation.scoring.run_files import RunFileError, decreasing_scores, read_run, write_qrels, write_trec_run
from rag_pipeline.core.retrieval.retriever import Retriever

ON_CALL = "handbook:engineering/on-call.md"
REFUNDS = "helpcenter:refunds.html"
BENEFITS = "handbook:people/benefits.md"
DOCS = {ON_CALL: {"source_id": "handbook", "rel_path": "engineering/on-call.md", "indexed": True},
        BENEFITS: {"source_id": "handbook", "rel_path": "people/benefits.md", "indexed": True},
        REFUNDS: {"source_id": "helpcenter", "rel_path": "refunds.html", "indexed": True}}


@pytest.fixture(scope="module")
def chunks(sample_index):
    _, store, _ = sample_index
    return store.served.chunk_texts()


def _testset_rows(chunks) -> list[dict]:
    """What RAGAS 0.1's TestsetGenerator writes (`testset.to_pandas()`): the contexts a question was
    generated from, the documents' metadata (LangChain's `source`), the evolution that made it."""
    return [
        {"question": "What does a primary on-call week pay?", "contexts": [chunks[ON_CALL][3]],
         "ground_truth": "A standby allowance of €250.", "evolution_type": "simple",
         "metadata": [{"source": "corpus/handbook/engineering/on-call.md"}], "episode_done": True},
        {"question": "How long do I have to ask for a refund?", "contexts": [chunks[REFUNDS][1]],
         "ground_truth": "14 days.", "evolution_type": "reasoning", "metadata": [{"source": "unknown.html"}],
         "episode_done": True},
        {"question": "What does the company pay towards health insurance?", "contexts": [chunks[BENEFITS][1]],
         "ground_truth": "€100 per month.", "evolution_type": "multi_context", "metadata": [], "episode_done": True},
        # An unanswerable case the team added by hand in the same shape.
        {"question": "What is the office wifi password?", "contexts": [], "ground_truth": "", "evolution_type": "",
         "metadata": [{"answerable": False}], "episode_done": True},
    ]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_a_ragas_01_testset_imports_every_case_with_its_contexts_as_gold(tmp_path, sample_index, chunks, kind):
    _, store, _ = sample_index
    rows = _testset_rows(chunks)
    path = tmp_path / f"testset.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:  # as pandas' to_csv writes it: lists and dicts as Python literals
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            for row in rows:
                writer.writerow({k: repr(v) if isinstance(v, (list, dict)) else v for k, v in row.items()})
    result = import_from_store(path, "auto", store)
    assert result.shape == "ragas" and not result.left_out, result.problems()
    assert [c["gold_docs"] for c in result.cases] == [[ON_CALL], [REFUNDS], [BENEFITS], []]
    assert [c.get("slice") for c in result.cases] == ["simple", "reasoning", "multi_context", None]
    assert result.cases[0]["provenance"].endswith("gold from contexts, metadata)")
    assert [u.reference for u in result.unmapped] == ["unknown.html"], "a metadata file that matches nothing is named"
    unanswerable = result.cases[3]
    assert unanswerable["answerable"] is False and "reference" not in unanswerable
    golden = load_golden_set(result.write(tmp_path / "golden.jsonl"), known_documents=store.ledger.document_history())
    assert len(golden.cases) == 4 and not golden.cases[3].answerable


def test_contexts_with_answers_stay_the_systems_output(tmp_path, sample_index, chunks):
    """RAGAS 0.1 evaluation data (the testset run through a system) has `answer`: its contexts are retrieved."""
    _, store, _ = sample_index
    path = tmp_path / "evaluated.jsonl"
    path.write_text(json.dumps({"question": "What does a primary on-call week pay?", "contexts": [chunks[ON_CALL][3]],
                                "answer": "€250", "ground_truth": "€250.", "evolution_type": "simple"}) + "\n")
    result = import_from_store(path, "auto", store)
    assert not result.cases and "only contexts, not labels" in result.left_out[0].reason


def test_deepeval_unanswerable_goldens_need_no_expected_output(tmp_path):
    path = tmp_path / "deepeval.json"
    path.write_text(json.dumps({"goldens": [
        {"input": "How long do refunds take?", "expected_output": "14 days.", "source_file": "refunds.html"},
        {"input": "Do you sell gift cards?", "additional_metadata": {"answerable": False}},
        {"input": "Is there a gym?", "additional_metadata": {"answerable": "maybe"}},
    ]}, indent=2))
    result = import_cases(path, "auto", DOCS)
    assert [c["gold_docs"] for c in result.cases] == [[REFUNDS], []]
    assert result.cases[1]["answerable"] is False
    assert "is not a boolean" in result.left_out[0].reason
    assert len(load_golden_set(result.write(tmp_path / "golden.jsonl")).cases) == 2


def test_a_question_asked_twice_with_other_labels_is_a_warning_naming_both_lines(tmp_path):
    path = tmp_path / "cases.jsonl"
    records = [{"id": "a", "question": "How long do refunds take?", "reference": "14 days.", "gold_docs": [REFUNDS]},
               {"id": "b", "question": "how long do refunds take", "reference": "14 days.", "gold_docs": [BENEFITS]},
               {"id": "c", "question": "How long do refunds take?", "reference": "14 days.", "gold_docs": [REFUNDS]},
               {"id": "d", "question": "How long do refunds take?", "answerable": False}]
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    result = import_cases(path, "handwritten", DOCS)
    assert result.warnings == [
        "line 2 (b): the question of line 1 (a) again, with other gold_docs: keep one, or make the questions distinct",
        "line 4 (d): the question of line 1 (a) again, with other gold_docs, answerable, reference: keep one, or make "
        "the questions distinct"]
    assert result.warnings[0] in result.problems() and "2 warning(s)" in result.summary()


def test_imports_are_read_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(golden_lines, "MAX_GOLDEN_LINE_BYTES", 1000)
    path = tmp_path / "cases.jsonl"
    path.write_text(json.dumps({"question": "q?", "reference": "x" * 5000, "gold_docs": [REFUNDS]}) + "\n")
    with pytest.raises(GoldenSetError, match=r"cases.jsonl line 1: line longer than 1,000 bytes"):
        import_cases(path, "handwritten", DOCS)
    monkeypatch.setattr("rag_pipeline.core.evaluation.golden.dataset_records.MAX_IMPORT_FILE_BYTES", 100)
    small = tmp_path / "small.csv"
    small.write_text("question,reference,gold_docs\n" + "q?,r.,helpcenter:refunds.html\n" * 10)
    size = small.stat().st_size
    with pytest.raises(InputTooLargeError, match=rf"small.csv: {size} bytes, over the 100-byte bound of a dataset to import"):
        import_cases(small, "handwritten", DOCS)


@pytest.fixture(scope="module")
def evaluated(sample_index):
    config, store, embedder = sample_index
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    return golden, evaluate(golden, Retriever(store, embedder, RetrievalConfig(mode="hybrid")), "hybrid", "fp", {})


def test_the_ragas_export_carries_gold_and_retrieved_ids(tmp_path, sample_index, evaluated):
    """RAGAS's id-based context recall needs both id lists; computed here from the export alone."""
    _, store, _ = sample_index
    golden, result = evaluated
    export_ragas(result, golden, tmp_path / "export.jsonl", store.served.chunk_text_by_id, context_k=5)
    rows = [json.loads(line) for line in (tmp_path / "export.jsonl").read_text().splitlines()]
    by_id = {c.case.id: c for c in result.cases}
    for row in rows:
        case = by_id[row["case_id"]]
        assert row["reference_context_ids"] == list(case.case.gold_docs)
        assert row["retrieved_chunk_ids"] == [h["chunk_id"] for h in case.trace["final"][:5]]
        assert row["retrieved_context_ids"] == [h["doc_id"] for h in case.trace["final"][:5]]
        assert len(row["retrieved_context_ids"]) == len(row["retrieved_contexts"])
    scored = [r for r in rows if r["reference_context_ids"]]
    id_recall = [len(set(r["reference_context_ids"]) & set(r["retrieved_context_ids"])) / len(r["reference_context_ids"])
                 for r in scored]
    assert 0 < sum(id_recall) / len(id_recall) <= 1


def _pytrec(qrels_path, run_path, measures):
    qrels, run = {}, {}
    for line in qrels_path.read_text().splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    for line in run_path.read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    return qrels, pytrec_eval.RelevanceEvaluator(qrels, measures).evaluate({q: run.get(q, {}) for q in qrels})


def test_a_trec_run_and_its_qrels_reproduce_the_metrics_with_pytrec_eval(tmp_path, evaluated):
    golden, result = evaluated
    rankings = [(c.case.id, c.ranked_docs, c.doc_scores) for c in result.cases]
    write_trec_run(rankings, tmp_path / "run.trec", tag=result.eval_id)
    write_qrels([c for c in golden.cases if c.id in {r.case.id for r in result.cases if r.scored}], tmp_path / "run.qrels")
    qrels, values = _pytrec(tmp_path / "run.qrels", tmp_path / "run.trec", {"recall.5", "ndcg_cut.10", "success.5"})
    for ours, theirs in (("recall_at_5", "recall_5"), ("ndcg_at_10", "ndcg_cut_10"), ("success_at_5", "success_5")):
        assert result.overall[ours] == pytest.approx(sum(v[theirs] for v in values.values()) / len(qrels), abs=1e-9)
    first = (tmp_path / "run.trec").read_text().splitlines()[0].split()
    case = next(c for c in result.cases if c.case.id == first[0])
    assert float(first[4]) == case.doc_scores[0], "the score column holds the retrieval score"


def test_scores_strictly_decrease_also_in_32_bits_and_stay_the_retrieval_scores():
    out = decreasing_scores([0.5, 0.5, 0.7, 0.0322664584, 0.0322664590, None], 6)
    assert out[0] == 0.5 and out[3] == 0.0322664584, "scores already decreasing are kept as they are"
    assert all(np.float32(a) > np.float32(b) for a, b in zip(out, out[1:]))
    assert 0 < 0.5 - out[1] < 1e-7 and 0 < out[3] - out[4] < 1e-8


def test_another_systems_run_is_scored_like_the_index(tmp_path, evaluated, sample_index):
    """A TREC run and a JSONL run of the same rankings give this pipeline's own metrics; pytrec_eval agrees."""
    _, store, _ = sample_index
    golden, result = evaluated
    rankings = [(c.case.id, c.ranked_docs, c.doc_scores) for c in result.cases]
    write_trec_run(rankings, tmp_path / "theirs.trec", tag="their-service")
    jsonl = tmp_path / "theirs.jsonl"
    # JSONL as a service logs it: the question (the id where two cases ask it as different callers),
    # file paths instead of ids, an answer.
    paths = {d: d.split(":", 1)[1] for c in result.cases for d in c.ranked_docs}
    asked = Counter(c.case.question.lower() for c in result.cases)
    jsonl.write_text("".join(json.dumps({("question" if asked[c.case.question.lower()] == 1 else "id"):
                                         (c.case.question if asked[c.case.question.lower()] == 1 else c.case.id),
                                         "retrieved": [paths[d] for d in c.ranked_docs], "answer": "see the page"}) + "\n"
                             for c in result.cases))
    resolver = Resolver({d: {"rel_path": rel} for d, rel in paths.items()})
    for path in (tmp_path / "theirs.trec", jsonl):
        run = read_run(path, golden.cases, resolver)
        scored = score_run(golden, run, {})
        for key in ("recall_at_5", "mrr_at_10", "ndcg_at_10", "success_at_5"):
            assert scored.overall[key] == pytest.approx(result.overall[key], abs=1e-9), (path.name, key)
        assert scored.by_slice.keys() == result.by_slice.keys()
    assert score_run(golden, read_run(jsonl, golden.cases, resolver), {}).cases[0].trace["answer"]["text"] == "see the page"
    shared = next(c for c in result.cases if asked[c.case.question.lower()] > 1)
    (tmp_path / "ambiguous.jsonl").write_text(json.dumps({"question": shared.case.question, "ranked_docs": []}) + "\n")
    with pytest.raises(RunFileError, match=r"ambiguous.jsonl line 1: the question of 2 cases .*: give the case's `id`"):
        read_run(tmp_path / "ambiguous.jsonl", golden.cases)


def test_a_bad_run_file_names_its_lines(tmp_path, evaluated):
    golden, _ = evaluated
    path = tmp_path / "bad.trec"
    path.write_text(f"{golden.cases[0].id} Q0 a 1 0.9 tag\n{golden.cases[0].id} Q0 b 2 high tag\nonly three fields\n")
    with pytest.raises(RunFileError) as excinfo:
        read_run(path, golden.cases)
    assert str(excinfo.value).split("\n")[1:] == ["  bad.trec line 2: score 'high' is not a number",
                                                  "  bad.trec line 3: expected 6 fields `qid Q0 docid rank score tag`, got 3"]
    missing = read_run(tmp_path / "bad.trec" if False else _one_line(tmp_path, golden), golden.cases)
    assert f"{len(golden.cases) - 1} case(s) absent from the run" in missing.summary(golden.cases)


def _one_line(tmp_path, golden):
    path = tmp_path / "one.jsonl"
    path.write_text(json.dumps({"id": golden.cases[0].id, "ranked_docs": ["x:y.md"]}) + "\n"
                    + json.dumps({"id": "not-a-case", "ranked_docs": []}) + "\n")
    return path
