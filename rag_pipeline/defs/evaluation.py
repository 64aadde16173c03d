"""Evaluation assets, one partition per golden-set revision (the content hash of the file)."""

from pathlib import Path

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.evaluation.attribution import render as why
from rag_pipeline.core.evaluation.attribution.attribute import explain
from rag_pipeline.core.evaluation.evaluate import run_golden_evaluation
from rag_pipeline.core.evaluation.gating.baselines import compare_with_baseline, not_gated_verdict
from rag_pipeline.core.evaluation.gating.policy import policy_or_default
from rag_pipeline.core.evaluation.gating.report import (
    answer_section,
    answers_note,
    failed_cases_table,
    slice_table,
    write_report,
)
from rag_pipeline.core.evaluation.golden.snapshots import golden_file_for_revision
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring.external_runs import evaluate_run_file
from rag_pipeline.core.evaluation.scoring.results import headline_numbers
from rag_pipeline.core.evaluation.scoring.run_files import describe_run
from rag_pipeline.core.faults import hold_point
from rag_pipeline.core.outcomes import Status, StepOutcome
from rag_pipeline.core.plots import markdown_image
from rag_pipeline.defs import checks
from rag_pipeline.defs.common import OWNERS, STORE_POOL, tag_failure, tag_trigger
from rag_pipeline.defs.failures import explained
from rag_pipeline.defs.ingestion import search_index
from rag_pipeline.defs.metadata import SOURCE_COLUMNS, numbers, outcome, source_rows, table
from rag_pipeline.defs.partitions import golden_partitions
from rag_pipeline.defs.resources import EmbedderResource, PipelineSettings, StoreResource

_common = dict(partitions_def=golden_partitions, group_name="evaluation", pool=STORE_POOL, kinds={"duckdb"},
               owners=OWNERS)


class GoldenEvalConfig(dg.Config):
    """Run-time choices of one evaluation; empty means the pipeline config's values."""

    mode: str = ""
    # `full` (every case) or `pr` (the fast slice-stratified subset, evaluation.pr_subset_size).
    suite: str = "full"
    # Another system's rankings to score instead of this index's (a TREC or JSONL run file); the
    # command line gates such a run only with `--gate`, and passes `gate: false` otherwise.
    run_file: str = ""
    # False: measure only; the gate check then warns that it did not gate. Unset: this index is
    # gated, another system's run is not.
    gate: bool | None = None


def _golden_file(settings: PipelineSettings, store: StoreResource, revision: str) -> Path:
    config = settings.load()
    return golden_file_for_revision(config.golden_set, store.get(), revision, config.storage.golden_revisions)


@dg.asset(check_specs=checks.specs("golden_set", golden_partitions), **_common)
def golden_set(context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource):
    """The validated, frozen cases of one golden-set revision; gold ids checked against every
    document the sources ever held."""
    tag_trigger(context)
    hold_point("evaluation")
    db = store.get()
    with explained(context):
        golden = load_golden_set(_golden_file(settings, store, context.partition_key),
                                 served_hashes=db.served.document_hashes(), known_documents=db.ledger.document_history())
    context.log.info(render.plain_text(golden.summary()))
    slices: dict[str, int] = {}
    for case in golden.cases:
        slices[case.slice] = slices.get(case.slice, 0) + 1
    yield dg.MaterializeResult(metadata={
        "summary": dg.MetadataValue.md(render.inline(golden.summary())),
        "cases_by_slice": dg.MetadataValue.md(render.table(sorted(slices.items()), ["slice", "cases"])),
        **numbers({"cases": len(golden.cases), "stale_cases": len(golden.stale)}),
        **outcome(),
    })
    yield checks.result("golden_labels_current", golden.labels_verdict())


@dg.asset(
    deps=[golden_set, dg.AssetDep(search_index, partition_mapping=dg.AllPartitionMapping())],
    check_specs=checks.specs("golden_eval", golden_partitions),
    **_common,
)
def golden_eval(context: dg.AssetExecutionContext, config: GoldenEvalConfig, settings: PipelineSettings,
                store: StoreResource, embedder: EmbedderResource):
    """Retrieval (and answer) metrics by slice and split on one golden revision, with per-case traces,
    a report and a plot of each slice against the promoted baseline, which the gate compares with."""
    db = store.get()
    with explained(context):
        pipeline = settings.load()
        path = _golden_file(settings, store, context.partition_key)
        if config.run_file:
            # Another system's run: this pipeline's settings are not what it ran with, so none are recorded.
            _, result, run_summary = evaluate_run_file(path, Path(config.run_file), db, pipeline.source_ids, config.suite,
                                                       pipeline.evaluation.pr_subset_size, pipeline.evaluation.report_k)
            context.log.info(render.plain_text(run_summary))
        else:
            _, result = run_golden_evaluation(path, db, embedder.get(), pipeline.retrieval, pipeline.retrieval_fingerprint(),
                                              pipeline.source_ids, config.mode or None, pipeline.answers, config.suite,
                                              pipeline.evaluation.pr_subset_size, pipeline.evaluation.report_k,
                                              pipeline.retrieval_settings())
        policy = policy_or_default(pipeline.gate_policy)
        comparison = compare_with_baseline(db, result.eval_id, policy)
        # Why each case moved against the baseline, proven by replays on this index (not for another
        # system's run: there is no retrieval here to replay).
        changes = None if config.run_file or comparison.gate is None else explain(
            db, result, comparison.baseline_id, embedder.get(), policy.headline_metrics)
        moved = [c.as_json() for c in changes.changes] if changes else []
        sections = [why.markdown_section(moved, changes.baseline_id, changes.holdout_moved, changes.notes)] if changes else []
        # Unset: this index's evaluation is gated, another system's run is not.
        gated = config.gate if config.gate is not None else not config.run_file
        report = write_report(result, db, policy, pipeline.storage.reports, gated, comparison, sections)
    yield dg.MaterializeResult(metadata={
        "eval_id": result.eval_id,
        "mode": result.mode,
        "suite": f"{result.suite} ({len(result.cases)} cases)",
        "config_fingerprint": result.config_fingerprint,
        **({"external_run": render.printable(describe_run(result.external_run))} if result.external_run else {}),
        "index_state": dg.MetadataValue.json(result.index_state),
        # The night in one table: what each source served this evaluation, and which documents failed.
        "sources": table(source_rows(db, pipeline.sources), SOURCE_COLUMNS),
        "slice_table": dg.MetadataValue.md(slice_table(result)),
        "slices_against_baseline": dg.MetadataValue.md(markdown_image(report.plot, "slices against the baseline")),
        "answers_by_slice": dg.MetadataValue.md("\n".join(answer_section(result))
                                                or render.inline(answers_note(result.as_json()) or "")),
        "failed_cases": dg.MetadataValue.md(failed_cases_table(result)),
        **(_why_metadata(moved) if changes else {}),
        "report": dg.MetadataValue.md(report.markdown()),
        "report_file": dg.MetadataValue.path(str(report.path)),
        # Numbers as numeric metadata, so the Dagster UI plots their trend.
        **numbers(headline_numbers(result)),
        **outcome(),
    })
    # After the materialization: a failed gate never hides what was measured.
    if not gated:
        yield checks.result("gate_vs_baseline", not_gated_verdict(result.external_run))
        return
    yield checks.gate_result(comparison.verdict(why.why_line(moved)), moved)
    if comparison.gate is not None and comparison.gate.errors:
        # The run's failure headline says what regressed, not only that a blocking check failed.
        regressed = "; ".join(render.plain_text(f.message) for f in comparison.gate.errors)
        if moved:
            regressed += f"; {why.why_line(moved)}"
        tag_failure(context, f"gate_vs_baseline: {regressed}")
        raise dg.Failure(
            description=f"gate_vs_baseline: {regressed} (eval {result.eval_id} against "
                        f"{render.plain_text(comparison.against)})",
            metadata={"eval_id": result.eval_id, "baseline_eval": comparison.baseline_id or "",
                      "report_file": dg.MetadataValue.path(str(report.path)),
                      **outcome(StepOutcome(Status.REGRESSED, f"gate_vs_baseline: {regressed}"))},
            allow_retries=False,
        )


def _why_metadata(moved: list[dict]) -> dict:
    """Why cases moved against the baseline: a table (falls first) and counts by cause, as numbers."""
    counts = {f"cause_{kind}": n for kind, n in why.counts(moved).items()}
    return {"case_changes": table(why.rows(moved), why.COLUMNS),
            **numbers({"cases_moved": len(moved), "cases_fell": sum(1 for c in moved if c["delta"] < 0), **counts})}


evaluation_assets = [golden_set, golden_eval]
