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

Only HTML is partitioned this way: Markdown and plain text are read by their own structure with
no NLP at all (structural_text.py).

This leans on three names inside unstructured 0.27: the HTML classifier (below),
`nlp.tokenize._process_cached` and `nlp.tokenize._get_nlp`. When one is missing (another version
of unstructured), the plain partition runs: slower, never different. The stand-ins are set on
unstructured's modules, so for the process: every partition of HTML takes `PARTITION_LOCK` (the
parser worker parses one document at a time anyway; a thread parsing beside it must not meet the
recorder).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType

# Where each format's partitioner looks up its classifier at call time (the recorder stands in there).
_CLASSIFIERS: dict[str, tuple[str, str]] = {
    "html": ("unstructured.partition.html.parser", "derive_element_type_from_text"),
}
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


def _recorder(seen: list[str]) -> Callable:
    """A classifier that records its text and answers NarrativeText (any kind would do: the first
    pass's elements are dropped)."""
    from unstructured.documents.elements import NarrativeText

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
    return _classified_in_batches(partition, module, function, tokenize)


def _classified_in_batches(partition: Callable[[], list], module: ModuleType, function: str,
                           tokenize: ModuleType) -> list:
    seen: list[str] = []
    classify = getattr(module, function)
    setattr(module, function, _recorder(seen))
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
