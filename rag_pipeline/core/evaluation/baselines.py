"""Promoted baselines: gating a stored evaluation against the baseline of its golden revision,
and promoting it when the gate says PROMOTE (the first evaluation of a revision needs no gate)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from rag_pipeline.core.evaluation.gates import GatePolicy, GateResult, compare, render_gate
from rag_pipeline.core.evaluation.suites import FULL
from rag_pipeline.core.render import inline
from rag_pipeline.core.storage import Store
from rag_pipeline.core.verdicts import Verdict


@dataclass
class BaselineComparison:
    candidate_id: str
    revision: str
    baseline_id: str | None
    gate: GateResult | None
    # Why there is nothing to compare with, when `gate` is None.
    missing_reason: str = ""
    suite: str = FULL

    def verdict(self) -> Verdict:
        """`gate_vs_baseline`: ERROR on a regression, WARN on an unprotected drop or when there is no baseline."""
        if self.gate is None:
            return Verdict(False, f"{self.missing_reason}; promote one with `rag-pipeline promote`", severity="WARN")
        gate = self.gate
        summary = gate.decision if gate.findings or gate.promote else "no regression; " + gate.decision
        summary = f"{self.suite} suite: {summary}"
        numbers = {f"delta_{d.metric}": round(d.delta, 6) for d in gate.deltas if not math.isnan(d.delta)}
        markdown = {"baseline_eval": inline(self.baseline_id), "suite": inline(self.suite), "gate": render_gate(gate)}
        return Verdict(not gate.findings, summary, numbers, markdown=markdown, severity=None if gate.errors else "WARN")


def promotion_verdict(eval_id: str, revision: str) -> Verdict:
    """`gate_vs_baseline` right after a promotion: the evaluation is the baseline, so it passes against itself."""
    return Verdict(True, f"{eval_id} is now the promoted baseline of golden revision {revision}; later evaluations "
                         "of this revision are gated against it", markdown={"baseline_eval": inline(eval_id)})


def compare_with_baseline(
    store: Store, eval_id: str, policy: GatePolicy, baseline_id: str | None = None
) -> BaselineComparison:
    """Gate an evaluation against `baseline_id`, or against the promoted baseline of its revision."""
    candidate = store.records.evaluation_record(eval_id)
    revision, suite = candidate["revision"], candidate.get("suite", FULL)
    baseline_id = baseline_id or store.records.baseline(revision, suite)
    if baseline_id is None:
        other = store.records.latest_baseline(suite)
        if suite != FULL and store.records.baseline(revision) is not None:
            reason = "the full suite's baseline is not comparable with a subset: promote an evaluation of this suite"
        elif other:
            reason = f"the latest baseline is on golden revision {other[0]}: not comparable"
        else:
            reason = "no baseline promoted yet"
        return BaselineComparison(eval_id, revision, None, None, f"no {suite}-suite baseline for revision {revision} ({reason})",
                                  suite=suite)
    return BaselineComparison(eval_id, revision, baseline_id, compare(store.records.evaluation_record(baseline_id), candidate, policy),
                              suite=suite)


def promote_if_better(store: Store, eval_id: str, policy: GatePolicy, note: str = "") -> tuple[bool, str]:
    """Store the evaluation as its revision's baseline only on PROMOTE; returns (promoted, the text to show).

    The first evaluation of a golden revision becomes its baseline: there is nothing to gate it against.
    """
    comparison = compare_with_baseline(store, eval_id, policy)
    suite = comparison.suite
    if comparison.gate is None:
        store.records.promote(comparison.revision, eval_id, f"first {suite}-suite baseline of this golden revision{note}", suite)
        return True, f"PROMOTE\n{eval_id} is the first {suite}-suite baseline of golden revision {comparison.revision}"
    if comparison.gate.promote:
        store.records.promote(comparison.revision, eval_id, f"replaces {comparison.baseline_id}{note}", suite)
    return comparison.gate.promote, f"suite: {suite}\n" + render_gate(comparison.gate)
