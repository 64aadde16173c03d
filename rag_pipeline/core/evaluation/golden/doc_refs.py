"""Document references to document ids: one resolver for everything a person may write where a
document is meant (golden files, imports, other systems' runs).

Document ids are `<source>:<relative path>` (the path under the source's root, `/`-separated).
A reference resolves, in this order:

- a document id: as it is; else `<source prefix>:<id>`; else a chunk id (`<doc id>#<n>`) to its
  document; else as a file name or path (below).
- a file name or path: for a path with a folder part, the exact relative path, else a path ending
  in a document's relative path (`docs/middleware.md` from the repository finds
  `starlette:middleware.md` when the source's root is `docs/`); else the file name, when no other
  document has it (when several documents share it and only one of them is indexed, that one);
  else unresolved: "ambiguous: N documents named X (candidates)" or "no document named X". A
  bare file name is never matched by relative path: `on-call.md` is ambiguous when one source has
  `on-call.md` and another `engineering/on-call.md`. With a source prefix, only that source's
  documents are candidates (all documents, when it has none of the name).
- a context text: the document whose served chunks contain it (compared as lower-case words, so
  punctuation, markup and chunk boundaries do not matter); else the document holding the largest
  share (at least `OVERLAP_THRESHOLD`) of the text's word trigrams, when no other document comes
  within `OVERLAP_MARGIN` of it.

What cannot be resolved gets a reason, and `Resolver.suggest` the closest document id (difflib,
over ids and relative paths) for a "did you mean".
"""

from __future__ import annotations

import difflib
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rag_pipeline.core.storage import Store

OVERLAP_THRESHOLD = 0.5
OVERLAP_MARGIN = 0.1
# Closeness (difflib's ratio) at or above which a known id is offered as "did you mean".
SUGGESTION_CUTOFF = 0.6


def known_documents(store: Store) -> dict[str, dict]:
    """Document id -> `{source_id, rel_path, title, indexed}`: every served document, plus every
    document the ledger has seen (gone from the index: `indexed` false) that was not skipped."""
    documents: dict[str, dict] = {}
    for source_id in store.served.known_sources():
        for row in store.served.indexed_documents(source_id):
            documents[row["doc_id"]] = {"source_id": source_id, "rel_path": row["rel_path"],
                                        "title": row.get("title") or "", "indexed": True}
    for doc_id, skipped in store.ledger.document_history().items():
        if skipped is None and doc_id not in documents and ":" in doc_id:
            source_id, rel_path = doc_id.split(":", 1)
            documents[doc_id] = {"source_id": source_id, "rel_path": rel_path, "title": "", "indexed": False}
    return documents


def documents_from_history(history: Mapping[str, str | None], served: Mapping[str, str] | None = None) -> dict[str, dict]:
    """`known_documents`' shape from a ledger history (document id -> skip reason, None for a
    document) and, when given, the served document hashes (`indexed` is membership in them)."""
    documents: dict[str, dict] = {}
    for doc_id, skipped in history.items():
        if skipped is None and ":" in doc_id:
            source_id, rel_path = doc_id.split(":", 1)
            documents[doc_id] = {"source_id": source_id, "rel_path": rel_path, "title": "",
                                 "indexed": served is None or doc_id in served}
    return documents


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


def _trigrams(words: Sequence[str]) -> set[tuple[str, ...]]:
    return {tuple(words[i:i + 3]) for i in range(len(words) - 2)}


class ContextMatcher:
    """Maps a context text to the document whose chunk texts hold it (see the module docstring)."""

    def __init__(self, chunk_texts: Mapping[str, Sequence[str]], threshold: float = OVERLAP_THRESHOLD,
                 margin: float = OVERLAP_MARGIN) -> None:
        self.threshold, self.margin = threshold, margin
        self.text = {doc: " " + " ".join(" ".join(_words(t)) for t in texts) + " " for doc, texts in chunk_texts.items()}
        self.index: dict[tuple[str, ...], set[str]] = defaultdict(set)
        for doc, texts in chunk_texts.items():
            for text in texts:
                for gram in _trigrams(_words(text)):
                    self.index[gram].add(doc)

    def match(self, context: str) -> tuple[str | None, str]:
        """(doc id, how) or (None, why not)."""
        words = _words(context)
        grams = _trigrams(words)
        if not grams:
            return None, f"context too short to match ({len(words)} words)"
        shares = Counter()
        for gram in grams:
            shares.update(self.index.get(gram, ()))
        complete = [d for d, n in shares.items() if n == len(grams)]
        holding = sorted(d for d in complete if f" {' '.join(words)} " in self.text[d])
        if len(holding) == 1:
            return holding[0], "context text found in its chunks"
        if len(holding) > 1:
            return None, f"ambiguous: the text is in {len(holding)} documents ({', '.join(holding[:3])})"
        ranked = sorted(((n / len(grams), d) for d, n in shares.items()), key=lambda x: (-x[0], x[1]))
        if not ranked:
            return None, "no served chunk shares a word trigram with it"
        best, doc = ranked[0]
        second = ranked[1][0] if len(ranked) > 1 else 0.0
        if best < self.threshold:
            return None, (f"no served chunk contains it; best overlap {best:.2f} ({doc}) "
                          f"is under {self.threshold:.2f}")
        if best - second < self.margin:
            return None, f"ambiguous: overlap {best:.2f} with {doc} and {second:.2f} with {ranked[1][1]}"
        return doc, f"word-trigram overlap ({best:.2f})"


class Resolver:
    """Document ids, file names and context texts to document ids (see the module docstring)."""

    def __init__(self, documents: Mapping[str, Mapping[str, Any]],
                 chunk_texts: Mapping[str, Sequence[str]] | Callable[[], Mapping[str, Sequence[str]]] | None = None,
                 source_prefix: str | None = None) -> None:
        self.documents = documents
        self.prefix = source_prefix
        self._chunk_texts = chunk_texts
        self._matcher: ContextMatcher | None = None
        self.by_path: dict[str, list[str]] = defaultdict(list)
        self.by_name: dict[str, list[str]] = defaultdict(list)
        for doc_id, doc in documents.items():
            rel = str(doc.get("rel_path") or doc_id.split(":", 1)[-1])
            self.by_path[rel].append(doc_id)
            self.by_name[rel.rsplit("/", 1)[-1]].append(doc_id)

    def _in_prefix(self, candidates: list[str]) -> list[str]:
        if self.prefix:
            mine = [d for d in candidates if d.split(":", 1)[0] == self.prefix]
            return mine or candidates
        return candidates

    def document_id(self, ref: str) -> tuple[str | None, str]:
        ref = ref.strip()
        if ref in self.documents:
            return ref, "document id"
        if self.prefix and f"{self.prefix}:{ref}" in self.documents:
            return f"{self.prefix}:{ref}", f"document id with source prefix {self.prefix!r}"
        if "#" in ref:
            base = ref.rsplit("#", 1)[0]
            for candidate in (base, f"{self.prefix}:{base}" if self.prefix else None):
                if candidate in self.documents:
                    return candidate, "chunk id to its document"
        doc, how = self.file(ref)
        if doc is not None:
            return doc, how
        tried = f" (nor {self.prefix}:{ref})" if self.prefix else ""
        return None, f"no document with id {ref!r}{tried}; {how}"

    def file(self, ref: str) -> tuple[str | None, str]:
        path = ref.strip().replace("\\", "/").removeprefix("./")
        if path in self.documents:
            return path, "document id"
        # A bare file name says nothing about the folder: an exact relative-path match in one
        # source must not hide a document of the same name in another folder.
        paths = () if "/" not in path.lstrip("/") else (
            ("relative path", self.by_path.get(path.lstrip("/"), [])),
            ("path ending in its relative path",
             _longest([d for rel, docs in self.by_path.items() if path.endswith("/" + rel) for d in docs], self.documents)),
        )
        for how, candidates in paths:
            candidates = self._in_prefix(candidates)
            if len(candidates) == 1:
                return candidates[0], how
            if len(candidates) > 1:
                return None, f"ambiguous: {len(candidates)} documents at {path} ({', '.join(sorted(candidates)[:3])})"
        name = path.rsplit("/", 1)[-1]
        named = self._in_prefix(self.by_name.get(name, []))
        if len(named) == 1:
            return named[0], "unique file name"
        indexed = [d for d in named if self.documents[d].get("indexed", True)]
        if len(named) > 1 and len(indexed) == 1:
            return indexed[0], f"file name (the one indexed of {len(named)})"
        if named:
            return None, f"ambiguous: {len(named)} documents named {name} ({', '.join(sorted(named)[:3])})"
        return None, f"no document named {name}"

    def suggest(self, ref: str) -> str | None:
        """The known document id closest to `ref` (compared with ids, and with relative paths for a
        reference without a source), or None when nothing is close (difflib's ratio under
        SUGGESTION_CUTOFF)."""
        ref = ref.strip().replace("\\", "/").removeprefix("./")
        if not ref or not self.documents:
            return None
        ids = list(self.documents)
        close = difflib.get_close_matches(ref, ids, n=1, cutoff=SUGGESTION_CUTOFF)
        if close:
            return close[0]
        # A path from the repository (`docs/middlware.md`): compared by its tail with relative paths.
        paths = list(self.by_path)
        tail = ref.split(":", 1)[-1]
        for candidate in [tail] + [tail.split("/", n)[-1] for n in range(1, tail.count("/") + 1)]:
            close = difflib.get_close_matches(candidate, paths, n=1, cutoff=SUGGESTION_CUTOFF)
            if close:
                return sorted(self._in_prefix(self.by_path[close[0]]))[0]
        return None

    def context(self, text: str) -> tuple[str | None, str]:
        if self._matcher is None:
            if self._chunk_texts is None:
                return None, "no chunk texts to match contexts against"
            texts = self._chunk_texts() if callable(self._chunk_texts) else self._chunk_texts
            self._matcher = ContextMatcher(texts)
        return self._matcher.match(text)


def _longest(candidates: list[str], documents: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Of documents whose relative paths end a given path, those with the longest relative path."""
    if not candidates:
        return []
    length = {d: len(str(documents[d].get("rel_path") or d)) for d in candidates}
    top = max(length.values())
    return [d for d in candidates if length[d] == top]


class KnownDocuments:
    """Every document the sources have held (the ledger's history: id -> skip reason, None for a
    document), resolving what a golden file names: ids as they are, paths through the Resolver,
    and on a miss the reason with the closest id ("did you mean")."""

    def __init__(self, known: Mapping[str, str | None], served_hashes: Mapping[str, str] | None = None) -> None:
        self.known = known
        self.sources = {d.split(":", 1)[0] for d in known if ":" in d}
        self.resolver = Resolver(documents_from_history(known, served_hashes))

    def resolve(self, ref: str) -> tuple[str | None, str | None]:
        """(document id, None) or (None, why not)."""
        if ref in self.known:
            if self.known[ref] is not None:
                return None, f"{ref!r} is not a document (skipped at discovery: {self.known[ref]})"
            return ref, None
        source = ref.split(":", 1)[0] if ":" in ref else None
        if source in self.sources:
            # Written as an id of a known source: never re-read as a path (a typo would silently
            # land on another folder's file of the same name); only a chunk id maps to its document.
            base = ref.rsplit("#", 1)[0]
            if "#" in ref and self.known.get(base, "") is None:
                return base, None
            return None, self._never_held(ref)
        doc_id, how = self.resolver.file(ref)
        if doc_id is not None:
            return doc_id, None
        if how.startswith("ambiguous"):
            return None, f"{ref!r}: {how}; write the document id (<source>:<relative path>)"
        if source is not None:
            return None, (f"{ref!r} is not a document any source has ever held (no source {source!r} has been "
                          f"ingested; ingested: {', '.join(sorted(self.sources)) or 'none'})")
        return None, self._never_held(ref, " (ids are <source>:<relative path>; a path is matched against the "
                                           "documents' relative paths)")

    def _never_held(self, ref: str, hint: str = "") -> str:
        suggestion = self.resolver.suggest(ref)
        return (f"{ref!r} is not a document any source has ever held"
                + (f"; did you mean `{suggestion}`?" if suggestion else hint))
