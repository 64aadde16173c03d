"""Plain text to `unstructured`'s elements by the structure the format marks, no NLP; and the
elements every structural reader builds (Markdown: `markdown_text.py`, reStructuredText:
`rst_text.py`, notebooks: `notebook_text.py`).

`unstructured`'s `partition_md` converts Markdown to HTML and `partition_text` splits text at blank
lines; both then ask spaCy, block by block, whether a block is narrative text, a title or plain
text (sentence counts, capitalisation, a verb). That was nine tenths of a plain-text parse
(1,000 SciFact abstracts: about 80 s, against under 2 s here). Markdown says what a block is:
`#` headings, lists, fences, tables. Plain text says less, and the rules below say it plainly.

The elements are `unstructured`'s own classes (Title, NarrativeText, Text, ListItem, Table,
CodeSnippet) with the metadata the pipeline reads: `category_depth` of headings, `parent_id` (an
element to its enclosing Title), `text_as_html` of tables. Each element comes with its line span
in the text (1-based, inclusive), taken from the parse itself rather than searched for afterwards.

Plain text (blocks are runs of non-blank lines; CR LF, CR and LF all end a line):
- a line followed by `===` or `---` is a Title (depth 0 or 1);
- a block of one short line with no sentence end, followed by more text, is a Title (depth 0);
- lines starting with a bullet (`-`, `*`, `•`, `1.`, `a)`) are ListItems, each with its
  indented continuation lines;
- a block of two or more lines with the same number (two or more) of tab-separated cells is a Table;
- otherwise a block is prose, broken after every line that ends a sentence, so a file without
  blank lines still gives elements of a few lines each (the chunker packs them to size).
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

# Part of the parser version: a change to the rules here changes elements, so documents parse again.
STRUCTURE_VERSION = "1"
# Sentence ends, Latin and CJK; a closing quote or bracket may follow.
_SENTENCE_END = re.compile(r"[.!?。！？…][\"'”’)\]]*$")
_BULLET = re.compile(r"^\s*(?:[-*+•‣◦▪–]|\d{1,3}[.)]|[a-zA-Z][.)])\s+\S")
_SETEXT = re.compile(r"^\s*(=+|-+)\s*$")
_SPACES = re.compile(r"[ \t]+")
_TITLE_MAX_WORDS = 12
_TITLE_MAX_CHARS = 120


@dataclass(frozen=True)
class Located:
    """One `unstructured` element and its 1-based, inclusive line span in the parsed text."""

    element: object
    line_start: int | None
    line_end: int | None


def text_elements(text: str) -> list[Located]:
    """`unstructured` elements of a plain text, in document order."""
    return with_parents(list(_text_blocks(text.splitlines())))


# --- Plain text ---------------------------------------------------------------------------------


def _text_blocks(lines: Sequence[str]) -> Iterator[Located]:
    """Elements of the non-blank runs of `lines`."""
    blocks = list(_runs(lines))
    for position, (start, block) in enumerate(blocks):
        has_next = position + 1 < len(blocks)
        yield from _text_block(start, block, has_next)


def _runs(lines: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
    """(0-based index of its first line, its lines) of every run of non-blank lines."""
    start, block = 0, []
    for number, line in enumerate(lines):
        if line.strip():
            if not block:
                start = number
            block.append(line)
        elif block:
            yield start, block
            block = []
    if block:
        yield start, block


def _text_block(start: int, block: list[str], has_next: bool) -> Iterator[Located]:
    """A block's elements: its underlined headings, and the runs of lines between them."""
    from unstructured.documents.elements import ElementMetadata, Title

    segment, index = 0, 0
    while index < len(block) - 1:
        if _SETEXT.match(block[index + 1]) and not _SETEXT.match(block[index]):
            if index > segment:
                yield from _unmarked_block(start + segment, block[segment:index], True)
            depth = 0 if block[index + 1].strip()[0] == "=" else 1
            yield Located(Title(block[index].strip(), metadata=ElementMetadata(category_depth=depth)),
                          start + index + 1, start + index + 2)
            index += 2
            segment = index
        else:
            index += 1
    if segment < len(block):
        yield from _unmarked_block(start + segment, block[segment:], has_next)


def _unmarked_block(start: int, block: list[str], has_next: bool) -> Iterator[Located]:
    """A run of lines with no underlined heading: a heading line, a table, a list or prose."""
    from unstructured.documents.elements import ElementMetadata, Table, Title

    first = block[0].strip()
    if len(block) == 1 and has_next and _looks_like_heading(first):
        yield Located(Title(first, metadata=ElementMetadata(category_depth=0)), start + 1, start + 1)
        return
    cells = [line.strip().split("\t") for line in block]
    if len(block) >= 2 and len(cells[0]) >= 2 and all(len(row) == len(cells[0]) for row in cells):
        rows = [[" ".join(cell.split()) for cell in row] for row in cells]
        text = "\n".join(" ".join(row) for row in rows)
        yield Located(Table(text, metadata=ElementMetadata(text_as_html=table_html(rows))), start + 1,
                      start + len(block))
        return
    if any(_BULLET.match(line) for line in block):
        yield from _list_block(start, block)
        return
    yield from _prose_block(start, block)


def _list_block(start: int, block: list[str]) -> Iterator[Located]:
    """ListItems, one per bullet line with the lines that continue it; lines before the first
    bullet are prose."""
    from unstructured.documents.elements import ElementMetadata, ListItem

    item: list[str] = []
    item_start = start
    lead: list[str] = []
    for offset, line in enumerate(block):
        if _BULLET.match(line):
            if item:
                yield Located(ListItem(_joined(item), metadata=ElementMetadata()), item_start + 1, item_start + len(item))
            elif lead:
                yield from _prose_block(start, lead)
            item, item_start = [_BULLET_MARK.sub("", line, count=1)], start + offset
        elif item:
            item.append(line)
        else:
            lead.append(line)
    if item:
        yield Located(ListItem(_joined(item), metadata=ElementMetadata()), item_start + 1, item_start + len(item))


_BULLET_MARK = re.compile(r"^\s*(?:[-*+•‣◦▪–]|\d{1,3}[.)]|[a-zA-Z][.)])\s+")


def _prose_block(start: int, block: list[str]) -> Iterator[Located]:
    """Prose, broken after each line that ends a sentence (a hard-wrapped paragraph stays whole)."""
    piece: list[str] = []
    piece_start = start
    for offset, line in enumerate(block):
        if not piece:
            piece_start = start + offset
        piece.append(line)
        if _SENTENCE_END.search(line.rstrip()) or offset == len(block) - 1:
            yield Located(prose_element(_joined(piece)), piece_start + 1, piece_start + len(piece))
            piece = []


def _joined(lines: Sequence[str]) -> str:
    return " ".join(" ".join(line.split()) for line in lines).strip()


def _looks_like_heading(line: str) -> bool:
    """A short line with letters and no sentence end or trailing comma: how plain text writes a heading."""
    words = line.split()
    return (0 < len(words) <= _TITLE_MAX_WORDS and len(line) <= _TITLE_MAX_CHARS
            and any(ch.isalpha() for ch in line) and not _SENTENCE_END.search(line)
            and not line.endswith((",", ";")) and not _BULLET.match(line))


def table_html(rows: Sequence[Sequence[str]]) -> str:
    def row_html(row: Sequence[str], cell: str) -> str:
        return "<tr>" + "".join(f"<{cell}>{html.escape(text)}</{cell}>" for text in row) + "</tr>"

    head, body = rows[0], rows[1:]
    return ("<table><thead>" + row_html(head, "th") + "</thead><tbody>"
            + "".join(row_html(row, "td") for row in body) + "</tbody></table>")


# --- Shared -------------------------------------------------------------------------------------


def prose_element(text: str):
    """NarrativeText, or Text for one short fragment without a sentence end (a label, a caption)."""
    from unstructured.documents.elements import ElementMetadata, NarrativeText, Text

    if len(text.split()) < 4 and not _SENTENCE_END.search(text):
        return Text(text, metadata=ElementMetadata())
    return NarrativeText(text, metadata=ElementMetadata())


def located(element, line_map: Sequence[int] | None) -> Located:
    # markdown-it's map is [first line, line after the block), 0-based.
    if not line_map:
        return Located(element, None, None)
    return Located(element, line_map[0] + 1, max(line_map[1], line_map[0] + 1))


def with_parents(located: list[Located]) -> list[Located]:
    """Set every element's `parent_id` to its enclosing Title (by `category_depth`), then give the
    elements `unstructured`'s deterministic hash ids."""
    from unstructured.documents.elements import assign_and_map_hash_ids

    stack: list[tuple[int, object]] = []
    for item in located:
        element = item.element
        if element.category == "Title":
            depth = element.metadata.category_depth or 0
            while stack and stack[-1][0] >= depth:
                stack.pop()
            if stack:
                element.metadata.parent_id = stack[-1][1].id
            stack.append((depth, element))
        elif stack:
            element.metadata.parent_id = stack[-1][1].id
    assign_and_map_hash_ids([item.element for item in located])
    return located
