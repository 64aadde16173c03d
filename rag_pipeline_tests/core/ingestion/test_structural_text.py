"""Markdown and plain text read by their structure: unstructured's element model, exact line spans,
no NLP model; on a real docs tree and on odd text."""

import re
import sys
from pathlib import Path

import pytest

from rag_pipeline.config import ChunkingConfig
from rag_pipeline.core.ingestion.chunking import chunk_document
from rag_pipeline.core.ingestion.markdown_text import markdown_elements
from rag_pipeline.core.ingestion.parsing import ParseJob, parse_job, parser_version, table_rows
from rag_pipeline_tests.conftest import HTTPX_V023, require

_WORD = re.compile(r"\w+")


def _parse(name: str, text: str | bytes):
    data = text if isinstance(text, bytes) else text.encode()
    return parse_job(ParseJob(f"s:{name}", name, name.rsplit(".", 1)[1], data, "hash"))


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _httpx_pages() -> list[Path]:
    return sorted(require(HTTPX_V023).rglob("*.md"))


@pytest.mark.slow
def test_httpx_pages_keep_unstructureds_headings_and_each_element_sits_on_its_lines():
    """Every page of a real docs tree: the heading paths unstructured's own partition_md gives, and
    every element's words found on the lines its span names."""
    pages = _httpx_pages()
    assert len(pages) == 13
    categories = set()
    for page in pages:
        text = page.read_text()
        lines = text.splitlines()
        job = ParseJob(f"s:{page.name}", page.name, "md", page.read_bytes(), "hash")
        ours, theirs = parse_job(job), parse_job(job, parser_defaults=True)
        assert ([e.heading_path for e in ours.elements if e.category == "Title"]
                == [e.heading_path for e in theirs.elements if e.category == "Title"]), page.name
        assert ours.title == theirs.title, page.name
        for element in ours.elements:
            categories.add(element.category)
            assert element.line_start and element.line_end >= element.line_start, (page.name, element)
            span = " ".join(lines[element.line_start - 1 : element.line_end]).lower()
            words = _words(element.text)
            if element.category != "Table":  # cells lose their pipes, not their words
                assert words[0] in span and words[-1] in span, (page.name, element.text[:60], element.line_start)
        # All the text unstructured found is there: the same words, give or take markup it kept.
        ours_words, theirs_words = set(_words(" ".join(e.text for e in ours.elements))), set(
            _words(" ".join(e.text for e in theirs.elements)))
        assert len(theirs_words - ours_words) <= 0.02 * len(theirs_words), (page.name, theirs_words - ours_words)
    assert {"Title", "NarrativeText", "ListItem", "CodeSnippet"} <= categories


def test_markdown_elements_are_unstructureds_own_with_parents_depths_and_tables():
    from unstructured.documents.elements import CodeSnippet, ListItem, NarrativeText, Table, Title

    text = ("# Plans\n\nGrowth costs 49 dollars a month.\n\n## Limits\n\n- ten seats\n- one project\n\n"
            "```python title=\"x.py\"\n# not a heading\nprint(1)\n```\n\n| plan | price |\n|---|---|\n| Growth | 49 |\n")
    located = markdown_elements(text)
    kinds = [type(item.element) for item in located]
    assert kinds == [Title, NarrativeText, Title, ListItem, ListItem, CodeSnippet, Table]
    plans, _, limits, *rest = [item.element for item in located]
    assert (plans.metadata.category_depth, limits.metadata.category_depth) == (0, 1)
    assert limits.metadata.parent_id == plans.id and all(e.metadata.parent_id == limits.id for e in rest)
    assert rest[2].text == "# not a heading\nprint(1)"
    assert table_rows(rest[3].metadata.text_as_html) == [["plan", "price"], ["Growth", "49"]]
    assert [(i.line_start, i.line_end) for i in located] == [(1, 1), (3, 3), (5, 5), (7, 7), (8, 8), (10, 13), (15, 17)]


def test_markdown_odd_structure():
    text = ("Title One\n=========\n\nSub\n---\n\n1. first item\n\n   its second paragraph\n\n   - nested item\n\n"
            "<div><h2>Raw heading</h2><script>alert(1)</script><p>Raw <b>text</b></p></div>\n\n"
            "> quoted words here\n\n```\nnever closed fence\n")
    doc = _parse("odd.md", text)
    got = [(e.category, e.text, e.heading_path) for e in doc.elements]
    assert got == [
        ("Title", "Title One", ("Title One",)),
        ("Title", "Sub", ("Title One", "Sub")),
        ("ListItem", "first item", ("Title One", "Sub")),
        ("UncategorizedText", "its second paragraph", ("Title One", "Sub")),
        ("ListItem", "nested item", ("Title One", "Sub")),
        ("Title", "Raw heading", ("Title One", "Raw heading")),
        ("UncategorizedText", "Raw text", ("Title One", "Raw heading")),
        ("UncategorizedText", "quoted words here", ("Title One", "Raw heading")),
        ("CodeSnippet", "never closed fence", ("Title One", "Raw heading")),
    ]
    assert not any("alert" in e.text or "<" in e.text for e in doc.elements)


def test_front_matter_counts_in_line_spans():
    doc = _parse("fm.md", "---\ntitle: Leave\n---\n# Leave\n\nBirth parents get twenty weeks.\n")
    assert doc.title == "Leave"
    assert [(e.line_start, e.line_end) for e in doc.elements] == [(4, 4), (6, 6)]


def test_plain_text_headings_lists_tables_and_prose():
    text = ("Refund policy\n\nCustomers may ask for a refund within 30 days.\nRefunds take a week.\n\n"
            "Steps\n\n- write to support\n  with your order number\n- wait\n\n"
            "plan\tprice\tseats\nGrowth\t49\t10\n\nContact us,\n")
    doc = _parse("policy.txt", text)
    got = [(e.category, e.text, e.heading_path, e.line_start, e.line_end) for e in doc.elements]
    assert got == [
        ("Title", "Refund policy", ("Refund policy",), 1, 1),
        ("NarrativeText", "Customers may ask for a refund within 30 days.", ("Refund policy",), 3, 3),
        ("NarrativeText", "Refunds take a week.", ("Refund policy",), 4, 4),
        ("Title", "Steps", ("Steps",), 6, 6),
        ("ListItem", "write to support with your order number", ("Steps",), 8, 9),
        ("ListItem", "wait", ("Steps",), 10, 10),
        ("Table", "plan price seats\nGrowth 49 10", ("Steps",), 12, 13),
        ("UncategorizedText", "Contact us,", ("Steps",), 15, 15),
    ]
    assert table_rows(doc.elements[6].table_html) == [["plan", "price", "seats"], ["Growth", "49", "10"]]


def test_plain_text_without_blank_lines_breaks_at_sentence_ends():
    lines = [f"Sentence {i} of a file that never leaves a blank line." for i in range(6)]
    lines.insert(3, "this one wraps onto")
    doc = _parse("dense.txt", "\n".join(lines) + "\n")
    spans = [(e.line_start, e.line_end) for e in doc.elements]
    assert spans == [(1, 1), (2, 2), (3, 3), (4, 5), (6, 6), (7, 7)]
    assert doc.elements[3].text == "this one wraps onto Sentence 3 of a file that never leaves a blank line."


def test_crlf_and_cr_give_the_elements_lf_gives():
    text = "Refund policy\n\nCustomers may ask for a refund.\nIt takes a week.\n\n- one\n- two\n"
    lf = _parse("a.txt", text)
    for newline in ("\r\n", "\r"):
        other = _parse("a.txt", text.replace("\n", newline))
        assert [(e.category, e.text, e.line_start, e.line_end) for e in other.elements] == [
            (e.category, e.text, e.line_start, e.line_end) for e in lf.elements]
    md = "# Plans\r\n\r\nGrowth costs 49.\r\n\r\n- a\r\n- b\r\n"
    assert [(e.category, e.text) for e in _parse("a.md", md).elements] == [
        ("Title", "Plans"), ("NarrativeText", "Growth costs 49."), ("ListItem", "a"), ("ListItem", "b")]


def test_tabs_in_prose_are_spaces_and_cjk_keeps_its_text():
    doc = _parse("tabs.txt", "A line\twith a tab inside it, and more words.\n")
    assert [e.text for e in doc.elements] == ["A line with a tab inside it, and more words."]
    cjk = "退款政策\n\n客户可以在三十天内申请退款。退款需要一周。\n第二段没有空行。\n"
    doc = _parse("cjk.txt", cjk)
    assert [(e.category, e.text, e.heading_path) for e in doc.elements] == [
        ("Title", "退款政策", ("退款政策",)),
        ("NarrativeText", "客户可以在三十天内申请退款。退款需要一周。", ("退款政策",)),
        ("NarrativeText", "第二段没有空行。", ("退款政策",)),
    ]
    assert doc.title == "退款政策"


def test_underlined_headings_anywhere_in_a_block_and_thousands_of_them():
    doc = _parse("setext.txt", "Intro line one.\nOverview\n========\nBody text here.\nDetails\n-------\nMore.\n")
    assert [(e.category, e.text, e.heading_path, e.line_start) for e in doc.elements] == [
        ("NarrativeText", "Intro line one.", (), 1),
        ("Title", "Overview", ("Overview",), 2),
        ("NarrativeText", "Body text here.", ("Overview",), 4),
        ("Title", "Details", ("Overview", "Details"), 5),
        ("NarrativeText", "More.", ("Overview", "Details"), 7),
    ]
    many = "".join(f"Heading {i}\n=====\n" for i in range(5000))  # one block: no recursion per heading
    assert len(_parse("many.txt", many).elements) == 5000


def test_a_two_megabyte_single_line_is_one_element_and_chunks_to_size():
    line = " ".join(f"word{i % 997}" for i in range(300_000))
    assert len(line) > 2_000_000
    doc = _parse("long.txt", line)
    [element] = doc.elements
    assert (element.line_start, element.line_end) == (1, 1) and len(element.text) == len(line)
    chunks = chunk_document(doc, "s", ChunkingConfig())
    assert len(chunks) > 100 and max(c.token_count for c in chunks) <= ChunkingConfig().max_tokens + 20


@pytest.mark.parametrize(("name", "text"), [("only-html.md", "<div></div>\n<!-- nothing -->\n"),
                                            ("only-rules.md", "***\n\n___\n")])
def test_markdown_without_text_fails_with_a_reason(name, text):
    from rag_pipeline.core.ingestion.parsing import ParseError

    with pytest.raises(ParseError, match="no text could be extracted"):
        _parse(name, text)


def test_no_nlp_model_is_loaded_and_the_parser_version_names_the_path():
    """In a fresh process (this one may have run unstructured's own partitioners): neither spaCy nor
    unstructured's NLP module is imported by a Markdown or text parse."""
    import subprocess

    code = ("import sys\n"
            "from rag_pipeline.core.ingestion.parsing import ParseJob, parse_job\n"
            "for name, text in (('a.md', b'# Plans\\n\\nGrowth costs 49 dollars a month.\\n'),\n"
            "                   ('a.txt', b'Plans\\n\\nGrowth costs 49 dollars a month.\\n')):\n"
            "    assert len(parse_job(ParseJob('s:' + name, name, name.split('.')[1], text, 'h')).elements) == 2\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'spacy' or m == 'unstructured.nlp.tokenize'))\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    assert "md/txt structure" in parser_version() and "markdown-it-py" in parser_version()
