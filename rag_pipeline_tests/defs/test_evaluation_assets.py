"""golden_set and golden_eval materialized in process, partitioned by golden-set revision."""

import json

import dagster as dg
import pytest
import pytrec_eval

from rag_pipeline.cli.runner import evaluate_golden, ingest
from rag_pipeline.core.storage import open_store
from rag_pipeline.defs.partitions import golden_partitions
from rag_pipeline_tests.conftest import write_tree

PAGES = {
    "refunds.md": "# Refunds\n\nRefund requests are honoured within 14 days of purchase.\n",
    "sso.md": "# Single sign-on\n\nSSO works with Okta and Entra ID through SAML 2.0.\n",
    "limits.md": "# API limits\n\nThe Growth plan allows 600 requests per minute.\n",
    "export.md": "# Data export\n\nRun tallyo export --since 2024-01-01 to download a CSV archive.\n",
}
CASES = [
    {"id": "q1", "question": "how many days do I have to ask for my money back", "reference": "14 days",
     "gold_docs": ["kb:refunds.md"], "slice": "billing", "split": "dev"},
    {"id": "q2", "question": "which identity providers can I use for SAML login", "reference": "Okta, Entra ID",
     "gold_docs": ["kb:sso.md"], "slice": "auth", "split": "dev"},
    {"id": "q3", "question": "requests per minute on growth", "reference": "600", "gold_docs": ["kb:limits.md"],
     "slice": "billing", "split": "holdout", "weight": 3},
    {"id": "q4", "question": "do you offer payroll in Brazil", "reference": "Not covered.", "gold_docs": [],
     "answerable": False, "slice": "unanswerable", "split": "dev"},
]


@pytest.fixture
def setup(tmp_path, write_config):
    root = write_tree(tmp_path / "kb", PAGES)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("\n".join(json.dumps(c) for c in CASES) + "\n")
    config = write_config({"kb": root}, golden_set=str(golden))
    instance = dg.DagsterInstance.ephemeral()
    [run] = ingest(config, instance)
    assert run.success
    return config, instance, golden


def test_eval_materializes_per_revision_with_numeric_metadata(setup):
    config, instance, golden = setup
    run = evaluate_golden(config, instance, mode="bm25")
    assert run.success, run.error
    assert run.revision in instance.get_dynamic_partitions(golden_partitions.name)
    assert "loaded 4 cases" in run.golden_summary
    assert "| billing |" in run.slice_table and "**weighted**" in run.slice_table
    event = instance.get_latest_materialization_event(dg.AssetKey("golden_eval"))
    metadata = event.asset_materialization.metadata
    assert isinstance(metadata["recall_at_5"], dg.FloatMetadataValue)
    assert metadata["recall_at_5"].value == pytest.approx(run.summary["overall"]["recall_at_5"])
    assert run.summary["revision"] == run.revision and run.summary["index_state"]["kb"]
    assert run.summary["unanswerable"]["cases"] == 1


def test_a_new_revision_is_a_new_partition_and_the_old_one_stays_frozen(setup):
    config, instance, golden = setup
    first = evaluate_golden(config, instance, mode="bm25")
    golden.write_text(golden.read_text() + json.dumps({**CASES[0], "id": "q5"}) + "\n")
    second = evaluate_golden(config, instance, mode="bm25")
    assert second.success and first.revision != second.revision
    assert {first.revision, second.revision} <= set(instance.get_dynamic_partitions(golden_partitions.name))
    # The first revision is still evaluable from its snapshot although the file moved on.
    from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision

    store = open_store(config.storage)
    path = golden_file_for_revision(config.golden_set, store, first.revision, config.storage.golden_revisions)
    assert path.read_text().count("\n") == len(CASES)


def test_trec_run_file_reproduces_the_metrics(setup, tmp_path):
    from rag_pipeline.core.evaluation.scoring.run_files import write_trec_run

    config, instance, _ = setup
    run = evaluate_golden(config, instance, mode="hybrid")
    store = open_store(config.storage)
    eval_id = run.summary["eval_id"]
    out = write_trec_run(store.records.ranked_runs(eval_id), tmp_path / "run.trec", tag=eval_id)
    trec_run: dict[str, dict[str, float]] = {}
    for line in out.read_text().splitlines():
        qid, _, doc, rank, score, tag = line.split()
        trec_run.setdefault(qid, {})[doc] = float(score)
        assert tag == eval_id, "the tag names the evaluation (revision, mode, config fingerprint)"
    # Scores are the retrieval's: the first document's is its best chunk's fused score, not a rank.
    traces = store.records.case_traces(eval_id)
    top = max(trec_run["q1"].items(), key=lambda item: item[1])
    assert top[1] == pytest.approx(traces["q1"]["final"][0]["score"], abs=1e-6) and top[1] < 1.0
    qrels = {c["id"]: {d: 1 for d in c["gold_docs"]} for c in CASES if c["gold_docs"]}
    values = pytrec_eval.RelevanceEvaluator(qrels, {"recall.5", "ndcg_cut.10"}).evaluate({q: trec_run[q] for q in qrels})
    assert run.summary["overall"]["recall_at_5"] == pytest.approx(sum(v["recall_5"] for v in values.values()) / 3, abs=1e-9)
    assert run.summary["overall"]["ndcg_at_10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in values.values()) / 3, abs=1e-9)


def _latest_gate(instance, revision):
    key = dg.AssetCheckKey(dg.AssetKey("golden_eval"), "gate_vs_baseline")
    [record] = instance.event_log_storage.get_asset_check_execution_history(key, limit=1)
    return record.status.value, record.event.dagster_event.event_specific_data


def test_a_promotion_is_recorded_on_golden_eval_as_often_as_it_happens(setup):
    from rag_pipeline.core.evaluation.gating.baselines import promote_if_better
    from rag_pipeline.core.evaluation.gating.policy import GatePolicy
    from rag_pipeline.defs.checks import record_promotion

    config, instance, _ = setup
    run = evaluate_golden(config, instance, mode="bm25")
    status, evaluation = _latest_gate(instance, run.revision)
    assert status == "FAILED" and "no baseline" in evaluation.description  # a warning: nothing to compare with
    promoted, _ = promote_if_better(open_store(config.storage), run.summary["eval_id"], GatePolicy())
    assert promoted
    record_promotion(instance, run.revision, run.summary["eval_id"])
    # A second promotion on the same revision (Dagster keeps one run-less check row per partition and
    # refused a second report of the check: an observation has no such limit).
    second = evaluate_golden(config, instance, mode="bm25")
    open_store(config.storage).records.promote(second.revision, second.summary["eval_id"], "replaces the first", "full")
    record_promotion(instance, second.revision, second.summary["eval_id"])

    observations = instance.fetch_observations(
        dg.AssetRecordsFilter(dg.AssetKey("golden_eval"), asset_partitions=[run.revision]), limit=10).records
    promoted_ids = [o.asset_observation.metadata["promoted_eval_id"].value for o in observations]
    assert promoted_ids == [second.summary["eval_id"], run.summary["eval_id"]]  # newest first
    assert "is now the promoted baseline" in observations[0].asset_observation.description
    # The check's result stays what it was about its own evaluation; the next evaluation is gated
    # against the new baseline.
    third = evaluate_golden(config, instance, mode="bm25")
    status, evaluation = _latest_gate(instance, third.revision)
    assert "no baseline" not in evaluation.description and second.summary["eval_id"] in str(evaluation.metadata)


def test_golden_eval_draws_each_slice_against_the_baseline(setup):
    config, instance, _ = setup
    first = evaluate_golden(config, instance, mode="bm25")
    from rag_pipeline.core.evaluation.gating.baselines import promote_if_better
    from rag_pipeline.core.evaluation.gating.policy import GatePolicy

    promote_if_better(open_store(config.storage), first.summary["eval_id"], GatePolicy())
    second = evaluate_golden(config, instance, mode="bm25")
    metadata = instance.get_latest_materialization_event(dg.AssetKey("golden_eval")).asset_materialization.metadata
    assert metadata["slices_against_baseline"].value.startswith("![slices against the baseline](data:image/png;base64,")
    assert "data:image/png;base64," in metadata["report"].value
    report = metadata["report_file"].value
    assert second.report == report
    from pathlib import Path

    plot = Path(report).with_name(Path(report).stem + "-slices.png")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"![slices against the baseline]({plot.name})" in Path(report).read_text()


def test_a_new_golden_revision_is_gated_against_the_previous_baseline(setup, tmp_path):
    from rag_pipeline.core.evaluation.gating.baselines import promote_if_better
    from rag_pipeline.core.evaluation.gating.policy import GatePolicy

    config, instance, golden = setup
    store = open_store(config.storage)
    first = evaluate_golden(config, instance, mode="bm25")
    assert promote_if_better(store, first.summary["eval_id"], GatePolicy())[0]

    # A new revision (one case added, one relabelled) evaluated on an index where q1's page lost
    # its words: q1 is unchanged between the revisions, so its drop must be seen.
    cases = [dict(c) for c in CASES]
    cases[1]["gold_docs"] = ["kb:limits.md"]
    cases.append({"id": "q5", "question": "how do I download a CSV archive", "reference": "tallyo export",
                  "gold_docs": ["kb:export.md"], "slice": "data", "split": "dev"})
    golden.write_text("\n".join(json.dumps(c) for c in cases) + "\n")
    refunds = tmp_path / "kb" / "refunds.md"
    original = refunds.read_text()
    refunds.write_text("# Plants\n\nThe office plants are watered on Fridays.\n")
    assert ingest(config, instance)[0].success
    regressed = evaluate_golden(config, instance, mode="bm25")
    assert regressed.revision != first.revision
    # q1's drop is seen; on the two scored cases both revisions share, one miss cannot be told from
    # noise: inconclusive, a warning on the gate check, and no promotion.
    assert regressed.measured and not regressed.gate_failed and regressed.checks["gate_vs_baseline"] is False
    promoted, text = promote_if_better(store, store.records.latest_evaluation(regressed.revision), GatePolicy())
    assert not promoted, text
    assert f"gated against baseline {first.summary['eval_id']} of the previous golden revision {first.revision}" in text
    assert "on the 3 case(s) the two revisions share unchanged" in text  # q1, q3, q4; q2 changed, q5 is new
    assert "WARN (inconclusive): mrr_at_10 1.0000 -> " in text and "over 2 cases: fell by" in text
    assert "INCONCLUSIVE (2 cases cannot tell this drop from noise" in text
    assert store.records.baseline(regressed.revision) is None

    # Mended, the same revision's first evaluation becomes its baseline without having to win.
    refunds.write_text(original)
    assert ingest(config, instance)[0].success
    mended = evaluate_golden(config, instance, mode="bm25")
    promoted, text = promote_if_better(store, mended.summary["eval_id"], GatePolicy())
    assert promoted, text
    assert store.records.baseline(mended.revision) == mended.summary["eval_id"]


def test_the_first_baseline_still_keeps_the_budgets(setup):
    from rag_pipeline.core.evaluation.gating.baselines import promote_if_better
    from rag_pipeline.core.evaluation.gating.policy import GatePolicy

    config, instance, _ = setup
    run = evaluate_golden(config, instance, mode="bm25")
    promoted, text = promote_if_better(open_store(config.storage), run.summary["eval_id"], GatePolicy(context_tokens_budget=1))
    assert not promoted and "over the budget 1" in text


def test_golden_eval_says_why_cases_moved_against_the_baseline(setup, tmp_path):
    """The refunds page loses its words overnight: golden_eval names the page as the cause of q1's
    fall in a table and in numbers, the gate check's description names it, the report has it."""
    from rag_pipeline.core.evaluation.gating.baselines import promote_if_better
    from rag_pipeline.core.evaluation.gating.policy import GatePolicy

    config, instance, _ = setup
    first = evaluate_golden(config, instance, mode="bm25")
    assert promote_if_better(open_store(config.storage), first.summary["eval_id"], GatePolicy())[0]
    metadata = instance.get_latest_materialization_event(dg.AssetKey("golden_eval")).asset_materialization.metadata
    assert "case_changes" not in metadata  # no baseline then: nothing to explain
    (tmp_path / "kb" / "refunds.md").write_text("# Plants\n\nThe office plants are watered on Fridays.\n")
    assert ingest(config, instance)[0].success
    second = evaluate_golden(config, instance, mode="bm25")

    metadata = instance.get_latest_materialization_event(dg.AssetKey("golden_eval")).asset_materialization.metadata
    [row] = metadata["case_changes"].value.records
    assert (row.data["case"], row.data["cause"], row.data["document"], row.data["recovered"]) == (
        "q1", "gold_changed", "kb:refunds.md", True)
    assert row.data["baseline"] == 1.0 and row.data["candidate"] < 1.0
    assert metadata["cause_gold_changed"].value == 1 and metadata["cause_outranked"].value == 0
    assert metadata["cases_moved"].value == 1 and metadata["cases_fell"].value == 1
    assert "## Why cases moved against the baseline" in metadata["report"].value
    _, evaluation = _latest_gate(instance, second.revision)
    assert "why: 1 case(s) fell (gold_changed 1: kb:refunds.md)" in evaluation.description
    [checked] = evaluation.metadata["case_changes"].records
    assert checked.data["case"] == "q1"


def test_another_systems_run_in_the_ui_names_whose_run_it_is_and_warns_it_was_not_gated(setup, tmp_path):
    """What the Dagster UI shows for `eval --run` (gate false, as the command line passes without
    --gate): the run named in the metadata and the report, the gate check a warning that says why."""
    config, instance, _ = setup
    assert evaluate_golden(config, instance, mode="bm25").success
    run_file = tmp_path / "vendor.trec"
    run_file.write_text("".join(f"{case} Q0 kb:{doc} {rank} {10 - rank} vendor-x\n"
                                for case, docs in (("q1", ["sso.md", "refunds.md"]), ("q2", ["refunds.md"]))
                                for rank, doc in enumerate(docs, start=1)))
    run = evaluate_golden(config, instance, run_file=str(run_file), gate=False)
    assert run.success, run.error
    metadata = instance.get_latest_materialization_event(dg.AssetKey("golden_eval")).asset_materialization.metadata
    assert metadata["external_run"].value == "vendor.trec (TREC, tag vendor-x)"
    assert "- another system's run, not this index: vendor.trec (TREC, tag vendor-x)" in metadata["report"].value
    assert "not in the top 1 listed" in metadata["failed_cases"].value  # q2 lists one page, not its gold
    status, evaluation = _latest_gate(instance, run.revision)
    assert status == "FAILED" and evaluation.severity == dg.AssetCheckSeverity.WARN
    assert evaluation.description.startswith("not gated: another system's run (vendor.trec (TREC, tag vendor-x)) is "
                                             "measured and compared with this index's baseline, never judged by it")

    gated = evaluate_golden(config, instance, run_file=str(run_file), gate=True)
    _, evaluation = _latest_gate(instance, gated.revision)
    assert not evaluation.description.startswith("not gated")
