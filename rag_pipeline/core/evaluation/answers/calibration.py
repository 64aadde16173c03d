"""Grader calibration: a grader's verdicts against people's, before its numbers may gate anything.

A verdicts file holds, one JSON object a line: `case_id`, `slice`, `answer`, `context` (chunk id ->
text the answer was given), `reference`, `answerable`, `verdicts` (rubric field -> "pass" | "fail")
and `reviewer`. The grader under calibration is the deterministic answer checks (or any function
with the same shape). Reported per rubric and slice: agreement, false-pass rate
(grader passes, person fails: the dangerous error) and false-fail rate.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from rag_pipeline.core import jsonl
from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.answers.checks import check_answer
from rag_pipeline.core.evaluation.answers.generators import ABSTENTION, Answer, parse_citations
from rag_pipeline.core.render import inline, table

Grader = Callable[[dict], dict[str, bool]]


def deterministic_grader(verdict: Mapping) -> dict[str, bool]:
    """Rubric verdicts of the deterministic checks for one recorded answer."""
    text = verdict["answer"]
    abstained = text.strip().rstrip(".").lower() == ABSTENTION.rstrip(".").lower()
    answer = Answer(text, parse_citations(text), abstained, "recorded")
    check = check_answer(answer, verdict.get("context") or {}, verdict.get("reference", ""), verdict.get("answerable", True))
    grades = {"faithful": check.faithful, "citations_valid": check.citations_valid}
    if check.missing_facts is not None:
        grades["required_facts"] = not check.missing_facts
    if check.claims:
        grades["claim_support"] = check.supported_claims == check.claims
    if check.abstention_correct is not None:
        grades["abstention"] = check.abstention_correct
    return grades


@dataclass
class RubricStats:
    n: int = 0
    agree: int = 0
    human_fail: int = 0
    false_pass: int = 0
    human_pass: int = 0
    false_fail: int = 0

    def add(self, human_pass: bool, grader_pass: bool) -> None:
        self.n += 1
        self.agree += human_pass == grader_pass
        if human_pass:
            self.human_pass += 1
            self.false_fail += not grader_pass
        else:
            self.human_fail += 1
            self.false_pass += grader_pass

    def as_dict(self) -> dict[str, float]:
        return {
            "verdicts": float(self.n),
            "agreement": self.agree / self.n if self.n else float("nan"),
            "false_pass_rate": self.false_pass / self.human_fail if self.human_fail else float("nan"),
            "false_fail_rate": self.false_fail / self.human_pass if self.human_pass else float("nan"),
        }


@dataclass
class CalibrationReport:
    grader: str
    by_rubric: dict[str, RubricStats] = field(default_factory=dict)
    by_slice: dict[str, dict[str, RubricStats]] = field(default_factory=dict)

    def usable(self, budgets: Mapping[str, float]) -> tuple[bool, list[str]]:
        """May this grader gate? Not when its false-pass rate on a critical rubric is over budget
        (or cannot be measured: no human 'fail' verdict on that rubric)."""
        reasons = []
        for rubric, budget in budgets.items():
            stats = self.by_rubric.get(rubric)
            rate = stats.as_dict()["false_pass_rate"] if stats else float("nan")
            if rate != rate:  # NaN: never measured
                reasons.append(f"grader {self.grader}: no human 'fail' verdict on {rubric}, false-pass rate unknown")
            elif rate > budget:
                reasons.append(f"grader {self.grader}: false-pass rate on {rubric} {rate:.2f} over its budget {budget:.2f}")
        return not reasons, reasons


def load_verdicts(path: Path) -> list[dict]:
    rows = []
    for number, row in jsonl.records(path):
        for key in ("case_id", "answer", "verdicts", "reviewer"):
            if key not in row:
                raise InputError(f"{path} line {number}: field '{key}' is missing")
        bad = {k: v for k, v in row["verdicts"].items() if v not in ("pass", "fail")}
        if bad:
            raise InputError(f"{path} line {number}: verdicts must be 'pass' or 'fail', got {bad}")
        rows.append(row)
    return rows


def calibrate(verdicts: list[dict], grader: Grader = deterministic_grader, name: str = "deterministic-checks") -> CalibrationReport:
    report = CalibrationReport(name)
    slices: dict[str, dict[str, RubricStats]] = defaultdict(dict)
    for row in verdicts:
        grades = grader(row)
        for rubric, human in row["verdicts"].items():
            if rubric not in grades:
                continue
            human_pass, grader_pass = human == "pass", grades[rubric]
            report.by_rubric.setdefault(rubric, RubricStats()).add(human_pass, grader_pass)
            slices[row.get("slice", "all")].setdefault(rubric, RubricStats()).add(human_pass, grader_pass)
    report.by_slice = dict(slices)
    return report


def render_calibration(report: CalibrationReport, budgets: Mapping[str, float]) -> str:
    """Agreement, false-pass and false-fail rates by rubric and by slice, and whether it may gate."""
    def rates(name: str, slice_name: str, stats: RubricStats, budget: float | None) -> tuple:
        d = stats.as_dict()
        return (name, slice_name, int(d["verdicts"]), d["agreement"], d["false_pass_rate"], d["false_fail_rate"], budget)

    rows = []
    for rubric, stats in sorted(report.by_rubric.items()):
        rows.append(rates(rubric, "all", stats, budgets.get(rubric)))
        rows += [rates(rubric, slice_name, rubrics[rubric], None)
                 for slice_name, rubrics in sorted(report.by_slice.items()) if rubric in rubrics]
    usable, reasons = report.usable(budgets)
    return "\n".join([
        f"grader {inline(report.grader)} against human verdicts", "",
        table(rows, ["rubric", "slice", "verdicts", "agreement", "false-pass", "false-fail", "budget"], limit=None),
        "", "may gate: yes" if usable else "may gate: NO — " + inline("; ".join(reasons)),
    ])
