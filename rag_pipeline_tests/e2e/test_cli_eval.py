"""The evaluation side of the command line on a tiny BEIR dataset: import-beir, eval --json
--trec-run, search, promote and gate, with their exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import pytrec_eval
import yaml

CORPUS = {
    "d1": ("Refund policy", "Refunds are issued within fourteen days of purchase for annual plans."),
    "d2": ("Single sign-on", "Configure SAML single sign-on with Okta or Microsoft Entra ID."),
    "d3": ("Rate limits", "The Growth plan allows six hundred API requests per minute."),
    "d4": ("Data export", "Use the export command to download all invoices as a CSV archive."),
    "d5": ("Two-factor login", "Turn on two-factor authentication with an authenticator app."),
}
QUERIES = {"q1": "how long do refunds take", "q2": "okta saml login", "q3": "api requests per minute limit",
           "q4": "download invoices csv"}
QRELS = [("q1", "d1", 1), ("q2", "d2", 1), ("q3", "d3", 1), ("q4", "d4", 1), ("q4", "d5", 0)]


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run([sys.executable, "-m", "rag_pipeline.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=300)


def _dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, (t, x) in CORPUS.items()))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in QUERIES.items()))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS))
    return root


def test_beir_import_eval_search_promote_gate(tmp_path):
    dataset = _dataset(tmp_path / "tiny-beir")
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"sources": [], "embedding": {"kind": "hashing"},
                                      "storage": {"path": str(tmp_path / "index.duckdb")}}))
    out = _cli("import-beir", str(dataset), "--name", "tiny", "--out", str(tmp_path / "golden.jsonl"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "wrote 4 cases" in out.stdout
    assert (tmp_path / "golden.qrels").read_text().count("\n") == len(QRELS)

    common = ["--config", str(config), "--source", f"tiny={dataset / 'corpus.jsonl'}", "--golden", str(tmp_path / "golden.jsonl")]
    out = _cli("eval", *common, "--mode", "bm25", "--json", "--trec-run", str(tmp_path / "run.trec"), cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    # Strict JSON: a rate with no case is null, never a bare NaN that strict parsers refuse.
    report = json.loads(out.stdout, parse_constant=lambda name: pytest.fail(f"{name} in eval --json"))
    assert {"overall", "by_slice", "by_split", "unanswerable"} <= set(report)
    assert report["unanswerable"]["superseded_outranks_current_rate"] is None  # no superseded document here
    assert report["mode"] == "bm25" and report["index_state"]["tiny"]
    # No answers generated (no answers.generator here): empty, and a sentence saying why and what to set.
    assert not report["answers"] and "answers.generator" in report["answers_note"]
    # The TREC run, read back by pytrec_eval with the imported qrels, gives the same numbers.
    run: dict[str, dict[str, float]] = {}
    for line in (tmp_path / "run.trec").read_text().splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, {})[doc] = float(score)
    qrels: dict[str, dict[str, int]] = {}
    for line in (tmp_path / "golden.qrels").read_text().splitlines():
        qid, _, doc, grade = line.split()
        qrels.setdefault(qid, {})[doc] = int(grade)
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.5"}).evaluate(run)
    assert report["overall"]["ndcg_at_10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in reference.values()) / 4, abs=1e-9)
    assert report["overall"]["recall_at_5"] == pytest.approx(sum(v["recall_5"] for v in reference.values()) / 4, abs=1e-9)

    out = _cli("search", "okta saml login", "--config", str(config), "--mode", "bm25", "--k", "2", "--json", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    trace = json.loads(out.stdout)
    assert trace["final"][0]["doc_id"] == "tiny:d2" and "bm25" in trace["candidates"] and "bm25" in trace["latency_ms"]

    out = _cli("promote", "--config", str(config), cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("PROMOTE")
    out = _cli("eval", *common, "--mode", "bm25", "--json", cwd=tmp_path)
    assert out.returncode == 0
    out = _cli("gate", "--config", str(config), cwd=tmp_path)
    assert out.returncode == 0, out.stdout
    assert "\nrecall_at_5 " in out.stdout and "verdict: PASS" in out.stdout
    assert "decision: keep baseline — no significant gain" in out.stdout
    # Keeping the baseline because the candidate is no better is no regression: exit 0, not 1.
    out = _cli("promote", "--config", str(config), cwd=tmp_path)
    assert out.returncode == 0 and "keep baseline" in out.stdout


def test_monitor_reports_a_day_and_fails_on_drift_only_when_asked(tmp_path):
    """A golden set about refunds and SSO; day one asks about those, day two about something else."""
    dataset = _dataset(tmp_path / "tiny-beir")
    config = tmp_path / "pipeline.yaml"
    log = tmp_path / "log"
    log.mkdir()
    assert _cli("import-beir", str(dataset), "--name", "tiny", "--out", str(tmp_path / "golden.jsonl"), cwd=tmp_path).returncode == 0
    ordinary = ["how long do refunds take", "okta saml login", "api requests per minute limit", "download invoices csv"]
    shifted = ["kubernetes pod eviction", "helm chart rollback", "container image registry", "node autoscaling policy"]
    for day, queries in (("2026-11-02", ordinary * 3), ("2026-11-03", shifted * 3)):
        (log / f"{day}.jsonl").write_text("".join(
            json.dumps({"timestamp": f"{day}T{9 + i % 8:02d}:00:00Z", "query": q, "tenant": None, "roles": ["customer"]}) + "\n"
            for i, q in enumerate(queries)) + "{broken\n")
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "tiny", "path": str(dataset / "corpus.jsonl"), "kind": "beir"}], "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp_path / "index.duckdb")}, "golden_set": str(tmp_path / "golden.jsonl"),
        "monitoring": {"query_log": str(log), "start_date": "2026-11-01", "sample_size": 12, "bootstrap_samples": 200},
    }))
    assert _cli("ingest", "--config", str(config), cwd=tmp_path).returncode == 0
    out = _cli("monitor", "--config", str(config), "--json", cwd=tmp_path)  # the log's last day by default
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)
    assert report["day"] == "2026-11-03"
    assert report["checks"] == {"drift_within_threshold": False, "no_large_new_gap": False}
    # The shifted questions the corpus has no words for (each asked three times) are gaps; no other is.
    gaps = report["coverage_gaps"]
    assert gaps and {q for g in gaps for q in g["queries"]} <= set(shifted)
    assert all(g["count"] == 3 and g["first_seen"] == "2026-11-03" for g in gaps)
    assert report["metadata"]["sampled_queries"] == 12 and report["metadata"]["malformed_lines"] == 2
    assert _cli("monitor", "--config", str(config), "--fail-on-drift", cwd=tmp_path).returncode == 1
    calm = _cli("monitor", "--config", str(config), "--day", "2026-11-02", "--fail-on-drift", cwd=tmp_path)
    assert calm.returncode == 0, calm.stdout[-2000:] + calm.stderr[-2000:]
    assert "within threshold" in calm.stdout and "candidates for new golden cases" in calm.stdout
