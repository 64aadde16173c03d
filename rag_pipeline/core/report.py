"""Rendering evaluation results: the slice table, failed cases with traces, TREC run files."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence

from rag_pipeline.core.evaluation import EvalResult

SLICE_COLUMNS = ("recall_at_1", "recall_at_3", "recall_at_5", "recall_at_10", "mrr_at_10", "ndcg_at_10")


def _fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.3f}"


def _count_or_rate(key: str, value: float) -> str:
    return str(int(value)) if key.endswith(("cases", "abstained")) else _fmt(value)


def slice_table(result: EvalResult, columns: Sequence[str] = SLICE_COLUMNS) -> str:
    """Markdown table: one row per slice, then overall and weighted; answerable cases only in metrics."""
    header = "| slice | cases | scored | " + " | ".join(columns) + " | abstain | leaks |"
    lines = [header, "|" + "---|" * (len(columns) + 5)]

    def row(name: str, values: dict, all_cases: float | str, extras: dict) -> str:
        cells = [_fmt(values.get(c)) for c in columns]
        abstain = _fmt(extras.get("abstain_rate")) if "abstain_rate" in extras else ""
        leaks = str(int(extras["forbidden_leak_cases"])) if "forbidden_leak_cases" in extras else ""
        scored = str(int(values.get("cases", 0)))
        return f"| {name} | {all_cases} | {scored} | " + " | ".join(cells) + f" | {abstain} | {leaks} |"

    for name, values in result.by_slice.items():
        lines.append(row(name, values, int(values.get("all_cases", 0)), values))
    total = len(result.cases)
    lines.append(row("**overall**", result.overall, total, {}))
    lines.append(row("**weighted**", result.weighted, total, {}))
    return "\n".join(lines)


def failed_cases_table(result: EvalResult, limit: int = 50) -> str:
    failed = [c for c in result.cases if c.failed]
    if not failed:
        return "_no failed cases_"
    lines = ["| case | slice | first gold rank | gold | top 3 retrieved | forbidden retrieved |", "|---|---|---|---|---|---|"]
    for c in failed[:limit]:
        rank = str(c.first_gold_rank) if c.first_gold_rank else "not in top 100"
        lines.append(
            f"| {c.case.id} | {c.case.slice} | {rank} | {', '.join(c.case.gold_docs)} | "
            f"{', '.join(c.ranked_docs[:3])} | {', '.join(c.forbidden_retrieved)} |"
        )
    return "\n".join(lines)


ANSWER_COLUMNS = ("answer_faithful", "answer_citations_valid", "answer_required_facts", "answer_claim_support_proxy",
                  "answer_claim_support_llm",
                  "answer_abstained_correctly", "answer_cites_current_version")


def answer_section(result: EvalResult) -> list[str]:
    """Answer metrics beside the retrieval table: by slice, the 2x2 abstention table, cost."""
    answers = result.answers
    if not answers:
        return []
    columns = [c for c in ANSWER_COLUMNS if c in answers["overall"]]
    lines = [
        "## Answers", "",
        f"generator `{answers['generator']}`, model `{answers['model']}`, prompt `{answers['prompt_version'] or '–'}`, "
        f"settings {answers['settings']}; errored cases {answers['errored_cases']}; tokens "
        f"{answers['prompt_tokens']} + {answers['completion_tokens']}, cost {answers['cost']:.4f}. "
        "`answer_claim_support_proxy` is a lexical proxy, not an entailment judgement.", "",
        "| slice | " + " | ".join(columns) + " |", "|" + "---|" * (len(columns) + 1),
    ]
    for name, values in [*answers["by_slice"].items(), ("**overall**", answers["overall"])]:
        lines.append(f"| {name} | " + " | ".join(_fmt(values.get(c)) for c in columns) + " |")
    table = answers["abstention"]
    lines += ["", "|  | answerable | unanswerable |", "|---|---|---|",
              f"| answered | {table['answered_answerable']} | {table['answered_unanswerable']} |",
              f"| abstained | {table['abstained_answerable']} | {table['abstained_unanswerable']} |", ""]
    return lines


def render_markdown(result: EvalResult) -> str:
    """The full report: header, slice table, splits, unanswerable, failed cases and their traces."""
    parts = [
        f"# Golden evaluation `{result.eval_id}`",
        "",
        f"- golden-set revision: `{result.revision}` · mode: `{result.mode}` · config fingerprint: `{result.config_fingerprint}`",
        "- index state: " + ", ".join(f"`{s}`={h}" for s, h in sorted(result.index_state.items())),
        f"- no-result threshold: {result.no_result_threshold:.4f} ({result.threshold_source})",
        f"- latency: p50 {result.latency['p50_latency_ms']:.1f} ms, p95 {result.latency['p95_latency_ms']:.1f} ms; "
        f"context {result.latency['mean_context_tokens']:.0f} words per query",
        "",
        "## Metrics by slice",
        "",
        "Document-level, TREC conventions; `scored` = answerable cases with current labels. "
        "Unanswerable cases are scored apart (abstain = best score under the threshold).",
        "",
        slice_table(result),
        "",
        "## By split",
        "",
        "| split | scored | " + " | ".join(SLICE_COLUMNS) + " |",
        "|" + "---|" * (len(SLICE_COLUMNS) + 2),
        *(f"| {s} | {int(v.get('cases', 0))} | " + " | ".join(_fmt(v.get(c)) for c in SLICE_COLUMNS) + " |"
          for s, v in result.by_split.items()),
        "",
        "## Unanswerable, permissions, versions",
        "",
        *(f"- {key}: {_count_or_rate(key, value)}" for key, value in result.unanswerable.items()),
        "",
        *answer_section(result),
        "## Failed cases",
        "",
        failed_cases_table(result),
        "",
        "## Traces of failed cases",
        "",
    ]
    for c in [c for c in result.cases if c.failed][:20]:
        parts += [f"### {c.case.id}: {c.case.question}", "", "```json", json.dumps(c.trace, indent=1), "```", ""]
    return "\n".join(parts)
