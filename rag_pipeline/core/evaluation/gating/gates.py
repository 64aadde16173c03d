"""Regression gates: a candidate evaluation against the promoted baseline of the same golden revision.

Two numbers per metric, never blended: the baseline's and the candidate's, with the paired
difference over cases, its interval and its significance. Every rule has a three-way verdict:

- **regression** (ERROR, fails the gate): a drop significantly beyond its tolerance, i.e. the
  whole (1 - alpha) interval of the paired difference lies below -tolerance;
- **inconclusive** (WARN): a drop beyond the tolerance that the cases cannot tell from noise; it
  is reported with the minimum detectable effect (MDE) of this many cases, and it holds back a
  promotion, but it is not a regression;
- **pass**: no drop beyond the tolerance.

Headline metrics (each with its tolerance, else the policy's default) and protected slices follow
these rules (a protected slice over its own cases, with the protected-slice tolerance); a drop on
another slice only warns. Each rule is stated in words that cannot read as contradictory: the
change, its interval, whether it is significant at its p, the tolerance, and the outcome. A forbidden document
retrieved where the baseline retrieved none is a fact, not an estimate: always an ERROR.
Promotion needs a significant gain of at least `min_gain` on a headline metric and no ERROR or
inconclusive drop.

A rule with an active waiver (`waivers.py`: who, why, until when) that regresses is WAIVED: a
WARN shown with its waiver, not a failure; it still holds the baseline back.

Budgets: the mean context size is a count, the same on every run of a config: over its budget it
fails the gate. Latency is one wall-clock measurement on a machine that may be busy (a shared CI
runner measured the same config at 1.2 s and 2.3 s): over its budget it warns and never fails
(benchmarks/ measures speed on a quiet machine)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.significance import Delta, paired_delta
from rag_pipeline.core.evaluation.gating.waivers import Waiver
from rag_pipeline.core.render import Markdown, inline, printable, table, text_table

Severity = Literal["ERROR", "WARN"]
Outcome = Literal["pass", "regression", "inconclusive", "warn", "waived"]


@dataclass
class Finding:
    severity: Severity
    message: str
    rule: str = ""


@dataclass(frozen=True)
class RuleResult:
    """One rule the gate checked, whatever its outcome (a JUnit test case reads one of these)."""

    rule: str
    outcome: Outcome
    message: str
    # The waiver that turned this rule's regression into a warning ("waived").
    waiver: Waiver | None = None


@dataclass
class GateResult:
    comparable: bool
    deltas: list[Delta] = field(default_factory=list)
    slice_deltas: dict[str, tuple[float, float]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    promote: bool = False
    reasons: list[str] = field(default_factory=list)
    rules: list[RuleResult] = field(default_factory=list)
    alpha: float = 0.05
    # Rule -> the waiver in force for it (core/evaluation/gating/waivers.py: active_waivers).
    waivers: dict[str, Waiver] = field(default_factory=dict)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "ERROR"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "WARN"]

    @property
    def inconclusive(self) -> list[RuleResult]:
        return [r for r in self.rules if r.outcome == "inconclusive"]

    @property
    def waived(self) -> list[RuleResult]:
        """Rules that regressed under an active waiver: shown, not failed, never promoted."""
        return [r for r in self.rules if r.outcome == "waived"]

    @property
    def passed(self) -> bool:
        """No ERROR finding (a candidate that is merely not better, or inconclusive, still passes)."""
        return self.comparable and not self.errors

    @property
    def verdict(self) -> str:
        """`regression` (an ERROR), `waived` (regressions, each under an active waiver), `inconclusive`
        (a drop the cases cannot decide), or `pass`."""
        if not self.passed:
            return "regression" if self.comparable else "not comparable"
        return "waived" if self.waived else "inconclusive" if self.inconclusive else "pass"

    @property
    def decision(self) -> str:
        return "PROMOTE" if self.promote else "keep baseline — " + "; ".join(self.reasons)

    def add(self, rule: str, outcome: Outcome, message: str) -> None:
        """Record a rule's outcome; a regression is an ERROR finding (a WARN when its rule is waived),
        an inconclusive drop or a warning a WARN."""
        waiver = self.waivers.get(rule) if outcome == "regression" and rule != "comparable" else None
        if waiver is not None:
            outcome = "waived"
        self.rules.append(RuleResult(rule, outcome, message, waiver))
        if outcome == "regression":
            self.findings.append(Finding("ERROR", message, rule))
        elif outcome in ("inconclusive", "warn"):
            self.findings.append(Finding("WARN", message, rule))
        elif outcome == "waived":
            self.findings.append(Finding("WARN", f"WAIVED {message} ({waiver.describe()})", rule))

    def worst_slice(self) -> tuple[str, float] | None:
        if not self.slice_deltas:
            return None
        name = min(self.slice_deltas, key=lambda s: self.slice_deltas[s][1] - self.slice_deltas[s][0])
        base, cand = self.slice_deltas[name]
        return name, cand - base


def three_way(delta: Delta, tolerance: float) -> Outcome:
    """`regression` when the whole interval lies below -tolerance, `inconclusive` when the drop is
    beyond the tolerance but its interval reaches back over it, else `pass`."""
    if math.isnan(delta.delta) or delta.delta >= -tolerance - 1e-12:
        return "pass"
    return "regression" if delta.ci_high < -tolerance - 1e-12 else "inconclusive"


def compare(baseline: Mapping, candidate: Mapping, policy: GatePolicy,
            unchanged_cases: Collection[str] | None = None, waivers: Mapping[str, Waiver] | None = None) -> GateResult:
    """Gate a candidate evaluation against a baseline.

    Both arguments are evaluation records: `revision`, `by_slice`, `latency`, `unanswerable`
    (the summary an evaluation stores) plus `cases`: case id -> {metric: value} for scored cases,
    and `case_slices`: case id -> slice.

    `unchanged_cases`: the candidate is the first evaluation of a new golden revision and the
    baseline is the previous revision's; only these cases (the same in both revisions) are
    compared, slices by their mean over them. Such a candidate is promotable when it passes (no
    ERROR): it sets the new revision's first baseline, so it must not regress, not win.

    `waivers`: rule -> the waiver in force today (`waivers.active_waivers`).
    """
    across = unchanged_cases is not None
    problem = None
    if baseline["revision"] != candidate["revision"] and not across:
        problem = (f"baseline is on golden revision {baseline['revision']}, candidate on {candidate['revision']}: "
                   "not comparable; promote a baseline on this revision first")
    elif baseline.get("suite", "full") != candidate.get("suite", "full"):
        problem = (f"baseline is the {baseline.get('suite', 'full')} suite, candidate the {candidate.get('suite', 'full')} "
                   "suite: a subset is never compared with another set of cases; promote a baseline of this suite")
    if problem:
        result = GateResult(comparable=False, alpha=policy.significance.alpha)
        result.add("comparable", "regression", problem)
        result.reasons.append(problem)
        return result
    result = GateResult(comparable=True, alpha=policy.significance.alpha, waivers=dict(waivers or {}))
    base_cases, cand_cases = baseline["cases"], candidate["cases"]
    shared_ids = set(base_cases) & set(cand_cases)
    if across:
        shared_ids &= set(unchanged_cases)
    shared = sorted(shared_ids)
    if across:
        baseline, candidate = (_over_cases(r, shared, policy.slice_metric) for r in (baseline, candidate))
    for metric in policy.headline_metrics:
        ids = [c for c in shared if metric in base_cases[c] and metric in cand_cases[c]]
        result.deltas.append(paired_delta(metric, [base_cases[c][metric] for c in ids],
                                          [cand_cases[c][metric] for c in ids], policy.significance))
    _check_grader(result, policy)
    _check_headlines(result, policy)
    _check_slices(result, baseline, candidate, policy, shared)
    _check_budgets(result, candidate, policy)
    _decide(result, policy)
    if across:
        # Sets the new revision's first baseline: it must not regress, nor leave a drop undecided.
        result.promote = not result.errors and not result.inconclusive and not result.waived
        result.reasons = ([f.message for f in result.errors] + [r.message for r in result.inconclusive]
                          + [f"waived: {r.message}" for r in result.waived])
    return result


def _over_cases(record: Mapping, case_ids: Sequence[str], metric: str) -> dict:
    """The record with its slices' `metric` recomputed over `case_ids` only (its rates kept)."""
    by_slice: dict[str, list[float]] = {}
    for case_id in case_ids:
        if metric in record["cases"][case_id]:
            by_slice.setdefault(record["case_slices"].get(case_id, ""), []).append(record["cases"][case_id][metric])
    slices = {name: {k: v for k, v in values.items() if k != metric} for name, values in record["by_slice"].items()}
    for name, values in by_slice.items():
        slices.setdefault(name, {})[metric] = sum(values) / len(values)
    return {**record, "by_slice": slices}


def check_budgets(candidate: Mapping, policy: GatePolicy) -> list[Finding]:
    """The budget findings alone: what gates an evaluation that has no baseline to compare with."""
    result = GateResult(comparable=True)
    _check_budgets(result, candidate, policy)
    return result.findings


def _check_grader(result: GateResult, policy: GatePolicy) -> None:
    """Answer metrics are graded; a grader whose false-pass rate on a critical rubric is over budget
    (against human verdicts) cannot gate a release, and the gate says so."""
    if not any(m.startswith("answer_") for m in policy.headline_metrics):
        return
    if policy.grader_verdicts is None:
        result.add("grader calibrated", "regression", "answer metrics are headline metrics but no grader_verdicts "
                                                       "file calibrates the grader against people")
        return
    from rag_pipeline.core.evaluation.answers.calibration import calibrate, load_verdicts

    usable, reasons = calibrate(load_verdicts(policy.grader_verdicts)).usable(policy.grader_false_pass_budgets)
    if not usable:
        result.add("grader calibrated", "regression", "grader cannot gate: " + "; ".join(reasons))
    else:
        result.add("grader calibrated", "pass", "the grader's false-pass rates are within budget")


def _check_headlines(result: GateResult, policy: GatePolicy) -> None:
    for d in result.deltas:
        tolerance = policy.headline_tolerance(d.metric)
        outcome = three_way(d, tolerance)
        result.add(d.metric, outcome, _drop_message(d.metric, d, tolerance, outcome, result.alpha))


def _drop_message(name: str, d: Delta, tolerance: float, outcome: Outcome, alpha: float) -> str:
    """A rule as a person reads it: `recall_at_5 0.8125 -> 0.6875 over 32 cases: fell by 0.125 (95% CI
    -0.219 to -0.031); significant at p = 0.012; tolerance 0.02: REGRESSION`."""
    if d.cases == 0:
        return f"{name}: no case scored in both evaluations"
    text = f"{name} {d.baseline:.4f} -> {d.candidate:.4f} over {d.cases} cases: {d.describe(alpha)}"
    if outcome == "regression":
        return f"{text}; tolerance {_amount(tolerance)}: REGRESSION (the whole interval lies beyond the tolerance)"
    if outcome == "inconclusive":
        reaches = ", which the interval reaches into" if d.p_value < alpha else ""
        mde = f"about {d.mde:.3f}" if not math.isnan(d.mde) else "not estimable"
        return (f"{text}; tolerance {_amount(tolerance)}{reaches}: INCONCLUSIVE ({d.cases} cases cannot tell this drop "
                f"from noise; the smallest drop they detect is {mde})")
    return f"{text}; tolerance {_amount(tolerance)}: PASS" + (" (within the tolerance)" if d.delta < 0 else "")


def _amount(value: float) -> str:
    """A tolerance as written in a policy: `0.02`, `0.00`, `0.005`."""
    return f"{value:.2f}" if round(value, 2) == value else f"{value:g}"


def _check_slices(result: GateResult, baseline: Mapping, candidate: Mapping, policy: GatePolicy,
                  shared: Sequence[str]) -> None:
    metric = policy.slice_metric
    tolerance = policy.slice_tolerance()
    slices = candidate.get("case_slices") or {}
    for name, base_values in baseline["by_slice"].items():
        cand_values = candidate["by_slice"].get(name, {})
        protected = name in policy.protected_slices
        if metric in base_values and metric in cand_values:
            b, c = base_values[metric], cand_values[metric]
            result.slice_deltas[name] = (b, c)
            ids = [i for i in shared if slices.get(i) == name
                   and metric in baseline["cases"][i] and metric in candidate["cases"][i]]
            if protected and ids:
                d = paired_delta(metric, [baseline["cases"][i][metric] for i in ids],
                                 [candidate["cases"][i][metric] for i in ids], policy.significance)
                outcome = three_way(d, tolerance)
                result.add(f"protected slice {name} {metric}", outcome,
                           _drop_message(f"protected slice {name}: {metric}", d, tolerance, outcome, result.alpha))
            elif c < b - 1e-12:
                result.add(f"slice {name} {metric}", "warn", f"slice {name}: {metric} {b:.3f} -> {c:.3f}")
        # A forbidden document retrieved is a fact about the candidate, not a sample estimate.
        if "forbidden_leak_cases" in base_values and "forbidden_leak_cases" in cand_values:
            b, c = base_values["forbidden_leak_cases"], cand_values["forbidden_leak_cases"]
            outcome = "regression" if c > b + 1e-12 else "pass"
            result.add(f"slice {name} forbidden_leak_cases", outcome,
                       f"slice {name}: cases that retrieved a forbidden document {b:.0f} -> {c:.0f}")
        # Unanswerable cases are guarded by their abstention, paired over cases where both records have them.
        if "abstain_rate" in base_values and "abstain_rate" in cand_values:
            _check_abstention(result, name, baseline, candidate, policy, protected)


def _check_abstention(result: GateResult, name: str, baseline: Mapping, candidate: Mapping, policy: GatePolicy,
                      protected: bool) -> None:
    b_rate, c_rate = baseline["by_slice"][name]["abstain_rate"], candidate["by_slice"][name]["abstain_rate"]
    rule = f"{'protected ' if protected else ''}slice {name} abstain_rate"
    if c_rate >= b_rate - 1e-12:
        result.add(rule, "pass", f"slice {name}: abstain_rate {b_rate:.3f} -> {c_rate:.3f}")
        return
    if not protected:
        result.add(rule, "warn", f"slice {name}: abstain_rate {b_rate:.3f} -> {c_rate:.3f}")
        return
    slices = candidate.get("case_slices") or {}
    b_cases, c_cases = baseline.get("case_abstained") or {}, candidate.get("case_abstained") or {}
    ids = sorted(i for i in set(b_cases) & set(c_cases) if slices.get(i) == name)
    if not ids:  # records written before per-case abstention was kept: no paired test possible
        result.add(rule, "inconclusive", f"protected slice {name}: abstain_rate {b_rate:.3f} -> {c_rate:.3f} "
                                         "(no per-case abstention stored to test it)")
        return
    d = paired_delta("abstain_rate", [float(b_cases[i]) for i in ids], [float(c_cases[i]) for i in ids],
                     policy.significance)
    outcome = three_way(d, 0.0)
    result.add(rule, outcome, _drop_message(f"protected slice {name}: abstain_rate", d, 0.0, outcome, result.alpha))


def _check_budgets(result: GateResult, candidate: Mapping, policy: GatePolicy) -> None:
    latency = candidate.get("latency", {})
    p95 = latency.get("p95_latency_ms", math.nan)
    if policy.latency_budget_p95_ms is not None:
        if p95 is None or math.isnan(p95):
            result.add("p95 latency budget", "warn", "no latency was measured (no case searched on its own): the p95 "
                                                     "budget is not checked")
        elif p95 > policy.latency_budget_p95_ms:
            result.add("p95 latency budget", "warn",
                       f"p95 latency {p95:.0f} ms over the budget {policy.latency_budget_p95_ms:g} ms (one timing on a "
                       "machine that may be busy: it warns, never fails; measure speed with benchmarks/)")
        else:
            result.add("p95 latency budget", "pass",
                       f"p95 latency {p95:.0f} ms within the budget {policy.latency_budget_p95_ms:g} ms")
    if policy.context_tokens_budget is not None:
        words = latency.get("mean_context_tokens", 0)
        if words is None or math.isnan(words):
            result.add("context size budget", "pass", "context size not measured (another system's run): the budget "
                                                      "is not checked")
            return
        over = words > policy.context_tokens_budget
        result.add("context size budget", "regression" if over else "pass",
                   f"context {words:.0f} words per query {'over' if over else 'within'} the budget "
                   f"{policy.context_tokens_budget:g}")


def _decide(result: GateResult, policy: GatePolicy) -> None:
    if result.errors:
        result.reasons = [f.message for f in result.errors]
        return
    if result.waived:
        # A waiver lets the candidate pass; it does not make its regression the new baseline.
        result.reasons = ["a waived regression is not promoted (" + ", ".join(r.rule for r in result.waived) + ")"]
        return
    alpha = policy.significance.alpha
    wins = [d for d in result.deltas if d.delta >= policy.min_gain and d.p_value < alpha]
    undecided = result.inconclusive
    if wins and not undecided:
        result.promote = True
        return
    if wins:
        result.reasons = ["a significant gain, but a drop the cases cannot decide: "
                          + "; ".join(r.message for r in undecided)]
        return
    best = max(result.deltas, key=lambda d: d.delta, default=None)
    if best is None:
        result.reasons = ["no headline metric to compare"]
    else:
        result.reasons = [
            f"no significant gain of at least {policy.min_gain:g} on a headline metric "
            f"(best: {best.metric} {best.delta:+.4f}, p={best.p_value:.3f})"
        ]


def render_gate(result: GateResult, terminal: bool = False) -> str:
    """The gate's tables and verdict as markdown, shown in Dagster; `terminal`: plain text for the
    command line and CI logs (aligned columns, `->`, never `-&gt;`)."""
    ci = f"{1 - result.alpha:.0%} CI"
    outcomes = {r.rule: r.outcome for r in result.rules}
    # The interval as "low to high" beside its outcome: "[-0.0577, +0.0000]" next to p 0.720 read as a contradiction.
    metric_rows = [
        (d.metric, Markdown(f"{d.baseline:.4f}"), Markdown(f"{d.candidate:.4f}"), Markdown(f"{d.delta:+.4f}"),
         Markdown(f"{d.ci_low:+.4f} to {d.ci_high:+.4f}"), Markdown(f"{d.p_value:.3f}"),
         Markdown("–" if math.isnan(d.mde) else f"{d.mde:.3f}"), d.cases, outcomes.get(d.metric, "").upper())
        for d in result.deltas
    ]
    columns = ["metric", "baseline", "candidate", "delta", ci, "p", "MDE", "cases", "outcome"]
    render = (lambda rows, cols: text_table(rows, cols)) if terminal else (lambda rows, cols: table(rows, cols, limit=None))
    lines = [render(metric_rows, columns)] if metric_rows else []
    if result.slice_deltas:
        slice_rows = [(name, b, c, Markdown(f"{c - b:+.3f}")) for name, (b, c) in sorted(result.slice_deltas.items())]
        lines += ["", render(slice_rows, ["slice", "baseline", "candidate", "delta"])]
    lines.append("")
    text = printable if terminal else inline
    labels = {"regression": "ERROR (regression)", "inconclusive": "WARN (inconclusive)", "warn": "WARN",
              "waived": "WAIVED (regression)"}
    lines += [f"{labels[r.outcome]}: {text(r.message)}" + (f" — {text(r.waiver.describe())}" if r.waiver else "")
              for r in result.rules if r.outcome != "pass"]
    lines.append(text(result.decision))
    return "\n".join(lines)


def gate_reasons(result: GateResult, baseline_id: str | None) -> list[str]:
    """The lines a failed or inconclusive gate prints: each rule that did not pass, with the
    baseline's evaluation id; plain text."""
    against = f" [baseline {baseline_id}]" if baseline_id else ""
    labels = {"regression": "REGRESSION", "inconclusive": "INCONCLUSIVE", "warn": "WARNING", "waived": "WAIVED"}
    # A metric's rule states its outcome itself ("...; tolerance 0.02: REGRESSION"): said once.
    return [(printable(r.message) if f": {labels[r.outcome]}" in r.message else f"{labels[r.outcome]} {printable(r.message)}")
            + against + (f" — {printable(r.waiver.describe())}" if r.waiver else "")
            for r in result.rules if r.outcome != "pass"]
