"""The morning after, as the on-call person reads it: `rag-pipeline eval` in a real process names why
each case moved against the baseline, in its JSON (`case_changes`), its terminal output and its JUnit
report."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

PAGES = {
    "refunds.md": "# Refunds\n\nRefunds for annual plans take 14 days after the request.\n",
    "seats.md": "# Seats\n\nEach plan includes 5 seats. Extra seats cost 4 euros a month.\n",
    "sso.md": "# Single sign-on\n\nSingle sign-on uses SAML 2.0 with Okta or Entra ID.\n",
    "limits.md": "# Rate limits\n\nThe Growth plan allows 600 API requests per minute.\n",
}
CASES = [
    ("refund-days", "how many days does a refund of an annual plan take", "kb:refunds.md"),
    ("seats", "how many seats does a plan include", "kb:seats.md"),
    ("sso", "single sign-on with SAML and Okta", "kb:sso.md"),
    ("limits", "API requests per minute on the Growth plan", "kb:limits.md"),
]


def test_eval_names_why_each_case_moved_in_json_terminal_and_junit(tmp_path):
    kb = write_tree(tmp_path / "kb", PAGES)
    golden = tmp_path / "golden.jsonl"
    golden.write_text("".join(json.dumps({"id": i, "question": q, "reference": "see the page", "gold_docs": [d]}) + "\n"
                              for i, q, d in CASES))
    config = tmp_path / "pipeline.yaml"
    # report_k 1: a case whose gold falls to rank 2 fails, so its JUnit failure carries its cause.
    config.write_text(yaml.safe_dump({"sources": [{"name": "kb", "path": str(kb)}], "embedding": {"kind": "hashing"},
                                      "storage": {"path": str(tmp_path / "index.duckdb")}, "golden_set": str(golden),
                                      "evaluation": {"report_k": 1}}))
    first = run_cli("eval", "--json", "--config", str(config), cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert json.loads(first.stdout)["case_changes"] == []  # nothing to compare with yet
    promoted = run_cli("promote", "--config", str(config), cwd=tmp_path)
    assert promoted.returncode == 0, promoted.stdout

    # Overnight: the SSO page is deleted and a new page answers the seats question better than its gold.
    (kb / "sso.md").unlink()
    (kb / "plans-faq.md").write_text("# Plans FAQ\n\nHow many seats does a plan include? Plans include seats.\n")
    out = run_cli("eval", "--json", "--junit-xml", str(tmp_path / "junit.xml"), "--config", str(config), cwd=tmp_path)
    report = json.loads(out.stdout, parse_constant=lambda name: pytest.fail(f"{name} in eval --json"))
    assert out.returncode == report["exit_code"], out.stderr[-2000:]
    changes = {c["case_id"]: c for c in report["case_changes"]}
    # Falls, the largest first (equal falls by case id): the new page outranks two golds.
    assert [c["case_id"] for c in report["case_changes"]] == ["sso", "refund-days", "seats"]
    sso, seats = changes["sso"], changes["seats"]
    assert sso["cause"] == {"kind": "gold_deleted", "doc": "kb:sso.md", "detail": sso["cause"]["detail"]}
    assert (sso["baseline"], sso["candidate"], sso["scored"]) == (1.0, 0.0, False)
    assert sso["counterfactual"]["recovered"] and sso["counterfactual"]["metric"] == 1.0
    assert seats["cause"]["kind"] == "outranked" and seats["cause"]["doc"] == "kb:plans-faq.md"
    assert seats["first_gold_rank"] == {"baseline": 1, "candidate": 2}
    assert seats["counterfactual"] == {"undone": "replayed with kb:plans-faq.md served as in the baseline",
                                       "metric": seats["baseline"], "first_gold_rank": 1, "recovered": True}

    cases = {c.get("name"): c for c in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    message = cases["seats"].find("failure").get("message")
    assert message.startswith("no gold document in the top 1 (first at rank 2)")
    assert "cause: outranked kb:plans-faq.md (a new document, ranked 1 above the gold" in message

    # The terminal's short version, from the same findings.
    text = run_cli("eval", "--config", str(config), cwd=tmp_path)
    assert text.returncode == report["exit_code"], text.stderr[-2000:]
    assert "why cases moved against the baseline: " in text.stdout
    assert "  seats [general] mrr_at_10 1.0000 -> 0.5000: outranked kb:plans-faq.md (a new document" in text.stdout
    assert "  sso [general] recall_at_5 1.0000 -> 0.0000: gold_deleted kb:sso.md" in text.stdout
