"""The command line as a CI job would call it: real subprocesses, real exit codes."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT


def _cli(*args: str, cwd: Path | None = None, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    env.pop("DAGSTER_HOME", None)
    return subprocess.run(
        [sys.executable, "-m", "rag_pipeline.cli", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def _config(tmp_path: Path, sources: dict[str, Path]) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({
        "sources": [{"name": n, "path": str(p)} for n, p in sources.items()],
        "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp_path / "index.duckdb")},
    }))
    return path


def _docs(root: Path, n: int, prefix: str) -> Path:
    root.mkdir(parents=True)
    for i in range(n):
        (root / f"{prefix}{i}.md").write_text(f"# {prefix} page {i}\n\nThis page explains topic {prefix}{i} in detail.\n")
    return root


def test_ingest_json_with_source_override(tmp_path):
    config = _config(tmp_path, {"a": _docs(tmp_path / "a", 3, "a")})
    extra = _docs(tmp_path / "b", 2, "b")
    (extra / "logo.png").write_bytes(b"\x89PNG")
    (extra / "broken.md").write_bytes(b"\xff\xfe\x00bad")
    out = _cli("ingest", "--config", str(config), "--source", f"b={extra}", "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)["sources"]
    assert set(report) == {"a", "b"}
    expected_keys = {"discovered", "skipped", "added", "changed", "unchanged", "deleted", "parsed", "chunked",
                     "embedded", "cache_hits", "indexed", "queryable", "failed", "failures"}
    assert expected_keys <= set(report["b"])
    assert (report["a"]["discovered"], report["a"]["queryable"], report["a"]["failed"]) == (3, 3, 0)
    assert (report["b"]["discovered"], report["b"]["skipped"], report["b"]["queryable"], report["b"]["failed"]) == (3, 1, 2, 1)
    assert report["b"]["failures"][0]["doc_id"] == "b:broken.md"


def test_human_summary_and_invalid_config(tmp_path):
    config = _config(tmp_path, {"a": _docs(tmp_path / "a", 2, "a")})
    out = _cli("ingest", "--config", str(config))
    assert out.returncode == 0
    assert "discovered" in out.stdout and "queryable" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text("sources:\n  - name: a\n    path: a\nchunking:\n  strategy: sentences\n")
    out = _cli("ingest", "--config", str(bad))
    assert out.returncode == 2
    assert "chunking.strategy" in out.stderr and str(bad) in out.stderr
    # A config with no source would ingest nothing and say nothing: it is refused, with the way out.
    empty = tmp_path / "empty.yaml"
    empty.write_text("sources: []\nembedding:\n  kind: hashing\n")
    out = _cli("ingest", "--config", str(empty))
    assert out.returncode == 2 and "no sources to ingest" in out.stderr and "--source NAME=PATH" in out.stderr


def test_unmounted_source_fails_the_run_and_keeps_the_index(tmp_path):
    root = _docs(tmp_path / "a", 3, "a")
    config = _config(tmp_path, {"a": root})
    assert _cli("ingest", "--config", str(config)).returncode == 0
    root.rename(tmp_path / "moved")
    out = _cli("ingest", "--config", str(config), "--json")
    assert out.returncode == 1
    report = json.loads(out.stdout)["sources"]["a"]
    assert "does not exist" in report["error"] and "nothing was deleted" in report["error"]
    import duckdb

    with duckdb.connect(str(tmp_path / "index.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM documents").fetchall()[0][0] == 3


def test_two_processes_writing_one_duckdb_file_both_succeed(tmp_path):
    """Both processes ingest both sources: DuckDB allows one writer per file, and two runs of one
    source would overwrite each other's staging, so they must wait for each other, not crash."""
    config = _config(tmp_path, {"a": _docs(tmp_path / "a", 20, "a"), "b": _docs(tmp_path / "b", 20, "b")})
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    env.pop("DAGSTER_HOME", None)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "rag_pipeline.cli", "ingest", "--config", str(config), "--source", f"{name}={tmp_path / name}", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        for name in ("a", "b")
    ]
    outputs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-1500:] for _, err in outputs]
    import duckdb

    with duckdb.connect(str(tmp_path / "index.duckdb"), read_only=True) as con:
        assert con.execute("SELECT count(DISTINCT doc_id) FROM documents").fetchall()[0][0] == 40


def test_dagster_definitions_validate_with_the_workspace():
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    out = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        capture_output=True, text=True, cwd=PROJECT_ROOT, env=env, timeout=300,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize(("assignment", "named"), [
    ("chunking.max_tokenz=80", "chunking.max_tokenz: Extra inputs are not permitted"),
    ("chunking.max_tokens=eighty", "chunking.max_tokens: Input should be a valid integer"),
    ("chunking.max_tokens", "expected section.key=value"),
])
def test_an_experiment_overlay_the_config_would_refuse_is_a_usage_error_naming_the_key(tmp_path, assignment, named):
    config = _config(tmp_path, {"a": _docs(tmp_path / "a", 1, "a")})
    out = _cli("experiment", "--config", str(config), "--set", assignment, "--hypothesis", "h")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert named in out.stderr and "Traceback" not in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "pipeline.yaml"], "nothing run, nothing created"


def test_calibrate_reports_the_grader_and_refuses_it_over_budget():
    out = _cli("calibrate", "--config", str(PROJECT_ROOT / "data" / "pipeline.yaml"))
    assert out.returncode == 1, out.stderr
    assert "| faithful | all |" in out.stdout and "false-pass" in out.stdout
    assert "may gate: NO — grader deterministic-checks: false-pass rate on faithful" in out.stdout


def test_a_second_ingest_of_unchanged_sources_runs_nothing_and_imports_no_dagster(tmp_path):
    config = _config(tmp_path, {"a": _docs(tmp_path / "a", 3, "a"), "b": _docs(tmp_path / "b", 2, "b")})
    assert _cli("ingest", "--config", str(config)).returncode == 0
    out = _cli("ingest", "--config", str(config), "--json")
    assert out.returncode == 0, out.stderr[-2000:]
    report = json.loads(out.stdout)["sources"]
    assert all("inputs unchanged" in report[s]["not_run"] for s in ("a", "b"))
    assert (report["a"]["unchanged"], report["a"]["queryable"], report["b"]["queryable"]) == (3, 3, 2)
    # Decided before Dagster is imported, and with no module that only a run, a search or another
    # command needs: the interpreter's own import log names none of them.
    traced = subprocess.run([sys.executable, "-X", "importtime", "-m", "rag_pipeline.cli", "ingest", "--config", str(config)],
                            capture_output=True, text=True, timeout=300)
    assert traced.returncode == 0 and "inputs unchanged" in traced.stdout
    imported = {line.split("|")[-1].strip() for line in traced.stderr.splitlines() if line.startswith("import time:")}
    assert not {"dagster", "numpy", "onnxruntime", "rag_pipeline.cli.evaluate", "rag_pipeline.core.evaluation",
                "rag_pipeline.core.storage.memory"} & imported, sorted(imported)
    (tmp_path / "a" / "a0.md").write_text("# Changed\n\nA changed page.\n")
    out = _cli("ingest", "--config", str(config), "--json")
    report = json.loads(out.stdout)["sources"]
    assert report["a"]["not_run"] is None and report["a"]["changed"] == 1


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    # `rag-pipeline search ... | head -1`: here the reader is gone before the first line.
    config = _config(tmp_path, {"a": _docs(tmp_path / "a", 3, "a")})
    assert _cli("ingest", "--config", str(config)).returncode == 0
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    env.pop("DAGSTER_HOME", None)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "rag_pipeline.cli", "search", "--config", str(config), "topic"],
                              stdout=write_end, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    finally:
        os.close(write_end)
    assert done.returncode == 141 and "Traceback" not in done.stderr and "Exception" not in done.stderr, done.stderr
