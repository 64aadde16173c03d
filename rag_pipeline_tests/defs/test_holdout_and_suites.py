"""Holdout stays held out, and the pull-request subset is gated only against its own kind.

The sample corpus and golden set (18 holdout cases) go through ingestion, the full and the `pr`
evaluation and the day's monitoring in Dagster; every report file, every event the instance
recorded (log lines and metadata) and every stored trace is then searched for holdout questions.
"""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from rag_pipeline.cli import main as cli
from rag_pipeline.cli.runner import evaluate_golden, ingest, monitor
from rag_pipeline.config import load_config
from rag_pipeline.core.evaluation.gating.baselines import compare_with_baseline, promote_if_better
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision
from rag_pipeline.core.evaluation.golden.suites import select_suite
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.storage import open_store
from rag_pipeline_tests.conftest import sample_pipeline


@pytest.fixture(scope="module")
def sample(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("holdout")
    config = sample_pipeline(tmp, evaluation={"pr_subset_size": 24})
    golden = config.golden_set
    instance = dg.DagsterInstance.ephemeral()
    assert all(r.success for r in ingest(config, instance))
    full = evaluate_golden(config, instance, mode="hybrid")
    pr = evaluate_golden(config, instance, mode="hybrid", suite="pr")
    day = max(p.stem for p in config.monitoring.query_log.glob("*.jsonl")) if config.monitoring.query_log.is_dir() else None
    monitored = monitor(config, instance, day) if day else None
    return {"config": config, "instance": instance, "full": full, "pr": pr, "monitored": monitored, "golden": golden}


def _holdout_questions(config) -> list[str]:
    golden = load_golden_set(config.golden_set)
    return [c.question for c in golden.cases if c.split == "holdout"]


def test_no_holdout_question_in_any_report_event_or_trace(sample):
    config, instance = sample["config"], sample["instance"]
    assert sample["full"].success, sample["full"].error
    questions = _holdout_questions(config)
    assert len(questions) >= 10
    texts: dict[str, str] = {}
    for path in config.storage.path.parent.rglob("*"):
        if path.is_file() and path.suffix in (".md", ".json", ".jsonl", ".txt", ".html"):
            texts[str(path)] = path.read_text(encoding="utf-8", errors="replace")
    runs = instance.get_runs()
    assert len(runs) >= 5
    for run in runs:
        texts[f"run {run.job_name} {run.run_id}"] = "\n".join(dg.serialize_value(e) for e in instance.all_logs(run.run_id))
    store = open_store(config.storage)
    texts["stored traces"] = "\n".join(t for (t,) in store.db.rows("SELECT trace FROM eval_cases"))
    assert any("Golden evaluation" in t for t in texts.values()), "the report was written"
    for question in questions:
        # JSON escapes quotes and non-ASCII: look for the question as written and as serialized.
        forms = {question, json.dumps(question)[1:-1]}
        for where, text in texts.items():
            assert not any(form in text for form in forms), f"holdout question {question!r} found in {where}"
    # Holdout still counts: its cases are in the aggregates.
    assert sample["full"].summary["by_split"]["holdout"]["cases"] > 0


def test_the_pr_suite_is_a_stratified_subset_without_holdout(sample):
    config = sample["config"]
    golden = load_golden_set(config.golden_set)
    subset = select_suite(golden, "pr", 24)
    assert select_suite(golden, "pr", 24).cases == subset.cases
    assert 20 <= len(subset.cases) <= 30 and not [c for c in subset.cases if c.split == "holdout"]
    eligible_slices = {c.slice for c in golden.cases if c.split != "holdout"}
    assert {c.slice for c in subset.cases} == eligible_slices
    # A case's place depends on its id: adding a case keeps every chosen case but at most one.
    grown = golden.cases + [golden.cases[0].__class__(**{**golden.cases[0].__dict__, "id": "zz-new"})]
    regrown = select_suite(golden.__class__(**{**golden.__dict__, "cases": grown}), "pr", 24)
    assert len({c.id for c in subset.cases} - {c.id for c in regrown.cases}) <= 1
    summary = sample["pr"].summary
    assert summary["suite"] == "pr-24" and summary["cases"] == len(subset.cases)
    assert f"suite pr-24: {len(subset.cases)} of these cases evaluated" in sample["pr"].golden_summary


def test_a_subset_is_never_gated_against_a_full_baseline(sample):
    config = sample["config"]
    store = open_store(config.storage)
    full_id, pr_id = sample["full"].summary["eval_id"], sample["pr"].summary["eval_id"]
    promote_if_better(store, full_id, GatePolicy())
    comparison = compare_with_baseline(store, pr_id, GatePolicy())
    assert comparison.gate is None and "not comparable with a subset" in comparison.missing_reason
    forced = compare_with_baseline(store, pr_id, GatePolicy(), baseline_id=full_id)
    assert not forced.gate.comparable and "never compared" in forced.gate.reasons[0]
    # Promoted on its own suite, the next pr evaluation is gated against it.
    promoted, _ = promote_if_better(store, pr_id, GatePolicy())
    assert promoted and store.records.baseline(sample["pr"].revision, "pr-24") == pr_id
    assert store.records.baseline(sample["pr"].revision) == full_id
    # A subset of another size is another set of cases: never gated against this one.
    folder = Path(config.storage.path).parent.parent  # sample_pipeline's folder, with its pipeline.yaml
    raw = yaml.safe_load((folder / "pipeline.yaml").read_text()) | {"evaluation": {"pr_subset_size": 12}}
    (folder / "pipeline_pr12.yaml").write_text(yaml.safe_dump(raw))
    smaller_config = load_config(folder / "pipeline_pr12.yaml")
    smaller = evaluate_golden(smaller_config, sample["instance"], mode="hybrid", suite="pr")
    smaller_id = store.records.latest_evaluation(smaller.revision)
    assert store.records.evaluation_summary(smaller_id)["suite"] == "pr-12"
    assert compare_with_baseline(store, smaller_id, GatePolicy()).gate is None
    forced = compare_with_baseline(store, smaller_id, GatePolicy(), baseline_id=pr_id)
    assert not forced.gate.comparable and "never compared" in forced.gate.reasons[0]


def test_releasing_a_case_from_holdout_is_a_recorded_new_revision(sample, capsys):
    config, golden = sample["config"], sample["golden"]
    before = load_golden_set(golden)
    case = next(c for c in before.cases if c.split == "holdout")
    assert cli(["golden", "release-holdout", "zz-missing", "--config", str(config.config_path), "--by", "ana",
                "--reason", "typo"]) == 2
    assert load_golden_set(golden).revision == before.revision, "a failed release changes nothing"
    code = cli(["golden", "release-holdout", case.id, "--config", str(config.config_path), "--by", "ana",
                "--reason", "reviewed: used in the prompt guide"])
    assert code == 0, capsys.readouterr().err
    after = load_golden_set(golden)
    assert after.revision != before.revision
    assert next(c for c in after.cases if c.id == case.id).split == "validation"
    assert [c.id for c in after.cases] == [c.id for c in before.cases]
    store = open_store(config.storage)
    [change] = store.records.golden_changes()
    assert (change["change"], list(change["case_ids"]), change["changed_by"]) == ("release-holdout", [case.id], "ana")
    assert (change["old_revision"], change["new_revision"]) == (before.revision, after.revision)
    # The old revision stays evaluable from its snapshot.
    frozen = golden_file_for_revision(golden, store, before.revision, config.storage.golden_revisions)
    assert load_golden_set(frozen).revision == before.revision
