"""Two source partitions materialized at once by two Dagster processes, into one DuckDB file."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb
import pytest
import yaml

from rag_pipeline.config import PROJECT_ROOT

pytestmark = pytest.mark.slow


def test_two_partition_runs_at_once_share_one_duckdb_file(tmp_path):
    sources = {}
    for name in ("alpha", "beta"):
        root = tmp_path / name
        root.mkdir()
        for i in range(8):
            (root / f"{name}{i}.md").write_text(f"# {name} page {i}\n\nDetails about {name} topic number {i}.\n")
        sources[name] = root
    config = tmp_path / "pipeline.yaml"
    config.write_text(yaml.safe_dump({
        "sources": [{"name": n, "path": str(p)} for n, p in sources.items()],
        "embedding": {"kind": "hashing"},
        "storage": {"path": str(tmp_path / "index.duckdb")},
    }))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(PROJECT_ROOT / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(home), "RAG_PIPELINE_CONFIG": str(config), "HF_HUB_OFFLINE": "1", "DO_NOT_TRACK": "1"}
    os.environ["DAGSTER_HOME"] = str(home)
    try:
        with dg.DagsterInstance.get() as instance:
            instance.add_dynamic_partitions("sources", list(sources))
    finally:
        del os.environ["DAGSTER_HOME"]
    dagster = str(Path(sys.executable).parent / "dagster")
    procs = [
        subprocess.Popen(
            [dagster, "asset", "materialize", "-m", "rag_pipeline.definitions", "--select", "group:ingestion", "--partition", name],
            cwd=PROJECT_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for name in sources
    ]
    outputs = [p.communicate(timeout=600)[0] for p in procs]
    for proc, output in zip(procs, outputs):
        assert proc.returncode == 0, output[-3000:]
        # One process per run: the chain's steps share it (no process per step).
        assert "Executing steps in process" in output
    with duckdb.connect(str(tmp_path / "index.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT source_id, count(*) FROM documents GROUP BY 1 ORDER BY 1").fetchall()
    assert rows == [("alpha", 8), ("beta", 8)]
