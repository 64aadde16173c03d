"""Imports keep the team's identity: ids, slices and splits written in RAGAS `metadata` or DeepEval
`additional_metadata` survive, with the summary saying which fields came from where."""

import csv
import json

from rag_pipeline.core.evaluation.golden.formats import import_cases
from rag_pipeline.core.evaluation.golden.validation import load_golden_set

REFUNDS = "helpcenter:refunds.html"
ON_CALL = "handbook:engineering/on-call.md"
DOCS = {ON_CALL: {"source_id": "handbook", "rel_path": "engineering/on-call.md", "indexed": True},
        REFUNDS: {"source_id": "helpcenter", "rel_path": "refunds.html", "indexed": True}}


def _ragas_rows() -> list[dict]:
    return [
        # The team's case, exported to RAGAS with its identity in `metadata`.
        {"user_input": "How long do refunds take?", "reference": "14 days.", "reference_contexts": [],
         "synthesizer_name": "single_hop_specific_query_synthesizer", "source_doc": "refunds.html",
         "metadata": {"id": "refund-window", "slice": "exact_fact", "split": "holdout"}},
        # The top level wins over metadata; a slice in metadata wins over the synthesizer.
        {"user_input": "What does a primary on-call week pay?", "reference": "€250.", "id": "on-call-pay",
         "synthesizer_name": "multi_hop_abstract_query_synthesizer", "source_doc": "on-call.md",
         "metadata": {"id": "ignored", "slice": "paraphrase"}},
        # Nothing of the team's: the fallbacks of before (a generated id, the synthesizer as slice).
        {"user_input": "Who pays the standby allowance?", "reference": "Payroll, monthly.",
         "synthesizer_name": "single_hop_specific_query_synthesizer", "source_doc": "on-call.md"},
    ]


def test_ragas_metadata_keeps_the_teams_ids_slices_and_splits(tmp_path):
    path = tmp_path / "ragas.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _ragas_rows()))
    result = import_cases(path, "auto", DOCS)
    assert [(c["id"], c.get("slice"), c.get("split")) for c in result.cases] == [
        ("refund-window", "exact_fact", "holdout"), ("on-call-pay", "paraphrase", None),
        (result.cases[2]["id"], "single_hop_specific_query_synthesizer", None)]
    assert result.cases[2]["id"].startswith("ragas-")
    summary = result.summary()
    assert ("id: 1 generated from the file name and question, 1 from field id, 1 from metadata.id | slice: 2 from "
            "metadata.slice, 1 from field synthesizer_name | split: 2 left to the loader's default, 1 from "
            "metadata.split" in summary), summary
    golden = load_golden_set(result.write(tmp_path / "golden.jsonl"))
    assert {c.id: (c.slice, c.split) for c in golden.cases}["refund-window"] == ("exact_fact", "holdout")


def test_deepeval_additional_metadata_keeps_them_in_json_and_csv(tmp_path):
    goldens = [{"input": "How long do refunds take?", "expected_output": "14 days.", "source_file": "refunds.html",
                "additional_metadata": {"id": "refund-window", "slice": "exact_fact", "split": "validation"}},
               {"input": "Who pays the standby allowance?", "expected_output": "Payroll.", "source_file": "on-call.md"}]
    path = tmp_path / "deepeval.json"
    path.write_text(json.dumps({"goldens": goldens}))
    as_json = import_cases(path, "auto", DOCS)
    with open(tmp_path / "deepeval.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, ["input", "expected_output", "source_file", "additional_metadata"])
        writer.writeheader()
        writer.writerows({**g, "additional_metadata": json.dumps(g.get("additional_metadata", {}))} for g in goldens)
    as_csv = import_cases(tmp_path / "deepeval.csv", "deepeval", DOCS)
    for result in (as_json, as_csv):
        first, second = result.cases
        assert (first["id"], first["slice"], first["split"]) == ("refund-window", "exact_fact", "validation")
        assert "slice" not in second and "split" not in second  # the loader's defaults, as before
        assert ("slice: 1 from additional_metadata.slice, 1 left to the loader's default" in result.summary())


def test_a_ragas_01_testsets_document_metadata_never_names_a_case(tmp_path):
    # RAGAS 0.1 keeps a list of the source documents' metadata: a document's `id` is not the case's.
    path = tmp_path / "testset.jsonl"
    path.write_text(json.dumps({"question": "How long do refunds take?", "contexts": [], "ground_truth": "14 days.",
                                "evolution_type": "simple", "episode_done": True,
                                "metadata": [{"source": "refunds.html", "id": "doc-17", "slice": "pages"}]}) + "\n")
    result = import_cases(path, "auto", DOCS)
    (case,) = result.cases
    assert case["id"].startswith("testset-") and case["slice"] == "simple" and case["gold_docs"] == [REFUNDS]
    assert "slice: 1 from field evolution_type" in result.summary()
