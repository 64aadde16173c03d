"""Reading commands only read: on an index whose file and folder nobody may write, `search`, `gate`,
`experiments`, `golden export-ragas`, `golden triage` and `golden import` work and create nothing;
on a missing index they say to ingest first (exit 2) and create nothing either."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml

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


def _tree(folder: Path) -> dict[str, tuple[int, int]]:
    """Every name under `folder` with its size and modification time."""
    return {p.relative_to(folder).as_posix(): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(folder.rglob("*"))}


def _set_writable(folder: Path, writable: bool) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        bits = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        path.chmod(mode | stat.S_IWUSR if writable else mode & ~bits)


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("read_only")
    write_tree(tmp / "kb", PAGES)
    (tmp / "golden.jsonl").write_text("".join(json.dumps(c) + "\n" for c in CASES))
    config = tmp / "config" / "pipeline.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump({
        "sources": [{"name": "kb", "path": str(tmp / "kb")}], "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp / "store" / "index.duckdb")}, "golden_set": str(tmp / "golden.jsonl"),
    }))
    env = {"RAG_PIPELINE_CACHE": str(tmp / "cache")}
    for command in (["eval", "--mode", "bm25"], ["promote"]):
        out = run_cli(*command, "--config", str(config), env=env)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return tmp, config, env


def test_reading_commands_work_on_an_index_nobody_may_write(evaluated, tmp_path):
    tmp, config, env = evaluated
    store = tmp / "store"
    before = _tree(store)
    _set_writable(store, False)
    try:
        commands = {
            "search": ["search", "how long do refunds take", "--json"],
            "gate": ["gate"],
            "experiments": ["experiments"],
            "export-ragas": ["golden", "export-ragas", "--out", str(tmp_path / "ragas.jsonl")],
            "triage": ["golden", "triage", "--out", str(tmp_path / "queue.jsonl")],
            "import": ["golden", "import", str(tmp / "golden.jsonl"), "--out", str(tmp_path / "imported.jsonl")],
        }
        results = {name: run_cli(*args, "--config", str(config), env=env, unprivileged=True)
                   for name, args in commands.items()}
    finally:
        _set_writable(store, True)
    for name, out in results.items():
        assert out.returncode == 0, (name, out.stdout[-2000:], out.stderr[-2000:])
    assert json.loads(results["search"].stdout)["final"][0]["doc_id"] == "kb:refunds.md"
    # The latest evaluation is the promoted baseline: gated against itself, it keeps the baseline.
    assert "candidate " in results["gate"].stdout and "keep baseline" in results["gate"].stdout
    assert (tmp_path / "ragas.jsonl").read_text().count("\n") == len(CASES)
    assert (tmp_path / "imported.jsonl").read_text().count("\n") == len(CASES)
    assert _tree(store) == before, "a reading command wrote into the store's folder"


@pytest.mark.parametrize("command", [["search", "refunds"], ["gate"], ["promote"], ["golden", "export-ragas", "--out", "x.jsonl"]])
def test_a_reading_command_on_a_missing_index_says_to_ingest_and_creates_nothing(tmp_path, command):
    # No --config: the file named by $RAG_PIPELINE_CONFIG, whose default store is ../.rag_pipeline.
    config = tmp_path / "config" / "pipeline.yaml"
    config.parent.mkdir()
    config.write_text(yaml.safe_dump({"sources": [], "embedding": {"kind": "hashing"}}))
    out = run_cli(*command, env={"RAG_PIPELINE_CONFIG": str(config), "RAG_PIPELINE_CACHE": str(tmp_path / "cache")},
                  cwd=tmp_path)
    default = tmp_path / ".rag_pipeline" / "index.duckdb"
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    assert f"no index at {default}: run `rag-pipeline ingest` first" in out.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["config"], os.listdir(tmp_path)
