"""Markdown and plain text to `unstructured`'s elements by the structure the format marks, no NLP.

`unstructured`'s `partition_md` converts Markdown to HTML and `partition_text` splits text at blank
lines; both then ask spaCy, block by block, whether a block is narrative text, a title or plain
text (sentence counts, capitalisation, a verb). That was nine tenths of a plain-text parse
(1,000 SciFact abstracts: about 80 s, against under 2 s here). Markdown says what a block is:
`#` headings, lists, fences, tables. Plain text says less, and the rules below say it plainly.

The elements are `unstructured`'s own classes (Title, NarrativeText, Text, ListItem, Table,
CodeSnippet) with the metadata the pipeline reads: `category_depth` of headings, `parent_id` (an
element to its enclosing Title), `text_as_html` of tables. Each element comes with its line span
in the text (1-based, inclusive), taken from the parse itself rather than searched for afterwards.

Markdown (CommonMark with GFM tables, through markdown-it-py):
- `#`/setext headings are Titles with `category_depth` = level - 1;
- a paragraph is NarrativeText, or Text when it is one short fragment with no sentence end;
- the first paragraph of a list item is a ListItem (later paragraphs of the item: prose);
- fenced and indented code is a CodeSnippet (its text as written; the info string is dropped);
- a table is a Table with `text_as_html`; a raw HTML block keeps its text, never its tags
  (its `<h1>`..`<h6>` are Titles).

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
from functools import lru_cache
from html.parser import HTMLParser

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


def markdown_elements(text: str) -> list[Located]:
    """`unstructured` elements of a Markdown text, in document order."""
    return with_parents(markdown_located(text))


def markdown_located(text: str, nesting: int = 0) -> list[Located]:
    """The elements of a Markdown text with their line spans in it, parents not yet set (a notebook
    joins its cells first; a MyST directive's body is read at `nesting` + 1)."""
    # `:::` opens a MyST colon fence only on pages that use them: mkdocstrings writes `::: module`
    # lines, and as fences they would swallow the rest of the page.
    parser = _markdown(colon_fences=_COLON_DIRECTIVE.search(text) is not None)
    return list(_markdown_blocks(parser.parse(text), nesting))


def text_elements(text: str) -> list[Located]:
    """`unstructured` elements of a plain text, in document order."""
    return with_parents(list(_text_blocks(text.splitlines())))


# --- Markdown -----------------------------------------------------------------------------------


_COLON_DIRECTIVE = re.compile(r"^ {0,3}:{3,}\s*\{[\w.+:-]+\}", re.MULTILINE)


@lru_cache(maxsize=2)
def _markdown(colon_fences: bool = False):
    from markdown_it import MarkdownIt
    from mdit_py_plugins.colon_fence import colon_fence_plugin
    from mdit_py_plugins.myst_role import myst_role_plugin

    # html=True: raw HTML blocks become tokens of their own (their text is kept, their tags not),
    # rather than paragraphs of literal markup. MyST's `{role}` text is a token too.
    parser = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"]).use(myst_role_plugin)
    return parser.use(colon_fence_plugin) if colon_fences else parser


def _markdown_blocks(tokens: Sequence, nesting: int = 0) -> Iterator[Located]:
    from unstructured.documents.elements import CodeSnippet, ElementMetadata, ListItem, Table, Title

    from rag_pipeline.core.ingestion import myst

    item_started: list[bool] = []  # one flag per open list item: has its first paragraph been seen
    index = 0
    while index < len(tokens):
        token = tokens[index]
        kind = token.type
        if kind == "list_item_open":
            item_started.append(False)
        elif kind == "list_item_close":
            item_started.pop()
        elif kind == "heading_open":
            text = _inline_text(tokens[index + 1])
            if text:
                depth = int(token.tag[1:]) - 1
                yield _located(Title(text, metadata=ElementMetadata(category_depth=depth)), token.map)
            index += 2
        elif kind == "paragraph_open":
            text = _inline_text(tokens[index + 1])
            if text:
                if item_started and not item_started[-1]:
                    item_started[-1] = True
                    yield _located(ListItem(text, metadata=ElementMetadata()), token.map)
                else:
                    yield _located(prose_element(text), token.map)
            index += 2
        elif kind in ("fence", "colon_fence") and myst.is_directive(token):
            if item_started:
                item_started[-1] = True
            yield from myst.directive_elements(token, nesting)
        elif kind in ("fence", "code_block", "colon_fence"):
            code = token.content.rstrip("\n")
            if code.strip():
                if item_started:
                    item_started[-1] = True
                yield _located(CodeSnippet(code, metadata=ElementMetadata()), token.map)
        elif kind == "table_open":
            end = next(i for i in range(index, len(tokens)) if tokens[i].type == "table_close")
            rows = _table_rows(tokens[index:end + 1])
            rendered = _markdown().renderer.render(tokens[index:end + 1], _markdown().options, {})
            text = "\n".join(" ".join(row) for row in rows).strip()
            if text:
                yield _located(Table(text, metadata=ElementMetadata(text_as_html=rendered.strip())), token.map)
            index = end
        elif kind == "html_block":
            yield from _html_block(token.content, token.map)
        index += 1


def _inline_text(inline) -> str:
    """The text of an inline token as a reader sees it: markup, links' targets and raw HTML dropped,
    a MyST role's text as Sphinx shows it."""
    from rag_pipeline.core.ingestion.rst_text import role_text

    parts: list[str] = []
    for child in inline.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type == "myst_role":
            parts.append(role_text(child.content))
        elif child.type == "softbreak":
            parts.append(" ")
        elif child.type == "hardbreak":
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)  # the alt text
    return _SPACES.sub(" ", "".join(parts)).strip()


def _table_rows(tokens: Sequence) -> list[list[str]]:
    rows: list[list[str]] = []
    for position, token in enumerate(tokens):
        if token.type == "tr_open":
            rows.append([])
        elif token.type == "inline" and rows and position and tokens[position - 1].type in ("th_open", "td_open"):
            rows[-1].append(_inline_text(token))
    return [row for row in rows if any(row)]


_HEADING_TAGS = {f"h{level}": level for level in range(1, 7)}


class _HtmlText(HTMLParser):
    """The text of a fragment of HTML in runs: (heading level or None, text); script and style dropped."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.runs: list[tuple[int | None, list[str]]] = [(None, [])]
        self._skip = 0

    def handle_starttag(self, tag: str, attrs) -> None:
        if tag in ("script", "style"):
            self._skip += 1
        elif tag in _HEADING_TAGS:
            self.runs.append((_HEADING_TAGS[tag], []))

    def handle_endtag(self, tag: str) -> None:
        if tag in ("script", "style") and self._skip:
            self._skip -= 1
        elif tag in _HEADING_TAGS:
            self.runs.append((None, []))

    def handle_data(self, data: str) -> None:
        if not self._skip:
            self.runs[-1][1].append(data)


def _html_block(fragment: str, line_map: Sequence[int] | None) -> Iterator[Located]:
    """A raw HTML block's text: its headings as Titles, the rest as prose; never its tags."""
    from unstructured.documents.elements import ElementMetadata, Title

    parser = _HtmlText()
    parser.feed(fragment)
    parser.close()
    for level, parts in parser.runs:
        text = " ".join(" ".join(parts).split())
        if not text:
            continue
        if level is None:
            yield _located(prose_element(text), line_map)
        else:
            yield _located(Title(text, metadata=ElementMetadata(category_depth=level - 1)), line_map)


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


def _located(element, line_map: Sequence[int] | None) -> Located:
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
