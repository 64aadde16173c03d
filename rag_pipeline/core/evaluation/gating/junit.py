"""An evaluation as a JUnit XML report, the format CI systems (GitHub Actions, GitLab, Jenkins) show
as test results: a test case per golden case and per gate rule.

- Golden cases (suite `golden cases`): a case fails when no gold document is in its top k (the
  report's k) or when it retrieved a forbidden document; a case with stale labels is skipped
  (scored apart); an unanswerable case passes, its abstention in its output. Holdout cases are one
  test case together, failed when any of them failed, none named: holdout stays unseen. A case
  that moved against the baseline says why (its cause, `attribution/`): in its failure message,
  or in its output when it still passes.
- Gate rules (suite `gate`): a regression fails; an inconclusive drop, a warning or a WAIVED
  regression (with who waived it, why and until when) is skipped with its reason (JUnit has no
  warning); a passed rule passes. With no baseline, or `--no-gate`, one
  skipped case says so.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path

from rag_pipeline.core.evaluation.gating.baselines import BaselineComparison
from rag_pipeline.core.evaluation.golden.holdout import HOLDOUT
from rag_pipeline.core.evaluation.scoring.results import gold_rank_text


def _case(suite: ET.Element, classname: str, name: str, outcome: str = "pass", message: str = "",
          output: str = "") -> None:
    element = ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")
    if outcome == "failure":
        ET.SubElement(element, "failure", message=message, type="failure").text = message
    elif outcome == "skipped":
        ET.SubElement(element, "skipped", message=message)
    if output:
        ET.SubElement(element, "system-out").text = output


def _count(suite: ET.Element) -> None:
    cases = suite.findall("testcase")
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("errors", "0")
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("time", "0")


def golden_suite(root: ET.Element, eval_id: str, rows: Sequence[Mapping], report_k: int,
                 moved: Mapping[str, str] | None = None) -> ET.Element:
    """The golden cases of a stored evaluation (`Records.case_rows`). `moved`: case id -> why it moved
    against the baseline (its cause), added to its failure message, or to its output when it passes."""
    moved = moved or {}
    suite = ET.SubElement(root, "testsuite", name=f"golden cases ({eval_id})")
    held, held_failed = 0, 0
    for row in rows:
        failed, message = _case_failed(row, report_k)
        if row["split"] == HOLDOUT:
            held += 1
            held_failed += failed
            continue
        classname = f"golden.{row['slice'] or 'general'}"
        if row["stale"]:
            _case(suite, classname, row["case_id"], "skipped", "stale labels, scored apart: " + "; ".join(row["stale"]))
        elif failed:
            why = moved.get(row["case_id"])
            _case(suite, classname, row["case_id"], "failure", message + (f"; moved: {why}" if why else ""))
        elif not row["answerable"]:
            _case(suite, classname, row["case_id"], output="unanswerable: " + ("abstained" if row["abstained"] else "answered"))
        else:
            why = moved.get(row["case_id"])
            _case(suite, classname, row["case_id"], output=f"first gold document at rank {row['first_gold_rank']}"
                                                           + (f"; moved: {why}" if why else ""))
    if held:
        _case(suite, "golden.holdout", f"holdout ({held} cases)", "failure" if held_failed else "pass",
              f"{held_failed} of {held} holdout cases failed (not named: holdout stays unseen)" if held_failed else "")
    _count(suite)
    return suite


def _case_failed(row: Mapping, report_k: int) -> tuple[bool, str]:
    if row["forbidden_retrieved"]:
        return True, "retrieved a forbidden document: " + ", ".join(row["forbidden_retrieved"])
    if not row["answerable"] or row["stale"]:
        return False, ""
    rank = row["first_gold_rank"]
    if rank is not None and rank <= report_k:
        return False, ""
    where = f"first at rank {rank}" if rank is not None else gold_rank_text(None, len(row["ranked_docs"] or []))
    top = ", ".join((row["ranked_docs"] or [])[:report_k]) or "nothing"
    return True, f"no gold document in the top {report_k} ({where}); top {report_k}: {top}"


def gate_suite(root: ET.Element, comparison: BaselineComparison | None, gated: bool) -> ET.Element:
    """The gate's rules against the baseline."""
    suite = ET.SubElement(root, "testsuite", name="gate")
    if not gated:
        _case(suite, "gate", "gate", "skipped", "not gated: this evaluation only measured (--no-gate, or another "
                                                 "system's run without --gate)")
    elif comparison is None or comparison.gate is None:
        reason = comparison.missing_reason if comparison is not None else "no baseline"
        _case(suite, "gate", "gate", "skipped", f"nothing to compare with: {reason}")
    else:
        against = f" [baseline {comparison.baseline_id}]"
        for rule in comparison.gate.rules:
            outcome = {"regression": "failure", "inconclusive": "skipped", "warn": "skipped",
                       "waived": "skipped"}.get(rule.outcome, "pass")
            label = {"inconclusive": "inconclusive: ", "warn": "warning: ", "waived": "WAIVED: "}.get(rule.outcome, "")
            waiver = f" — {rule.waiver.describe()}" if rule.waiver else ""
            _case(suite, "gate", rule.rule, outcome, label + rule.message + against + waiver,
                  rule.message if outcome == "pass" else "")
    _count(suite)
    return suite


def write_junit(out: Path, eval_id: str, rows: Sequence[Mapping], report_k: int,
                comparison: BaselineComparison | None, gated: bool = True, moved: Mapping[str, str] | None = None) -> Path:
    """Write the JUnit XML report of one evaluation and its gate (`moved`: case id -> its cause, see
    `golden_suite`); the file is replaced whole."""
    root = ET.Element("testsuites", name=f"rag-pipeline eval {eval_id}")
    suites = [golden_suite(root, eval_id, rows, report_k, moved), gate_suite(root, comparison, gated)]
    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key)) for s in suites)))
    ET.indent(root)
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(f".{out.name}.tmp")
    ET.ElementTree(root).write(temporary, encoding="utf-8", xml_declaration=True)
    temporary.replace(out)
    return out
