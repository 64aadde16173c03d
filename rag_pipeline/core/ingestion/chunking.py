"""Chunking: parsed elements to retrievable chunks, by one of three strategies.

- `sections`: one chunk per heading section; sections over `max_tokens` split at element
  boundaries (tables by rows, each piece repeating the header row); with `merge_thin`, sections
  under `min_tokens` merge into the next one; with `breadcrumbs`, the embedded text starts with the
  document title and heading path.
- `fixed`: windows of `max_tokens` words with `overlap_tokens` of overlap, ignoring structure.
- `whole`: the whole document as one chunk (how BEIR/MTEB embed `title + " " + text`).

Sizes are counted in whitespace-separated words: cheap, model-independent, and about 0.75 of a
word-piece count for English prose (MiniLM truncates at 256 word pieces, about 190 words).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from rag_pipeline.config import ChunkingConfig
from rag_pipeline.core.ingestion.parsing import table_rows
from rag_pipeline.core.models import Chunk, Element, ParsedDocument
from rag_pipeline.core.retrieval.lexical import count_tokens

BREADCRUMB_SEPARATOR = " > "


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class _Piece:
    """A run of elements on its way to becoming one chunk."""

    heading_path: tuple[str, ...]
    texts: list[str] = field(default_factory=list)
    elements: list[Element] = field(default_factory=list)

    @property
    def tokens(self) -> int:
        return sum(count_tokens(t) for t in self.texts)

    def add(self, text: str, element: Element) -> None:
        self.texts.append(text)
        self.elements.append(element)

    def absorb(self, other: _Piece) -> None:
        self.texts.extend(other.texts)
        self.elements.extend(other.elements)


def chunk_document(doc: ParsedDocument, source_id: str, config: ChunkingConfig) -> list[Chunk]:
    """Chunks of one parsed document under the configured strategy."""
    if config.strategy == "whole":
        pieces = [_whole_piece(doc)]
    elif config.strategy == "fixed":
        pieces = _fixed_pieces(doc, config)
    else:
        pieces = _section_pieces(doc, config)
    chunks = []
    for piece in pieces:
        if not piece.texts:
            continue
        joiner = " " if config.strategy == "whole" else "\n"
        body = joiner.join(piece.texts)
        embed_text = _with_breadcrumbs(doc.title, piece.heading_path, body) if config.breadcrumbs else body
        lines = [e.line_start for e in piece.elements if e.line_start] + [
            e.line_end for e in piece.elements if e.line_end
        ]
        pages = [e.page_number for e in piece.elements if e.page_number]
        ordinal = len(chunks)
        chunks.append(
            Chunk(
                chunk_id=f"{doc.doc_id}#{ordinal}",
                doc_id=doc.doc_id,
                source_id=source_id,
                ordinal=ordinal,
                title=doc.title,
                heading_path=piece.heading_path,
                text=body,
                embed_text=embed_text,
                text_hash=text_hash(embed_text),
                token_count=count_tokens(embed_text),
                line_start=min(lines) if lines else None,
                line_end=max(lines) if lines else None,
                page_number=min(pages) if pages else None,
            )
        )
    return chunks


def _with_breadcrumbs(title: str, heading_path: Sequence[str], body: str) -> str:
    trail = list(heading_path)
    if not trail or trail[0].strip().lower() != title.strip().lower():
        trail.insert(0, title)
    return BREADCRUMB_SEPARATOR.join(trail) + "\n" + body


def _whole_piece(doc: ParsedDocument) -> _Piece:
    piece = _Piece(heading_path=())
    for element in doc.elements:
        piece.add(element.text, element)
    return piece


def _fixed_pieces(doc: ParsedDocument, config: ChunkingConfig) -> list[_Piece]:
    """Sliding windows over the document's words; each window remembers the elements it covers."""
    words: list[tuple[str, Element]] = []
    for element in doc.elements:
        words.extend((word, element) for word in _render(element).split())
    step = config.max_tokens - config.overlap_tokens
    pieces = []
    for start in range(0, max(len(words), 1), step):
        window = words[start : start + config.max_tokens]
        if not window:
            break
        first = window[0][1]
        piece = _Piece(heading_path=first.heading_path)
        piece.texts.append(" ".join(word for word, _ in window))
        piece.elements.extend(dict.fromkeys(element for _, element in window))
        pieces.append(piece)
        if start + config.max_tokens >= len(words):
            break
    return pieces


def _section_pieces(doc: ParsedDocument, config: ChunkingConfig) -> list[_Piece]:
    sections: list[_Piece] = []
    for element in doc.elements:
        starts_section = element.category == "Title" or not sections
        if starts_section or element.heading_path != sections[-1].heading_path:
            sections.append(_Piece(heading_path=element.heading_path))
        sections[-1].add(_render(element), element)
    if config.merge_thin:
        sections = _merge_thin(sections, config)
    pieces: list[_Piece] = []
    for section in sections:
        pieces.extend(_split_to_size(section, config.max_tokens))
    return pieces


def _merge_thin(sections: list[_Piece], config: ChunkingConfig) -> list[_Piece]:
    """Fold sections under `min_tokens` (a bare heading, a one-line note) into the next section.

    The merged chunk keeps the heading path of the section that carries the content.
    """
    merged: list[_Piece] = []
    carry: _Piece | None = None
    for section in sections:
        if carry is not None:
            if carry.tokens + section.tokens <= config.max_tokens:
                section.texts[:0] = carry.texts
                section.elements[:0] = carry.elements
            else:
                merged.append(carry)
            carry = None
        if section.tokens < config.min_tokens:
            carry = section
        else:
            merged.append(section)
    if carry is not None:
        if merged and merged[-1].tokens + carry.tokens <= config.max_tokens:
            merged[-1].absorb(carry)
        else:
            merged.append(carry)
    return merged


def _split_to_size(section: _Piece, max_tokens: int) -> list[_Piece]:
    """Pack a section's elements into pieces of at most `max_tokens` words."""
    pieces = [_Piece(section.heading_path)]
    for text, element in zip(section.texts, section.elements):
        for part in _split_element_text(text, element, max_tokens):
            if pieces[-1].texts and pieces[-1].tokens + count_tokens(part) > max_tokens:
                pieces.append(_Piece(section.heading_path))
            pieces[-1].add(part, element)
    return [p for p in pieces if p.texts]


def _split_element_text(text: str, element: Element, max_tokens: int) -> list[str]:
    if count_tokens(text) <= max_tokens:
        return [text]
    if element.category == "Table" and element.table_html:
        return _split_table(element.table_html, max_tokens)
    words = text.split()
    return [" ".join(words[i : i + max_tokens]) for i in range(0, len(words), max_tokens)]


def _render(element: Element) -> str:
    """Text of an element as it goes into a chunk; tables become header + rows."""
    if element.category == "Table" and element.table_html:
        rows = table_rows(element.table_html)
        if rows:
            return "\n".join(_format_row(row) for row in rows)
    return element.text


def _format_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _split_table(table_html: str, max_tokens: int) -> list[str]:
    """Split a long table by rows; every piece repeats the header, so no row loses its meaning."""
    rows = table_rows(table_html)
    header, body = _format_row(rows[0]), [_format_row(r) for r in rows[1:]]
    budget = max(max_tokens - count_tokens(header), 1)
    parts: list[list[str]] = [[]]
    for row in body:
        if parts[-1] and sum(count_tokens(r) for r in parts[-1]) + count_tokens(row) > budget:
            parts.append([])
        parts[-1].append(row)
    return ["\n".join([header, *part]) for part in parts if part] or [header]


def chunk_documents(docs: Sequence[ParsedDocument], source_id: str, config: ChunkingConfig) -> list[Chunk]:
    return [chunk for doc in docs for chunk in chunk_document(doc, source_id, config)]
