"""Promoted baselines: gating a stored evaluation against the baseline of its golden revision
(or, for a revision's first evaluation, the previous revision's baseline on the cases both
share unchanged), and promoting it when the gate says PROMOTE."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import date
from pathlib import Path

from rag_pipeline.core.evaluation.gating.gates import GateResult, check_budgets, compare, gate_reasons, render_gate
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.waivers import Waiver, active_waivers, utc_today
from rag_pipeline.core.evaluation.golden.cases import file_revision
from rag_pipeline.core.evaluation.golden.lines import golden_lines
from rag_pipeline.core.evaluation.golden.suites import FULL
from rag_pipeline.core.render import inline, printable
from rag_pipeline.core.storage import Store
from rag_pipeline.core.verdicts import Verdict

# The fields of a golden case that decide how it is scored: a case whose fields are the same in
# two revisions is the same test in both (its slice, split, weight and provenance may differ).
SCORED_FIELDS = ("question", "gold_docs", "gold_spans", "answerable", "tenant", "roles", "forbidden_docs")


@dataclass
class BaselineComparison:
    candidate_id: str
    revision: str
    baseline_id: str | None
    gate: GateResult | None
    # Why there is nothing to compare with, when `gate` is None.
    missing_reason: str = ""
    suite: str = FULL
    # When the baseline is the previous revision's: that revision and the cases both score alike.
    baseline_revision: str | None = None
    unchanged_cases: int = 0

    @property
    def against(self) -> str:
        """What the candidate was compared with, in words."""
        if self.baseline_revision is None:
            return f"baseline {self.baseline_id}"
        return (f"baseline {self.baseline_id} of the previous golden revision {self.baseline_revision}, "
                f"on the {self.unchanged_cases} case(s) the two revisions share unchanged")

    def verdict(self, why: str = "") -> Verdict:
        """`gate_vs_baseline`: ERROR on a regression, WARN on an unprotected drop or when there is no
        baseline. `why`: the line naming the top causes of the cases that moved (`attribution/render.py`)."""
        if self.gate is None:
            return Verdict(False, f"{self.missing_reason}; promote one with `rag-pipeline promote`", severity="WARN")
        gate = self.gate
        summary = gate.decision if gate.findings or gate.promote else "no regression; " + gate.decision
        summary = f"{self.suite} suite: {summary}"
        if self.baseline_revision is not None:
            summary += f" (against {self.against})"
        if why:
            summary += f"; {why}"
        summary += "".join(f"\nWAIVED {r.rule} — {r.waiver.describe()}" for r in gate.waived)
        numbers = {f"delta_{d.metric}": round(d.delta, 6) for d in gate.deltas if not math.isnan(d.delta)}
        markdown = {"baseline_eval": inline(self.baseline_id), "suite": inline(self.suite), "gate": render_gate(gate)}
        return Verdict(not gate.findings, summary, numbers, markdown=markdown, severity=None if gate.errors else "WARN")


def not_gated_verdict(external_run: dict | None = None) -> Verdict:
    """`gate_vs_baseline` of an evaluation that was not gated: a warning, never a pass. It only measured
    (`eval --no-gate`), or it scored another system's run (`eval --run` without `--gate`)."""
    if external_run:
        from rag_pipeline.core.evaluation.scoring.run_files import describe_run

        return Verdict(False, f"not gated: another system's run ({describe_run(external_run)}) is measured and "
                              "compared with this index's baseline, never judged by it (eval --run FILE --gate gates it)",
                       severity="WARN")
    return Verdict(False, "not gated: this evaluation only measured (eval --no-gate); gate it with `rag-pipeline gate`",
                   severity="WARN")


def promotion_verdict(eval_id: str, revision: str) -> Verdict:
    """`gate_vs_baseline` right after a promotion: the evaluation is the baseline, so it passes against itself."""
    return Verdict(True, f"{eval_id} is now the promoted baseline of golden revision {revision}; later evaluations "
                         "of this revision are gated against it", markdown={"baseline_eval": inline(eval_id)})


def baseline_index_state(store: Store, golden_set: Path | None) -> dict[str, str] | None:
    """What the promoted baseline of the golden file's revision measured (source -> manifest hash), or None."""
    if golden_set is None or not Path(golden_set).is_file():
        return None
    eval_id = store.records.baseline(file_revision(Path(golden_set)))
    return store.records.evaluation_summary(eval_id).get("index_state") if eval_id else None


def compare_with_baseline(
    store: Store, eval_id: str, policy: GatePolicy, baseline_id: str | None = None, today: date | None = None
) -> BaselineComparison:
    """Gate an evaluation against `baseline_id`, or against the promoted baseline of its revision,
    with the waivers in force on `today` (a UTC day; default: today)."""
    waivers = active_waivers((Waiver.from_row(row) for row in store.records.waivers()), today or utc_today())
    candidate = store.records.evaluation_record(eval_id)
    revision, suite = candidate["revision"], candidate.get("suite", FULL)
    baseline_id = baseline_id or store.records.baseline(revision, suite)
    if baseline_id is None:
        other = store.records.latest_baseline(suite)
        if suite != FULL and store.records.baseline(revision) is not None:
            reason = "the full suite's baseline is not comparable with a subset: promote an evaluation of this suite"
        elif other:
            # A new revision is gated against the previous one's baseline on the cases both score
            # alike: otherwise any edit of the golden file, even a blank line, would open the gate.
            unchanged = unchanged_cases(store.records.golden_snapshot(other[0]), store.records.golden_snapshot(revision))
            if unchanged is not None:
                gate = compare(store.records.evaluation_record(other[1]), candidate, policy, unchanged, waivers)
                return BaselineComparison(eval_id, revision, other[1], gate, suite=suite, baseline_revision=other[0],
                                          unchanged_cases=len(unchanged))
            reason = f"the latest baseline is on golden revision {other[0]}, whose text is not in the store: not comparable"
        else:
            reason = "no baseline promoted yet"
        return BaselineComparison(eval_id, revision, None, None, f"no {suite}-suite baseline for revision {revision} ({reason})",
                                  suite=suite)
    return BaselineComparison(eval_id, revision, baseline_id,
                              compare(store.records.evaluation_record(baseline_id), candidate, policy, waivers=waivers),
                              suite=suite)


def unchanged_cases(old_text: str | None, new_text: str | None) -> set[str] | None:
    """Ids of the cases two golden revisions (their JSONL texts) score alike (`SCORED_FIELDS`), or
    None when a text is missing. Lines that are not JSON objects are left out: the loader, not
    this comparison, reports them."""
    if old_text is None or new_text is None:
        return None
    old, new = _scored_fields(old_text), _scored_fields(new_text)
    return {case_id for case_id, fields in new.items() if old.get(case_id) == fields}


def _scored_fields(text: str) -> dict[str, str]:
    return {line.record["id"].strip(): json.dumps([line.record.get(f) for f in SCORED_FIELDS], sort_keys=True)
            for line in golden_lines(text) if line.record is not None and isinstance(line.record.get("id"), str)}


@dataclass
class Promotion:
    """What `promote` did: promoted or not, the text to show, and whether the gate found a regression
    (keeping the baseline because the candidate is not better is none)."""

    promoted: bool
    text: str
    regression: bool = False


def promote_if_better(store: Store, eval_id: str, policy: GatePolicy, note: str = "") -> tuple[bool, str]:
    """`promotion`'s (promoted, text)."""
    outcome = promotion(store, eval_id, policy, note)
    return outcome.promoted, outcome.text


def promotion(store: Store, eval_id: str, policy: GatePolicy, note: str = "") -> Promotion:
    """Store the evaluation as its revision's baseline only on PROMOTE.

    Later evaluations of a revision must beat its baseline. The first evaluation of a new revision
    must not regress against the previous revision's baseline on the cases both share unchanged;
    the very first evaluation has nothing to compare with. Budgets apply to all.
    """
    comparison = compare_with_baseline(store, eval_id, policy)
    suite = comparison.suite
    if comparison.gate is None:
        over = [f.message for f in check_budgets(store.records.evaluation_record(eval_id), policy) if f.severity == "ERROR"]
        if over:
            return Promotion(False, f"suite: {suite}\nkeep no baseline — " + "; ".join(over), regression=True)
        store.records.promote(comparison.revision, eval_id, f"first {suite}-suite baseline of this golden revision{note}", suite)
        return Promotion(True, f"PROMOTE\n{eval_id} is the first {suite}-suite baseline of golden revision {comparison.revision}")
    gate = comparison.gate
    if comparison.baseline_revision is not None:
        if gate.promote:
            store.records.promote(comparison.revision, eval_id, f"first {suite}-suite baseline of this golden revision, "
                                  f"gated against {comparison.against}{note}", suite)
        head = f"suite: {suite}\nfirst evaluation of golden revision {comparison.revision}, gated against {comparison.against}\n"
        return Promotion(gate.promote, head + render_gate(gate, terminal=True), regression=not gate.passed)
    if gate.promote:
        store.records.promote(comparison.revision, eval_id, f"replaces {comparison.baseline_id}{note}", suite)
    return Promotion(gate.promote, f"suite: {suite}\n" + render_gate(gate, terminal=True), regression=not gate.passed)


def gate_text(comparison: BaselineComparison) -> str:
    """The gate as plain text for a terminal or a CI log: against what, the metric table, each rule
    that did not pass (values, interval, p, the baseline's eval id), the verdict and the decision."""
    if comparison.gate is None:
        return (f"gate: {comparison.missing_reason}: nothing to compare with, so no regression; "
                f"`rag-pipeline promote` makes {comparison.candidate_id} the baseline")
    gate = comparison.gate
    lines = [f"gate: candidate {comparison.candidate_id} against {comparison.against}"]
    table_text = render_gate(gate, terminal=True).split("\n\n")[0] if gate.deltas else ""
    if table_text:
        lines += [table_text, ""]
    lines += gate_reasons(gate, comparison.baseline_id)
    verdict = {"regression": "REGRESSION", "inconclusive": "INCONCLUSIVE (no regression shown; not a failure)",
               "waived": "PASS WITH WAIVERS (each regression above is WAIVED: not a failure until its waiver ends)",
               "pass": "PASS", "not comparable": "NOT COMPARABLE"}[gate.verdict]
    lines.append(f"verdict: {verdict}")
    if gate.errors:
        decision = f"keep baseline ({len(gate.errors)} regression(s), above)"
    elif gate.promote:
        decision = "PROMOTE: `rag-pipeline promote` makes this evaluation the baseline"
    else:
        decision = gate.decision
    lines.append(f"decision: {printable(decision)}")
    return "\n".join(lines)
