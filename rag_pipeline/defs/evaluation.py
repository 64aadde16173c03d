"""Evaluation assets, one partition per golden-set revision (the content hash of the file)."""

import math
from pathlib import Path

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.baselines import compare_with_baseline
from rag_pipeline.core.evaluation import HEADLINE_METRICS, run_golden_evaluation
from rag_pipeline.core.gates import policy_or_default, render_gate
from rag_pipeline.core.golden import GoldenSetError, file_revision, load_golden_set
from rag_pipeline.core.report import (
    answer_section,
    failed_cases_table,
    render_markdown,
    slice_table,
)
from rag_pipeline.defs.ingestion import DUCKDB_POOL, search_index
from rag_pipeline.defs.metadata import md_table
from rag_pipeline.defs.partitions import golden_partitions
from rag_pipeline.defs.resources import (
    EmbedderResource,
    PipelineSettings,
    StoreResource,
)


class GoldenEvalConfig(dg.Config):
    """Run-time choices of one evaluation; empty means the pipeline config's values."""

    mode: str = ""


def golden_file_for_revision(settings: PipelineSettings, store: StoreResource, revision: str) -> Path:
    """The golden file of a revision: the configured file if it still has that content, else the
    snapshot kept when the revision was first seen (a revision is frozen; the file may move on)."""
    config = settings.load()
    if config.golden_set is None:
        raise GoldenSetError("no golden_set configured in the pipeline config")
    path = Path(config.golden_set)
    if path.is_file() and file_revision(path) == revision:
        store.get().snapshot_golden(revision, str(path), path.read_text(encoding="utf-8"))
        return path
    content = store.get().golden_snapshot(revision)
    if content is None:
        raise GoldenSetError(
            f"golden-set revision {revision} is neither the current content of {path} "
            f"(now {file_revision(path) if path.is_file() else 'missing'}) nor a kept snapshot"
        )
    frozen = Path(config.storage.path).parent / "golden_revisions" / f"{revision}.jsonl"
    frozen.parent.mkdir(parents=True, exist_ok=True)
    frozen.write_text(content, encoding="utf-8")
    return frozen


GOLDEN_LABELS_CHECK = "golden_labels_current"
_common = dict(partitions_def=golden_partitions, group_name="evaluation", pool=DUCKDB_POOL, kinds={"duckdb"})


@dg.asset(
    **_common,
    # Not blocking: stale cases are scored apart by the evaluation, never counted as misses.
    check_specs=[dg.AssetCheckSpec(GOLDEN_LABELS_CHECK, asset="golden_set")],
)
def golden_set(context: dg.AssetExecutionContext, settings: PipelineSettings, store: StoreResource):
    """The validated, frozen cases of one golden-set revision."""
    path = golden_file_for_revision(settings, store, context.partition_key)
    db = store.get()
    golden = load_golden_set(path, served_hashes=db.document_hashes(), known_documents=db.document_history())
    context.log.info(golden.summary())
    slices: dict[str, int] = {}
    for case in golden.cases:
        slices[case.slice] = slices.get(case.slice, 0) + 1
    yield dg.MaterializeResult(
        metadata={
            "summary": dg.MetadataValue.md(render.inline(golden.summary())),
            "cases": len(golden.cases),
            "stale_cases": len(golden.stale),
            **{f"slice_{metadata_key(name)}_cases": n for name, n in sorted(slices.items())},
        }
    )
    rows = [{"case": case_id, "problem": "; ".join(problems)} for case_id, problems in golden.stale.items()]
    yield dg.AssetCheckResult(
        check_name=GOLDEN_LABELS_CHECK,
        passed=not golden.stale,
        severity=dg.AssetCheckSeverity.WARN,
        description=(
            "every gold document is indexed and every pinned span unchanged"
            if not golden.stale
            else f"{len(golden.stale)} stale case(s), scored apart: "
            + "; ".join(render.printable(f"{r['case']}: {r['problem']}") for r in rows[:5])
        ),
        metadata={"stale_cases": len(golden.stale), "stale": md_table(rows, ["case", "problem"])},
    )


GATE_CHECK = "gate_vs_baseline"


@dg.asset(
    **_common,
    deps=[golden_set, dg.AssetDep(search_index, partition_mapping=dg.AllPartitionMapping())],
    check_specs=[dg.AssetCheckSpec(GATE_CHECK, asset="golden_eval", blocking=True)],
)
def golden_eval(
    context: dg.AssetExecutionContext,
    config: GoldenEvalConfig,
    settings: PipelineSettings,
    store: StoreResource,
    embedder: EmbedderResource,
):
    """Retrieval metrics by slice and split on one golden revision, with per-case traces and a report,
    gated against the promoted baseline of the same revision."""
    pipeline = settings.load()
    path = golden_file_for_revision(settings, store, context.partition_key)
    _, result = run_golden_evaluation(
        path, store.get(), embedder.get(), pipeline.retrieval, pipeline.retrieval_fingerprint(),
        pipeline.source_ids, config.mode or None, pipeline.answers,
    )
    report_path = report_file(pipeline.storage.path, result.eval_id)
    report_path.write_text(render_markdown(result), encoding="utf-8")
    numbers = {
        **{key: result.overall.get(key) for key in HEADLINE_METRICS},
        "weighted_recall_at_5": result.weighted.get("recall_at_5"),
        "weighted_ndcg_at_10": result.weighted.get("ndcg_at_10"),
        "p95_latency_ms": result.latency["p95_latency_ms"],
        "mean_context_tokens": result.latency["mean_context_tokens"],
        "unanswerable_abstain_rate": result.unanswerable["abstain_rate"],
        "forbidden_leak_cases": result.unanswerable["forbidden_leak_cases"],
        "stale_cases": result.unanswerable["stale_cases"],
        **(result.answers.get("overall", {}) if result.answers else {}),
    }
    metadata = {
        "eval_id": result.eval_id,
        "mode": result.mode,
        "config_fingerprint": result.config_fingerprint,
        "index_state": dg.MetadataValue.json(result.index_state),
        "slice_table": dg.MetadataValue.md(slice_table(result)),
        "answers_by_slice": dg.MetadataValue.md("\n".join(answer_section(result)) or "_no generator configured_"),
        "failed_cases": dg.MetadataValue.md(failed_cases_table(result)),
        "report": dg.MetadataValue.path(str(report_path)),
        # Numbers as numeric metadata, so the Dagster UI plots their trend; NaN (no such cases) is left out.
        **{key: dg.MetadataValue.float(float(v)) for key, v in numbers.items() if v is not None and not math.isnan(v)},
    }
    yield dg.MaterializeResult(metadata=metadata)
    yield gate_check_result(store.get(), result.eval_id, pipeline.gate_policy)


def metadata_key(name: str) -> str:
    """A metadata key part from a name written by others (a slice): letters, digits and `_` only."""
    return "".join(c if c.isascii() and c.isalnum() else "_" for c in name.lower()).strip("_") or "unnamed"


def gate_check_result(db, eval_id: str, policy_path: Path | None) -> dg.AssetCheckResult:
    """ERROR (blocking) when the gate finds a regression; WARN for unprotected slice drops or when
    no baseline of this golden revision exists to compare with."""
    comparison = compare_with_baseline(db, eval_id, policy_or_default(policy_path))
    if comparison.gate is None:
        return dg.AssetCheckResult(
            check_name=GATE_CHECK, passed=False, severity=dg.AssetCheckSeverity.WARN,
            description=f"{comparison.missing_reason}; promote one with `rag-pipeline promote`",
        )
    gate, baseline_id = comparison.gate, comparison.baseline_id
    severity = dg.AssetCheckSeverity.ERROR if gate.errors else dg.AssetCheckSeverity.WARN
    return dg.AssetCheckResult(
        check_name=GATE_CHECK,
        passed=not gate.findings,
        severity=severity,
        description=gate.decision if gate.findings or gate.promote else "no regression; " + gate.decision,
        metadata={"baseline_eval": baseline_id, "gate": dg.MetadataValue.md(render_gate(gate)),
                  **{f"delta_{d.metric}": dg.MetadataValue.float(d.delta) for d in gate.deltas if not math.isnan(d.delta)}},
    )


def report_file(index_path: Path, eval_id: str) -> Path:
    folder = Path(index_path).parent / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{eval_id}.md"


evaluation_assets = [golden_set, golden_eval]
