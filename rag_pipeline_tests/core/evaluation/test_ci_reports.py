"""What CI reads: the JUnit XML of an evaluation and its gate, and the gate as plain text."""

import xml.etree.ElementTree as ET

from rag_pipeline.core.evaluation.gating.baselines import BaselineComparison, gate_text
from rag_pipeline.core.evaluation.gating.gates import compare
from rag_pipeline.core.evaluation.gating.junit import write_junit
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.significance import SignificanceConfig
from rag_pipeline.core.render import Markdown, text_table

POLICY = GatePolicy(headline_metrics=("recall_at_5",), tolerance={"recall_at_5": 0.01},
                    significance=SignificanceConfig(samples=1000, seed=2), latency_budget_p95_ms=100,
                    context_tokens_budget=1000)


def _row(case_id, rank, split="dev", slice_name="billing", answerable=True, stale=(), forbidden=(), abstained=None):
    return {"case_id": case_id, "slice": slice_name, "split": split, "answerable": answerable, "first_gold_rank": rank,
            "abstained": abstained, "stale": list(stale), "forbidden_retrieved": list(forbidden),
            "ranked_docs": ["kb:a.md", "kb:b.md", "kb:c.md", "kb:d.md", "kb:e.md", "kb:f.md"]}


ROWS = [
    _row("hit", 1), _row("miss-at-5", 6), _row("nowhere", None), _row("leak", 1, forbidden=["kb:secret.md"]),
    _row("stale", None, stale=["kb:gone.md: not in the index"]),
    _row("unanswerable", None, answerable=False, abstained=True, slice_name="unanswerable"),
    _row("held-1", 1, split="holdout"), _row("held-2", None, split="holdout"),
]


def _record(values, p95=50.0):
    cases = {f"c{i}": {"recall_at_5": v} for i, v in enumerate(values)}
    return {"revision": "r", "cases": cases, "by_slice": {}, "case_slices": {c: "s" for c in cases},
            "latency": {"p95_latency_ms": p95, "mean_context_tokens": 10.0}}


def _comparison(candidate_values, p95=50.0):
    gate = compare(_record([1.0] * 40), _record(candidate_values, p95), POLICY)
    return BaselineComparison("cand-1", "r", "base-1", gate)


def test_junit_has_a_case_per_golden_case_and_gate_rule_and_counts_that_add_up(tmp_path):
    comparison = _comparison([0.0] * 20 + [1.0] * 20, p95=400.0)  # a regression, and latency over budget
    out = write_junit(tmp_path / "junit.xml", "cand-1", ROWS, 5, comparison)
    root = ET.parse(out).getroot()
    cases, gate = root.findall("testsuite")
    by_name = {c.get("name"): c for c in cases}
    assert set(by_name) == {"hit", "miss-at-5", "nowhere", "leak", "stale", "unanswerable", "holdout (2 cases)"}
    assert "held-1" not in out.read_text() and "held-2" not in out.read_text(), "holdout cases are never named"
    failed = {name for name, c in by_name.items() if c.find("failure") is not None}
    assert failed == {"miss-at-5", "nowhere", "leak", "holdout (2 cases)"}
    assert by_name["miss-at-5"].find("failure").get("message") == (
        "no gold document in the top 5 (first at rank 6); top 5: kb:a.md, kb:b.md, kb:c.md, kb:d.md, kb:e.md")
    # Ranks to the depth the ranking has: six documents listed, not a hundred.
    assert by_name["nowhere"].find("failure").get("message").startswith(
        "no gold document in the top 5 (not in the top 6 listed); top 5: kb:a.md")
    assert by_name["stale"].find("skipped") is not None
    assert by_name["unanswerable"].find("system-out").text == "unanswerable: abstained"
    assert by_name["holdout (2 cases)"].find("failure").get("message").startswith("1 of 2 holdout cases failed")
    rules = {c.get("name"): c for c in gate}
    assert rules["recall_at_5"].find("failure").get("message").endswith("[baseline base-1]")
    assert rules["p95 latency budget"].find("skipped").get("message").startswith("warning: p95 latency 400 ms")
    assert rules["context size budget"].find("failure") is None and rules["context size budget"].find("skipped") is None
    for suite in (cases, gate):
        assert int(suite.get("tests")) == len(suite.findall("testcase"))
        assert int(suite.get("failures")) == sum(1 for c in suite if c.find("failure") is not None)
        assert int(suite.get("skipped")) == sum(1 for c in suite if c.find("skipped") is not None)
    assert int(root.get("failures")) == 4 + 1 and int(root.get("tests")) == 7 + len(gate)


def test_junit_without_a_baseline_or_a_gate_skips_the_gate(tmp_path):
    missing = BaselineComparison("cand-1", "r", None, None, "no full-suite baseline for revision r (no baseline promoted yet)")
    root = ET.parse(write_junit(tmp_path / "a.xml", "cand-1", ROWS[:1], 5, missing)).getroot()
    assert root.find("testsuite[@name='gate']/testcase/skipped").get("message").startswith("nothing to compare with: no")
    root = ET.parse(write_junit(tmp_path / "b.xml", "cand-1", ROWS[:1], 5, None, gated=False)).getroot()
    assert "--no-gate" in root.find("testsuite[@name='gate']/testcase/skipped").get("message")
    assert root.get("failures") == "0"


def test_hostile_case_ids_stay_well_formed_xml(tmp_path):
    rows = [_row('<script>alert("x")</script> & ]]>', 9)]
    out = write_junit(tmp_path / "junit.xml", "e", rows, 5, None, gated=False)
    case = ET.parse(out).getroot().find("testsuite/testcase")
    assert case.get("name") == '<script>alert("x")</script> & ]]>' and "<script>" not in out.read_text()


def test_the_gate_as_plain_text_names_values_interval_p_and_the_baseline():
    text = gate_text(_comparison([0.0] * 20 + [1.0] * 20))
    lines = text.split("\n")
    assert lines[0] == "gate: candidate cand-1 against baseline base-1"
    assert lines[1].split() == ["metric", "baseline", "candidate", "delta", "95%", "CI", "p", "MDE", "cases", "outcome"]
    regression = next(line for line in lines if line.startswith("recall_at_5 1.0000"))
    assert regression.startswith("recall_at_5 1.0000 -> 0.5000 over 40 cases: fell by 0.500 (95% CI -0.")
    assert regression.endswith("significant at p < 0.001; tolerance 0.01: REGRESSION (the whole interval lies beyond "
                               "the tolerance) [baseline base-1]")
    assert lines[-2:] == ["verdict: REGRESSION", "decision: keep baseline (1 regression(s), above)"]
    none = gate_text(BaselineComparison("cand-1", "r", None, None, "no full-suite baseline for revision r"))
    assert none.startswith("gate: no full-suite baseline for revision r: nothing to compare with, so no regression")


def test_a_plain_text_table_has_no_markdown_or_html_escapes():
    text = text_table([["a|b <x> -> y", 3, 0.5], [Markdown("**overall**"), 10, None]], ["slice", "cases", "recall"])
    assert text.split("\n") == ["slice         cases  recall", "------------  -----  ------",
                                "a|b <x> -> y      3   0.500", "**overall**      10"]
