"""The triage path on the sample data: a drift candidate and a failed case become reviewed cases,
two reviewers' agreement is reported and their disagreement held back, a near duplicate is
flagged, the new revision evaluates, and the old revision still evaluates to its old numbers."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from rag_pipeline.cli import main as cli
from rag_pipeline.cli.runner import evaluate_golden, monitor
from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.evaluation.evaluate import run_golden_evaluation
from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.storage import open_store
from rag_pipeline_tests.conftest import copy_sample_index, sample_pipeline


@pytest.fixture(scope="module")
def triaged(tmp_path_factory, sample_index):
    tmp = tmp_path_factory.mktemp("triage")
    config = sample_pipeline(tmp)
    golden = config.golden_set
    instance = dg.DagsterInstance.ephemeral()
    copy_sample_index(sample_index, config.storage.path)  # the sample ingested alike, written to below
    first = evaluate_golden(config, instance, mode="hybrid")
    assert first.success, first.error
    day = max(p.stem for p in config.monitoring.query_log.glob("*.jsonl"))
    assert monitor(config, instance, day).success
    existing = next(c for c in load_golden_set(golden).cases if c.split != "holdout")
    reports = tmp / "reports.jsonl"
    reports.write_text("\n".join(json.dumps(r) for r in [
        {"question": "can I bring my dog to the office on fridays", "reported_by": "support", "note": "no answer"},
        {"question": existing.question, "reported_by": "support", "note": "asked again"},
    ]) + "\n")
    queue = tmp / "queue.jsonl"
    assert cli(["golden", "triage", "--config", str(config.config_path), "--reports", str(reports), "--out", str(queue)]) == 0
    items = [json.loads(line) for line in queue.read_text().splitlines()]
    return {"config": config, "instance": instance, "first": first, "golden": golden, "queue": items, "tmp": tmp,
            "existing": existing}


def test_the_queue_holds_each_kind_with_what_a_reviewer_needs(triaged):
    items = triaged["queue"]
    origins = {i["origin"] for i in items}
    assert {"drift", "failed_case", "user_report"} <= origins, origins
    for item in items:
        assert item["item_id"] and item["question"]
        assert len(item["nearest_golden"]) == 3 and all("similarity" in n for n in item["nearest_golden"])
        assert all(r["content_hash"] for r in item["retrieved"])
        assert item["reviewer"] == "" and item["decision"] == "" and item["answerable"] is None
    # Holdout questions are never proposed, and never shown as a neighbour.
    holdout = {c.question for c in load_golden_set(triaged["golden"]).cases if c.split == "holdout"}
    assert not holdout & {i["question"] for i in items}
    assert not holdout & {n["question"] for i in items for n in i["nearest_golden"]}


def _review(item: dict, reviewer: str, **labels) -> dict:
    top = item["retrieved"][0]["doc_id"]
    return {**item, "reference": "reviewed reference", "gold_docs": [top], "slice": "from_production", "split": "dev",
            "answerable": True, "reviewer": reviewer, "decision": "accept", **labels}


def test_reviewed_items_become_a_new_revision_and_the_old_one_keeps_its_numbers(triaged):
    items, tmp, golden, config = triaged["queue"], triaged["tmp"], triaged["golden"], triaged["config"]
    drift = next(i for i in items if i["origin"] == "drift")
    failed = next(i for i in items if i["origin"] == "failed_case")
    new_report = next(i for i in items if i["origin"] == "user_report" and "dog" in i["question"])
    duplicate = next(i for i in items if i["origin"] == "user_report" and i["question"] == triaged["existing"].question)
    first_reviewer = [_review(drift, "ana"), _review(failed, "ana", slice="relabelled"),
                      _review(new_report, "ana", answerable=False, gold_docs=[], slice="unanswerable"),
                      _review(duplicate, "ana")]
    second_reviewer = [_review(drift, "ben"), _review(new_report, "ben", slice="unanswerable")]
    files = []
    for name, rows in (("ana", first_reviewer), ("ben", second_reviewer)):
        path = tmp / f"reviewed-{name}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        files.append(str(path))
    before = load_golden_set(golden)
    code = cli(["golden", "accept", *files, "--config", str(config.config_path)])
    assert code == 1, "a disagreement and a near duplicate are left for people to settle"
    after = load_golden_set(golden)
    assert after.revision != before.revision
    added = [c for c in after.cases if c.id not in {b.id for b in before.cases}]
    assert [c.id for c in added] == [f"tri-{drift['item_id']}"]
    assert added[0].question == drift["question"] and added[0].gold_docs == (drift["retrieved"][0]["doc_id"],)
    relabelled = next(c for c in after.cases if c.id == failed["case_id"])
    assert relabelled.slice == "relabelled"
    assert len(after.cases) == len(before.cases) + 1
    store = open_store(config.storage)
    [change] = [c for c in store.records.golden_changes() if c["change"] == "accept-reviewed"]
    assert (change["old_revision"], change["new_revision"]) == (before.revision, after.revision)
    assert "golden_set" in {row["component"] for row in store.records.experiment_log()}
    # The new revision evaluates; the old one, from its snapshot, gives its old numbers.
    second = evaluate_golden(config, triaged["instance"], mode="hybrid")
    assert second.success and second.revision == after.revision
    assert second.summary["cases"] == len(after.cases)
    old_file = golden_file_for_revision(golden, store, before.revision, config.storage.golden_revisions)
    _, again = run_golden_evaluation(old_file, store, make_embedder(config.embedding), config.retrieval,
                                     config.retrieval_fingerprint(), config.source_ids, "hybrid")
    assert again.revision == before.revision
    for metric, value in triaged["first"].summary["overall"].items():
        assert again.overall[metric] == pytest.approx(value, abs=1e-12), metric


def test_agreement_and_duplicates_are_reported(triaged, capsys):
    items, tmp, config = triaged["queue"], triaged["tmp"], triaged["config"]
    drift = next(i for i in items if i["origin"] == "drift")
    report = next(i for i in items if i["origin"] == "user_report" and i["question"] == triaged["existing"].question)
    a = tmp / "a.jsonl"
    b = tmp / "b.jsonl"
    a.write_text(json.dumps(_review(drift, "ana", id="agree-1")) + "\n" + json.dumps(_review(report, "ana")) + "\n")
    b.write_text(json.dumps(_review(drift, "ben", id="agree-1", slice="other")) + "\n")
    golden_before = triaged["golden"].read_text()
    capsys.readouterr()
    assert cli(["golden", "accept", str(a), str(b), "--config", str(config.config_path)]) == 1
    out = capsys.readouterr().out
    assert "reviewer agreement by slice: from_production 0/1" in out
    assert f"to reconcile: item {drift['item_id']} (slice differ between ana, ben)" in out
    assert f"near duplicate: item {report['item_id']} ~ {triaged['existing'].id}" in out
    # One finding a line, not a line of escaped "\n"s.
    assert "\\n" not in out and any(line.startswith("to reconcile: item") for line in out.splitlines())
    assert triaged["golden"].read_text() == golden_before, "nothing accepted, nothing written"


def test_a_ragas_export_reads_back_and_is_no_golden_set(triaged, capsys):
    config, tmp = triaged["config"], triaged["tmp"]
    out = tmp / "ragas.jsonl"
    eval_id = triaged["first"].summary["eval_id"]
    assert cli(["golden", "export-ragas", "--eval", eval_id, "--out", str(out), "--config", str(config.config_path)]) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    golden = load_golden_set(config.golden_set)
    shown = {c.id: c for c in golden.cases if c.split != "holdout"}
    assert rows and len(rows) <= len(shown)
    for row in rows:
        assert {"question", "answer", "contexts", "ground_truth", "user_input", "response", "retrieved_contexts", "reference"} <= set(row)
        assert row["question"] in {c.question for c in shown.values()}
    assert any(row["contexts"] for row in rows)
    # The extractive generator answered: a stored evaluation exports its answers for RAGAS.
    assert sum(1 for row in rows if row["answer"]) >= len(rows) / 2
    assert all(row["answer"] == row["response"] for row in rows)
    # Read back as a RAGAS dataset, its contexts are what retrieval returned: the system's output,
    # never gold. Importing it as a golden set says so and writes nothing.
    imported = tmp / "imported.jsonl"
    capsys.readouterr()
    code = cli(["golden", "import", str(out), "--shape", "ragas", "--out", str(imported), "--config", str(config.config_path)])
    shown_output = capsys.readouterr()
    assert code == 1 and not imported.exists()
    assert f"imported 0 of {len(rows)} records" in shown_output.err
    assert "retrieved contexts are the tested system's output, not labels" in shown_output.err


def test_a_grader_disagreeing_with_a_person_becomes_an_item(triaged, tmp_path):
    from rag_pipeline.core.evaluation.triage import build_queue
    from rag_pipeline.core.retrieval.retriever import Retriever

    config = triaged["config"]
    context = {"kb:leave.md#1": "Every new parent gets 20 weeks of parental leave at full pay."}
    rows = [
        # The grader passes this answer (it is faithful to its context); the person fails it.
        {"case_id": "hv-x", "question": "how long is parental leave for a second child", "answer":
         "Every new parent gets 20 weeks of parental leave at full pay [kb:leave.md#1].", "context": context,
         "reference": "20 weeks.", "answerable": True, "verdicts": {"faithful": "fail"}, "reviewer": "ana"},
        {"case_id": "hv-y", "question": "is parental leave paid", "answer":
         "Every new parent gets 20 weeks of parental leave at full pay [kb:leave.md#1].", "context": context,
         "reference": "Yes, at full pay.", "answerable": True, "verdicts": {"faithful": "pass"}, "reviewer": "ana"},
    ]
    verdicts = tmp_path / "verdicts.jsonl"
    verdicts.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = open_store(config.storage)
    embedder = make_embedder(config.embedding)
    items = build_queue(store, load_golden_set(config.golden_set), Retriever(store, embedder, config.retrieval), embedder,
                        verdicts=verdicts)
    human = [i for i in items if i["origin"] == "grader_vs_human"]
    assert [(i["case_id"], i["evidence"]["rubrics"]) for i in human] == [("hv-x", ["faithful"])]
    assert human[0]["nearest_golden"] and human[0]["retrieved"]


def test_the_questions_of_the_open_gaps_become_items_with_their_caller(triaged):
    from datetime import date

    from rag_pipeline.core.evaluation.triage import build_queue
    from rag_pipeline.core.retrieval.retriever import Retriever

    config = triaged["config"]
    store = open_store(config.storage)
    members = [{"query": "payroll tax filing india", "tenant": "acme", "roles": ["customer"], "best_score": 0.2},
               {"query": "payroll tax filing india", "tenant": "acme", "roles": ["customer"], "best_score": 0.2},
               {"query": "run payroll for contractors", "tenant": None, "roles": [], "best_score": 0.3}]
    row = {"gap_id": "gap-x", "first_seen": date(2026, 12, 30), "last_seen": date(2026, 12, 30), "label": "payroll",
           "question_count": 3, "share": 0.2, "best_score": 0.3, "threshold": 0.4, "nearest_doc": None,
           "nearest_section": "", "tenants": ["acme"], "members": json.dumps(members), "centroid": [1.0],
           "closed_by": None}
    closed = {**row, "gap_id": "gap-y", "members": json.dumps([{**members[0], "query": "payroll calendar"}])}
    store.gaps.save_day(date(2026, 12, 29), [{**closed, "day": date(2026, 12, 29), "status": "open"}])
    store.gaps.save_day(date(2026, 12, 30), [{**row, "day": date(2026, 12, 30), "status": "open"}])
    # A gap a later day closed is no item any more: the gaps still open are.
    store.gaps.save_day(date(2026, 12, 31), [{**closed, "day": date(2026, 12, 31), "status": "closed",
                                              "closed_by": "kb:payroll.md"}])
    embedder = make_embedder(config.embedding)
    items = build_queue(store, load_golden_set(config.golden_set), Retriever(store, embedder, config.retrieval), embedder)
    gaps = [i for i in items if i["origin"] == "coverage_gap"]
    asked = [i["question"] for i in gaps]
    # Each question once; those of gap-x, and of any gap the fixture's monitoring day left open; not gap-y's.
    assert len(asked) == len(set(asked)) and {"payroll tax filing india", "run payroll for contractors"} <= set(asked)
    assert "payroll calendar" not in asked
    assert {json.loads(r["members"])[0]["query"] for r in store.gaps.still_open()} <= set(asked)
    first = next(i for i in gaps if i["question"] == "payroll tax filing india")
    assert first["filters"] == {"tenant": "acme", "roles": ["customer"]}
    assert first["evidence"]["gap_id"] == "gap-x" and first["evidence"]["label"] == "payroll"
    assert first["nearest_golden"] and first["answerable"] is None
    store.close()
