"""Every command the docs show works as they show it: run in a real process, on a workspace built
the way the docs build it, with the exit code they give, and no usage error.

Which commands count is the rule in `documented.py` (fenced `bash`/`sh`/`shell`/`console` blocks,
`rag-pipeline` lines of any other fenced block, README's synopsis, and inline `rag-pipeline` code
spans, whose flags only are checked). Each one is run by a test below, or listed in NOT_RUN (not_run.py) with
the test that covers it or why it cannot run here: a doc that gains a command that is neither
fails `test_every_documented_command_is_run_or_listed`.

Workspaces: the Skiff folder of docs/golden-set.md's worked example, built from what its transcript
prints (its pipeline.yaml, golden lines and pages; the pages it lists without showing are made up
here, SKIFF_PAGES), with the README's and the Quickstart's own pipeline.yaml and golden.jsonl written
literally, run with the real model as those configs say; and a copy of data/ with the hashing
embedder (the outcomes asserted there do not depend on the model) for the CI examples, the
synopsis and the golden-set commands.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline_tests.e2e.documented import (
    Shown,
    fence_after,
    flag_problems,
    run_shown,
    shown_commands,
    usage_trouble,
)
from rag_pipeline_tests.e2e.not_run import GOLDEN_DOC, NOT_RUN

# An exit code that depends on what the command measured: 1 when the gate it prints found a
# regression (GATED), or when the drift check it reports warned (DRIFT), else 0.
GATED, DRIFT = "gated", "drift"
# Run by the tests below, as `(doc, command as shown, exit code the doc gives)`, in order.
README_STEPS = [
    ("README.md", "rag-pipeline ingest --config pipeline.yaml", 0),
    ("README.md", "rag-pipeline eval --config pipeline.yaml", 0),  # "no baseline yet: exit 0"
    ("README.md", "rag-pipeline promote --config pipeline.yaml", 0),
]
README_UI = [  # one shell, as a user types them; `dagster dev` is in NOT_RUN
    ("README.md", "export DAGSTER_HOME=$PWD/.dagster_home RAG_PIPELINE_CONFIG=$PWD/pipeline.yaml", 0),
    ("README.md", "mkdir -p $DAGSTER_HOME && cp path/to/rag_pipeline/dagster.yaml $DAGSTER_HOME/", 0),
]
QUICKSTART = [
    (GOLDEN_DOC, "rag-pipeline eval --config pipeline.yaml", 0),  # ingests, measures, no baseline yet: exit 0
    (GOLDEN_DOC, "rag-pipeline promote --config pipeline.yaml", 0),
    (GOLDEN_DOC, "rag-pipeline eval --config pipeline.yaml", 0),  # gated against it: nothing changed
]
CI_JOBS = [  # the GitHub Actions and GitLab examples: the pull-request job, then the nightly one
    (GOLDEN_DOC, "rag-pipeline eval --subset pr --junit-xml reports/rag-eval.xml", 0),
    (GOLDEN_DOC, "rag-pipeline eval --junit-xml reports/rag-eval.xml --trec-run reports/run.trec", 0),
    (GOLDEN_DOC, "rag-pipeline promote", 0),
    (GOLDEN_DOC, "rag-pipeline eval --subset pr --no-gate", 0),
    (GOLDEN_DOC, "rag-pipeline promote", 0),
]
WORKED_EXAMPLE = [
    (GOLDEN_DOC, "rag-pipeline ingest --config pipeline.yaml", 0),
    (GOLDEN_DOC, "rag-pipeline eval --config pipeline.yaml --junit-xml out/main.xml --trec-run out/main.trec", 0),
    (GOLDEN_DOC, "rag-pipeline promote --config pipeline.yaml", 0),
    # The doc's 1 is a significant regression on 25 cases it shows four of: on three answerable
    # cases the gate may not be sure (e2e/test_team_golden_set.py proves a regression's exit 1).
    (GOLDEN_DOC, "rag-pipeline eval --config pipeline-bm25.yaml --junit-xml out/bm25.xml", GATED),
]
GROWTH = [  # exit 0: both reviewers agree, nothing waits for people
    (GOLDEN_DOC, "rag-pipeline golden triage --reports user_reports.jsonl --out queue.jsonl", 0),
    (GOLDEN_DOC, "rag-pipeline golden accept reviewed-ana.jsonl reviewed-ben.jsonl", 0),
    (GOLDEN_DOC, "rag-pipeline golden release-holdout hb-031 --by ana --reason \"...\"", 0),
]
GATE_WAIVERS = [  # exit 0: a known rule, a day to come (the doc's day stands for one a month ahead: WAIVER_UNTIL)
    (GOLDEN_DOC, 'rag-pipeline gate waive --rule "protected slice permissioned recall_at_5" --by ana --reason '
                 '"permissioned pages move to the intranet source; labels follow" --until 2026-12-31', 0),
    (GOLDEN_DOC, "rag-pipeline gate waivers", 0),
]
# A waiver's last day must lie ahead: the docs' day, however far, will pass.
WAIVER_UNTIL = (datetime.now(UTC).date() + timedelta(days=30)).isoformat()
# The docs' placeholders, and what stands for them here.
PLACEHOLDERS = {"path/to/rag_pipeline": str(PROJECT_ROOT), "hb-031": "hb-008",  # hb-008: a holdout case of data/
                "2026-12-31": WAIVER_UNTIL}

# The pages of the worked example's Skiff docs that its transcript lists without showing them.
SKIFF_PAGES = {
    "routing.md": "# Routing\n\nA route maps a path to an endpoint. Write a name in braces, `/users/{user_id}`, and the "
                  "endpoint receives that segment as an argument.\n",
    "guide/testing.md": "# Testing\n\nThe TestClient sends requests straight to the application object: no server "
                        "process, no port.\n",
    "img/logo.png": "\x89PNG made up",
}


# README's synopsis, line by line: what runs here ({config}, {data}, {out}: the sample workspace;
# {eval_id}: the evaluation the first `eval` made), and the exit code (GATED, DRIFT: see _expected).
SYNOPSIS_RUNS = {
    "ingest": [("ingest --config {config} --source handbook={data}/corpus/handbook --force --json "
                "--fail-on-document-errors", 0)],
    "eval": [("eval --config {config} --golden {data}/golden/golden_set.jsonl --mode hybrid --subset full "
              "--trec-run {out}/run.trec --junit-xml {out}/eval.xml --json", 0),
             ("eval --config {config} --run {out}/run.trec --subset pr --no-gate", 0),
             # Another system's run gated against the baseline: this index's own run, so no regression.
             ("eval --config {config} --run {out}/run.trec --gate", 0)],
    "search": [("search 'how many vacation days do I get' --config {config} --tenant acme --roles employee,support "
                "--status published,superseded --mode bm25 --k 3 --json", 0)],
    "gate": [("gate --config {config} --baseline {eval_id} --candidate {eval_id} --policy {data}/gate_policy.yaml", 0),
             ("gate --config {config} waive --rule recall_at_5 --by ana --reason 'labels rewritten this week' "
              "--until {until} --policy {data}/gate_policy.yaml", 0),
             ("gate waivers --config {config} --json", 0)],
    "promote": [("promote --config {config} --eval {eval_id} --policy {data}/gate_policy.yaml", 0)],
    "experiment": [("experiment --config {config} --set chunking.strategy=fixed "
                    "--hypothesis 'fixed windows lose the headings' --allow-bundle", GATED)],
    "experiments": [("experiments --config {config}", 0)],
    # Exit 1: the bundled verdicts show the grader may not gate faithfulness (data/gate_policy.yaml).
    "calibrate": [("calibrate --config {config} --verdicts {data}/golden/human_verdicts.jsonl", 1)],
    "monitor": [("monitor --config {config} --day 2026-11-29 --fail-on-drift --json", DRIFT)],
    "golden": [("golden export-ragas --config {config} --out {out}/ragas.jsonl", 0),
               ("golden import {out}/ragas-import.jsonl --config {config} --out {out}/imported.jsonl", 0)],
    "import-beir": [("import-beir {out}/beir --name tiny --out {out}/beir-golden.jsonl", 0)],
    "demo": [("demo --config {config}", 0)],
    # Last: they change what is served. The baseline promoted above measured `handbook`; `--at` a
    # date far ahead measures every source's latest state again, without serving anything new.
    "index": [("index list --config {config} --source handbook", 0),
              ("index restore --config {config} --source handbook --to baseline --by docs-test --reason 'the synopsis'", 0),
              ("index unpin --config {config} --source handbook", 0),
              ("index disable --config {config} --source handbook --by docs-test --reason 'the synopsis'", 0),
              ("index enable --config {config} --source handbook", 0)],
}
SYNOPSIS_RUNS["eval"].append(("eval --config {config} --at 2100-01-01 --json", 0))
RAGAS_RECORD = {"user_input": "when did the Dublin office open?", "reference": "In 2020.",
                "reference_contexts": ["We were founded in 2017 in Amsterdam, opened our Dublin office in 2020 and "
                                       "our Austin office in 2022."]}


def _expected(result, expected: int | str) -> int:
    if expected == GATED:  # `eval` and `gate` say "verdict: REGRESSION", `experiment` lists "ERROR (regression)" rules
        return 1 if re.search(r"^(verdict: REGRESSION|ERROR \(regression\))", result.stdout, re.M) else 0
    if expected == DRIFT:
        return 0 if json.loads(result.stdout)["checks"]["drift_within_threshold"] else 1
    return expected


def _check(result, shown: str, expected: int | str) -> None:
    expected = _expected(result, expected)
    assert result.returncode == expected, (f"`{shown}` exited {result.returncode}, the doc says {expected}\n"
                                           f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    assert not usage_trouble(result), f"`{shown}`: {usage_trouble(result)}"


def _run_steps(steps, cwd: Path, env: dict | None = None) -> list:
    results = []
    for _, text, expected in steps:
        results.append(run_shown(text, cwd, env, PLACEHOLDERS))
        _check(results[-1], text, expected)
    return results


def _transcript() -> dict[str, Shown]:
    return {s.text: s for s in shown_commands([PROJECT_ROOT / GOLDEN_DOC]) if s.kind == "shell"}


def _skiff_docs(folder: Path) -> None:
    """The worked example's `skiff/docs`, as its transcript lists it: the pages it prints, the others made up."""
    transcript = _transcript()
    for rel in transcript["find skiff -type f | sort"].output.split():
        shown = transcript.get(f"cat {rel}")
        name = Path(rel).stem.replace("-", " ")
        page = shown.output if shown else SKIFF_PAGES.get(rel.removeprefix("skiff/docs/"),
                                                         f"# {name.title()}\n\nHow Skiff handles {name}.\n")
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(page, encoding="utf-8")


def _applied(diff: str, text: str) -> str:
    """`text` with a normal diff's additions (`6a7,8` and its `> ` lines) made."""
    lines = text.splitlines(keepends=True)
    hunks = list(re.finditer(r"^(\d+)a\d+(?:,\d+)?\n((?:> .*\n)+)", diff, re.M))
    assert hunks and sum(len(h.group(0)) for h in hunks) == len(diff), f"a diff of additions only: {diff!r}"
    for hunk in reversed(hunks):
        at = int(hunk.group(1))
        lines[at:at] = [line[2:] + "\n" for line in hunk.group(2).splitlines()]
    return "".join(lines)


RULE_SAMPLE = '''# A page

```bash
rag-pipeline ingest --config a.yaml   # a comment
# a comment line
kubectl apply -f - <<'END'
kind: NotACommand
END
helm upgrade --install x \\
  --namespace rag
```

````console
$ cat page.md
```python
rag-pipeline not-a-command
```
$ echo $?
0
````

```yaml
steps:
  - run: rag-pipeline eval --subset pr
  - run: |
      rag-pipeline promote
script:
  - rag-pipeline eval --no-gate
```

```
rag-pipeline gate  [--baseline ID]
                   [--policy FILE]
```

Prose with `rag-pipeline promote [--eval ID]` and `make ui`.
'''


def test_the_rule_finds_every_kind_of_command(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(RULE_SAMPLE)
    found = [(s.line, s.kind, s.text, s.output) for s in shown_commands([page])]
    assert found == [
        (4, "shell", "rag-pipeline ingest --config a.yaml", ""),
        (6, "shell", "kubectl apply -f - <<'END'", ""),
        (9, "shell", "helm upgrade --install x --namespace rag", ""),
        (14, "shell", "cat page.md", "```python\nrag-pipeline not-a-command\n```\n"),
        (18, "shell", "echo $?", "0\n"),
        (24, "shell", "rag-pipeline eval --subset pr", ""),
        (26, "shell", "rag-pipeline promote", ""),
        (28, "shell", "rag-pipeline eval --no-gate", ""),
        (32, "synopsis", "rag-pipeline gate [--baseline ID] [--policy FILE]", ""),
        (36, "inline", "rag-pipeline promote [--eval ID]", ""),
    ]


def test_every_documented_command_is_run_or_listed():
    runs = {(doc, text) for steps in (README_STEPS, README_UI, QUICKSTART, WORKED_EXAMPLE, CI_JOBS, GROWTH, GATE_WAIVERS)
            for doc, text, _ in steps}
    shown = {s.key: s for s in shown_commands() if s.kind == "shell"}
    unaccounted = [f"{s.doc}:{s.line}: {s.text}" for key, s in shown.items() if key not in runs and key not in NOT_RUN]
    assert not unaccounted, ("commands the docs show that no test runs or lists (run them here, or add them to "
                             "NOT_RUN with the test that covers them):\n" + "\n".join(unaccounted))
    stale = sorted((runs | set(NOT_RUN)) - set(shown))
    assert not stale, f"listed here, no longer shown by the docs: {stale}"


def test_every_synopsis_line_runs_with_every_flag_it_shows():
    ran = [f"{text} " for runs in SYNOPSIS_RUNS.values() for text, _ in runs]
    ran += [text.removeprefix("rag-pipeline ") + " " for steps in (GROWTH,) for _, text, _ in steps]
    missing = []
    for line in (s for s in shown_commands() if s.kind == "synopsis"):
        words = line.text.replace("[", " ").replace("]", " ").split()[1:]
        command = words[0]
        if command not in SYNOPSIS_RUNS:
            missing.append(f"{line.text}: no run in SYNOPSIS_RUNS")
            continue
        shown = [w for w in words[1:] if w.startswith("--")] if command != "golden" else \
            [w for w in words[1:] if re.fullmatch(r"[a-z][a-z-]*", w)]
        of_command = [text for text in ran if text.startswith(command + " ")]
        prefix = "golden " if command == "golden" else ""
        missing += [f"{line.text}: {word} is never run" for word in shown
                    if not any(f"{prefix}{word} " in text for text in of_command)]
    assert not missing, "\n".join(missing)


def test_every_rag_pipeline_command_shown_is_one_the_parser_accepts():
    problems = [f"{s.doc}:{s.line}: `{s.text}`: {problem}" for s in shown_commands()
                if s.text.startswith("rag-pipeline ") for problem in flag_problems(s)]
    assert not problems, "\n".join(problems)


@pytest.mark.slow
def test_readme_own_corpus_in_five_steps(tmp_path):
    _skiff_docs(tmp_path)
    (tmp_path / "pipeline.yaml").write_text(fence_after("README.md", "**1. A config.**", "yaml"))
    (tmp_path / "golden.jsonl").write_text(fence_after("README.md", "**2. A golden set.**", "jsonl"))
    ingest, evaluation, promote = _run_steps(README_STEPS, tmp_path)
    assert "skiff" in ingest.stdout and (tmp_path / ".rag_pipeline" / "index.duckdb").is_file()
    assert "gate: no full-suite baseline" in evaluation.stdout
    assert promote.stdout.startswith("PROMOTE")
    # Step 5 in one shell, `dagster dev` (NOT_RUN) replaced by loading its definitions in that environment.
    script = "\n".join(text for _, text, _ in README_UI)
    ui = run_shown(f"{script}\n{sys.executable} -m dagster definitions validate -m rag_pipeline.definitions",
                   tmp_path, substitutions=PLACEHOLDERS)
    assert ui.returncode == 0, ui.stdout[-3000:] + ui.stderr[-3000:]
    assert (tmp_path / ".dagster_home" / "dagster.yaml").read_text() == (PROJECT_ROOT / "dagster.yaml").read_text()


@pytest.mark.slow
def test_golden_set_quickstart(tmp_path):
    project = tmp_path / "project"  # its config names no store: the default is beside the folder
    _skiff_docs(project)
    (project / "pipeline.yaml").write_text(fence_after(GOLDEN_DOC, "## Quickstart", "yaml"))
    (project / "golden.jsonl").write_text(fence_after(GOLDEN_DOC, "## Quickstart", "jsonl"))
    first, promote, later = _run_steps(QUICKSTART, project)
    assert "docs/guide/testing.md -> skiff:guide/testing.md" in first.stdout  # a path resolved to its id
    assert (tmp_path / ".rag_pipeline" / "index.duckdb").is_file()
    assert promote.stdout.startswith("PROMOTE")
    assert "gate: candidate" in later.stdout and "against baseline" in later.stdout


@pytest.mark.slow
def test_worked_example(tmp_path):
    transcript = _transcript()
    _skiff_docs(tmp_path)
    (tmp_path / "golden.jsonl").write_text(transcript["head -3 golden.jsonl; grep answerable golden.jsonl"].output)
    config = transcript["cat pipeline.yaml"].output
    (tmp_path / "pipeline.yaml").write_text(config)
    (tmp_path / "pipeline-bm25.yaml").write_text(_applied(transcript["diff pipeline.yaml pipeline-bm25.yaml"].output, config))
    ingest, main, promote, bm25 = _run_steps(WORKED_EXAMPLE, tmp_path)
    # The ingest output is the transcript's: the counts of twelve pages and the skipped picture.
    assert ingest.stdout.split() == transcript[WORKED_EXAMPLE[0][1]].output.split()
    for line in ("trec run: out/main.trec", "qrels: out/main.qrels", "junit xml: out/main.xml"):
        assert line in main.stdout.splitlines() and line in transcript[WORKED_EXAMPLE[1][1]].output.splitlines()
    assert "(e.g. docs/middleware.md -> skiff:middleware.md)" in main.stdout
    assert "gate: no full-suite baseline for revision" in main.stdout
    assert promote.stdout.startswith("PROMOTE\n") and "is the first full-suite baseline of golden revision" in promote.stdout
    assert "gate: candidate" in bm25.stdout and 'testsuite name="gate"' in (tmp_path / "out" / "bm25.xml").read_text()


@pytest.fixture(scope="module")
def sample(tmp_path_factory) -> dict:
    """A copy of data/ with the hashing embedder, ingested by the synopsis's `ingest` line, and the
    values of SYNOPSIS_RUNS's placeholders; commands without --config read $RAG_PIPELINE_CONFIG."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copytree(PROJECT_ROOT / "data", root / "data")
    config = root / "data" / "pipeline.yaml"
    text = config.read_text()
    assert "\n  kind: sentence-transformers " in text, "the sample config names its embedder's kind"
    config.write_text(text.replace("\n  kind: sentence-transformers ", "\n  kind: hashing ", 1))
    out = root / "out"
    (out / "beir" / "qrels").mkdir(parents=True)
    (out / "beir" / "corpus.jsonl").write_text('{"_id": "d1", "title": "Tides", "text": "The moon pulls the sea."}\n')
    (out / "beir" / "queries.jsonl").write_text('{"_id": "q1", "text": "what causes tides?"}\n')
    (out / "beir" / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (out / "ragas-import.jsonl").write_text(json.dumps(RAGAS_RECORD) + "\n")
    values = {"config": str(config), "data": str(config.parent), "out": str(out), "until": WAIVER_UNTIL}
    [(text, expected)] = SYNOPSIS_RUNS["ingest"]
    ingest = run_shown("rag-pipeline " + text.format(**values), root)
    _check(ingest, text, expected)
    return {"root": root, "values": values, "ingest": ingest, "env": {"RAG_PIPELINE_CONFIG": str(config)}}


@pytest.mark.slow
def test_the_command_line_synopsis(sample):
    values = sample["values"]
    assert json.loads(sample["ingest"].stdout)["sources"]["handbook"]["queryable"] > 0
    results = {}
    for command, runs in SYNOPSIS_RUNS.items():
        for text, expected in runs if command != "ingest" else []:  # the fixture ran `ingest`
            result = run_shown("rag-pipeline " + text.format(**values), sample["root"])
            _check(result, text, expected)
            results.setdefault(command, []).append(result)
            if command == "eval" and "eval_id" not in values:
                values["eval_id"] = json.loads(result.stdout)["eval_id"]
    assert (Path(values["out"]) / "eval.xml").is_file() and (Path(values["out"]) / "run.qrels").is_file()
    assert len(json.loads(results["search"][0].stdout)["final"]) == 3, "--k 3: three hits"
    assert "chunking.strategy: sections → fixed" in results["experiments"][0].stdout
    assert "faithful" in results["calibrate"][0].stdout
    assert '"gold_docs": ["handbook:welcome.md"]' in (Path(values["out"]) / "imported.jsonl").read_text()
    assert (Path(values["out"]) / "beir-golden.jsonl").read_text().count("\n") == 1
    assert "demo succeeded" in results["demo"][0].stdout
    assert "pinned to state" in results["index"][1].stdout and "follows its files again" in results["index"][4].stdout
    assert json.loads(results["eval"][-1].stdout)["at"]["handbook"].startswith("handbook@")
    assert results["gate"][1].stdout.startswith(f"WAIVED recall_at_5: waived by ana until {WAIVER_UNTIL} (UTC)")
    assert [w["rule"] for w in json.loads(results["gate"][2].stdout) if w["state"] == "active"] == ["recall_at_5"]


@pytest.mark.slow
def test_the_ci_examples(sample, tmp_path):
    pr, nightly, promote, subset, promote_subset = _run_steps(CI_JOBS, tmp_path, sample["env"])
    assert (tmp_path / "reports" / "rag-eval.xml").is_file() and (tmp_path / "reports" / "run.trec").is_file()
    assert "gate: not gated (--no-gate)" in subset.stdout
    for promoted in (promote, promote_subset):  # the first baseline, or the same config kept: never a regression
        assert re.search(r"^(PROMOTE$|keep baseline)", promoted.stdout, re.M), promoted.stdout


@pytest.mark.slow
def test_the_golden_set_grows_from_production(sample, tmp_path):
    question = "can I bring my dog to the office on fridays?"
    (tmp_path / "user_reports.jsonl").write_text(json.dumps({"question": question, "tenant": None, "roles": ["employee"],
                                                             "note": "no answer", "reported_by": "support"}) + "\n")
    triage = run_shown(GROWTH[0][1], tmp_path, sample["env"])
    _check(triage, GROWTH[0][1], GROWTH[0][2])
    [item] = [i for i in map(json.loads, (tmp_path / "queue.jsonl").read_text().splitlines()) if i["question"] == question]
    for reviewer in ("ana", "ben"):  # the fields the doc's comment names, the same labels from both
        labels = {"reference": "", "gold_docs": [], "slice": "unanswerable", "split": "dev", "answerable": False,
                  "prohibited_claims": [], "reviewer": reviewer, "decision": "accept"}
        (tmp_path / f"reviewed-{reviewer}.jsonl").write_text(json.dumps({**item, **labels}) + "\n")
    accept, release = _run_steps(GROWTH[1:], tmp_path, sample["env"])
    golden = Path(sample["values"]["data"]) / "golden" / "golden_set.jsonl"
    cases = {c["id"]: c for c in (json.loads(line) for line in golden.read_text().splitlines()
                                  if line.strip() and not line.startswith("#"))}
    assert any(c["question"] == question for c in cases.values()), accept.stdout
    assert cases["hb-008"]["split"] == "validation", release.stdout


@pytest.mark.slow
def test_the_gate_waiver_commands(sample, tmp_path):
    waive, listing = _run_steps(GATE_WAIVERS, tmp_path, sample["env"])
    assert waive.stdout.startswith(f"WAIVED protected slice permissioned recall_at_5: waived by ana until {WAIVER_UNTIL}")
    assert "protected slice permissioned recall_at_5" in listing.stdout and " active " in listing.stdout
