"""Rendering evaluation results: the slice table, failed cases with traces, the markdown report.

Case ids, questions, slice names and document ids come from the golden set and the corpus, so
every one goes through the renderer (`core/render.py`), which escapes them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.core.evaluation.gating.baselines import BaselineComparison, compare_with_baseline
from rag_pipeline.core.evaluation.gating.gates import render_gate
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.slice_plot import slice_comparison
from rag_pipeline.core.evaluation.golden.holdout import withheld
from rag_pipeline.core.evaluation.scoring.results import DEFAULT_REPORT_K, EvalResult, gold_rank_text
from rag_pipeline.core.evaluation.scoring.run_files import describe_run
from rag_pipeline.core.plots import markdown_image
from rag_pipeline.core.render import Markdown, inline, number, safe_json, table, text_table
from rag_pipeline.core.storage import Store

SLICE_COLUMNS = ("recall_at_1", "recall_at_3", "recall_at_5", "recall_at_10", "mrr_at_10", "ndcg_at_10")


def _count_or_rate(key: str, value: float) -> str:
    return str(int(value)) if key.endswith(("cases", "abstained")) and not math.isnan(value) else number(value)


def slice_columns(report_k: int) -> tuple[str, ...]:
    """The metric columns of every table: success@k at the report's cutoff, then SLICE_COLUMNS."""
    return (f"success_at_{report_k}", *SLICE_COLUMNS)


def slice_rows(summary: Mapping, plain: bool = False) -> tuple[list[list], list[str]]:
    """(rows, columns) of the slice table from an evaluation's summary (`EvalResult.as_json()` or a
    stored one): one row per slice, then overall and weighted; answerable cases only in metrics."""
    columns = slice_columns(summary.get("report_k", DEFAULT_REPORT_K))

    def row(name: object, values: Mapping, all_cases: int, extras: Mapping) -> list:
        abstain = number(extras["abstain_rate"]) if "abstain_rate" in extras else ""
        leaks = int(extras["forbidden_leak_cases"]) if "forbidden_leak_cases" in extras else ""
        return [name, all_cases, int(values.get("cases", 0)), *(values.get(c) for c in columns), abstain, leaks]

    rows = [row(name, values, int(values.get("all_cases", 0)), values) for name, values in summary["by_slice"].items()]
    total = summary["cases"] if isinstance(summary.get("cases"), int) else len(summary.get("cases") or ())
    rows.append(row("overall" if plain else Markdown("**overall**"), summary["overall"], total, {}))
    rows.append(row("weighted" if plain else Markdown("**weighted**"), summary["weighted"], total, {}))
    return rows, ["slice", "cases", "scored", *columns, "abstain", "leaks"]


def slice_table(result: EvalResult) -> str:
    """Markdown table: one row per slice, then overall and weighted (`slice_rows`)."""
    rows, columns = slice_rows(result.as_json())
    return table(rows, columns, limit=None)


def slice_text(summary: Mapping) -> str:
    """The slice table as plain text for a terminal or a CI log (`slice_rows`)."""
    rows, columns = slice_rows(summary, plain=True)
    return text_table(rows, columns)


def shown_failures(result: EvalResult) -> tuple[list, int]:
    """(failed cases that may be shown, number of failed holdout cases: counted, never listed)."""
    failed = [c for c in result.cases if c.failed]
    shown = [c for c in failed if not withheld(c.case)]
    return shown, len(failed) - len(shown)


def _ranked_verb(result: EvalResult) -> str:
    """Another system's run lists its documents; this index retrieves them."""
    return "listed" if result.external_run else "retrieved"


def failed_cases_table(result: EvalResult, limit: int = 50) -> str:
    """The failed cases at the report's k: no gold document in the top k, or a forbidden one retrieved."""
    failed, held = shown_failures(result)
    rows = [
        {"case": c.case.id, "slice": c.case.slice, "gold": c.case.gold_docs,
         "first gold rank": gold_rank_text(c.first_gold_rank, len(c.ranked_docs), _ranked_verb(result)),
         f"top {result.report_k} retrieved": c.ranked_docs[:result.report_k], "forbidden retrieved": c.forbidden_retrieved}
        for c in failed
    ]
    columns = ["case", "slice", "first gold rank", "gold", f"top {result.report_k} retrieved", "forbidden retrieved"]
    note = f"\n\n{held} failed holdout case(s) are counted in the metrics and not listed." if held else ""
    return table(rows, columns, limit=limit, empty=f"_no failed case: every scored case has a gold document in its top "
                                                    f"{result.report_k}_") + note


ANSWER_COLUMNS = ("answer_faithful", "answer_citations_valid", "answer_required_facts", "answer_claim_support_proxy",
                  "answer_claim_support_llm", "answer_no_prohibited_claims_proxy", "answer_no_prohibited_claims_llm",
                  "answer_abstained_correctly", "answer_cites_current_version")


def answer_section(result: EvalResult) -> list[str]:
    """Answer metrics beside the retrieval table: by slice, the 2x2 abstention table, cost."""
    answers = result.answers
    if not answers:
        return []
    columns = [c for c in ANSWER_COLUMNS if c in answers["overall"]]
    rows = [[name, *(values.get(c) for c in columns)]
            for name, values in [*answers["by_slice"].items(), (Markdown("**overall**"), answers["overall"])]]
    table_2x2 = answers["abstention"]
    return [
        "## Answers", "",
        f"generator {inline(answers['generator'])}, model {inline(answers['model'] or '–')}, prompt "
        f"{inline(answers['prompt_version'] or '–')}, settings {inline(answers['settings'])}; errored cases "
        f"{answers['errored_cases']}; tokens {answers['prompt_tokens']} + {answers['completion_tokens']}, cost "
        f"{answers['cost']:.4f}. `answer_claim_support_proxy` is a lexical proxy, not an entailment judgement.", "",
        table(rows, ["slice", *columns], limit=None), "",
        table([["answered", table_2x2["answered_answerable"], table_2x2["answered_unanswerable"]],
               ["abstained", table_2x2["abstained_answerable"], table_2x2["abstained_unanswerable"]]],
              ["", "answerable", "unanswerable"], limit=None), "",
        *_prohibited_claims_lines(result),
    ]


# A config without an answers section measures retrieval only, and says so where answer metrics would be.
ANSWERS_OFF = ("answers: off: answers.generator is none, so no answer was generated or graded (set answers.generator: "
               "extractive for the offline baseline's answer metrics, as data/pipeline.yaml does, or openai-compatible "
               "for your model)")
RUN_ANSWERS = "answers: another system's run: its answers are kept with the traces (golden export-ragas), not graded here"


def answers_note(summary: Mapping) -> str | None:
    """Why an evaluation (its summary) has no answer metrics, or None when it has them."""
    if summary.get("answers"):
        return None
    return RUN_ANSWERS if summary.get("external_run") else ANSWERS_OFF


def _prohibited_claims_lines(result: EvalResult) -> list[str]:
    """Each answer that made one of its case's prohibited claims (holdout cases only counted)."""
    made = [c for c in result.cases if c.answer and c.answer.get("prohibited_claims_made")]
    if not made:
        return []
    shown = [c for c in made if c.case.split != "holdout"]
    lines = [f"Answers that made a prohibited claim: {len(made)}.", ""]
    lines += [f"- {inline(c.case.id)} ({inline(c.case.slice)}): "
              + "; ".join(inline(claim) for claim in c.answer["prohibited_claims_made"]) for c in shown]
    if len(made) > len(shown):
        lines.append(f"- and {len(made) - len(shown)} holdout case(s), counted and not listed")
    return [*lines, ""]


@dataclass
class WrittenReport:
    """An evaluation's report file, its slice plot, and the gate comparison the plot shows."""

    path: Path
    plot: Path
    comparison: BaselineComparison
    result: EvalResult
    gated: bool = True
    sections: Sequence[str] = ()

    def markdown(self) -> str:
        """The report's text with the plot embedded (for Dagster metadata: a file link would not render)."""
        return render_markdown(self.result, markdown_image(self.plot, "slices against the baseline"),
                               gate_markdown(self.comparison, self.gated), self.sections)


def gate_markdown(comparison: BaselineComparison, gated: bool = True) -> str:
    """The report's gate section: against what, the metric table, each rule that did not pass (a
    WAIVED one with who waived it, why and until when) and the decision."""
    if not gated:
        return "_not gated: this evaluation only measured_"
    if comparison.gate is None:
        return f"_nothing to compare with: {inline(comparison.missing_reason)}_"
    return f"Against {inline(comparison.against)}.\n\n{render_gate(comparison.gate)}"


def write_report(result: EvalResult, store: Store, policy: GatePolicy, folder: Path, gated: bool = True,
                 comparison: BaselineComparison | None = None, sections: Sequence[str] = ()) -> WrittenReport:
    """Gate the evaluation against its revision's baseline (unless `comparison` is that gate already),
    draw each slice against it, and write the markdown report beside the plot (`<eval id>.md`,
    `<eval id>-slices.png`); `gated` False: the report says it only measured. `sections`: markdown
    shown after the gate (why cases moved)."""
    comparison = comparison or compare_with_baseline(store, result.eval_id, policy)
    candidate = store.records.evaluation_record(result.eval_id)
    baseline = store.records.evaluation_record(comparison.baseline_id) if comparison.baseline_id else None
    plot = slice_comparison(candidate, baseline, policy.headline_metrics, policy.significance,
                            folder / f"{result.eval_id}-slices.png")
    path = folder / f"{result.eval_id}.md"
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(render_markdown(result, f"![slices against the baseline]({plot.name})", gate_markdown(comparison, gated),
                                    sections), encoding="utf-8")
    return WrittenReport(path, plot, comparison, result, gated, tuple(sections))


def render_markdown(result: EvalResult, slice_plot: str | None = None, gate: str | None = None,
                    sections: Sequence[str] = ()) -> str:
    """The full report: header, slice table and plot, the gate, `sections` (why cases moved), splits,
    unanswerable, failed cases and traces."""
    columns = slice_columns(result.report_k)
    split_rows = [[s, int(v.get("cases", 0)), *(v.get(c) for c in columns)] for s, v in result.by_split.items()]
    parts = [
        f"# Golden evaluation {inline(result.eval_id)}",
        "",
        f"- golden-set revision: {inline(result.revision)} · suite: {inline(result.suite)} ({len(result.cases)} cases) · "
        f"mode: {inline(result.mode)} · config fingerprint: "
        f"{inline(result.config_fingerprint)}",
        *([f"- another system's run, not this index: {inline(describe_run(result.external_run))}"]
          if result.external_run else []),
        "- index state: " + ", ".join(f"{inline(s)}={inline(h)}" for s, h in sorted(result.index_state.items())),
        f"- no-result threshold: {number(result.no_result_threshold, 4)} ({inline(result.threshold_source)})",
        f"- latency: p50 {number(result.latency['p50_latency_ms'], 1)} ms, p95 {number(result.latency['p95_latency_ms'], 1)} "
        f"ms; context {number(result.latency['mean_context_tokens'], 0)} words per query",
        "",
        "## Metrics by slice",
        "",
        "Document-level, TREC conventions; `scored` = answerable cases with current labels. "
        "Unanswerable cases are scored apart (abstain = best score under the threshold).",
        "",
        slice_table(result),
        "",
        *([slice_plot, ""] if slice_plot else []),
        *(["## Gate", "", gate, ""] if gate else []),
        *(part for section in sections for part in (section, "")),
        "## By split",
        "",
        table(split_rows, ["split", "scored", *columns], limit=None),
        "",
        "## Unanswerable, permissions, versions",
        "",
        *(f"- {key}: {_count_or_rate(key, value)}" for key, value in result.unanswerable.items()),
        "",
        *(answer_section(result) or ["## Answers", "", inline(answers_note(result.as_json()) or ""), ""]),
        "## Failed cases",
        "",
        f"Scored cases with no gold document in their top {result.report_k} (success@{result.report_k} = 0), and cases "
        "that retrieved a forbidden document.",
        "",
        failed_cases_table(result),
        "",
        "## Traces of failed cases",
        "",
    ]
    for c in shown_failures(result)[0][:20]:
        parts += [f"### {inline(c.case.id)}: {inline(c.case.question, 300)}", "", "```json", safe_json(c.trace), "```", ""]
    return "\n".join(parts)
