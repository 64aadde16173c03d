"""Regression gates: a candidate evaluation against the promoted baseline of the same golden revision.

Two numbers per metric, never blended: the baseline's and the candidate's, with the paired
difference over cases and its significance. Protected slices may not regress whatever the
aggregate does; headline metrics may not drop beyond their tolerance; budgets cap latency and cost.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from rag_pipeline.core.render import Markdown, inline, printable, table

Severity = Literal["ERROR", "WARN"]


class SignificanceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    method: Literal["paired_bootstrap", "randomization"] = "paired_bootstrap"
    samples: int = Field(default=5000, ge=100)
    alpha: float = Field(default=0.05, gt=0, lt=1)
    seed: int = 13


class GatePolicy(BaseModel):
    """The thresholds policy file (data/gate_policy.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    headline_metrics: tuple[str, ...] = ("recall_at_5", "mrr_at_10", "ndcg_at_10")
    min_gain: float = Field(default=0.01, ge=0)
    tolerance: dict[str, float] = Field(default_factory=dict)
    protected_slices: tuple[str, ...] = ()
    slice_metric: str = "recall_at_5"
    latency_budget_p95_ms: float | None = None
    context_tokens_budget: float | None = None
    significance: SignificanceConfig = SignificanceConfig()
    # Answer metrics may gate only through a grader calibrated against people: human verdicts
    # file (relative to the policy file) and the largest false-pass rate allowed per critical rubric.
    grader_verdicts: Path | None = None
    grader_false_pass_budgets: dict[str, float] = Field(default_factory=dict)


def load_policy(path: Path | str) -> GatePolicy:
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if raw.get("grader_verdicts"):
            raw["grader_verdicts"] = str((path.parent / raw["grader_verdicts"]).resolve())
        return GatePolicy.model_validate(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"gate policy {path}: {exc}") from exc
    except ValidationError as exc:
        fields = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"gate policy {path} is invalid: {fields}") from exc


def policy_or_default(path: Path | str | None) -> GatePolicy:
    """The policy file's policy, or the defaults when no file is configured."""
    return load_policy(path) if path else GatePolicy()


@dataclass(frozen=True)
class Delta:
    """Baseline and candidate values of one metric, the paired difference and its significance."""

    metric: str
    baseline: float
    candidate: float
    ci_low: float
    ci_high: float
    p_value: float
    cases: int

    @property
    def delta(self) -> float:
        return self.candidate - self.baseline


@dataclass
class Finding:
    severity: Severity
    message: str


@dataclass
class GateResult:
    comparable: bool
    deltas: list[Delta] = field(default_factory=list)
    slice_deltas: dict[str, tuple[float, float]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    promote: bool = False
    reasons: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "ERROR"]

    @property
    def warnings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "WARN"]

    @property
    def passed(self) -> bool:
        """No ERROR finding (a candidate that is merely not better still passes)."""
        return self.comparable and not self.errors

    @property
    def decision(self) -> str:
        return "PROMOTE" if self.promote else "keep baseline — " + "; ".join(self.reasons)

    def worst_slice(self) -> tuple[str, float] | None:
        if not self.slice_deltas:
            return None
        name = min(self.slice_deltas, key=lambda s: self.slice_deltas[s][1] - self.slice_deltas[s][0])
        base, cand = self.slice_deltas[name]
        return name, cand - base


def paired_significance(
    baseline: Sequence[float], candidate: Sequence[float], config: SignificanceConfig
) -> tuple[float, float, float]:
    """(ci_low, ci_high, p_value) of the mean paired difference candidate - baseline over cases.

    paired_bootstrap: resample cases with replacement `samples` times; the CI is the central
    (1 - alpha) interval of the resampled mean differences; p = 2 * min(P(mean <= 0), P(mean >= 0)).
    randomization: flip the sign of each case's difference at random (the null of no difference);
    p = share of flipped means at least as extreme as the observed one; the CI is the bootstrap's.
    """
    diffs = [c - b for b, c in zip(baseline, candidate, strict=True)]
    n = len(diffs)
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    rng = random.Random(config.seed)
    observed = sum(diffs) / n
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(config.samples))
    low = means[int(math.floor(config.alpha / 2 * (config.samples - 1)))]
    high = means[int(math.ceil((1 - config.alpha / 2) * (config.samples - 1)))]
    if all(d == 0 for d in diffs):
        return low, high, 1.0
    if config.method == "randomization":
        extreme = sum(
            1 for _ in range(config.samples)
            if abs(sum(d if rng.random() < 0.5 else -d for d in diffs) / n) >= abs(observed) - 1e-12
        )
        return low, high, (extreme + 1) / (config.samples + 1)
    at_or_below = sum(1 for m in means if m <= 0) / config.samples
    at_or_above = sum(1 for m in means if m >= 0) / config.samples
    return low, high, min(1.0, 2 * min(at_or_below, at_or_above))


def compare(baseline: Mapping, candidate: Mapping, policy: GatePolicy,
            unchanged_cases: Collection[str] | None = None) -> GateResult:
    """Gate a candidate evaluation against a baseline.

    Both arguments are evaluation records: `revision`, `by_slice`, `latency`, `unanswerable`
    (the summary an evaluation stores) plus `cases`: case id -> {metric: value} for scored cases,
    and `case_slices`: case id -> slice.

    `unchanged_cases`: the candidate is the first evaluation of a new golden revision and the
    baseline is the previous revision's; only these cases (the same in both revisions) are
    compared, slices by their mean over them. Such a candidate is promotable when it passes (no
    ERROR): it sets the new revision's first baseline, so it must not regress, not win.
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
        result = GateResult(comparable=False)
        result.findings.append(Finding("ERROR", problem))
        result.reasons.append(problem)
        return result
    result = GateResult(comparable=True)
    base_cases, cand_cases = baseline["cases"], candidate["cases"]
    shared_ids = set(base_cases) & set(cand_cases)
    if across:
        shared_ids &= set(unchanged_cases)
    shared = sorted(shared_ids)
    if across:
        baseline, candidate = (_over_cases(r, shared, policy.slice_metric) for r in (baseline, candidate))
    for metric in policy.headline_metrics:
        ids = [c for c in shared if metric in base_cases[c] and metric in cand_cases[c]]
        b = [base_cases[c][metric] for c in ids]
        c = [cand_cases[c][metric] for c in ids]
        low, high, p = paired_significance(b, c, policy.significance)
        result.deltas.append(Delta(metric, _mean(b), _mean(c), low, high, p, len(ids)))
    _check_grader(result, policy)
    _check_headlines(result, policy)
    _check_slices(result, baseline, candidate, policy)
    _check_budgets(result, candidate, policy)
    _decide(result, policy)
    if across:
        result.promote = not result.errors
        result.reasons = [f.message for f in result.errors]
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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def _check_grader(result: GateResult, policy: GatePolicy) -> None:
    """Answer metrics are graded; a grader whose false-pass rate on a critical rubric is over budget
    (against human verdicts) cannot gate a release, and the gate says so."""
    if not any(m.startswith("answer_") for m in policy.headline_metrics):
        return
    if policy.grader_verdicts is None:
        result.findings.append(Finding("ERROR", "answer metrics are headline metrics but no grader_verdicts file "
                                                "calibrates the grader against people"))
        return
    from rag_pipeline.core.evaluation.calibration import calibrate, load_verdicts

    usable, reasons = calibrate(load_verdicts(policy.grader_verdicts)).usable(policy.grader_false_pass_budgets)
    if not usable:
        result.findings.append(Finding("ERROR", "grader cannot gate: " + "; ".join(reasons)))


def _check_headlines(result: GateResult, policy: GatePolicy) -> None:
    for d in result.deltas:
        tolerance = policy.tolerance.get(d.metric, 0.0)
        if d.delta < -tolerance - 1e-12:
            result.findings.append(Finding(
                "ERROR", f"{d.metric} dropped {d.delta:+.4f} ({d.baseline:.4f} -> {d.candidate:.4f}), "
                         f"beyond its tolerance {tolerance:g} (p={d.p_value:.3f})"))


def _check_slices(result: GateResult, baseline: Mapping, candidate: Mapping, policy: GatePolicy) -> None:
    metric = policy.slice_metric
    regressed = []
    for name, base_values in baseline["by_slice"].items():
        cand_values = candidate["by_slice"].get(name, {})
        if metric in base_values and metric in cand_values:
            b, c = base_values[metric], cand_values[metric]
            result.slice_deltas[name] = (b, c)
            if c < b - 1e-12:
                if name in policy.protected_slices:
                    regressed.append(f"{name} {metric} {b:.3f} -> {c:.3f}")
                else:
                    result.findings.append(Finding("WARN", f"slice {name}: {metric} {b:.3f} -> {c:.3f}"))
        # Slices without scored cases (unanswerable, denied callers) are guarded by their own rates.
        for rate, worse_if_higher in (("forbidden_leak_cases", True), ("abstain_rate", False)):
            if rate in base_values and rate in cand_values:
                b, c = base_values[rate], cand_values[rate]
                if (c > b + 1e-12) if worse_if_higher else (c < b - 1e-12):
                    if name in policy.protected_slices or rate == "forbidden_leak_cases":
                        regressed.append(f"{name} {rate} {b:.3f} -> {c:.3f}")
                    else:
                        result.findings.append(Finding("WARN", f"slice {name}: {rate} {b:.3f} -> {c:.3f}"))
    if regressed:
        result.findings.append(Finding("ERROR", "protected slice regressed: [" + ", ".join(regressed) + "]"))


def _check_budgets(result: GateResult, candidate: Mapping, policy: GatePolicy) -> None:
    latency = candidate.get("latency", {})
    p95 = latency.get("p95_latency_ms", math.nan)
    if policy.latency_budget_p95_ms is not None and math.isnan(p95):
        result.findings.append(Finding("WARN", "no latency was measured (no case searched on its own): the p95 budget "
                                               "is not checked"))
    elif policy.latency_budget_p95_ms is not None and p95 > policy.latency_budget_p95_ms:
        result.findings.append(Finding(
            "ERROR", f"p95 latency {p95:.0f} ms over the budget {policy.latency_budget_p95_ms:g} ms"))
    if policy.context_tokens_budget is not None and latency.get("mean_context_tokens", 0) > policy.context_tokens_budget:
        result.findings.append(Finding(
            "ERROR", f"context {latency['mean_context_tokens']:.0f} words per query over the budget {policy.context_tokens_budget:g}"))


def _decide(result: GateResult, policy: GatePolicy) -> None:
    if result.errors:
        result.reasons = [f.message for f in result.errors]
        return
    alpha = policy.significance.alpha
    wins = [d for d in result.deltas if d.delta >= policy.min_gain and d.p_value < alpha]
    if wins:
        result.promote = True
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
    """The gate's table and verdict as markdown, shown in Dagster; `terminal`: its findings and
    decision as plain text (a terminal shows `->`, not `-&gt;`), for the command line."""
    text = printable if terminal else inline
    metric_rows = [
        (d.metric, Markdown(f"{d.baseline:.4f}"), Markdown(f"{d.candidate:.4f}"), Markdown(f"{d.delta:+.4f}"),
         Markdown(f"[{d.ci_low:+.4f}, {d.ci_high:+.4f}]"), Markdown(f"{d.p_value:.3f}"), d.cases)
        for d in result.deltas
    ]
    lines = [table(metric_rows, ["metric", "baseline", "candidate", "delta", "95% CI", "p", "cases"], limit=None)]
    if result.slice_deltas:
        slice_rows = [(name, b, c, Markdown(f"{c - b:+.3f}")) for name, (b, c) in sorted(result.slice_deltas.items())]
        lines += ["", table(slice_rows, ["slice", "baseline", "candidate", "delta"], limit=None)]
    lines.append("")
    lines += [f"{f.severity}: {text(f.message)}" for f in result.findings]
    lines.append(text(result.decision))
    return "\n".join(lines)
