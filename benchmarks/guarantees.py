"""The fail-closed figures of docs/guarantees.md, measured, never typed: each subcommand writes its section.

    python benchmarks/guarantees.py access   # tenant and role probes, DuckDB and PostgreSQL
    python benchmarks/guarantees.py kills    # kill -9 at every fault point, with the convergence test's verdict

`access` builds the probe corpus of rag_pipeline_tests/harness/access_probes.py (every odd value x access field x front
matter or sidecar x four kinds of source defaults, each on a page indexed good first and on a new
page), ingests it twice into a fresh DuckDB file and a fresh schema on a PostgreSQL started from
Python (pgserver), and searches for every page as four callers; it prints the table of what each
odd value gets and the probe counts. `kills` runs the fault-injection tests
(rag_pipeline_tests/e2e/test_kill_anywhere.py and test_kill_commands.py) and reports each kill
point with the test's verdict (a point converged when its test passed).
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
    os.environ.setdefault(_name, "1")

from performance_page import write_section  # noqa: E402

from rag_pipeline.api import (  # noqa: E402
    EmbeddingConfig,
    Store,
    duckdb_store,
    make_embedder,
)
from rag_pipeline.config import PROJECT_ROOT  # noqa: E402
from rag_pipeline.core.faults import COMMAND_KILL_POINTS, KILL_POINTS  # noqa: E402
from rag_pipeline_tests.harness.access_probes import CALLERS, FIELDS, SOURCE_DEFAULTS, ProbeReport, run_probes  # noqa: E402

REPO = PROJECT_ROOT
PAGE = REPO / "docs" / "guarantees.md"
HEADER = """# Guarantees

What the pipeline promises when input is careless or hostile and when processes die, each with the
test that proves it. The figures are written by scripts in `benchmarks/` (the command is under each
heading), never by hand.
"""
SCRIPT = "benchmarks/guarantees.py"


def _section(title: str, body: str, subcommand: str) -> None:
    if not PAGE.exists():
        PAGE.write_text(HEADER)
    write_section(title, body, script=f"{SCRIPT} {subcommand}", command=f"python {SCRIPT} {subcommand}", page=PAGE)


def _probe(backend: str, folder: Path) -> ProbeReport:
    embedder = make_embedder(EmbeddingConfig(kind="hashing"))
    if backend == "duckdb":
        return run_probes(duckdb_store(folder / "index.duckdb"), embedder, folder / "corpus", backend)
    import pgserver

    from rag_pipeline.core.storage.postgres import PostgresDatabase

    server = pgserver.get_server(folder / "postgres", cleanup_mode="stop")
    try:
        store = Store(PostgresDatabase(server.get_uri(), schema="probes"))
        report = run_probes(store, embedder, folder / "corpus", backend)
        store.close()
        return report
    finally:
        server.cleanup()


def access() -> str:
    reports = []
    for backend in ("duckdb", "postgresql"):
        with tempfile.TemporaryDirectory() as folder:
            reports.append(_probe(backend, Path(folder)))
            print(f"{backend}: {reports[-1].searches} searches, {len(reports[-1].leaks)} leaks", file=sys.stderr)
    first = reports[0]
    lines = [
        "A page whose `tenant`, `visibility`, `roles` or `status` is null, empty, falsy, of the wrong type or "
        "given twice is an error of that page, with the reason in the ledger: its last good version stays "
        "served, and a new page with it is not served. Source defaults are checked by the same rules when "
        "the config loads (exit 2). The one documented null, `tenant: null` (\"shared by all tenants\"), is "
        "honoured only in a source that has no tenant of its own.",
        "",
        f"Probe corpus (`rag_pipeline_tests/harness/access_probes.py`): each value below x {len(FIELDS)} fields x front matter or "
        f"sidecar x {len(SOURCE_DEFAULTS)} source defaults ({', '.join(SOURCE_DEFAULTS)}), on a page indexed "
        f"good first and on a new page. Every page is then searched for, through the hybrid retrieval with "
        f"the caller's filters, as {len(CALLERS)} callers: {', '.join(c.name for c in CALLERS)}. A leak is a "
        "page returned to a caller its good metadata does not admit.",
        "",
        "| value given | " + " | ".join(FIELDS) + " |",
        "|---|" + "---|" * len(FIELDS),
    ]
    for row in first.outcome_table():
        lines.append(f"| {row['value']} | " + " | ".join(row[f] for f in FIELDS) + " |")
    lines += ["", "| backend | pages | probes (searches) | leaks | good pages an admitted caller could not find |",
              "|---|---|---|---|---|"]
    for report in reports:
        lines.append(f"| {report.backend} | {len(report.pages)} | {report.searches} | {len(report.leaks)} | "
                     f"{len(report.not_found)} |")
    lines += ["", "Test: `rag_pipeline_tests/core/ingestion/test_access_fails_closed.py` (both backends)."]
    return "\n".join(lines)


# Kill point -> what is stored when it fires.
_WHAT = {
    "discovered": "the staged discovery and its ledger rows",
    "parse:batch": "the first batch of parsed documents",
    "parsed": "every parsed document",
    "chunk:batch": "the first batch of chunks",
    "chunked": "every chunk",
    "embed:batch": "the first batch of cached vectors",
    "embedded": "every vector",
    "switch:begin": "nothing of the switch (its transaction open)",
    "switch:replaced": "the served rows replaced, not verified, not committed",
    "switch:verified": "probes and proofs passed, not committed (ledger, manifest and counts are in the same transaction)",
    "switch:committed": "the switch committed; the Dagster materialization not recorded",
    "eval:scored": "every case scored, nothing stored",
    "eval:half-saved": "the evaluation's row written inside its transaction, its cases not",
    "eval:saved": "the evaluation committed; report and materialization not written",
    "promote:decided": "the gate said PROMOTE, the baseline not stored",
    "promote:stored": "the baseline stored, the Dagster check not recorded",
    "accept:recorded": "both revisions' texts and the change recorded, the golden file not replaced",
    "accept:written": "the new golden text on disk beside the old file, not renamed over it",
}


def kills() -> str:
    tests = ["rag_pipeline_tests/e2e/test_kill_anywhere.py", "rag_pipeline_tests/e2e/test_kill_commands.py"]
    with tempfile.TemporaryDirectory() as folder:
        junit = Path(folder) / "junit.xml"
        command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests]
        print("running", shlex.join(command), file=sys.stderr)
        subprocess.run(command, cwd=REPO, check=False)
        cases = ElementTree.parse(junit).getroot().iter("testcase")
        verdicts = {case.get("name"): not any(child.tag in ("failure", "error", "skipped") for child in case) for case in cases}
    rows = []
    for point in KILL_POINTS:
        rows.append(("ingest", point, "DuckDB, hashing embedder", verdicts.get(f"test_a_kill_leaves_one_release_and_the_next_run_converges[{point}-hashing]")))
    rows.append(("ingest", "switch:replaced", "DuckDB, the bundled MiniLM",
                 verdicts.get("test_a_kill_leaves_one_release_and_the_next_run_converges[switch:replaced-model]")))
    rows.append(("ingest", "switch:replaced", "PostgreSQL",
                 verdicts.get("test_a_kill_inside_the_switch_on_postgresql_leaves_one_release_and_converges")))
    names = {"eval": "test_a_killed_eval_stores_a_whole_evaluation_or_none_and_the_next_converges",
             "promote": "test_a_killed_promote_is_done_or_not_and_the_next_finishes_it",
             "golden accept": "test_a_killed_accept_leaves_the_old_revision_whole_and_the_next_converges"}
    for command, points in COMMAND_KILL_POINTS.items():
        for point in points:
            rows.append((command, point, "DuckDB", verdicts.get(f"{names[command]}[{point}]")))
    tried = [r for r in rows if r[3] is not None]
    converged = sum(1 for r in tried if r[3])
    lines = [
        "A process sends itself SIGKILL at a named point (`core/faults.py`, `RAG_PIPELINE_KILL_AT`): no cleanup, "
        "as an OOM kill or a pulled plug. Then what is stored must be whole (one release served, never a mix; "
        "an evaluation with all its cases or none; a baseline or none; the golden file old or new, never cut) "
        "and the same command run again must converge with no manual step (all pages queryable, checks "
        "passing, counts true, the killed Dagster run closed; a run killed after its commit leaves the next one nothing to do).",
        "",
        f"{len(tried)} kills tried, {converged} converged.",
        "",
        "| command | kill point | stored when it fires | backend | converged |",
        "|---|---|---|---|---|",
    ]
    for command, point, backend, verdict in rows:
        shown = "not run" if verdict is None else ("yes" if verdict else "**no**")
        lines.append(f"| {command} | `{point}` | {_WHAT[point]} | {backend} | {shown} |")
    lines += ["", "Tests: `rag_pipeline_tests/e2e/test_kill_anywhere.py` (httpx docs 0.23.0 -> 0.28.1 while killed), "
              "`rag_pipeline_tests/e2e/test_kill_commands.py`."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("what", choices=("access", "kills"))
    args = parser.parse_args()
    if args.what == "access":
        _section("Access metadata fails closed", access(), "access")
    else:
        _section("Kill -9 at any point", kills(), "kills")
    print(f"wrote {PAGE}", file=sys.stderr)


if __name__ == "__main__":
    main()
