"""A real one-component experiment on a small corpus: logged, gated, and cheap on a chunker switch."""

import json

from rag_pipeline.core.embedding.embedder import make_embedder
from rag_pipeline.core.evaluation.experiments import render_log, run_experiment
from rag_pipeline.core.evaluation.gating.policy import GatePolicy
from rag_pipeline.core.evaluation.gating.significance import SignificanceConfig
from rag_pipeline.core.storage import duckdb_store

PAGE = """# Travel policy

## Booking

Book flights through the travel portal at least fourteen days ahead. Economy class applies to flights under six hours.

## Meals

The daily meal allowance is fifty-five euros when travelling abroad and forty euros at home.

## Hotels

Hotels up to one hundred and sixty euros a night are approved without a manager's sign-off.
"""


def test_chunker_experiment_is_logged_and_reuses_the_cache(tmp_path, write_config):
    root = tmp_path / "kb"
    root.mkdir()
    (root / "travel.md").write_text(PAGE)
    (root / "other.md").write_text("# Security\n\nUse a password manager and turn on two-factor login.\n")
    golden = tmp_path / "golden.jsonl"
    cases = [
        {"id": "m", "question": "meal money abroad", "reference": "55 EUR", "gold_docs": ["kb:travel.md"],
         "gold_spans": [{"doc_id": "kb:travel.md", "heading_path": ["Travel policy", "Meals"]}], "slice": "s", "split": "dev"},
        {"id": "p", "question": "password manager", "reference": "yes", "gold_docs": ["kb:other.md"], "slice": "s", "split": "dev"},
    ]
    golden.write_text("\n".join(json.dumps(c) for c in cases) + "\n")
    base = write_config({"kb": root}, golden_set=str(golden))
    fixed = base.model_copy(update={"chunking": base.chunking.model_copy(update={"strategy": "fixed", "max_tokens": 20, "overlap_tokens": 5})})
    store = duckdb_store(tmp_path / "experiments.duckdb")
    policy = GatePolicy(significance=SignificanceConfig(samples=200))
    embedder_for = lambda c: make_embedder(c.embedding)  # noqa: E731

    row, gate, base_eval, cand_eval = run_experiment(base, fixed, store, golden, policy, "fixed windows lose headings", embedder_for)
    assert row["component"] == "chunking" and not row["bundle"]
    assert row["config_diff"]["chunking.strategy"] == ["sections", "fixed"]
    assert base_eval.revision == cand_eval.revision
    assert set(row["deltas"]) == set(policy.headline_metrics)
    assert row["decision"] == gate.decision
    with store.db.connection() as con:
        cached = con.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0]

    # Switching back and forth again embeds nothing new: every chunk text is already cached.
    run_experiment(fixed, base, store, golden, policy, "and back", embedder_for)
    with store.db.connection() as con:
        assert con.execute("SELECT count(*) FROM embedding_cache").fetchall()[0][0] == cached
    log = store.records.experiment_log()
    assert [r["hypothesis"] for r in log] == ["fixed windows lose headings", "and back"]
    table = render_log(log)
    assert "chunking.strategy: sections → fixed" in table and "fixed windows lose headings" in table
