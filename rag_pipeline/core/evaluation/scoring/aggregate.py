"""An evaluation's figures over its case results: overall, weighted, by slice and by split, the
unanswerable cases apart, latency and context size, and the answers' figures."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence

from rag_pipeline.core.evaluation.answers.checks import abstention_table
from rag_pipeline.core.evaluation.scoring import metrics
from rag_pipeline.core.evaluation.scoring.results import ANSWER_PREFIX, CaseResult


def aggregate(rows: Sequence[CaseResult], no_result_threshold: float, abstention: Mapping | None = None) -> dict[str, dict]:
    """The `EvalResult` sections computed from the cases: `overall`, `weighted`, `by_slice`,
    `by_split`, `unanswerable` (with the threshold and the held-out figures of the `abstention` summary),
    `latency` and `answers`; a retrieval metric averages the scored cases only (`CaseResult.scored`)."""
    by_slice: dict[str, list[CaseResult]] = defaultdict(list)
    by_split: dict[str, list[CaseResult]] = defaultdict(list)
    for r in rows:
        by_slice[r.case.slice].append(r)
        by_split[r.case.split].append(r)
    return {
        "overall": _average(rows),
        "weighted": _average(rows, weighted=True),
        "by_slice": {s: _average(v) | _slice_extras(v) for s, v in sorted(by_slice.items())},
        "by_split": {s: _average(v) for s, v in sorted(by_split.items())},
        "unanswerable": _unanswerable(rows, no_result_threshold, abstention or {}),
        "latency": _latency(rows),
        "answers": _answer_summary(rows),
    }


def _average(rows: Sequence[CaseResult], weighted: bool = False) -> dict[str, float]:
    scored = [r for r in rows if r.scored]
    if not scored:
        return {}
    keys = sorted({k for r in scored for k in r.metrics if not k.startswith(ANSWER_PREFIX)})
    out: dict[str, float] = {"cases": float(len(scored))}
    for key in keys:
        with_key = [r for r in scored if key in r.metrics]
        weights = [r.case.weight for r in with_key] if weighted else None
        out[key] = metrics.mean([r.metrics[key] for r in with_key], weights)
    return out


def _rate(flags: Sequence[bool]) -> float:
    """The share of True among `flags`; NaN when there are none (a kind of case that is missing)."""
    return metrics.mean([1.0 if f else 0.0 for f in flags]) if flags else float("nan")


def _unanswerable(rows: Sequence[CaseResult], no_result_threshold: float, abstention: Mapping) -> dict[str, float]:
    unanswerable = [r for r in rows if not r.case.answerable]
    answerable = [r for r in rows if r.case.answerable]
    outranks = [r.superseded_outranks for r in rows if r.superseded_outranks is not None]
    return {
        "cases": float(len(unanswerable)),
        "abstained": float(sum(1 for r in unanswerable if r.abstained)),
        "abstain_rate": _rate([bool(r.abstained) for r in unanswerable]),
        "false_abstain_rate": _rate([bool(r.abstained) for r in answerable]),
        "forbidden_leak_cases": float(sum(1 for r in rows if r.forbidden_retrieved)),
        "superseded_outranks_current_rate": _rate(outranks),
        "stale_cases": float(sum(1 for r in rows if r.stale_docs)),
        "no_result_threshold": no_result_threshold,
        **_held_out_abstention(abstention),
    }


def _held_out_abstention(summary: Mapping) -> dict[str, float]:
    """The held-out abstention rates (splits other than the fit split), flat, for the report."""
    held = summary.get("held_out")
    if not held:
        return {}
    return {"held_out_abstain_rate": held["abstain_rate"], "held_out_false_abstain_rate": held["false_abstain_rate"],
            "held_out_balanced_accuracy": held["balanced_accuracy"]}


def _latency(rows: Sequence[CaseResult]) -> dict[str, float]:
    """Latency from the cases searched one at a time (a batch's own times are shared evenly), and
    the mean context size where it is known."""
    latencies = [r.latency_ms for r in rows if not math.isnan(r.latency_ms)]
    contexts = [float(r.context_tokens) for r in rows if r.context_tokens is not None]
    return {
        "p50_latency_ms": metrics.nearest_rank_quantile(latencies, 0.50),
        "p95_latency_ms": metrics.nearest_rank_quantile(latencies, 0.95),
        "latency_cases": float(len(latencies)),
        "mean_context_tokens": metrics.mean(contexts) if contexts else float("nan"),
    }


def _answer_means(rows: Sequence[CaseResult]) -> dict[str, float]:
    keys = sorted({k for r in rows for k in r.metrics if k.startswith(ANSWER_PREFIX)})
    return {k: metrics.mean([r.metrics[k] for r in rows if k in r.metrics]) for k in keys}


def _answer_summary(rows: Sequence[CaseResult]) -> dict:
    """Answer metrics overall and by slice, the 2x2 abstention table, errors, tokens and cost."""
    answered = [r for r in rows if r.answer is not None]
    if not answered:
        return {}
    by_slice: dict[str, list[CaseResult]] = defaultdict(list)
    for r in answered:
        by_slice[r.case.slice].append(r)
    first = answered[0].answer
    return {
        "generator": first["generator"], "model": first["model"], "prompt_version": first["prompt_version"],
        "settings": first["settings"],
        "overall": _answer_means(answered),
        "by_slice": {s: _answer_means(v) for s, v in sorted(by_slice.items())},
        "abstention": abstention_table([(r.case.answerable, r.answer["abstained"]) for r in answered if not r.answer["error"]]),
        "errored_cases": sum(1 for r in answered if r.answer["error"]),
        "prompt_tokens": sum(r.answer["prompt_tokens"] for r in answered),
        "completion_tokens": sum(r.answer["completion_tokens"] for r in answered),
        "cost": sum(r.answer["cost"] for r in answered),
    }


def _slice_extras(rows: Sequence[CaseResult]) -> dict[str, float]:
    extras: dict[str, float] = {"all_cases": float(len(rows))}
    unanswerable = [r for r in rows if not r.case.answerable]
    if unanswerable:
        extras["abstain_rate"] = _rate([bool(r.abstained) for r in unanswerable])
    if any(r.case.forbidden_docs for r in rows):
        extras["forbidden_leak_cases"] = float(sum(1 for r in rows if r.forbidden_retrieved))
    return extras
