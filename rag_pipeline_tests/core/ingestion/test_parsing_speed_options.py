"""The partition options that make HTML and Word parsing faster give the elements unstructured's
defaults give (Markdown and plain text take another path: test_structural_text.py)."""

from pathlib import Path

import pytest

from rag_pipeline.config import PROJECT_ROOT
from rag_pipeline.core.ingestion.discovery import discover_files
from rag_pipeline.core.ingestion.parsing import ParseJob, _partition, parse_job

CORPUS = PROJECT_ROOT / "data" / "corpus"
TYPES = ("html", "docx")


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
    jobs = _jobs("corpus", CORPUS)
    by_type = {t: sum(j.file_type == t for j in jobs) for t in TYPES}
    # The sample corpus's 20 HTML pages and one Word file.
    assert by_type == {"html": 20, "docx": 1}, by_type
    for job in jobs:
        fast, default = parse_job(job), parse_job(job, parser_defaults=True)
        assert fast.elements, job.rel_path
        assert _fields(fast) == _fields(default), job.rel_path
        assert (fast.title, fast.parser_version) == (default.title, default.parser_version), job.rel_path


@pytest.mark.parametrize("file_type, text", [("html", "<h1>Plans</h1><p>Growth costs 49 dollars a month.</p>")])
def test_the_two_calls_differ_in_language_detection_only(file_type, text):
    """The comparison above is not of one call with itself: the defaults detect a language."""
    fast = _partition(file_type, text.encode(), text)
    default = _partition(file_type, text.encode(), text, parser_defaults=True)
    assert {tuple(e.metadata.languages or ()) for e in fast} == {()}
    assert {tuple(e.metadata.languages or ()) for e in default} == {("eng",)}
    assert [(e.category, e.text) for e in fast] == [(e.category, e.text) for e in default]


def _raw(elements) -> list[tuple]:
    return [(e.category, e.text, e.id, {k: v for k, v in e.metadata.to_dict().items() if k != "languages"})
            for e in elements]


def _plain_and_batched(file_type: str, text: str):
    from unstructured.nlp import tokenize

    from rag_pipeline.core.ingestion import parsing

    partition = parsing._partitioner(file_type)
    options = parsing._PARTITION_OPTIONS[file_type]
    single_calls = []
    run_one = tokenize._run_pipeline

    def counted(text):
        single_calls.append(text)
        return run_one(text)

    for cache in (tokenize._process_cached, tokenize.pos_tag, tokenize.word_tokenize, tokenize._tokenize_for_cache):
        cache.cache_clear()
    tokenize._run_pipeline = counted
    try:
        batched = parsing._partition(file_type, text.encode(), text)
        batched_singles = len(single_calls)
        for cache in (tokenize._process_cached, tokenize.pos_tag, tokenize.word_tokenize, tokenize._tokenize_for_cache):
            cache.cache_clear()
        plain = partition(text=text, **options)
    finally:
        tokenize._run_pipeline = run_one
    return plain, batched, batched_singles, len(single_calls) - batched_singles


def _html(paragraphs) -> str:
    return "<html><body>" + "".join(paragraphs) + "</body></html>"


@pytest.mark.slow
def test_spacy_in_batches_gives_unstructureds_own_elements():
    """Every raw element (kind, text, id, metadata down to parent ids and depths) equals a plain
    partition's, on the sample corpus's HTML pages; and the batch is really used: the plain
    partition runs spaCy text by text, the batched one for none of them."""
    classified = 0
    for job in (j for j in _jobs("corpus", CORPUS) if j.file_type == "html"):
        text = job.data.decode("utf-8")
        plain, batched, batched_singles, plain_singles = _plain_and_batched(job.file_type, text)
        assert _raw(batched) == _raw(plain), job.rel_path
        assert batched_singles == 0, job.rel_path
        classified += plain_singles
    assert classified > 50  # the pages do need classifying: the comparison above is not empty


def test_without_unstructureds_internals_the_plain_partition_runs(monkeypatch):
    """Another unstructured without the classifier this relies on: the plain path, same elements."""
    from rag_pipeline.core.ingestion import batched_classification

    monkeypatch.setitem(batched_classification._CLASSIFIERS, "html", ("unstructured.partition.html.parser", "renamed"))
    text = _html(["<h1>Plans</h1>", "<p>Growth costs 49 dollars a month, billed yearly.</p>"])
    plain, batched, batched_singles, plain_singles = _plain_and_batched("html", text)
    assert _raw(batched) == _raw(plain) and [e.category for e in batched] == ["Title", "NarrativeText"]
    assert batched_singles == plain_singles > 0


def test_threads_parsing_at_once_each_get_their_own_elements():
    """The recorder is set for the whole process: a partition in another thread must wait for it."""
    import sys
    from concurrent.futures import ThreadPoolExecutor

    pages = [_html([f"<h1>Page {i}</h1>"] + [f"<p>The refund window is {j} days for plan {i}.</p>" for j in range(30)]
                   + ["<ul>"] + [f"<li>item {j}</li>" for j in range(5)] + ["</ul><p>SHORT CAPS LINE</p><p>Contact</p>"])
             for i in range(8)]
    alone = [[(e.category, e.text) for e in _partition("html", p.encode(), p)] for p in pages]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often, so that an unguarded recorder would be met
    try:
        with ThreadPoolExecutor(4) as pool:
            together = list(pool.map(lambda p: [(e.category, e.text) for e in _partition("html", p.encode(), p)], pages))
    finally:
        sys.setswitchinterval(interval)
    assert together == alone
    assert {"Title", "NarrativeText", "ListItem"} <= {category for page in alone for category, _ in page}


def test_a_long_page_is_tagged_a_window_at_a_time(monkeypatch):
    """spaCy's results are held one batch at a time, not for the whole page; the elements stay."""
    from rag_pipeline.core.ingestion import batched_classification

    held = []
    process = batched_classification._BatchWindow.process

    def watched(self, text):
        doc = process(self, text)
        held.append(len(self.docs))
        return doc

    monkeypatch.setattr(batched_classification._BatchWindow, "process", watched)
    page = _html(f"<p>Paragraph {i} says the refund takes {i} days for this plan.</p>" for i in range(300))
    plain, batched, batched_singles, _ = _plain_and_batched("html", page)
    assert _raw(batched) == _raw(plain) and len(batched) == 300
    assert batched_singles == 0 and max(held) == batched_classification.SPACY_BATCH
