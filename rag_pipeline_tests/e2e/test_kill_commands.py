"""SIGKILL `eval`, `promote` and `golden accept` at each of their points (faults.COMMAND_KILL_POINTS):
what is stored is whole (an evaluation with all its cases or none, a baseline or none, the golden
file old or new and never cut), and the same command run again converges with no manual step."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.faults import COMMAND_KILL_POINTS, KILL_AT_ENV
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.e2e.cli import run_cli

pytestmark = pytest.mark.slow

PAGES = {
    "refunds.md": "# Refunds\n\nRefunds are issued within fourteen days of the request.\n",
    "sso.md": "# Single sign-on\n\nConfigure SAML single sign-on with Okta.\n",
    "exports.md": "# Exports\n\nExports run nightly for every workspace.\n",
}
CASES = [
    {"id": "refunds", "question": "How long do refunds take?", "reference": "Fourteen days.", "gold_docs": ["kb:refunds.md"],
     "slice": "exact_fact", "split": "dev"},
    {"id": "sso", "question": "How do I set up Okta single sign-on?", "reference": "With SAML.", "gold_docs": ["kb:sso.md"],
     "slice": "exact_fact", "split": "validation"},
]
REVIEWED = {"item_id": "item00000001", "origin": "user_report", "question": "When do workspace exports run?",
            "evidence": {}, "filters": {"tenant": None, "roles": []}, "reference": "Nightly.", "gold_docs": ["kb:exports.md"],
            "slice": "exact_fact", "split": "dev", "answerable": True, "reviewer": "ana", "decision": "accept"}


def _write_config(folder: Path) -> Path:
    config = folder / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "kb", "path": str(folder / "kb")}], "embedding": {"kind": "hashing"},
        "storage": {"path": str(folder / "store" / "index.duckdb")}, "golden_set": str(folder / "golden.jsonl"),
        "retrieval": {"mode": "bm25"},
    }))
    return config


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """A source ingested and evaluated once (no baseline yet), copied for every kill point."""
    base = tmp_path_factory.mktemp("commands")
    write_tree(base / "kb", PAGES)
    (base / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    (base / "reviewed.jsonl").write_text(json.dumps(REVIEWED) + "\n")
    (base / "dagster_home").mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", base / "dagster_home" / "dagster.yaml")
    out = run_cli("eval", "--config", str(_write_config(base)), env=_env(base))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return base


def _env(folder: Path, point: str | None = None) -> dict[str, str]:
    env = {"DAGSTER_HOME": str(folder / "dagster_home"), "RAG_PIPELINE_CACHE": str(folder / "cache")}
    return {**env, KILL_AT_ENV: point} if point else env


def _copy(base: Path, to: Path) -> Path:
    shutil.copytree(base, to, dirs_exist_ok=True)
    return _write_config(to)


def _rows(folder: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(folder / "store" / "index.duckdb"), read_only=True) as con:
        return con.execute(sql).fetchall()


def _evaluations(folder: Path) -> dict[str, int]:
    """Stored evaluation id -> its stored cases."""
    return dict(_rows(folder, "SELECT r.eval_id, (SELECT count(*) FROM eval_cases c WHERE c.eval_id = r.eval_id) "
                              "FROM eval_runs r"))


def _no_run_left_started(folder: Path) -> None:
    with dg.DagsterInstance.from_config(str(folder / "dagster_home")) as instance:
        assert dg.DagsterRunStatus.STARTED not in [r.status for r in instance.get_runs()], "the killed run was left STARTED"
        assert not instance.event_log_storage.get_concurrency_run_ids(), "a run still holds a slot of pool store"


@pytest.mark.parametrize("point", COMMAND_KILL_POINTS["eval"])
def test_a_killed_eval_stores_a_whole_evaluation_or_none_and_the_next_converges(point, evaluated, tmp_path):
    config = _copy(evaluated, tmp_path)
    before = _evaluations(tmp_path)
    killed = run_cli("eval", "--config", str(config), env=_env(tmp_path, point))
    assert killed.returncode == -9, f"eval did not reach {point}: {killed.stdout[-2000:]}{killed.stderr[-2000:]}"
    after = _evaluations(tmp_path)
    assert set(after.values()) == {len(CASES)}, f"an evaluation was stored without all its cases: {after}"
    assert len(after) == len(before) + (1 if point == "eval:saved" else 0)
    again = run_cli("eval", "--config", str(config), env=_env(tmp_path), timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    final = _evaluations(tmp_path)
    assert len(final) == len(after) + 1 and set(final.values()) == {len(CASES)}
    _no_run_left_started(tmp_path)


@pytest.mark.parametrize("point", COMMAND_KILL_POINTS["promote"])
def test_a_killed_promote_is_done_or_not_and_the_next_finishes_it(point, evaluated, tmp_path):
    config = _copy(evaluated, tmp_path)
    [(eval_id,)] = _rows(tmp_path, "SELECT eval_id FROM eval_runs")
    killed = run_cli("promote", "--config", str(config), env=_env(tmp_path, point))
    assert killed.returncode == -9, f"promote did not reach {point}: {killed.stdout[-2000:]}{killed.stderr[-2000:]}"
    assert _rows(tmp_path, "SELECT eval_id FROM baselines") == ([(eval_id,)] if point == "promote:stored" else [])
    again = run_cli("promote", "--config", str(config), env=_env(tmp_path))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert _rows(tmp_path, "SELECT eval_id FROM baselines") == [(eval_id,)]  # promoted once, not twice
    if point == "promote:stored":
        assert "is already the promoted baseline" in again.stdout


@pytest.mark.parametrize("point", COMMAND_KILL_POINTS["golden accept"])
def test_a_killed_accept_leaves_the_old_revision_whole_and_the_next_converges(point, evaluated, tmp_path):
    config = _copy(evaluated, tmp_path)
    golden = tmp_path / "golden.jsonl"
    old = golden.read_bytes()
    killed = run_cli("golden", "accept", str(tmp_path / "reviewed.jsonl"), "--config", str(config),
                     env=_env(tmp_path, point))
    assert killed.returncode == -9, f"accept did not reach {point}: {killed.stdout[-2000:]}{killed.stderr[-2000:]}"
    assert golden.read_bytes() == old, "the golden file changed although the accept died before replacing it"
    snapshots = dict(_rows(tmp_path, "SELECT revision, content FROM golden_snapshots"))
    assert old.decode() in snapshots.values()
    again = run_cli("golden", "accept", str(tmp_path / "reviewed.jsonl"), "--config", str(config), env=_env(tmp_path))
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    text = golden.read_text()
    assert text.startswith(old.decode()) and '"tri-item00000001"' in text
    assert len(_rows(tmp_path, "SELECT * FROM golden_changes")) == 1  # the change recorded once
    assert not list(tmp_path.glob(".golden.jsonl.*.tmp")), "the killed writer's temporary file was left behind"
