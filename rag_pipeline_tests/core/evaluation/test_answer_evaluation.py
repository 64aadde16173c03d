"""Answers inside the golden evaluation, and grader calibration against human verdicts."""

import pytest

from rag_pipeline.config import AnswersConfig, RetrievalConfig, load_config
from rag_pipeline.core.evaluation.answers.calibration import calibrate, deterministic_grader, load_verdicts
from rag_pipeline.core.evaluation.answers.generators import make_generator
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.gating.gates import compare
from rag_pipeline.core.evaluation.gating.policy import GatePolicy, load_policy
from rag_pipeline.core.evaluation.gating.significance import SignificanceConfig
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline_tests.conftest import SAMPLE_CONFIG


@pytest.fixture(scope="module")
def answered(sample_index):
    config, store, embedder = sample_index
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    retriever = Retriever(store, embedder, RetrievalConfig(mode="hybrid"))
    answers = AnswersConfig(generator="extractive")
    return evaluate(golden, retriever, "hybrid", "fp", {}, supersedes=store.served.supersession(),
                    generator_for=lambda t: make_generator(answers, t), context_k=5)


def test_answers_sit_beside_retrieval_metrics_never_blended(answered):
    assert not any(k.startswith("answer_") for k in answered.overall)
    summary = answered.answers
    assert summary["generator"] == "extractive" and summary["errored_cases"] == 0
    assert sum(summary["abstention"].values()) == len(answered.cases)
    assert {"answer_faithful", "answer_citations_valid"} <= set(summary["overall"])
    assert set(summary["by_slice"]) == {c.case.slice for c in answered.cases}


def test_every_citation_points_into_the_context_and_superseded_cases_cite_the_current_version(answered):
    for row in answered.cases:
        context = {h["chunk_id"] for h in row.trace["final"]}
        assert set(row.answer["citations"]) <= context, row.case.id
    current = [r.metrics["answer_cites_current_version"] for r in answered.cases if "answer_cites_current_version" in r.metrics]
    assert current and all(value == 1.0 for value in current)


def test_grader_calibration_rates():
    verdicts = [
        {"case_id": "a", "slice": "s", "answer": "It is 20 weeks [d#1].", "context": {"d#1": "20 weeks."},
         "verdicts": {"faithful": "pass"}, "reviewer": "r"},
        {"case_id": "b", "slice": "s", "answer": "It is 30 weeks [d#1].", "context": {"d#1": "20 weeks."},
         "verdicts": {"faithful": "fail"}, "reviewer": "r"},
        {"case_id": "c", "slice": "t", "answer": "It starts after a probation [d#1].", "context": {"d#1": "20 weeks from day one."},
         "verdicts": {"faithful": "fail"}, "reviewer": "r"},
    ]
    report = calibrate(verdicts)
    stats = report.by_rubric["faithful"].as_dict()
    assert stats == {"verdicts": 3.0, "agreement": pytest.approx(2 / 3), "false_pass_rate": 0.5, "false_fail_rate": 0.0}
    assert report.by_slice["t"]["faithful"].false_pass == 1
    assert report.usable({"faithful": 0.6})[0] and not report.usable({"faithful": 0.2})[0]
    assert deterministic_grader(verdicts[1]) == {"faithful": False, "citations_valid": True, "claim_support": False}


def test_a_grader_over_its_false_pass_budget_cannot_gate(tmp_path):
    policy = load_policy(load_config(SAMPLE_CONFIG).gate_policy)
    report = calibrate(load_verdicts(policy.grader_verdicts))
    assert not report.usable(policy.grader_false_pass_budgets)[0]
    gated = policy.model_copy(update={"headline_metrics": ("recall_at_5", "answer_faithful"), "protected_slices": (),
                                      "significance": SignificanceConfig(samples=200)})
    record = {"revision": "r", "by_slice": {}, "latency": {}, "unanswerable": {},
              "cases": {f"c{i}": {"recall_at_5": 1.0, "answer_faithful": 1.0} for i in range(10)}}
    result = compare(record, record, gated)
    assert not result.passed
    assert result.decision.startswith("keep baseline — grader cannot gate: grader deterministic-checks: false-pass rate on faithful")
    # Without answer metrics among the headline metrics, the grader is not consulted.
    assert compare(record, record, GatePolicy(significance=SignificanceConfig(samples=200))).passed


def test_a_broken_endpoint_errors_cases_and_the_evaluation_goes_on(sample_index, tmp_path):
    from rag_pipeline.core.evaluation.answers.generators import OpenAICompatibleGenerator
    from rag_pipeline_tests.core.evaluation.test_answers import PROMPT, _ChatServer, _reply

    config, store, embedder = sample_index
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    golden.cases = golden.cases[:4]
    script = [(200, b"{oops", {}), (200, _reply("I don't know based on the available documents."), {}),
              (400, {"error": "bad request"}, {}), (200, _reply("It depends [nowhere#0]."), {})]
    server = _ChatServer(script)
    try:
        result = evaluate(golden, Retriever(store, embedder, RetrievalConfig(mode="dense")), "dense", "fp", {},
                          generator_for=lambda t: OpenAICompatibleGenerator(server.url, "m", PROMPT, max_retries=0),
                          context_k=3)
    finally:
        server.close()
    assert result.answers["errored_cases"] == 2
    assert [bool(c.answer["error"]) for c in result.cases] == [True, False, True, False]
    assert result.cases[3].metrics["answer_citations_valid"] == 0.0  # cites a chunk that was not in its context
    assert result.overall  # retrieval metrics are unaffected by the broken generator


def test_on_the_sample_corpus_an_invented_number_and_an_outside_citation_fail(answered, sample_index):
    import re

    from rag_pipeline.core.evaluation.answers.checks import check_answer
    from rag_pipeline.core.evaluation.answers.generators import Answer, parse_citations

    _, store, _ = sample_index
    row = next(r for r in answered.cases
               if r.answer and not r.answer["abstained"] and re.search(r"\b\d+\b", r.answer["text"]))
    with store.db.connection() as con:
        context = dict(con.execute(
            "SELECT chunk_id, text FROM chunks WHERE list_contains(?::VARCHAR[], chunk_id)",
            [[h["chunk_id"] for h in row.trace["final"][:5]]]).fetchall())
    honest = Answer(row.answer["text"], row.answer["citations"], False, "extractive")
    assert check_answer(honest, context, row.case.reference, True).faithful
    invented = re.sub(r"\b(\d+)\b", lambda m: str(int(m.group(1)) + 7919), row.answer["text"], count=1)
    assert not check_answer(Answer(invented, parse_citations(invented), False, "t"), context, row.case.reference, True).faithful
    with store.db.connection() as con:
        outside = con.execute("SELECT chunk_id FROM chunks WHERE NOT list_contains(?::VARCHAR[], chunk_id) LIMIT 1",
                              [list(context)]).fetchall()[0][0]
    cited_outside = f"{row.answer['text']} [{outside}]"
    assert not check_answer(Answer(cited_outside, parse_citations(cited_outside), False, "t"), context,
                            row.case.reference, True).citations_valid


def test_prohibited_claims_are_checked_in_the_evaluation_and_listed_in_the_report(sample_index, answered):
    import dataclasses

    from rag_pipeline.core.evaluation.answers.generators import split_sentences
    from rag_pipeline.core.evaluation.gating.report import render_markdown

    config, store, embedder = sample_index
    # A claim the generator does make (its own first sentence, citations removed), and one it does not.
    spoken = next(r for r in answered.cases if r.case.answerable and r.case.split != "holdout" and not r.answer["abstained"])
    claim = split_sentences(spoken.answer["text"])[0].split(" [")[0]
    quiet = next(r for r in answered.cases if r.case.answerable and r.case.id != spoken.case.id and not r.answer["abstained"])
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    claims = {spoken.case.id: (claim,), quiet.case.id: ("The moon is made of green cheese.",)}
    golden.cases = [dataclasses.replace(c, prohibited_claims=claims.get(c.id, ())) for c in golden.cases]
    retriever = Retriever(store, embedder, RetrievalConfig(mode="hybrid"))
    answers = AnswersConfig(generator="extractive")
    result = evaluate(golden, retriever, "hybrid", "fp", {}, supersedes=store.served.supersession(),
                      generator_for=lambda t: make_generator(answers, t), context_k=5)
    rows = {r.case.id: r for r in result.cases}
    assert rows[spoken.case.id].metrics["answer_no_prohibited_claims_proxy"] == 0.0
    assert rows[spoken.case.id].answer["prohibited_claims_made"] == [claim]
    assert rows[quiet.case.id].metrics["answer_no_prohibited_claims_proxy"] == 1.0
    # Only the two cases with prohibited claims carry the metric.
    assert sum("answer_no_prohibited_claims_proxy" in r.metrics for r in result.cases) == 2
    report = render_markdown(result)
    assert "Answers that made a prohibited claim: 1." in report and spoken.case.id in report.split("prohibited claim: 1.")[1]
