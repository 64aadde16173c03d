"""`monitor` as a docs team reads it: the pages production hits beside the golden labels they have
(gold written as repository paths, resolved), and every refused query-log line named by file, line
and reason, in the terminal, in the JSON (the asset's table) and in the drift report, bounded."""

from __future__ import annotations

import json

import pytest
import yaml

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

PAGES = {
    "refunds": "Refunds are issued within fourteen days to the card that paid.",
    "sso": "Single sign-on works with Okta and Entra ID; the admin turns it on.",
    "webhooks": "Webhooks retry five times with exponential backoff before they give up.",
    "exports": "Exports write a CSV of invoices; a filter picks the dates.",
}
QUESTIONS = {
    "refunds": ["how long do refunds take", "where does a refund go", "refund to which card"],
    "sso": ["does sso work with okta", "who turns on single sign-on"],
    "webhooks": ["how often are webhooks retried", "webhook backoff"],
    "exports": ["export invoices as csv"],
}
BAD_LINES = 25


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs-team")
    write_tree(root / "repo" / "docs", {f"{name}.md": f"# {name.title()}\n\n{text}\n" for name, text in PAGES.items()})
    golden = [{"id": f"{name}-{i}", "question": question, "reference": PAGES[name],
               # As the team wrote them: paths from the repository, not ids.
               "gold_docs": [f"docs/{name}.md"]}
              for name, questions in QUESTIONS.items() for i, question in enumerate(questions)]
    (root / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in golden))
    lines = []
    for minute in range(30):
        name = ("refunds", "refunds", "sso", "webhooks", "exports")[minute % 5]
        lines.append(json.dumps({"timestamp": f"2026-11-20T09:{minute:02d}:00Z", "query": f"{name} question {minute}"}))
        if minute < BAD_LINES:
            lines.append(f"WARN 2026-11-20T09:{minute:02d}:30Z log-forwarder: connection reset {minute}")
    write_tree(root / "query_log", {"2026-11-20.jsonl": "\n".join(lines) + "\n"})
    config = {"sources": [{"name": "kb", "path": str(root / "repo" / "docs")}], "embedding": {"kind": "hashing"},
              "storage": {"path": str(root / "store" / "index.duckdb")}, "golden_set": str(root / "golden.jsonl"),
              "monitoring": {"query_log": str(root / "query_log"), "start_date": "2026-11-20", "sample_size": 30,
                             "bootstrap_samples": 200}}
    (root / "pipeline.yaml").write_text(yaml.safe_dump(config))
    out = run_cli("ingest", "--config", str(root / "pipeline.yaml"), cwd=root)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return root


def test_monitor_names_every_refused_line_and_shows_pages_with_their_labels(team):
    out = run_cli("monitor", "--config", str(team / "pipeline.yaml"), "--day", "2026-11-20", cwd=team)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    assert f"query-log lines refused, left out of the sample: {BAD_LINES}" in text
    # Lines 2, 4, 6...: each plain-text line between two queries, by file and line, with the reason.
    assert "  2026-11-20.jsonl:2: invalid JSON (Expecting value)" in text
    assert "  2026-11-20.jsonl:20: invalid JSON (Expecting value)" in text
    assert "2026-11-20.jsonl:22:" not in text  # ten printed...
    assert f"  ... and {BAD_LINES - 10} more (the drift report names the first 20)" in text

    report = (team / text.split("report: ", 1)[1].strip()).read_text()
    refused = report.split("## Query-log lines refused", 1)[1]
    assert f"{BAD_LINES} line(s) of the query log could not be read" in refused
    assert "| 2026-11-20.jsonl:40 | invalid JSON (Expecting value) |" in refused
    assert "2026-11-20.jsonl:42" not in refused and f"_and {BAD_LINES - 20} more_" in refused

    pages = report.split("## Pages: hit in production, labelled by golden cases", 1)[1].split("##", 1)[0]
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in pages.splitlines() if line.startswith("| ")]
    assert rows[0] == ["source", "page", "top-1 hits", "in top documents", "gold labels"]
    by_page = {row[1]: row[2:] for row in rows[1:]}
    # Gold paths resolved to the pages: labels per page, and one source, never a path split on ":".
    assert {page: counts[2] for page, counts in by_page.items() if page.startswith("kb:")} == {
        "kb:refunds.md": "3", "kb:sso.md": "2", "kb:webhooks.md": "2", "kb:exports.md": "1"}
    assert rows[1][:2] == ["**kb**", "**total of 4 pages**"] and rows[1][4] == "8"
    assert int(rows[1][2]) == 30 and int(by_page["kb:refunds.md"][0]) >= 12  # every sampled query has a first page
    assert {row[0] for row in rows[1:]} == {"**kb**", "kb"}


def test_the_json_carries_the_assets_table_bounded_with_the_count_of_the_rest(team):
    out = run_cli("monitor", "--config", str(team / "pipeline.yaml"), "--day", "2026-11-20", "--json", cwd=team)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    result = json.loads(out.stdout)
    refused = result["refused_lines"]
    assert result["metadata"]["malformed_lines"] == BAD_LINES
    assert len(refused) == 21 and refused[0] == {"where": "2026-11-20.jsonl:2", "reason": "invalid JSON (Expecting value)"}
    assert refused[-1] == {"where": f"and {BAD_LINES - 20} more", "reason": f"{BAD_LINES} lines refused in all (malformed_lines)"}
