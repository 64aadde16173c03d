"""A hostile corpus, golden set and query log through ingest, eval and monitor, as a CI job runs them.

Every bad input must be recorded with a true reason, nothing outside the source root may be read
or served, the good documents must all be queryable, and no report or Dagster metadata value may
carry live markup or a broken table row.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.monitoring.sampling import read_query_log
from rag_pipeline_tests.e2e.cli import run_cli

pytestmark = pytest.mark.slow

OUTSIDE_MARKER = "OUTSIDE-THE-ROOT-7f3a"
EVIL_NAME = "evil<img src=x onerror=alert(9)>|x.html"
GOOD = {
    "good.md": "# Refund policy\n\nRefunds are issued within fourteen days of the request.\n",
    "name with spaces.md": "# Spaces\n\nA page whose file name holds spaces about invoices.\n",
    "ünïcödé-页面.md": "# Unicode\n\nA page with a unicode name about payroll calendars.\n",
    "new\nline.md": "# Newline\n\nA page whose file name holds a newline, about webhooks.\n",
    EVIL_NAME: ("<html><body><h1>Script payload</h1><p>Exports run nightly <script>alert(1)</script> for "
                "every workspace.</p><img src=x onerror=alert(9)><a href='javascript:alert(2)'>link</a></body></html>"),
}
# name -> (stage, a part of the reason the ledger must give)
BAD = {
    "empty.md": ("parsed", "empty file"),
    "binary.md": ("parsed", "binary content (NUL bytes)"),
    "latin1.md": ("parsed", "not valid UTF-8 (byte 0xe9 at line 1)"),
    "bad-front-matter.md": ("discovered", "front matter is not valid YAML"),
    "corrupt.pdf": ("parsed", "invalid pdf header"),
    "truncated.docx": ("parsed", "not a readable Word .docx document (not a complete zip archive): truncated"),
    "too-big.md": ("discovered", "over the 1.0 MB limit (limits.max_file_mb)"),
    "too-long.md": ("parsed", "over the 50,000 limit (limits.max_text_chars)"),
    "dangling.md": ("discovered", "dangling symbolic link to missing.md"),
    "unreadable.md": ("discovered", "permission denied"),
}
SKIPPED = {
    "outside.md": "outside the source root: not read",
    "passwd.md": "symbolic link to /etc/passwd, outside the source root: not read",
    "outside-fifo.md": "outside the source root: not read",
    "loop-a.md": "symbolic link loop",
    "loop-b.md": "symbolic link loop",
    "alias.md": "read under its own path",
    "fifo.md": "FIFO",
}
# Raw markup that must appear in no report file and no metadata value.
LIVE_MARKUP = re.compile(r"<script|<img|onerror\s*=|javascript:", re.I)
CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x1b]")


def _build_corpus(tmp: Path) -> Path:
    root, outside = tmp / "src", tmp / "outside"
    root.mkdir()
    outside.mkdir()
    for name, text in GOOD.items():
        (root / name).write_text(text)
    (root / "empty.md").write_bytes(b"")
    (root / "binary.md").write_bytes(bytes(range(256)) * 8)
    (root / "latin1.md").write_bytes("# Café\n\nlatin-1 text\n".encode("latin-1"))
    (root / "bad-front-matter.md").write_text("---\ntitle: [unclosed\n---\n# Page\n\nbody\n")
    (root / "corrupt.pdf").write_bytes(b"hello, this is not a pdf")
    docx = (PROJECT_ROOT / "data" / "corpus" / "product_docs" / "admin-guide.docx").read_bytes()
    (root / "truncated.docx").write_bytes(docx[: len(docx) // 3])
    (root / "too-big.md").write_bytes(b"# Big\n\n" + b"words " * 200_000)
    (root / "too-long.md").write_text("# Long\n\n" + "word " * 20_000)
    (outside / "secret.md").write_text(f"# Secret\n\n{OUTSIDE_MARKER} root daemon bin sys nologin\n")
    os.mkfifo(outside / "pipe.md")
    os.mkfifo(root / "fifo.md")
    for name, target in {"outside.md": "../outside/secret.md", "passwd.md": "/etc/passwd",
                         "outside-fifo.md": "../outside/pipe.md", "dangling.md": "missing.md",
                         "loop-a.md": "loop-b.md", "loop-b.md": "loop-a.md", "alias.md": "good.md"}.items():
        os.symlink(target, root / name)
    (root / "unreadable.md").write_text("# Unreadable\n\nnobody may read this\n")
    (root / "unreadable.md").chmod(0)
    (root / "team").mkdir()
    (root / "team" / "roster.md").write_text("# Roster\n\nThe on-call roster rotates weekly.\n")
    return root


def _golden(tmp: Path) -> Path:
    evil_doc = f"hostile:{EVIL_NAME}"
    cases = [
        {"id": "refund|window", "question": "How long do <script>alert(1)</script> refunds take?",
         "reference": "Fourteen days.", "gold_docs": ["hostile:good.md"], "slice": "<img src=x onerror=alert(3)>",
         "split": "dev"},
        {"id": "exports", "question": "When do exports run? [x](javascript:alert(1))", "reference": "Nightly.",
         "gold_docs": [evil_doc], "slice": "exact_fact", "split": "dev"},
        {"id": "leak", "question": "exports nightly workspace script payload", "reference": "none",
         "gold_docs": [], "answerable": False, "forbidden_docs": [evil_doc], "slice": "permissioned", "split": "dev"},
        {"id": "roster", "question": "How often does the on-call roster rotate?", "reference": "Weekly.",
         "gold_docs": ["hostile:team/roster.md"], "slice": "exact_fact", "split": "validation"},
        {"id": "payroll", "question": "payroll calendars unicode page", "reference": "A unicode page.",
         "gold_docs": ["hostile:ünïcödé-页面.md"], "slice": "paraphrase", "split": "dev"},
        {"id": "webhooks", "question": "a page about webhooks", "reference": "The newline page.",
         "gold_docs": ["hostile:new\nline.md"], "slice": "paraphrase", "split": "holdout"},
    ]
    path = tmp / "golden.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in cases))
    return path


def _query_log(tmp: Path) -> Path:
    folder = tmp / "query_log"
    folder.mkdir()
    queries = ["<script>alert('q')</script> refunds", "[click](javascript:alert(1)) exports", "a | b | c invoices",
               "<img src=x onerror=alert(4)> payroll", "how long do refunds take", "when do exports run",
               "webhook retries", "on-call roster"]
    lines = [json.dumps({"timestamp": f"2026-11-20T{8 + i:02d}:00:00Z", "query": q, "tenant": None, "roles": []})
             for i, q in enumerate(queries)]
    # A valid line with a 5 MB query: refused unread (never embedded or searched), the day read on.
    huge = json.dumps({"timestamp": "2026-11-20T07:30:00Z", "query": "refunds " * 650_000, "tenant": None})
    (folder / "2026-11-20.jsonl").write_text("\n".join(lines) + "\n{broken <script> line\n" + huge + "\n")
    return folder


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    root = _build_corpus(tmp)
    config = tmp / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "hostile", "path": str(root), "limits": {"max_file_mb": 1, "max_text_chars": 50_000}}],
        "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp / "store" / "index.duckdb")},
        "golden_set": str(_golden(tmp)),
        "monitoring": {"query_log": str(_query_log(tmp)), "start_date": "2026-11-10", "bootstrap_samples": 200},
        "answers": {"generator": "extractive"},
    }))
    home = tmp / "dagster_home"
    home.mkdir()
    env = {"DAGSTER_HOME": str(home)}
    first = run_cli("ingest", "--config", str(config), "--json", env=env, unprivileged=True, timeout=600)
    return {"tmp": tmp, "root": root, "config": config, "env": env, "first": first,
            "db": tmp / "store" / "index.duckdb", "home": home}


def _ledger(db: Path) -> dict[tuple[str, str], tuple[str, str]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {(d, s): (st, r) for d, s, st, r in con.execute("SELECT doc_id, stage, status, reason FROM ledger").fetchall()}


def test_every_bad_input_fails_alone_with_a_true_reason(hostile):
    run = hostile["first"]
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout)["sources"]["hostile"]
    assert report["success"] and report["checks"]["coverage"] and report["checks"]["deletions_propagated"]
    assert report["warnings"] == ["no_failed_documents"]
    failures = {f["doc_id"].split(":", 1)[1]: (f["stage"], f["reason"]) for f in report["failures"]}
    assert set(failures) == set(BAD)
    for name, (stage, reason) in BAD.items():
        assert failures[name][0] == stage and reason in failures[name][1], (name, failures[name])
    ledger = _ledger(hostile["db"])
    for name, reason in SKIPPED.items():
        status, text = ledger[(f"hostile:{name}", "discovered")]
        assert status == "skipped" and reason in text, (name, text)


def test_the_good_documents_are_all_queryable(hostile):
    ledger = _ledger(hostile["db"])
    for name in [*GOOD, "team/roster.md"]:
        assert ledger[(f"hostile:{name}", "queryable")][0] == "ok", name
    with duckdb.connect(str(hostile["db"]), read_only=True) as con:
        served = {d for (d,) in con.execute("SELECT doc_id FROM documents").fetchall()}
    assert served == {f"hostile:{name}" for name in [*GOOD, "team/roster.md"]}


def test_nothing_outside_the_root_is_read_or_served(hostile):
    # The FIFO outside the root would have hung the run had it been opened (the run finished).
    with duckdb.connect(str(hostile["db"]), read_only=True) as con:
        tables = [t for (t,) in con.execute("SELECT table_name FROM information_schema.tables").fetchall()]
        for table in tables:
            columns = [c for (c, kind) in con.execute(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [table]
            ).fetchall() if kind in ("VARCHAR", "VARCHAR[]")]
            for column in columns:
                hits = con.execute(f'SELECT count(*) FROM "{table}" WHERE CAST("{column}" AS VARCHAR) LIKE ? '
                                   f'OR CAST("{column}" AS VARCHAR) LIKE ?', [f"%{OUTSIDE_MARKER}%", "%root:x:0:0%"]).fetchall()
                assert hits == [(0,)], (table, column)
    search = run_cli("search", "root daemon bin sys nologin", "--config", str(hostile["config"]), "--mode", "bm25",
                     "--json")
    assert search.returncode == 0, search.stderr[-2000:]
    assert json.loads(search.stdout)["final"] == []


def test_fail_on_document_errors_exits_1(hostile):
    out = run_cli("ingest", "--config", str(hostile["config"]), "--fail-on-document-errors", env=hostile["env"],
                  unprivileged=True)
    assert out.returncode == 1
    assert "FAILED hostile:new\\nline.md" not in out.stdout  # the newline page is fine...
    assert "CHECK WARNED hostile: no_failed_documents" in out.stdout
    # ...and every id is printed on one line: the newline in a name shows escaped.
    assert not any(line.startswith("line.md") for line in out.stdout.splitlines())


def test_an_unreadable_folder_keeps_its_served_pages(hostile):
    team = hostile["root"] / "team"
    team.chmod(0)
    try:
        out = run_cli("ingest", "--config", str(hostile["config"]), "--json", env=hostile["env"], unprivileged=True)
    finally:
        team.chmod(0o755)
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)["sources"]["hostile"]
    assert report["deleted"] == 0
    failures = {f["doc_id"]: f["reason"] for f in report["failures"]}
    assert "folder team cannot be listed" in failures["hostile:team/roster.md"]
    with duckdb.connect(str(hostile["db"]), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM documents WHERE doc_id = 'hostile:team/roster.md'").fetchall() == [(1,)]


def _metadata_texts(home: Path) -> tuple[list[str], list[str]]:
    """Every text a person sees in Dagster for these runs, split by how the UI shows it: markdown
    (rendered, so it must carry no live markup) and plain text (table cells, descriptions, failures:
    shown as typed, so escaping them would show `&lt;` literally)."""
    markdown, plain = [], []
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with dg.DagsterInstance.get() as instance:
            for run in instance.get_runs():
                for entry in instance.all_logs(run.run_id):
                    event = entry.dagster_event
                    if event is None:
                        continue
                    data = event.event_specific_data
                    metadata = getattr(getattr(data, "materialization", None), "metadata", None) or getattr(data, "metadata", None) or {}
                    for value in metadata.values():
                        if isinstance(value, dg.MarkdownMetadataValue):
                            markdown.append(value.value)
                        elif isinstance(value, dg.TableMetadataValue):
                            plain += [str(cell) for record in value.records for cell in record.data.values()]
                        else:
                            plain.append(json.dumps(value.value, default=str) if isinstance(value.value, (dict, list)) else str(value.value))
                    plain.append(getattr(data, "description", None) or "")
                    plain.append(entry.user_message or "")
    finally:
        os.environ.pop("DAGSTER_HOME", None)
    return markdown, plain


def _table_rows_are_whole(markdown: str) -> None:
    for block in re.split(r"\n\s*\n", markdown):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        widths = {len(re.findall(r"(?<!\\)\|", row)) for row in rows}
        assert len(widths) <= 1, block


def test_reports_and_metadata_carry_no_live_markup(hostile):
    config, env = str(hostile["config"]), hostile["env"]
    evaluation = run_cli("eval", "--config", config, "--mode", "bm25", env=env, unprivileged=True)
    assert evaluation.returncode in (0, 1), evaluation.stderr[-3000:]
    assert "report:" in evaluation.stdout, evaluation.stdout[-3000:] + evaluation.stderr[-3000:]
    monitoring = run_cli("monitor", "--config", config, "--day", "2026-11-20", "--json", env=env, unprivileged=True)
    assert monitoring.returncode == 0, monitoring.stdout[-3000:] + monitoring.stderr[-3000:]
    # The broken line and the 5 MB one, refused (a 5 MB query would have been sampled and searched).
    assert json.loads(monitoring.stdout)["metadata"]["malformed_lines"] == 2, monitoring.stdout[-3000:]
    malformed = read_query_log(hostile["tmp"] / "query_log").malformed
    assert any("line of 5.0 MB, over the 64 KB limit" in m["reason"] for m in malformed), malformed
    reports = sorted((hostile["tmp"] / "store" / "reports").glob("*.md"))
    assert {p.name.startswith("drift-") for p in reports} == {True, False}
    for path in reports:
        text = path.read_text()
        assert not LIVE_MARKUP.search(text), (path.name, LIVE_MARKUP.search(text).group())
        _table_rows_are_whole(text)
    evaluation_report = next(p for p in reports if not p.name.startswith("drift-")).read_text()
    assert "evil&lt;img src=x onerror&#61;alert(9)&gt;\\|x.html" in evaluation_report  # shown, escaped
    markdown, plain = _metadata_texts(hostile["home"])
    assert any("onerror&#61;" in t for t in markdown)  # the hostile names did reach the markdown...
    for text in markdown:
        assert not LIVE_MARKUP.search(text), text[:500]  # ...but never live
        _table_rows_are_whole(text)
    assert any("<script>" in t for t in plain)  # plain text shows the query as it was typed...
    for text in plain:
        assert not CONTROL_CHARACTERS.search(text), repr(text[:500])  # ...with nothing that moves the cursor
