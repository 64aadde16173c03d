from rag_pipeline.config import ChunkingConfig
from rag_pipeline.core.ingestion.chunking import chunk_document
from rag_pipeline.core.models import Element, ParsedDocument
from rag_pipeline.core.retrieval.lexical import count_tokens

TABLE_HTML = "<table><tr><th>Plan</th><th>Seats</th></tr>" + "".join(
    f"<tr><td>Plan{i}</td><td>{i * 5}</td></tr>" for i in range(40)
) + "</table>"


def _doc(*elements: tuple[str, str, tuple[str, ...]], table_html: str | None = None) -> ParsedDocument:
    els = tuple(
        Element("s:d.md", i, cat, text, path, table_html=table_html if cat == "Table" else None,
                line_start=i + 1, line_end=i + 1)
        for i, (cat, text, path) in enumerate(elements)
    )
    return ParsedDocument("s:d.md", "hash", "test", "Handbook", els)


def _words(n: int, word: str = "alpha") -> str:
    return " ".join([word] * n)


def test_sections_with_breadcrumbs_and_thin_merge():
    doc = _doc(
        ("Title", "Handbook", ("Handbook",)),
        ("Title", "Leave", ("Handbook", "Leave")),
        ("NarrativeText", _words(60), ("Handbook", "Leave")),
        ("Title", "Sick", ("Handbook", "Sick")),
        ("NarrativeText", _words(60, "beta"), ("Handbook", "Sick")),
    )
    chunks = chunk_document(doc, "s", ChunkingConfig(min_tokens=5))
    # The bare "Handbook" heading is thin: it merges into the Leave section.
    assert [c.heading_path for c in chunks] == [("Handbook", "Leave"), ("Handbook", "Sick")]
    assert chunks[0].embed_text.startswith("Handbook > Leave\n")
    assert chunks[0].text.startswith("Handbook\nLeave\n")
    assert [c.chunk_id for c in chunks] == ["s:d.md#0", "s:d.md#1"]
    assert (chunks[1].line_start, chunks[1].line_end) == (4, 5)


def test_options_change_the_output():
    doc = _doc(("Title", "Leave", ("Leave",)), ("NarrativeText", "short note", ("Leave",)),
               ("Title", "Sick", ("Sick",)), ("NarrativeText", _words(50), ("Sick",)))
    no_merge = chunk_document(doc, "s", ChunkingConfig(merge_thin=False, breadcrumbs=False))
    assert len(no_merge) == 2 and not no_merge[0].embed_text.startswith("Handbook")
    merged = chunk_document(doc, "s", ChunkingConfig(merge_thin=True, min_tokens=10))
    assert len(merged) == 1


def test_long_table_splits_by_rows_and_every_piece_keeps_the_header():
    doc = _doc(("Title", "Plans", ("Plans",)), ("Table", "flattened", ("Plans",)), table_html=TABLE_HTML)
    chunks = chunk_document(doc, "s", ChunkingConfig(max_tokens=40, overlap_tokens=0, min_tokens=0))
    table_chunks = [c for c in chunks if "Plan1 " in c.text or "| Plan3" in c.text or "Seats" in c.text]
    assert len(table_chunks) > 1
    assert all("| Plan | Seats |" in c.text for c in table_chunks)
    assert all(c.token_count <= 40 + 10 for c in chunks)  # 10: breadcrumbs ride on top of the body


def test_fixed_windows_overlap():
    doc = _doc(("NarrativeText", " ".join(f"w{i}" for i in range(250)), ()))
    chunks = chunk_document(doc, "s", ChunkingConfig(strategy="fixed", max_tokens=100, overlap_tokens=20, breadcrumbs=False))
    assert [count_tokens(c.text) for c in chunks] == [100, 100, 90]
    assert chunks[1].text.split()[0] == "w80"


def test_whole_document_joins_title_and_text_like_mteb():
    doc = _doc(("Title", "A title", ("A title",)), ("NarrativeText", "The abstract.", ("A title",)))
    [chunk] = chunk_document(doc, "s", ChunkingConfig(strategy="whole", breadcrumbs=False))
    assert chunk.embed_text == "A title The abstract."


def test_ids_and_hashes_are_stable():
    doc = _doc(("Title", "Leave", ("Leave",)), ("NarrativeText", _words(50), ("Leave",)))
    first = chunk_document(doc, "s", ChunkingConfig())
    second = chunk_document(doc, "s", ChunkingConfig())
    assert [(c.chunk_id, c.text_hash) for c in first] == [(c.chunk_id, c.text_hash) for c in second]
