"""A new team's own docs and golden set, through the command line as CI runs it: ingest says what it
skipped, eval measures and then gates (plain-text reasons, exit codes 0 / 1 / 2, JUnit XML), a
changed config that regresses fails, `--no-gate` only measures, another system's run is
scored like the index, and RAGAS and DeepEval exports come back with the team's ids, slices and splits."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
import yaml

from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

# Twenty-four pages, each about one made-up feature with words of its own; a few in MkDocs style.
TOPICS = [
    ("middleware", "quokka lattice", "Middleware wraps the application; the quokka lattice orders the layers."),
    ("routing", "zephyr mosaic", "Routes map paths to endpoints; the zephyr mosaic matches path parameters."),
    ("testing", "marmot compass", "The test client sends requests without a server; the marmot compass fakes time."),
    ("lifespan", "otter beacon", "Lifespan handlers run at start and stop; the otter beacon opens database pools."),
    ("websockets", "heron cascade", "WebSocket endpoints keep a connection open; the heron cascade sends frames."),
    ("templates", "lynx tapestry", "Templates render HTML pages; the lynx tapestry caches compiled templates."),
    ("static-files", "badger prism", "Static files are served from a folder; the badger prism sets cache headers."),
    ("authentication", "falcon ledger", "Authentication checks credentials; the falcon ledger stores session tokens."),
    ("cors", "walrus harbor", "CORS headers allow other origins; the walrus harbor lists the allowed origins."),
    ("gzip", "ibex furnace", "Responses are compressed with gzip; the ibex furnace picks the compression level."),
    ("background-tasks", "puffin orchard", "Background tasks run after the response; the puffin orchard queues them."),
    ("exceptions", "jackal meridian", "Exception handlers turn errors into responses; the jackal meridian logs them."),
    ("config", "tapir quarry", "Configuration reads environment variables; the tapir quarry parses dotenv files."),
    ("requests", "bison anthem", "The request object holds headers and body; the bison anthem parses form data."),
    ("responses", "gecko lantern", "Response classes send JSON, HTML or files; the gecko lantern streams large files."),
    ("schemas", "okapi riddle", "Schemas describe the API; the okapi riddle writes the OpenAPI document."),
    ("graphql", "narwhal sonnet", "GraphQL support runs queries; the narwhal sonnet batches resolvers."),
    ("database", "coyote ember", "Databases connect through async drivers; the coyote ember pools connections."),
    ("thread-pool", "raven trellis", "Blocking code runs in a thread pool; the raven trellis limits the threads."),
    ("server-push", "mantis voyage", "HTTP/2 server push sends assets early; the mantis voyage chooses the assets."),
    ("events", "pelican quiver", "Server-sent events stream updates; the pelican quiver keeps the stream alive."),
    ("sessions", "weasel canvas", "Sessions keep data across requests; the weasel canvas signs the cookie."),
    ("deployment", "yak horizon", "Deployment runs behind a process manager; the yak horizon sets the worker count."),
    ("release-notes", "moose fable", "Release notes list changes; the moose fable marks breaking changes."),
]


def _page(name: str, words: str, text: str) -> str:
    title = name.replace("-", " ").title()
    page = f"# {title}\n\n{text}\n\n## Details\n\nMore about the {words} in {title.lower()}.\n"
    if name in ("middleware", "config"):  # MkDocs fences with attributes: code, never headings
        page += f'\n```python title="{name}.py" linenums="1"\n# Configure the {words}\nsetup()\n```\n'
    return page


def _golden_lines() -> list[dict]:
    """The golden file as a team writes it first: paths from the repository, no slices, no splits,
    an unanswerable case without a reference."""
    cases = [{"id": f"q-{name}", "question": f"what does the {words} do?", "reference": text,
              "gold_docs": [f"docs/{name}.md" if i % 2 else f"{name}.md"]}
             for i, (name, words, text) in enumerate(TOPICS)]
    cases.append({"id": "q-wifi", "question": "what is the office wifi password?", "answerable": False})
    return cases


@pytest.fixture(scope="module")
def team(tmp_path_factory):
    root = tmp_path_factory.mktemp("team")
    pages = {f"docs/{name}.md": _page(name, words, text) for name, words, text in TOPICS}
    write_tree(root / "repo", {**pages, "docs/img/logo.png": b"\x89PNG not really"})
    (root / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in _golden_lines()))
    (root / "gate_policy.yaml").write_text(yaml.safe_dump({
        "headline_metrics": ["recall_at_5", "mrr_at_10"], "tolerance": {"recall_at_5": 0.02, "mrr_at_10": 0.02},
        "latency_budget_p95_ms": 0.001,  # certain to be over: it warns, never fails
        "significance": {"samples": 2000}}))
    base = {"sources": [{"name": "web", "path": str(root / "repo" / "docs")}],
            "embedding": {"kind": "hashing"}, "storage": {"path": str(root / "store" / "index.duckdb")},
            "golden_set": str(root / "golden.jsonl"), "gate_policy": str(root / "gate_policy.yaml")}
    (root / "pipeline.yaml").write_text(yaml.safe_dump(base))
    # A changed config that regresses: dense retrieval over 8-dimensional hashed vectors.
    (root / "regressed.yaml").write_text(yaml.safe_dump({**base, "embedding": {"kind": "hashing", "dimension": 8},
                                                         "retrieval": {"mode": "dense"}}))
    return root


def _cli(team, *args, config="pipeline.yaml"):
    return run_cli(*args, "--config", str(team / config), cwd=team)


def test_a_team_corpus_measured_gated_regressed_and_reported(team):
    out = _cli(team, "ingest", "--json")
    assert out.returncode == 0, out.stderr[-3000:]
    skipped = json.loads(out.stdout)["sources"]["web"]["skipped_files"]
    assert skipped == [{"doc_id": "web:img/logo.png", "reason": "unsupported file type '.png'"}]
    out = _cli(team, "ingest")  # nothing changed: the skipped file is still named, with its reason
    assert "SKIPPED 1 in web: unsupported file type '.png': web:img/logo.png" in out.stdout

    out = _cli(team, "eval", "--junit-xml", str(team / "first.xml"), "--trec-run", str(team / "first.trec"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    # Half relative to the source's root, half to the repository: every one resolved.
    assert "24 document path(s) resolved to ids (e.g. middleware.md -> web:middleware.md)" in out.stdout
    assert "success_at_5" in out.stdout.split("\n\n")[1], "the metrics table, success@k in it"
    assert "gate: no full-suite baseline" in out.stdout and "so no regression" in out.stdout
    # No answers section in the team's config: answers are off, and said to be, in the output and the report.
    assert "\nanswers: off: answers.generator is none, so no answer was generated or graded" in out.stdout
    first_report = (team / out.stdout.split("report: ", 1)[1].split("\n", 1)[0]).read_text()
    assert "## Answers\n\nanswers: off: answers.generator is none" in first_report
    assert (team / "first.qrels").read_text().count("\n") == len(TOPICS)
    first = ET.parse(team / "first.xml").getroot()
    assert first.tag == "testsuites" and int(first.get("tests")) == len(TOPICS) + 2
    assert [s.get("name").split(" (")[0] for s in first] == ["golden cases", "gate"]
    assert first.find("testsuite[@name='gate']/testcase/skipped") is not None

    out = _cli(team, "promote")
    assert out.returncode == 0 and out.stdout.startswith("PROMOTE"), out.stdout
    baseline_id = out.stdout.split("\n")[1].split()[0]

    out = _cli(team, "eval", "--junit-xml", str(team / "regressed.xml"), config="regressed.yaml")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    text = out.stdout
    # Measured first: the table and the failed cases, then the gate's reasons in plain text.
    assert text.index("success_at_5") < text.index("failed cases at k=5") < text.index("gate: candidate")
    regression = next(line for line in text.splitlines() if line.startswith("recall_at_5 ") and ": fell by " in line)
    assert " -> " in regression and ": fell by " in regression and "(95% CI -" in regression
    assert regression.endswith(f"; significant at p < 0.001; tolerance 0.02: REGRESSION (the whole interval lies beyond "
                               f"the tolerance) [baseline {baseline_id}]")
    assert "WARNING p95 latency" in text and "warns, never fails" in text
    assert "verdict: REGRESSION" in text
    assert "&gt;" not in text and "&#" not in text and "\\|" not in text, "plain text, no markdown or HTML escapes"
    report = ET.parse(team / "regressed.xml").getroot()
    gate = report.find("testsuite[@name='gate']")
    failed_rules = {c.get("name") for c in gate if c.find("failure") is not None}
    assert {"recall_at_5", "mrr_at_10"} <= failed_rules
    assert "[baseline " in gate.find("testcase[@name='recall_at_5']/failure").get("message")
    assert gate.find("testcase[@name='p95 latency budget']/skipped") is not None, "a warning is skipped, not failed"
    cases = report.find("testsuite[@name^='golden cases']") or report[0]
    failed_cases = [c.get("name") for c in cases if c.find("failure") is not None]
    listed = int(text.split("failed cases at k=5 (no gold document in the top 5, or a forbidden one retrieved): ")[1]
                 .split()[0])
    assert len(failed_cases) == listed > 0
    assert int(report.get("failures")) == len(failed_cases) + len(failed_rules)

    out = _cli(team, "eval", "--no-gate", config="regressed.yaml")
    assert out.returncode == 0 and "gate: not gated (--no-gate): measured only" in out.stdout
    assert _cli(team, "gate").returncode == 1, "the regressed evaluation, gated after the fact"
    out = _cli(team, "promote")
    assert out.returncode == 1 and "keep baseline" in out.stdout


def test_another_systems_run_is_scored_and_gated_without_ingesting(team):
    assert _cli(team, "ingest").returncode == 0
    run = team / "service.jsonl"
    # The team's production service, logged by question, its documents as repository paths (the gold
    # page first, then another); the unanswerable question is left out: it returned nothing.
    lines = [{"question": f"what does the {words} do?", "answer": "from the service",
              "retrieved": [f"repo/docs/{name}.md", f"repo/docs/{TOPICS[(i + 1) % len(TOPICS)][0]}.md"]}
             for i, (name, words, _) in enumerate(TOPICS)]
    run.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = _cli(team, "eval", "--run", str(run), "--json", "--no-gate")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["mode"] == "run" and report["overall"]["recall_at_5"] == 1.0 and report["overall"]["mrr_at_10"] == 1.0
    assert report["unanswerable"]["abstain_rate"] == 1.0, "a case the run left out abstained"
    assert report["gate"]["verdict"] == "not gated" and report["external_run"]["file"] == "service.jsonl"
    out = _cli(team, "eval", "--run", str(team / "missing.jsonl"))
    assert out.returncode == 2 and "run file" in out.stderr
    # A run file with bad lines: refused inside the evaluation's run, still a usage error, each line named.
    (team / "bad.trec").write_text("q-routing Q0 web:routing.md 1 high tag\nq-cors Q0 web:cors.md\n")
    out = _cli(team, "eval", "--run", str(team / "bad.trec"))
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert "bad.trec line 1: score 'high' is not a number" in out.stderr
    assert "bad.trec line 2: expected 6 fields" in out.stderr and "RunFileError" not in out.stderr


def test_a_vendors_run_is_compared_with_our_baseline_and_gated_only_when_asked(team):
    assert _cli(team, "ingest").returncode == 0
    measured = json.loads(_cli(team, "eval", "--json", "--no-gate").stdout)["eval_id"]
    assert _cli(team, "promote", "--eval", measured).returncode == 0  # a baseline of this index, whichever
    # A vendor's search, tagged with its name: ten documents a case, the gold page at rank 8 or not at all.
    others = [name for name, _, _ in TOPICS]
    lines = []
    for i, (name, _, _) in enumerate(TOPICS):
        listed = [o for o in others if o != name][i % 5: i % 5 + 10]
        if i % 2:
            listed[7] = name
        lines += [f"q-{name} Q0 web:{doc}.md {rank} {20 - rank}.5 vendor-x" for rank, doc in enumerate(listed, start=1)]
    (team / "vendor.trec").write_text("\n".join(lines) + "\n")

    out = _cli(team, "eval", "--run", str(team / "vendor.trec"))
    text = out.stdout
    assert out.returncode == 0, text[-3000:] + out.stderr[-3000:]
    assert "scored another system's run, not this index: vendor.trec (TREC, tag vendor-x)" in text
    assert "gate: not gated: another system's run is measured and compared with this index's baseline" in text
    assert "REGRESSION" not in text and "verdict:" not in text
    assert "answers: another system's run: its answers are kept with the traces" in text
    compared = text.split("compared with baseline ", 1)[1]
    assert compared.split("\n")[1].split() == ["metric", "baseline", "the", "run", "delta", "95%", "CI", "p", "cases"]
    assert "recall_at_5" in compared
    # Ranks to the depth the run has: it lists ten documents a case, not a hundred.
    assert "first gold rank not in the top 10 listed" in text and "top 100" not in text
    assert "first gold rank 8;" in text
    report = (team / text.split("report: ", 1)[1].split("\n", 1)[0]).read_text()
    assert "- another system's run, not this index: vendor.trec (TREC, tag vendor-x)" in report
    assert "not in the top 10 listed" in report

    out = _cli(team, "eval", "--run", str(team / "vendor.trec"), "--gate")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    assert "verdict: REGRESSION" in out.stdout and "vendor.trec (TREC, tag vendor-x)" in out.stdout
    out = _cli(team, "eval", "--run", str(team / "vendor.trec"), "--gate", "--no-gate")
    assert out.returncode == 2 and "not allowed with argument" in out.stderr


def test_a_ragas_export_of_the_teams_cases_comes_back_with_their_ids_slices_and_splits(team, tmp_path):
    assert _cli(team, "ingest").returncode == 0
    rows = [{"user_input": f"what does the {words} do?", "reference": text, "source_doc": f"docs/{name}.md",
             "synthesizer_name": "single_hop_specific_query_synthesizer",
             "metadata": {"id": f"q-{name}", "slice": "features", "split": "dev"} if i else {}}
            for i, (name, words, text) in enumerate(TOPICS[:3])]
    (tmp_path / "ragas.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _cli(team, "golden", "import", str(tmp_path / "ragas.jsonl"), "--out", str(tmp_path / "imported.jsonl"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert ("id: 2 from metadata.id, 1 generated from the file name and question | slice: 2 from metadata.slice, "
            "1 from field synthesizer_name | split: 2 from metadata.split, 1 left to the loader's default") in out.stdout
    written = [json.loads(line) for line in (tmp_path / "imported.jsonl").read_text().splitlines()]
    assert [(c["id"], c["slice"], c.get("split")) for c in written[1:]] == [("q-routing", "features", "dev"),
                                                                           ("q-testing", "features", "dev")]


def test_a_deepeval_export_of_the_teams_cases_comes_back_with_their_ids_slices_and_splits(team, tmp_path):
    assert _cli(team, "ingest").returncode == 0

    def export(split: str) -> str:
        goldens = [{"input": f"what does the {words} do?", "expected_output": text, "source_file": f"docs/{name}.md",
                    **({"additional_metadata": {"id": f"q-{name}", "slice": "features", "split": split}} if i else {})}
                   for i, (name, words, text) in enumerate(TOPICS[:3])]
        (tmp_path / "deepeval.json").write_text(json.dumps({"goldens": goldens}))
        return _cli(team, "golden", "import", str(tmp_path / "deepeval.json"), "--out", str(tmp_path / "imported.jsonl"))

    out = export("test")  # not a split of ours: each case named, nothing written
    assert out.returncode == 2 and not (tmp_path / "imported.jsonl").exists()
    assert "deepeval.json line 1 (q-routing): field 'split': 'test' is not one of dev, validation, holdout" in out.stderr
    out = export("holdout")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert ("slice: 2 from additional_metadata.slice, 1 left to the loader's default | split: 2 from "
            "additional_metadata.split, 1 left to the loader's default") in out.stdout, out.stdout
    written = [json.loads(line) for line in (tmp_path / "imported.jsonl").read_text().splitlines()]
    assert [(c["id"], c.get("slice"), c.get("split")) for c in written] == [
        (written[0]["id"], None, None), ("q-routing", "features", "holdout"), ("q-testing", "features", "holdout")]
    assert written[0]["id"] != "q-middleware"  # generated: the file gave none
    assert [c["gold_docs"] for c in written] == [[f"web:{name}.md"] for name, _, _ in TOPICS[:3]]

def test_a_bad_golden_file_exits_2_with_one_line_per_problem(team, tmp_path):
    bad = tmp_path / "golden.jsonl"
    bad.write_text(json.dumps({"id": "a", "question": "q?", "reference": "r.", "gold_docs": ["docs/midleware.md"]}) + "\n"
                   + json.dumps({"id": "b", "question": "q2?", "gold_docs": ["routing.md"]}) + "\n{oops\n")
    out = run_cli("eval", "--config", str(team / "pipeline.yaml"), "--golden", str(bad), cwd=team)
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    lines = out.stderr.strip().split("\n")
    assert lines[0].startswith("error: golden set ") and lines[0].endswith("has 3 problem(s):")
    assert lines[1] == ("  golden.jsonl line 1 (a): field 'gold_docs': 'docs/midleware.md' is not a document any source "
                        "has ever held; did you mean `web:middleware.md`?")
    assert lines[2] == "  golden.jsonl line 2 (b): field 'reference': missing or empty (only an unanswerable case may leave it out)"
    assert lines[3].startswith("  golden.jsonl line 3: invalid JSON")
    assert "\\n" not in out.stderr and "GoldenSetError" not in out.stderr and "Traceback" not in out.stderr
