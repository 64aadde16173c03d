"""Exceptions with an owner: `gate waive` on the bundled sample, whose hybrid evaluation is promoted
and whose dense-only evaluation (the hashing embedder) regresses against it.

While the waiver holds, each regression it names is WAIVED, with who, why and until when, in the
terminal gate, `eval --json`, the JUnit file, the markdown report and the Dagster gate check, and
the gate passes; the day after its date the same evaluation fails the gate again. A waiver for a
rule the gate does not know, a past day, or no owner or reason is refused (exit 2).
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.etree import ElementTree

import dagster as dg
import pytest

from rag_pipeline.cli.runner import evaluate_golden, ingest
from rag_pipeline.config import PROJECT_ROOT, load_config
from rag_pipeline.core.evaluation.gating.baselines import compare_with_baseline, gate_text, promotion
from rag_pipeline.core.evaluation.gating.policy import load_policy
from rag_pipeline.core.storage import open_store
from rag_pipeline.defs import checks
from rag_pipeline_tests.e2e.cli import run_cli

pytestmark = pytest.mark.slow

TODAY = datetime.now(UTC).date()


@pytest.fixture(scope="module")
def regressed(tmp_path_factory) -> dict:
    """The sample ingested, its hybrid evaluation promoted, and a dense-only evaluation that regresses."""
    root = tmp_path_factory.mktemp("waivers")
    shutil.copytree(PROJECT_ROOT / "data", root / "data")
    path = root / "data" / "pipeline.yaml"
    hashing = path.read_text().replace("\n  kind: sentence-transformers ", "\n  kind: hashing ", 1)
    assert "kind: hashing" in hashing  # the sample's embedding section as written: the dense gap needs the hashing embedder
    path.write_text(hashing)
    config = load_config(path)
    instance = dg.DagsterInstance.ephemeral()
    assert all(run.success for run in ingest(config, instance))
    baseline = evaluate_golden(config, instance)
    store, policy = open_store(config.storage), load_policy(config.gate_policy)
    assert promotion(store, baseline.summary["eval_id"], policy).promoted
    dense = evaluate_golden(config, instance, mode="dense")
    assert dense.gate_failed, "the dense-only evaluation must regress for these tests to mean anything"
    comparison = compare_with_baseline(store, dense.summary["eval_id"], policy)
    return {"root": root, "config": config, "path": path, "instance": instance, "store": store, "policy": policy,
            "candidate": dense.summary["eval_id"], "regressed": [r.rule for r in comparison.gate.rules
                                                                 if r.outcome == "regression"]}


def _waive(regressed, *args: str):
    return run_cli("gate", "--config", str(regressed["path"]), "waive", *args, cwd=regressed["root"])


def test_a_waiver_is_refused_for_an_unknown_rule_a_past_day_or_no_owner(regressed):
    good = {"--rule": regressed["regressed"][0], "--by": "ana", "--reason": "labels are being rewritten",
            "--until": TODAY.isoformat()}

    def waive(**changes) -> tuple[int, str]:
        done = _waive(regressed, *[part for flag, value in {**good, **changes}.items() for part in (flag, value)])
        return done.returncode, done.stderr

    code, said = waive(**{"--rule": "recall_at_7"})
    assert code == 2 and "--rule 'recall_at_7' is not a rule this gate knows" in said
    assert "recall_at_5" in said and "protected slice permissioned recall_at_5" in said  # the known ones, named
    code, said = waive(**{"--until": (TODAY - timedelta(days=1)).isoformat()})
    assert code == 2 and "is in the past" in said
    code, said = waive(**{"--by": "  "})
    assert code == 2 and "--by is empty" in said
    code, said = waive(**{"--reason": ""})
    assert code == 2 and "--reason is empty" in said
    code, said = waive(**{"--until": "31/12/2026"})
    assert code == 2 and "is not a day: give YYYY-MM-DD" in said
    listed = run_cli("gate", "waivers", "--config", str(regressed["path"]), "--json", cwd=regressed["root"])
    assert listed.returncode == 0 and json.loads(listed.stdout) == []  # nothing refused was recorded


def test_waived_regressions_pass_the_gate_shown_everywhere_until_their_day(regressed):
    for rule in regressed["regressed"]:
        done = _waive(regressed, "--rule", rule, "--by", "ana", "--reason", "dense-only while the hybrid index is rebuilt",
                      "--until", TODAY.isoformat())
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"WAIVED {rule}: waived by ana until {TODAY.isoformat()} (UTC)")
    waiver = f"waived by ana until {TODAY.isoformat()} (UTC): dense-only while the hybrid index is rebuilt"
    # The terminal gate: exit 0, each regression WAIVED with its owner, reason and day.
    gate = run_cli("gate", "--config", str(regressed["path"]), "--candidate", regressed["candidate"], cwd=regressed["root"])
    assert gate.returncode == 0, gate.stdout + gate.stderr
    assert "verdict: PASS WITH WAIVERS" in gate.stdout
    shown = [line for line in gate.stdout.splitlines() if line.startswith("WAIVED ")]
    assert len(shown) == len(regressed["regressed"]) and all(line.endswith(waiver) for line in shown), gate.stdout
    # eval --json and the JUnit file of a new evaluation of the same config.
    junit = regressed["root"] / "out" / "eval.xml"
    evaluation = run_cli("eval", "--config", str(regressed["path"]), "--mode", "dense", "--json", "--junit-xml", str(junit),
                         cwd=regressed["root"])
    assert evaluation.returncode == 0, evaluation.stderr[-3000:]
    report = json.loads(evaluation.stdout)
    assert report["gate"]["verdict"] == "waived" and report["exit_code"] == 0 and not report["gate"]["promote"]
    waived = {r["rule"]: r["waiver"] for r in report["gate"]["rules"] if r["outcome"] == "waived"}
    assert set(waived) == set(regressed["regressed"])
    assert all(w == {"by": "ana", "reason": "dense-only while the hybrid index is rebuilt", "until": TODAY.isoformat()}
               for w in waived.values())
    cases = {case.get("name"): case for case in ElementTree.parse(junit).getroot().iter("testcase")}
    for rule in regressed["regressed"]:
        skipped = cases[rule].find("skipped")
        assert skipped is not None and skipped.get("message").startswith("WAIVED: ") and waiver in skipped.get("message")
    # The markdown report names them in its gate section.
    markdown = Path(report["report"]).read_text()
    gate_section = markdown.split("## Gate", 1)[1].split("\n## ", 1)[0]
    assert gate_section.count("WAIVED (regression)") == len(regressed["regressed"]) and "waived by ana" in gate_section
    # The Dagster gate check of an evaluation run: a WARN whose description lists each waiver.
    run = evaluate_golden(regressed["config"], regressed["instance"], mode="dense")
    assert run.success and not run.gate_failed
    comparison = compare_with_baseline(regressed["store"], run.summary["eval_id"], regressed["policy"])
    result = checks.result("gate_vs_baseline", comparison.verdict())
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert result.description.count("\nWAIVED ") == len(regressed["regressed"]) and waiver in result.description
    listed = run_cli("gate", "waivers", "--config", str(regressed["path"]), cwd=regressed["root"])
    assert listed.returncode == 0 and listed.stdout.count(" active ") == len(regressed["regressed"])
    # The day after the waiver's last day, the same evaluation fails the gate again, by itself.
    tomorrow = TODAY + timedelta(days=1)
    expired = compare_with_baseline(regressed["store"], regressed["candidate"], regressed["policy"], today=tomorrow)
    assert expired.gate.verdict == "regression"
    assert sorted(f.rule for f in expired.gate.errors) == sorted(regressed["regressed"])
    assert "WAIVED" not in gate_text(expired)
    # And a waived regression never becomes the baseline.
    assert not promotion(regressed["store"], regressed["candidate"], regressed["policy"]).promoted
