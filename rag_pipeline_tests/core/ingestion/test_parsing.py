"""Real `unstructured` parsing of small files, and the reasons given for broken ones."""

import pytest

from rag_pipeline.core.ingestion.discovery import discover_files
from rag_pipeline.core.ingestion.parsing import (
    ParseError,
    locate_lines,
    parse_document,
    table_rows,
)
from rag_pipeline.core.models import Element

MARKDOWN = """---
title: Leave policy
---
# Leave policy

Everyone gets annual leave.

## Parental leave

Birth parents get twenty weeks.

### Returning to work

Phased return over four weeks.

## Sick leave

| Tenure | Paid sick days |
|---|---|
| 0-2 years | 10 |
| 3+ years | 15 |
"""


def _parse_one(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    [item] = [f for f in discover_files("s", tmp_path) if f.rel_path == name]
    return parse_document(item)


def test_markdown_heading_paths_lines_and_tables(tmp_path):
    doc = _parse_one(tmp_path, "leave.md", MARKDOWN)
    assert doc.title == "Leave policy" and doc.parser_version.startswith("unstructured ")
    by_text = {e.text: e for e in doc.elements}
    returning = by_text["Phased return over four weeks."]
    assert returning.heading_path == ("Leave policy", "Parental leave", "Returning to work")
    # Line numbers count the front matter: the paragraph is on line 14 of the file.
    assert (returning.line_start, returning.line_end) == (14, 14)
    [table] = [e for e in doc.elements if e.category == "Table"]
    assert table.heading_path == ("Leave policy", "Sick leave")
    assert table_rows(table.table_html)[0] == ["Tenure", "Paid sick days"]


def test_html_headings(tmp_path):
    html = "<html><head><title>x</title></head><body><h1>Plans</h1><p>Intro text here.</p><h2>Growth</h2><p>Growth costs 49 dollars.</p></body></html>"
    doc = _parse_one(tmp_path, "plans.html", html)
    growth = next(e for e in doc.elements if "49" in e.text)
    assert growth.heading_path == ("Plans", "Growth")


@pytest.mark.parametrize(
    ("name", "content", "reason"),
    [
        ("empty.md", b"", "empty file"),
        ("blank.md", b"   \n\t\n", r"no text: the file holds only white space \(6 bytes\)"),
        ("binary.md", b"\x00\x01\x02PK\x03\x04" * 20, "binary content"),
        ("bom-garbage.md", b"\xff\xfe\x00bad", "starts with a utf-16-le byte-order mark but does not read as utf-16-le"),
        ("junk.docx", b"PK\x05\x06" + b"\x00" * 18, "not a Word .docx document"),
        ("renamed.docx", b"just some text, not a Word file", r"not a readable Word .docx document \(not a complete zip"),
        ("latin1.md", "# Caf\xe9\n\nna\xefve text\n".encode("latin-1"), "not valid UTF-8"),
        ("corrupt.pdf", b"%PDF-1.4\n this is not really a pdf \n%%EOF", "pdf parser failed|no text could be extracted"),
        ("only-front-matter.md", b"---\ntitle: x\n---\n", "no body text"),
    ],
)
def test_broken_files_fail_with_a_reason(tmp_path, name, content, reason):
    with pytest.raises(ParseError, match=reason):
        _parse_one(tmp_path, name, content)


@pytest.mark.parametrize(("name", "content"), [
    ("bom.md", b"\xef\xbb\xbf# Caf\xc3\xa9 menu\n\nFresh na\xc3\xafve bread.\n"),
    ("utf16.md", "# Caf\xe9 menu\n\nFresh na\xefve bread.\n".encode("utf-16")),
    ("latin1.html", '<html><head><meta charset="iso-8859-1"></head><body><h1>Caf\xe9 menu</h1>'
                    '<p>Fresh na\xefve bread.</p></body></html>'.encode("latin-1")),
])
def test_text_is_decoded_as_the_file_declares(tmp_path, name, content):
    # A byte-order mark decides and is dropped; an HTML page's declared charset is honoured.
    doc = _parse_one(tmp_path, name, content)
    assert [e.text for e in doc.elements] == ["Caf\xe9 menu", "Fresh na\xefve bread."]
    assert doc.elements[0].category == "Title" and doc.elements[1].heading_path == ("Caf\xe9 menu",)


def test_locate_lines_skips_what_it_cannot_place():
    lines = ["# Title", "", "Some **bold** text here", "", "tail words end"]
    elements = [
        Element("d", 0, "Title", "Title"),
        Element("d", 1, "NarrativeText", "Some bold text here"),
        Element("d", 2, "NarrativeText", "never in the file"),
        Element("d", 3, "NarrativeText", "tail words end"),
    ]
    located = locate_lines(elements, lines)
    assert [(e.line_start, e.line_end) for e in located] == [(1, 1), (3, 3), (None, None), (5, 5)]


def test_sample_pdf_and_docx_parse_with_pages_and_headings():
    from rag_pipeline.config import PROJECT_ROOT

    root = PROJECT_ROOT / "data" / "corpus" / "product_docs"
    items = {f.file_type: f for f in discover_files("product_docs", root) if f.file_type in ("pdf", "docx")}
    pdf = parse_document(items["pdf"])
    assert max(e.page_number or 0 for e in pdf.elements) >= 2
    docx = parse_document(items["docx"])
    assert any(e.category == "Table" for e in docx.elements)
    assert any(len(e.heading_path) >= 2 for e in docx.elements)
