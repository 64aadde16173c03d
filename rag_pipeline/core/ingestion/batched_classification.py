"""unstructured's text classification, with spaCy run over batches of texts, not one at a time.

unstructured decides, block by block, whether a text is narrative text, a title or plain text
(`is_possible_narrative_text` and `is_possible_title`: sentence count, capitalisation, a verb),
and every decision runs spaCy's pipeline on that one text (unstructured/nlp/tokenize.py,
`_process_cached`). On pages of short paragraphs the fixed cost of each call dominates: spaCy
over many texts at once (`nlp.pipe`) is 2 to 2.5 times faster for the same tags and sentences.

So a document is partitioned twice. First with unstructured's classifier replaced by a recorder,
which only collects the texts that would be classified (the rest of a partition is about a tenth
of its time); then the real partition runs, and spaCy tags the recorded texts in batches of 64,
in the order the recorder saw them, as the partition reaches them (a text not recorded takes
unstructured's own path). The elements are unstructured's own: `test_parsing_speed_options`
compares them with a plain partition on real pages.

This leans on three names inside unstructured 0.27: the classifier of each format (below),
`nlp.tokenize._process_cached` and `nlp.tokenize._get_nlp`. When one is missing (another version
of unstructured), the plain partition runs: slower, never different. A Markdown page is
converted to HTML once for both passes (through the name `partition.md.markdown`; without it,
twice). The stand-ins are set on unstructured's modules, so for the process: every partition of a
text format takes `PARTITION_LOCK` (the parser worker parses one document at a time anyway; a
thread parsing beside it must not meet the recorder).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType

# Where each format's partitioner looks up its classifier at call time (the recorder stands in there).
_CLASSIFIERS: dict[str, tuple[str, str]] = {
    "md": ("unstructured.partition.html.parser", "derive_element_type_from_text"),
    "html": ("unstructured.partition.html.parser", "derive_element_type_from_text"),
    "txt": ("unstructured.partition.text", "element_from_text"),
}
# A format whose partitioner converts its text to markup before partitioning that: (the
# partitioner's module, its name for the converter's module, the converting function). The first
# pass's conversion serves the second (`_ConvertOnce`).
_CONVERTERS: dict[str, tuple[str, str, str]] = {"md": ("unstructured.partition.md", "markdown", "markdown")}
SPACY_BATCH = 64
PARTITION_LOCK = threading.RLock()


def _hooks(file_type: str) -> tuple[ModuleType, str, ModuleType] | None:
    if file_type not in _CLASSIFIERS:
        return None
    module_name, function = _CLASSIFIERS[file_type]
    try:
        module = importlib.import_module(module_name)
        tokenize = importlib.import_module("unstructured.nlp.tokenize")
    except ImportError:
        return None
    if not all(hasattr(m, n) for m, n in ((module, function), (tokenize, "_process_cached"), (tokenize, "_get_nlp"))):
        return None
    return module, function, tokenize


def _recorder(file_type: str, seen: list[str]) -> Callable:
    """A classifier that records its text and answers NarrativeText (any kind would do: the first
    pass's elements are dropped)."""
    from unstructured.documents.elements import NarrativeText

    if file_type == "txt":
        def record_element(text: str, *args, **kwargs):
            seen.append(text)
            return NarrativeText(text=text)

        return record_element

    def record_kind(text: str):
        seen.append(text)
        return NarrativeText

    return record_kind


def partition_batched(file_type: str, partition: Callable[[], list]) -> list:
    """`partition()`'s elements, with the spaCy work of its classification done in batches."""
    with PARTITION_LOCK:
        return _two_passes(file_type, partition)


def _two_passes(file_type: str, partition: Callable[[], list]) -> list:
    hooks = _hooks(file_type)
    if hooks is None:
        return partition()
    module, function, tokenize = hooks
    with _converted_once(file_type):
        return _classified_in_batches(file_type, partition, module, function, tokenize)


def _classified_in_batches(file_type: str, partition: Callable[[], list], module: ModuleType, function: str,
                           tokenize: ModuleType) -> list:
    seen: list[str] = []
    classify = getattr(module, function)
    setattr(module, function, _recorder(file_type, seen))
    try:
        partition()
    except Exception:  # noqa: BLE001 - the real partition below raises it again, with its own words
        seen.clear()
    finally:
        setattr(module, function, classify)
    limit = getattr(tokenize, "MAX_CACHEABLE_CHARS", 8192)
    texts = [t for t in dict.fromkeys(str(t) for t in seen) if t.strip() and len(t) <= limit]
    if not texts:
        return partition()
    batches = _BatchWindow(texts, tokenize._get_nlp(), tokenize._process_cached)
    tokenize._process_cached = batches.process
    try:
        return partition()
    finally:
        tokenize._process_cached = batches.unbatched


@contextmanager
def _converted_once(file_type: str) -> Iterator[None]:
    """While a document's two passes run, its format's converter (Markdown to HTML) converts a
    text once: the second pass gets the first pass's HTML (a fifth of a Markdown page's parse)."""
    if file_type not in _CONVERTERS:
        yield
        return
    module_name, attribute, function = _CONVERTERS[file_type]
    partitioner = importlib.import_module(module_name)
    converter = getattr(partitioner, attribute, None)
    if not callable(getattr(converter, function, None)):
        yield  # another version of unstructured: each pass converts, as before
        return
    setattr(partitioner, attribute, _ConvertOnce(converter, function))
    try:
        yield
    finally:
        setattr(partitioner, attribute, converter)


class _ConvertOnce:
    """Stands in for a converter module (`markdown`): its conversion function answers a text and
    options it has seen with the result it gave (Python-Markdown builds a new converter on every
    call, so the result depends on nothing else); every other name is the module's own."""

    def __init__(self, module: ModuleType, function: str) -> None:
        self._module, self._function, self._results = module, function, {}
        setattr(self, function, self._convert)

    def _convert(self, text: str, **options):
        key = (text, repr(sorted(options.items())))
        if key not in self._results:
            self._results[key] = getattr(self._module, self._function)(text, **options)
        return self._results[key]

    def __getattr__(self, name: str):
        return getattr(self._module, name)


class _BatchWindow:
    """spaCy's results for the recorded texts, SPACY_BATCH at a time in the recorded order.

    The real partition asks for the texts in the order the recorder saw them (the same walk), so
    only one batch of Docs is held at a time: a page of 20,000 paragraphs does not keep 20,000
    Docs in memory. A text outside the window (or never recorded) takes unstructured's own path."""

    def __init__(self, texts: list[str], nlp, unbatched: Callable) -> None:
        self.texts, self.nlp, self.unbatched = texts, nlp, unbatched
        self.position = {text: i for i, text in enumerate(texts)}
        self.docs: dict[str, object] = {}

    def process(self, text: str):
        doc = self.docs.get(text)
        if doc is None and text in self.position:
            start = self.position[text]
            window = self.texts[start : start + SPACY_BATCH]
            self.docs = dict(zip(window, self.nlp.pipe(window, batch_size=SPACY_BATCH), strict=True))
            doc = self.docs[text]
        return doc if doc is not None else self.unbatched(text)
