"""Minimal golden sets with reported defaults; imports from RAGAS, DeepEval and hand-written shapes
against the sample corpus; the RAGAS export of a real evaluation."""

import csv
import hashlib
import json
from collections import Counter

import pytest

from rag_pipeline.config import AnswersConfig, ChunkingConfig, LifecycleConfig, RetrievalConfig, SourceConfig
from rag_pipeline.core.evaluation.answers.generators import make_generator
from rag_pipeline.core.evaluation.evaluate import evaluate
from rag_pipeline.core.evaluation.golden.cases import SPLITS, GoldenSet, GoldenSetError, default_split
from rag_pipeline.core.evaluation.golden.formats import import_cases, import_from_store, known_documents
from rag_pipeline.core.evaluation.golden.validation import load_golden_set
from rag_pipeline.core.evaluation.scoring.ragas_export import export_ragas
from rag_pipeline.core.retrieval.retriever import Retriever
from rag_pipeline_tests.conftest import write_tree

ON_CALL = "handbook:engineering/on-call.md"
REFUNDS = "helpcenter:refunds.html"
BENEFITS = "handbook:people/benefits.md"
MOON = "The moon is made of green cheese and the tides are its crumbs falling into the sea."


def _line_of(path, marker: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), start=1) if marker in line)


def _load_against(store, path, **extra):
    return load_golden_set(path, served_hashes=store.served.document_hashes() | extra.get("hashes", {}),
                           known_documents=store.ledger.document_history() | extra.get("history", {}))


# ---- minimal sets and their defaults -----------------------------------------------------------


def test_a_minimal_set_loads_with_its_defaults_reported_and_a_stable_split(tmp_path):
    lines = [json.dumps({"id": f"hx-{i:03d}", "question": f"question {i}?", "reference": f"answer {i}.",
                         "gold_docs": ["hb:leave.md"]}) for i in range(1, 36)]
    lines.append(json.dumps({"id": "hx-036", "question": "Who won in 1998?", "reference": "Not covered.", "answerable": False}))
    path = tmp_path / "golden.jsonl"
    path.write_text("\n".join(lines) + "\n")
    golden = load_golden_set(path)
    assert golden.defaults_applied == {"split": 36, "slice": 36}
    assert golden.summary().endswith("defaults applied: split (36 cases, from the id's hash: dev or validation, never "
                                     "holdout), slice (36 cases: general)")
    assert {c.slice for c in golden.cases} == {"general"} and golden.cases[-1].gold_docs == ()
    splits = {c.id: c.split for c in golden.cases}
    assert set(splits.values()) <= set(SPLITS)
    # Stable: the same on re-loading and whatever the order of the lines.
    assert {c.id: c.split for c in load_golden_set(path).cases} == splits
    (tmp_path / "reversed.jsonl").write_text("\n".join(reversed(lines)) + "\n")
    assert {c.id: c.split for c in load_golden_set(tmp_path / "reversed.jsonl").cases} == splits
    # The documented rule, and its 75 / 25 shares (a default is never holdout).
    n = int(hashlib.sha256(b"hx-001").hexdigest()[:8], 16) % 100
    assert splits["hx-001"] == ("dev" if n < 75 else "validation")
    shares = Counter(default_split(f"case-{i}") for i in range(3000))
    assert 0.72 < shares["dev"] / 3000 < 0.78 and shares["holdout"] == 0


def test_given_values_are_kept_and_invalid_ones_stay_errors(tmp_path):
    base = {"question": "q?", "reference": "r.", "gold_docs": ["hb:leave.md"]}
    path = tmp_path / "golden.jsonl"
    path.write_text(json.dumps(base | {"id": "a", "slice": "policy", "split": "holdout"}) + "\n"
                    + json.dumps(base | {"id": "b", "slice": "policy"}) + "\n")
    golden = load_golden_set(path)
    assert golden.defaults_applied == {"split": 1}
    assert [c.split for c in golden.cases][0] == "holdout"
    assert golden.summary().endswith("defaults applied: split (1 cases, from the id's hash: dev or validation, never holdout)")
    path.write_text(json.dumps(base | {"id": "a", "split": "train"}) + "\n" + json.dumps(base | {"id": "b", "slice": 3}) + "\n")
    with pytest.raises(GoldenSetError) as excinfo:
        load_golden_set(path)
    assert "line 1 (a): field 'split': 'train' is not one of dev, validation, holdout" in str(excinfo.value)
    assert "line 2 (b): field 'slice': must be a string" in str(excinfo.value)


# ---- imports -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chunks(sample_index):
    _, store, _ = sample_index
    return store.served.chunk_texts()


def _reworded(text: str) -> str:
    """The same passage with every eighth word changed: not contained anywhere, mostly overlapping."""
    words = text.split()
    return " ".join("zzz" if i % 8 == 7 else w for i, w in enumerate(words))


def _ragas_rows(chunks) -> list[dict]:
    return [
        {"user_input": "What does a primary on-call week pay?", "reference": "A standby allowance of €250.",
         "reference_contexts": [chunks[ON_CALL][3]], "response": "€250", "synthesizer_name": "single_hop"},
        # What the system retrieved is its output: only the reference contexts are gold.
        {"question": "Can I get a refund after three weeks?", "ground_truth": "No, only within 14 days.",
         "reference_contexts": [_reworded(chunks[REFUNDS][1])], "retrieved_contexts": [chunks[BENEFITS][1]]},
        {"question": "What does the company pay towards health insurance?",
         "ground_truths": ["€100 per month in the Netherlands.", "All of it in Ireland."],
         "reference_contexts": [chunks[BENEFITS][1], "Lorem ipsum dolor sit amet, consectetur adipiscing elit."]},
        {"question": "What is the moon made of?", "ground_truth": "Green cheese.", "reference_contexts": [MOON]},
        {"question": "Who founded the company?", "ground_truth": "Nobody knows."},
        # Retrieved contexts only (RAGAS's old `contexts` column, and `retrieved_contexts`): no labels.
        {"question": "Is there a gym allowance?", "ground_truth": "No.", "contexts": [chunks[BENEFITS][1]]},
        {"user_input": "Who is on call this week?", "reference": "See the rota.", "retrieved_contexts": [chunks[ON_CALL][3]]},
    ]


@pytest.mark.parametrize("kind", ["jsonl", "csv"])
def test_ragas_rows_map_their_contexts_to_documents(tmp_path, sample_index, chunks, kind):
    _, store, _ = sample_index
    rows = _ragas_rows(chunks)
    path = tmp_path / f"ragas_set.{kind}"
    if kind == "jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        columns = ["question", "user_input", "reference", "ground_truth", "ground_truths", "reference_contexts",
                   "contexts", "retrieved_contexts", "response", "synthesizer_name"]
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=columns)
            writer.writeheader()
            for i, row in enumerate(rows):
                # Lists as pandas writes them (Python literals) and as JSON.
                encode = repr if i % 2 else json.dumps
                writer.writerow({k: encode(v) if isinstance(v, list) else v for k, v in row.items()})
    result = import_from_store(path, "auto", store)
    assert result.shape == "ragas"
    line = {i: _line_of(path, r.get("user_input") or r["question"]) for i, r in enumerate(rows)}
    assert [c["gold_docs"] for c in result.cases] == [[ON_CALL], [REFUNDS], [BENEFITS]]
    hows = {m.doc_id: m.how for m in result.mapped_by}
    assert hows[ON_CALL] == hows[BENEFITS] == "context text found in its chunks"
    assert hows[REFUNDS].startswith("word-trigram overlap")
    assert [(u.line, u.reference) for u in result.unmapped[:2]] == [
        (line[2], "Lorem ipsum dolor sit amet, consectetur adipiscing elit."), (line[3], MOON[:77] + "...")]
    assert all("no served chunk" in u.reason for u in result.unmapped[:2])
    assert [(u.line, u.reference) for u in result.unmapped[2:]] == [
        (line[5], "contexts (1 text(s))"), (line[6], "retrieved_contexts (1 text(s))")]
    assert all("retrieved contexts are the tested system's output, not labels" in u.reason for u in result.unmapped[2:])
    assert [(x.line, x.reason) for x in result.left_out] == [
        (line[3], "none of its 1 gold reference(s) could be mapped"),
        (line[4], "answerable, but it names no gold document or context"),
        (line[5], "answerable, but it names no gold document or context (only contexts, not labels)"),
        (line[6], "answerable, but it names no gold document or context (only retrieved_contexts, not labels)"),
    ]
    first = result.cases[0]
    assert first["slice"] == "single_hop" and first["reference"] == "A standby allowance of €250."
    assert first["provenance"] == (f"imported from {path.name} line {line[0]} (shape ragas, "
                                   "reference from reference, gold from reference_contexts)")
    assert result.cases[2]["reference"] == "€100 per month in the Netherlands.\nAll of it in Ireland."
    assert "imported 3 of 7 records" in result.summary() and "4 unmapped" in result.summary()
    golden = _load_against(store, result.write(tmp_path / "golden.jsonl"))
    assert len(golden.cases) == 3 and not golden.stale
    assert golden.defaults_applied == {"split": 3, "slice": 2}


def test_deepeval_goldens_map_source_files_and_contexts(tmp_path, sample_index, chunks):
    _, store, _ = sample_index
    goldens = [
        {"input": "How much is the on-call standby allowance?", "expected_output": "€250 a week.",
         "context": [chunks[ON_CALL][3]], "source_file": "on-call.md"},
        {"input": "How long is the refund window?", "expected_output": "14 days.",
         "source_file": "/home/someone/data/corpus/helpcenter/refunds.html"},
        # What the system retrieved is no label: this record has none, the last one its `context`.
        {"input": "Is supplementary insurance paid?", "expected_output": "€100 a month.",
         "retrieval_context": [chunks[BENEFITS][1]]},
        {"input": "A question nobody answered", "context": [chunks[ON_CALL][1]]},
        {"input": "What is in the roadmap?", "expected_output": "Secrets.", "source_file": "roadmap.pdf"},
        {"input": "Is health insurance paid?", "expected_output": "€100 a month.", "context": [chunks[BENEFITS][1]],
         "retrieval_context": [chunks[ON_CALL][1]]},
    ]
    path = tmp_path / "deepeval.json"
    path.write_text(json.dumps({"goldens": goldens}, indent=2))
    result = import_from_store(path, "auto", store)
    assert result.shape == "deepeval"
    line = {i: _line_of(path, g["input"]) - 1 for i, g in enumerate(goldens)}  # the line of the record's "{"
    assert [c["gold_docs"] for c in result.cases] == [[ON_CALL], [REFUNDS], [BENEFITS]]
    assert [m.how for m in result.mapped_by] == ["unique file name", "context text found in its chunks",
                                                  "path ending in its relative path", "context text found in its chunks"]
    assert result.cases[2]["provenance"].endswith("gold from context)")
    assert result.cases[0]["provenance"].startswith(f"imported from deepeval.json line {line[0]} (shape deepeval")
    assert result.unmapped == [
        (line[2], "retrieval_context (1 text(s))", "ignored: retrieved contexts are the tested system's output, not "
                                                   "labels; gold comes from source_file / context or document-id / "
                                                   "file-name fields"),
        (line[4], "roadmap.pdf", "no document named roadmap.pdf")]
    assert [(x.line, x.reason) for x in result.left_out] == [
        (line[2], "answerable, but it names no gold document or context (only retrieval_context, not labels)"),
        (line[3], "no reference answer (expected_output); only an unanswerable case (answerable: false) may leave it out"),
        (line[4], "none of its 1 gold reference(s) could be mapped")]
    assert len(_load_against(store, result.write(tmp_path / "golden.jsonl")).cases) == 3


@pytest.fixture(scope="module")
def faq_store(tmp_path_factory, sample_index):
    """A second source with two files named faq.md (the sample corpus has no two files of one name)."""
    from rag_pipeline.core.ingestion.stages import ingest_source
    from rag_pipeline.core.storage import duckdb_store

    _, _, embedder = sample_index
    folder = tmp_path_factory.mktemp("faq")
    page = "# FAQ\n\nQuestions the {} team hears every week, with the answers it gives to each of them.\n"
    root = write_tree(folder / "kb", {"team-a/faq.md": page.format("A"), "team-b/faq.md": page.format("B")})
    store = duckdb_store(folder / "index.duckdb")
    ingest_source(SourceConfig(name="kb", path=root), store, embedder, ChunkingConfig(), LifecycleConfig(), "faq")
    return store


def test_handwritten_ids_and_file_names_map_and_name_what_they_cannot(tmp_path, sample_index, faq_store):
    _, store, _ = sample_index
    documents = known_documents(store) | known_documents(faq_store)
    assert {"kb:team-a/faq.md", "kb:team-b/faq.md", ON_CALL} <= set(documents)
    base = {"question": "q {}?", "reference": "r."}
    records = [
        {"id": "hw-1", "gold_pids": ["engineering/on-call.md"]},
        {"id": "hw-2", "expected_document_ids": [REFUNDS, f"{REFUNDS}#2"]},
        {"id": "hw-3", "source_doc": "benefits.md", "slice": "people", "split": "holdout", "weight": 2},
        {"id": "hw-4", "source_docs": ["faq.md", "missing.md", "people/benefits.md"]},
        {"id": "hw-5", "file": "faq.md"},
        {"id": "hw-6", "answerable": False, "slice": "unanswerable"},
        {"id": "hw-1", "gold_pids": ["engineering/on-call.md"]},
    ]
    path = tmp_path / "handwritten.jsonl"
    path.write_text("".join(json.dumps({k: v.format(i) if isinstance(v, str) else v for k, v in base.items()} | r) + "\n"
                            for i, r in enumerate(records)))
    result = import_cases(path, "handwritten", documents, source_prefix="handbook")
    assert {c["id"]: c["gold_docs"] for c in result.cases} == {
        "hw-1": [ON_CALL], "hw-2": [REFUNDS], "hw-3": [BENEFITS], "hw-4": [BENEFITS], "hw-6": []}
    assert [m.how for m in result.mapped_by] == [
        "document id with source prefix 'handbook'", "document id", "chunk id to its document", "unique file name",
        "relative path"]
    assert result.unmapped == [
        (4, "faq.md", "ambiguous: 2 documents named faq.md (kb:team-a/faq.md, kb:team-b/faq.md)"),
        (4, "missing.md", "no document named missing.md"),
        (5, "faq.md", "ambiguous: 2 documents named faq.md (kb:team-a/faq.md, kb:team-b/faq.md)"),
    ]
    assert result.left_out == [(5, "hw-5", "none of its 1 gold reference(s) could be mapped"),
                               (7, "hw-1", "duplicate id (first on line 1)")]
    assert any(line.startswith("line 4: 'missing.md': no document named") for line in result.problems())
    out = result.write(tmp_path / "golden.jsonl")
    golden = _load_against(store, out, hashes=faq_store.served.document_hashes(), history=faq_store.ledger.document_history())
    by_id = {c.id: c for c in golden.cases}
    assert by_id["hw-3"].split == "holdout" and by_id["hw-3"].weight == 2 and not by_id["hw-6"].answerable
    assert by_id["hw-1"].provenance == "imported from handwritten.jsonl line 1 (shape handwritten, reference from reference)"
    assert golden.defaults_applied == {"split": 4, "slice": 3}


def test_an_unknown_shape_and_an_undecidable_one_are_refused(tmp_path, sample_index):
    _, store, _ = sample_index
    path = tmp_path / "mixed.jsonl"
    path.write_text(json.dumps({"user_input": "q", "expected_output": "r"}) + "\n")
    with pytest.raises(ValueError, match="cannot tell the shape: ragas keys"):
        import_from_store(path, "auto", store)
    with pytest.raises(ValueError, match="unknown shape 'promptfoo'"):
        import_from_store(path, "promptfoo", store)


# ---- export ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evaluated(sample_index):
    config, store, embedder = sample_index
    golden = load_golden_set(config.golden_set, served_hashes=store.served.document_hashes())
    result = evaluate(golden, Retriever(store, embedder, RetrievalConfig(mode="bm25")), "bm25", "fp", {})
    return golden, result


def _read(path):
    if path.suffix == ".csv":
        with path.open(newline="") as handle:
            return [{k: json.loads(v) if k in ("contexts", "retrieved_contexts") else v for k, v in row.items()}
                    for row in csv.DictReader(handle)]
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.parametrize("name", ["ragas.jsonl", "ragas.csv"])
def test_ragas_export_of_a_real_evaluation(tmp_path, sample_index, evaluated, name):
    _, store, _ = sample_index
    golden, result = evaluated
    export = export_ragas(result, golden, tmp_path / name, store.served.chunk_text_by_id, context_k=5,
                          include_holdout=True)
    rows = _read(tmp_path / name)
    assert len(rows) == export.rows == len(result.cases) == len(golden.cases)
    assert "answers: none (the evaluation stored no answer: answers.generator none" in export.summary()
    for row, case_result in zip(rows, result.cases):
        case = case_result.case
        assert row["case_id"] == case.id and row["question"] == row["user_input"] == case.question
        assert row["ground_truth"] == row["reference"] == case.reference
        assert row["answer"] == row["response"] == ""
        hits = case_result.trace["final"][:5]
        assert row["contexts"] == row["retrieved_contexts"] and len(row["contexts"]) == len(hits)
        if hits:
            assert row["contexts"][0] == store.served.chunk_text_by_id([hits[0]["chunk_id"]])[hits[0]["chunk_id"]]
    assert sum(1 for r in rows if r["contexts"]) == sum(1 for c in result.cases if c.trace["final"])
    # A stored evaluation: traces as stored (JSON), no answers; the same rows.
    record = {"revision": result.revision, "traces": {c.case.id: json.loads(json.dumps(c.trace)) for c in result.cases}}
    export_ragas(record, golden, tmp_path / f"stored-{name}", store.served.chunk_text_by_id, include_holdout=True)
    assert _read(tmp_path / f"stored-{name}") == rows
    # By default holdout cases stay unseen: left out and counted.
    holdout = {c.id for c in golden.cases if c.split == "holdout"}
    assert holdout, "the sample golden set has holdout cases"
    export = export_ragas(result, golden, tmp_path / f"shown-{name}", store.served.chunk_text_by_id)
    assert [r["case_id"] for r in _read(tmp_path / f"shown-{name}")] == [r["case_id"] for r in rows if r["case_id"] not in holdout]
    assert f"{len(holdout)} holdout case(s) left out" in export.summary()
    with pytest.raises(ValueError, match="golden revision"):
        export_ragas(record | {"revision": "000000000000"}, golden, tmp_path / "x.jsonl", store.served.chunk_text_by_id)


def test_ragas_export_carries_the_generated_answers(tmp_path, sample_index, evaluated):
    _, store, embedder = sample_index
    golden, _ = evaluated
    subset = GoldenSet(golden.path, golden.revision, golden.cases[:8], golden.stale)
    answers = AnswersConfig(generator="extractive")
    result = evaluate(subset, Retriever(store, embedder, RetrievalConfig(mode="bm25")), "bm25", "fp", {},
                      generator_for=lambda t: make_generator(answers, t))
    export = export_ragas(result, subset, tmp_path / "answered.jsonl", store.served.chunk_text_by_id)
    rows = _read(tmp_path / "answered.jsonl")
    assert [r["answer"] for r in rows] == [c.answer["text"] for c in result.cases if c.case.split != "holdout"]
    assert export.answers == sum(1 for r in rows if r["answer"]) > 0


# ---- strict values, shared file names, nothing written when invalid ---------------------------

DOCS = {ON_CALL: {"source_id": "handbook", "rel_path": "engineering/on-call.md", "indexed": True},
        "extra:on-call.md": {"source_id": "extra", "rel_path": "on-call.md", "indexed": True},
        REFUNDS: {"source_id": "helpcenter", "rel_path": "refunds.html", "indexed": True}}


def _handwritten(tmp_path, records, name="handwritten.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"question": f"question {i}?", "reference": "r."} | r) + "\n"
                            for i, r in enumerate(records)))
    return path


def test_answerable_is_parsed_strictly_on_import(tmp_path):
    values = [False, "false", "No", " YES ", "true", "maybe", 0]
    path = _handwritten(tmp_path, [{"id": f"a-{i}", "answerable": v, "gold_docs": [REFUNDS] if parsed else []}
                                   for i, (v, parsed) in enumerate(zip(values, [0, 0, 0, 1, 1, 1, 0]))])
    result = import_cases(path, "handwritten", DOCS)
    assert {c["id"]: c["answerable"] for c in result.cases} == {
        "a-0": False, "a-1": False, "a-2": False, "a-3": True, "a-4": True}
    assert [(x.line, x.case, x.reason) for x in result.left_out] == [
        (6, "a-5", 'field \'answerable\': "maybe" is not a boolean; write true or false (or the strings "true", '
                   '"false", "yes", "no")'),
        (7, "a-6", 'field \'answerable\': 0 is not a boolean; write true or false (or the strings "true", "false", '
                   '"yes", "no")')]
    assert len(load_golden_set(result.write(tmp_path / "golden.jsonl")).cases) == 5


def test_a_bare_file_name_two_documents_share_is_ambiguous(tmp_path):
    path = _handwritten(tmp_path, [{"id": "b-1", "source_doc": "on-call.md"}, {"id": "b-2", "source_doc": "/on-call.md"},
                                   {"id": "b-3", "source_doc": "engineering/on-call.md"},
                                   {"id": "b-4", "source_doc": "extra:on-call.md"},
                                   {"id": "b-5", "source_doc": "docs/extra/on-call.md"}])
    result = import_cases(path, "handwritten", DOCS)
    ambiguous = "ambiguous: 2 documents named on-call.md (extra:on-call.md, handbook:engineering/on-call.md)"
    assert result.unmapped == [(1, "on-call.md", ambiguous), (2, "/on-call.md", ambiguous)]
    # A folder part or a source prefix still matches exactly.
    assert {c["id"]: c["gold_docs"] for c in result.cases} == {
        "b-3": [ON_CALL], "b-4": ["extra:on-call.md"], "b-5": ["extra:on-call.md"]}
    assert [m.how for m in result.mapped_by] == ["relative path", "document id", "path ending in its relative path"]


def test_an_invalid_import_writes_nothing_and_names_the_input_line(tmp_path):
    records = [{"id": "c-1", "gold_docs": [REFUNDS]}, {"id": "c-2"}, {"id": "c-3", "gold_docs": [REFUNDS]},
               {"id": "c-4", "gold_docs": [REFUNDS]}, {"id": "c-5", "gold_docs": [REFUNDS], "weight": "heavy"}]
    path = _handwritten(tmp_path, records)
    result = import_cases(path, "handwritten", DOCS)
    assert [c["id"] for c in result.cases] == ["c-1", "c-3", "c-4", "c-5"], "c-2 names no gold document"
    out = tmp_path / "golden.jsonl"
    with pytest.raises(GoldenSetError) as excinfo:
        result.write(out)
    message = str(excinfo.value)
    assert f"nothing written to {out}" in message
    assert "handwritten.jsonl line 5 (c-5): field 'weight': must be a finite positive number" in message
    assert not out.exists() and not list(tmp_path.glob(".golden.jsonl*")), "no output, no temporary file"
    # Fixed, the same import writes a file the loader reads.
    records[-1]["weight"] = 2
    fixed = import_cases(_handwritten(tmp_path, records), "handwritten", DOCS)
    assert [c.weight for c in load_golden_set(fixed.write(out)).cases] == [1, 1, 1, 2]


def test_an_import_from_a_store_checks_ids_no_source_ever_held(tmp_path, sample_index):
    _, store, _ = sample_index
    path = _handwritten(tmp_path, [{"id": "d-1", "gold_docs": [REFUNDS]},
                                   {"id": "d-2", "gold_docs": [REFUNDS], "forbidden_docs": ["handbook:nope.md"]}])
    result = import_from_store(path, "handwritten", store)
    out = tmp_path / "golden.jsonl"
    with pytest.raises(GoldenSetError, match=r"handwritten.jsonl line 2 \(d-2\): field 'forbidden_docs': "
                                             r"'handbook:nope.md' is not a document any source has ever held"):
        result.write(out)
    assert not out.exists()
