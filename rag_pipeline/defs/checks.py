"""Every asset check of the pipeline in one place: what it proves (its description in the UI), whether
it blocks, how severe a failure is; and the one function that turns a core `Verdict` into its result.

Checks are partitioned like their asset (one status per source, per golden revision, per day), so
the UI keeps each source's own state: a source that failed stays red until a run of that source
passes, whatever other sources do meanwhile.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import dagster as dg

from rag_pipeline.core import render
from rag_pipeline.core.verdicts import Table, Verdict
from rag_pipeline.defs.metadata import numbers, table


@dataclass(frozen=True)
class CheckDoc:
    asset: str
    description: str
    blocking: bool = False
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
    # The UI plots a check's numeric metadata over time across all its partitions. For the checks on
    # sources that would draw one line through different sources (13 -> 20 -> 17), so their numbers
    # are shown as text; the asset's own materialization plots them per source.
    plot_numbers: bool = True


CHECKS: dict[str, CheckDoc] = {
    "coverage": CheckDoc(
        "search_index",
        "Every document the source holds now is queryable (a search for its own opening text finds it in the "
        "top 10) or has a recorded failure. Proven on the new version before it is served: a failure keeps "
        "the previous version served.",
        blocking=True, plot_numbers=False,
    ),
    "deletions_propagated": CheckDoc(
        "search_index",
        "Nothing of a deleted document is left in any table or the embedding cache, no orphan rows exist, and "
        "neither retriever returns it for its own former text. Proven before the switch, like coverage.",
        blocking=True, plot_numbers=False,
    ),
    "sources_fresh": CheckDoc(
        "search_index",
        "What the index serves is what the source holds now: the oldest change not yet indexed (changed, "
        "never indexed, deleted but still served, unreadable) is younger than lifecycle.max_staleness_hours. "
        "Checked after the switch; a stale source makes its run red.",
        blocking=True, plot_numbers=False,
    ),
    "no_failed_documents": CheckDoc(
        "search_index",
        "Warns while any document of the source fails a stage for its current content (unreadable, bad "
        "metadata, parser error, over a limit); lists each with its stage and reason.",
        severity=dg.AssetCheckSeverity.WARN, plot_numbers=False,
    ),
    "served_as_configured": CheckDoc(
        "search_index",
        "Warns while the source is pinned to an earlier index state or disabled (`rag-pipeline index restore` or "
        "`disable`, or the UI's jobs of the same name): who did it, when and why. Ingestion then leaves its served "
        "rows alone until `index unpin` or `index enable`.",
        severity=dg.AssetCheckSeverity.WARN, plot_numbers=False,
    ),
    "golden_labels_current": CheckDoc(
        "golden_set",
        "Every gold document of the revision is indexed and every span pinned to a content hash still has "
        "it; stale cases are scored apart, never counted as misses.",
        severity=dg.AssetCheckSeverity.WARN,
    ),
    "gate_vs_baseline": CheckDoc(
        "golden_eval",
        "The evaluation against the promoted baseline of its golden revision: no headline metric below its "
        "tolerance, no protected slice regressed, latency and context within budget (paired significance). "
        "Warns when no baseline exists yet. Its result names the top causes of the cases that moved, each proven "
        "by a replay with that change undone (table `case_changes`).",
        blocking=True,
    ),
    "drift_within_threshold": CheckDoc(
        "drift_report",
        "The day's production sample is no farther from the golden set (MMD²) than golden questions are from "
        "each other at the configured false-alarm rate; warns with the queries that should become cases.",
        severity=dg.AssetCheckSeverity.WARN,
    ),
    "no_large_new_gap": CheckDoc(
        "coverage_gaps",
        "No coverage gap (a topic of questions with weak evidence in the served index) holds more than "
        "monitoring.gap_share_warn of the day's questions for the first time this day, new or open since an "
        "earlier day; warns once, with the gap's label and questions (a gap that stays over it is only listed).",
        severity=dg.AssetCheckSeverity.WARN,
    ),
}


def specs(asset: str, partitions_def: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    """The check specs of one asset, partitioned like it (a preview API in Dagster 1.13, chosen
    deliberately: it is what gives each source its own check state; its warning is not repeated)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [
            dg.AssetCheckSpec(name, asset=asset, description=doc.description, blocking=doc.blocking,
                              partitions_def=partitions_def)
            for name, doc in CHECKS.items() if doc.asset == asset
        ]


def result(name: str, verdict: Verdict) -> dg.AssetCheckResult:
    """The check's result from core's verdict: its summary (plain text, its lines kept: Dagster shows
    a check's description as text), its numbers (plotted by the UI), its tables (Dagster's table view)."""
    doc = CHECKS[name]
    severity = dg.AssetCheckSeverity.WARN if verdict.severity == "WARN" else doc.severity
    metadata: dict = (numbers(verdict.numbers) if doc.plot_numbers
                      else {key: dg.MetadataValue.text(render.number(value)) for key, value in verdict.numbers.items()})
    metadata |= {key: table(t.rows, t.columns) for key, t in verdict.tables.items()}
    metadata |= {key: dg.MetadataValue.md(text) for key, text in verdict.markdown.items()}
    metadata |= {key: dg.MetadataValue.text(render.plain_text(text)) for key, text in verdict.texts.items()}
    return dg.AssetCheckResult(check_name=name, asset_key=doc.asset, passed=verdict.passed, severity=severity,
                               description=render.cut(render.plain_text(verdict.summary), 1000), metadata=metadata)


def gate_result(verdict: Verdict, moved: Sequence[Mapping]) -> dg.AssetCheckResult:
    """`gate_vs_baseline`'s result, with the cases that moved against the baseline and their causes as
    a table (its description already names the top causes: `BaselineComparison.verdict(why)`)."""
    if moved:
        from rag_pipeline.core.evaluation.attribution import render as why

        verdict = replace(verdict, tables={**verdict.tables, "case_changes": Table(why.rows(moved), why.COLUMNS)})
    return result("gate_vs_baseline", verdict)


def record_promotion(instance: dg.DagsterInstance, revision: str, eval_id: str) -> None:
    """Record a promotion in Dagster, where the on-call person looks: an observation of
    `golden_eval` for the revision, naming the evaluation that is now its baseline.

    An observation, not a second evaluation of `gate_vs_baseline`: Dagster 1.13 keeps one run-less
    check row per (asset, check, partition) and refuses a second report on it, and the check's
    result was true of its evaluation when it was made; the next evaluation is gated against this
    baseline."""
    from rag_pipeline.core.evaluation.gating.baselines import promotion_verdict

    verdict = promotion_verdict(eval_id, revision)
    instance.report_runless_asset_event(dg.AssetObservation(
        asset_key=CHECKS["gate_vs_baseline"].asset, partition=revision,
        description=render.plain_text(verdict.summary),
        metadata={"promoted_eval_id": dg.MetadataValue.text(eval_id), "golden_revision": dg.MetadataValue.text(revision)},
    ))
