"""The partition options that make parsing faster give the elements unstructured's defaults give."""

from pathlib import Path

import pytest

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.ingestion.discovery import discover_files
from rag_pipeline.core.ingestion.parsing import ParseJob, _partition, parse_job
from rag_pipeline_tests.conftest import HTTPX_V023, require

CORPUS = PROJECT_ROOT / "data" / "corpus"
TYPES = ("md", "html", "txt", "docx")


def _jobs(source_id: str, root: Path) -> list[ParseJob]:
    return [
        ParseJob(f.doc_id, f.rel_path, f.file_type, Path(f.abs_path).read_bytes(), f.content_hash, f.meta.title)
        for f in discover_files(source_id, root) if f.file_type in TYPES and not f.skip_reason and not f.error
    ]


def _fields(doc) -> list[tuple]:
    return [(e.category, e.text, e.heading_path, e.line_start, e.line_end, e.page_number, e.table_html)
            for e in doc.elements]


@pytest.mark.slow
def test_fast_options_give_the_default_elements():
    jobs = _jobs("httpx", require(HTTPX_V023)) + _jobs("corpus", CORPUS)
    by_type = {t: sum(j.file_type == t for j in jobs) for t in TYPES}
    # 13 httpx pages and the sample corpus's 27 Markdown, 20 HTML, one text and one Word file.
    assert by_type == {"md": 40, "html": 20, "txt": 1, "docx": 1}, by_type
    for job in jobs:
        fast, default = parse_job(job), parse_job(job, parser_defaults=True)
        assert fast.elements, job.rel_path
        assert _fields(fast) == _fields(default), job.rel_path
        assert (fast.title, fast.parser_version) == (default.title, default.parser_version), job.rel_path


@pytest.mark.parametrize("file_type, text", [("md", "# Plans\n\nGrowth costs 49 dollars a month.\n"),
                                             ("html", "<h1>Plans</h1><p>Growth costs 49 dollars a month.</p>"),
                                             ("txt", "Growth costs 49 dollars a month.\n")])
def test_the_two_calls_differ_in_language_detection_only(file_type, text):
    """The comparison above is not of one call with itself: the defaults detect a language."""
    fast = _partition(file_type, text.encode(), text)
    default = _partition(file_type, text.encode(), text, parser_defaults=True)
    assert {tuple(e.metadata.languages or ()) for e in fast} == {()}
    assert {tuple(e.metadata.languages or ()) for e in default} == {("eng",)}
    assert [(e.category, e.text) for e in fast] == [(e.category, e.text) for e in default]
