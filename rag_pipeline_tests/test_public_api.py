"""The public surface (rag_pipeline.api) is pinned: a name leaves or joins it only by editing the
list below on purpose; benchmarks take what it offers from it; it works without Dagster."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import rag_pipeline.api as api

REPO = Path(__file__).resolve().parent.parent
PINNED = {
    "ChunkingConfig", "DomainError", "Embedder", "EmbeddingConfig", "GatePolicy", "Hit", "InputError",
    "LifecycleConfig", "PipelineConfig", "Retriever", "RetrievalConfig", "SearchFilters", "SourceConfig", "Store",
    "UnavailableError", "compare", "coverage_gaps_day", "drift_day", "duckdb_store", "evaluate", "import_beir", "ingest_source",
    "load_config", "load_golden_set", "load_policy", "make_embedder", "open_store", "render_log", "run_experiment",
    "sample_day",
}


def test_the_surface_is_the_pinned_one_and_every_name_resolves():
    assert set(api.__all__) == PINNED, "a change to the public surface: update PINNED and say so in the changelog"
    assert len(api.__all__) == len(PINNED)  # no name twice
    missing = [name for name in api.__all__ if not hasattr(api, name)]
    assert missing == []


def test_the_surface_imports_no_dagster():
    code = "import sys, rag_pipeline.api; print(sorted(m for m in sys.modules if m.split('.')[0] == 'dagster'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert done.stdout.strip() == "[]"


def test_benchmarks_take_the_public_names_from_the_surface():
    offenders = []
    for script in sorted((REPO / "benchmarks").glob("*.py")):
        for node in ast.walk(ast.parse(script.read_text(), filename=str(script))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("rag_pipeline.core"):
                offenders += [f"{script.name}:{node.lineno} {alias.name} from {node.module}"
                              for alias in node.names if alias.name in PINNED]
    assert offenders == [], "import these from rag_pipeline.api: " + "; ".join(offenders)
