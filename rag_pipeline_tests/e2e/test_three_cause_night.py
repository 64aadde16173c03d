"""The night issue 33 describes, run as a team runs it from the command line: one night deletes a gold
page, cuts the answer out of another and adds a page that outranks a third. Exactly those three cases
fall, each with its own cause and the replay that proves it, in `eval --json` (`case_changes`) and in
the report's section grouped by cause."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

BACKUPS = ("Backups of the database are taken every 6 hours and copied to a second region, where each copy is kept "
           "for 30 days. A restore from the latest copy takes about an hour and is rehearsed every quarter by the "
           "platform team.")
# Each section of the operations page is long enough (chunking.min_tokens) to be a chunk of its own,
# so the section that lost the answer can be named.
PAGES = {
    "refunds.md": "# Refunds\n\nRefunds for annual plans take 14 days after the request.\n",
    "seats.md": "# Seats\n\nEach plan includes 5 seats. Extra seats cost 4 euros a month.\n",
    "sso.md": "# Single sign-on\n\nSingle sign-on uses SAML 2.0 with Okta or Entra ID.\n",
    "export.md": "# Export\n\nExport invoices as a CSV archive from the billing page.\n",
    "limits.md": "# Rate limits\n\nThe Growth plan allows 600 API requests per minute.\n",
    "storage.md": "# Storage\n\nThe database keeps uploaded files for 30 days.\n",
    "operations.md": (f"# Operations\n\n## Backups\n\n{BACKUPS}\n\n## Maintenance\n\nMaintenance windows are on "
                      "Sunday mornings and are announced a week ahead on the status page. During a window the service "
                      "stays readable, while writes may pause for a few minutes at a time.\n"),
}
CASES = [
    ("refund-days", "how long does a refund of an annual plan take", "kb:refunds.md"),
    ("seats", "how many seats does a plan include", "kb:seats.md"),
    ("sso", "single sign-on with SAML and Okta", "kb:sso.md"),
    ("export", "export invoices as a CSV archive", "kb:export.md"),
    ("limits", "API requests per minute on the Growth plan", "kb:limits.md"),
    ("backups", "how often are backups of the database taken", "kb:operations.md"),
]


@pytest.fixture(scope="module")
def night(tmp_path_factory) -> tuple[dict, str]:
    """A baseline promoted, then the night's three changes evaluated: eval --json and the report's text."""
    folder = tmp_path_factory.mktemp("three-causes")
    kb = write_tree(folder / "kb", PAGES)
    golden = folder / "golden.jsonl"
    golden.write_text("".join(json.dumps({"id": i, "question": q, "reference": "see the page", "gold_docs": [d]}) + "\n"
                              for i, q, d in CASES))
    config = folder / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"name": "kb", "path": str(kb)}], "embedding": {"kind": "hashing"},
                                      "storage": {"path": str(folder / "index.duckdb")}, "golden_set": str(golden)}))
    first = run_cli("eval", "--config", str(config), cwd=folder)
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    promoted = run_cli("promote", "--config", str(config), cwd=folder)
    assert promoted.returncode == 0, promoted.stdout + promoted.stderr

    (kb / "sso.md").unlink()  # (a) a gold page deleted
    (kb / "operations.md").write_text(PAGES["operations.md"].replace(BACKUPS, "See the runbook."))  # (b) its answer cut
    (kb / "seat-count.md").write_text(  # (c) a new page that outranks the seats page
        "# Seat count\n\nHow many seats are included? Five seats come with every subscription.\n")
    out = run_cli("eval", "--json", "--config", str(config), cwd=folder)
    found = json.loads(out.stdout, parse_constant=lambda name: pytest.fail(f"{name} in eval --json"))
    assert out.returncode == found["exit_code"], out.stderr[-2000:]
    return found, Path(found["report"]).read_text(encoding="utf-8")


def test_each_of_the_three_cases_that_fell_names_its_own_change_in_eval_json(night):
    found, _ = night
    changes = {c["case_id"]: c for c in found["case_changes"]}
    # Exactly the three cases the night touched moved, and all three fell.
    assert sorted(changes) == ["backups", "seats", "sso"]
    assert all(c["candidate"] < c["baseline"] for c in changes.values())
    assert {case: (c["cause"]["kind"], c["cause"]["doc"]) for case, c in changes.items()} == {
        "sso": ("gold_deleted", "kb:sso.md"),
        "backups": ("gold_changed", "kb:operations.md"),
        "seats": ("outranked", "kb:seat-count.md"),
    }
    # The gold page still exists: the section of it whose text went is named.
    assert "'Operations > Backups', lost that text" in changes["backups"]["cause"]["detail"]
    assert changes["seats"]["cause"]["detail"].startswith("a new document, ranked 1 above the gold")
    # Each cause proven: with that one change undone the case replays its baseline value.
    for change in changes.values():
        proof = change["counterfactual"]
        assert proof["recovered"] is True, change
        assert proof["metric"] == pytest.approx(change["baseline"], abs=1e-9), change
    assert "kb:sso.md" in changes["sso"]["counterfactual"]["undone"]
    assert "kb:seat-count.md" in changes["seats"]["counterfactual"]["undone"]


def test_the_report_groups_the_three_cases_by_cause_with_their_documents(night):
    found, report = night
    section = report[report.index("## Why cases moved against the baseline"):]
    section = section[:section.index("\n## ", 1)] if "\n## " in section[1:] else section
    assert "3 case(s) moved against the baseline" in section and "3 fell, 0 rose" in section
    groups = {}
    for part in section.split("\n### ")[1:]:
        heading, _, body = part.partition("\n")
        groups[heading] = body
    assert set(groups) == {"gold_deleted (1)", "gold_changed (1)", "outranked (1)"}
    for heading, case, doc in (("gold_deleted (1)", "sso", "kb:sso.md"), ("gold_changed (1)", "backups", "kb:operations.md"),
                               ("outranked (1)", "seats", "kb:seat-count.md")):
        rows = [line for line in groups[heading].splitlines() if line.startswith("| ") and "---" not in line][1:]
        assert len(rows) == 1 and rows[0].startswith(f"| {case} | general |") and f"| {doc} |" in rows[0], rows
