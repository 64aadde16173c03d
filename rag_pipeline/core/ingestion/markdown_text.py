"""Markdown, as MyST reads it, to `unstructured`'s elements by the structure it marks, no NLP
(the elements and the rules of plain text: `structural_text.py`).

CommonMark with GFM tables, through markdown-it-py:
- `#`/setext headings are Titles with `category_depth` = level - 1;
- a paragraph is NarrativeText, or Text when it is one short fragment with no sentence end;
- the first paragraph of a list item is a ListItem (later paragraphs of the item: prose);
- fenced and indented code is a CodeSnippet (its text as written; the info string is dropped);
- a table is a Table with `text_as_html`; a raw HTML block keeps its text, never its tags
  (its `<h1>`..`<h6>` are Titles);
- a MyST role (`{ref}` text) reads as Sphinx shows it.

MyST directives in Markdown: ```` ```{note} ```` fences and `:::{note}` colon fences, read as the
reStructuredText ones are (`rst_text.py`).

markdown-it-py tokenizes both fences (the colon fence through mdit-py-plugins); a fence whose
info string starts with `{name}` is a directive:
- code directives (`code-block`, `code`, `code-cell`, `sourcecode`...) are CodeSnippets;
- admonitions (`note`, `warning`, ..., `admonition` with its title, `versionadded` and the other
  version directives, `seealso`, `todo`) keep their body, read as Markdown, its first element led
  by the label ("Warning: ...");
- `toctree`, `index` and the like give nothing;
- `eval-rst` holds reStructuredText: read as such;
- any other directive (`autofunction`, `literalinclude`, an extension's) becomes its text,
  "autofunction: pkg.mod.func", then its body read as Markdown. No file is ever read.
A directive's options (`:key: value` lines, or a `---` YAML block, at the top of its body) are
dropped. Directives nest (a note inside a tab) up to `MAX_NESTING` deep; deeper, a body is kept
as plain text rather than read again.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from functools import lru_cache
from html.parser import HTMLParser

from rag_pipeline.core.ingestion.rst_text import (
    CODE_DIRECTIVES,
    DROPPED_DIRECTIVES,
    FIXED_LABELS,
    VERSION_LABELS,
    role_text,
    rst_located,
)
from rag_pipeline.core.ingestion.structural_text import Located, located, prose_element, with_parents

_SPACES = re.compile(r"[ \t]+")

# Part of the parser version: a change to the rules here changes elements, so documents parse again.
MYST_VERSION = "1"
MAX_NESTING = 8
_DIRECTIVE_INFO = re.compile(r"^\{([A-Za-z0-9][\w.+:-]*)\}\s*(.*)$", re.DOTALL)
_OPTION = re.compile(r"^:[\w.+-]+:(\s.*)?$")
_ADMONITIONS = {"note", "warning", "tip", "important", "caution", "danger", "error", "hint", "attention"}
_MYST_CODE = CODE_DIRECTIVES | {"code-cell"}


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


# --- CommonMark -----------------------------------------------------------------------------------


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
                yield located(Title(text, metadata=ElementMetadata(category_depth=depth)), token.map)
            index += 2
        elif kind == "paragraph_open":
            text = _inline_text(tokens[index + 1])
            if text:
                if item_started and not item_started[-1]:
                    item_started[-1] = True
                    yield located(ListItem(text, metadata=ElementMetadata()), token.map)
                else:
                    yield located(prose_element(text), token.map)
            index += 2
        elif kind in ("fence", "colon_fence") and is_directive(token):
            if item_started:
                item_started[-1] = True
            yield from directive_elements(token, nesting)
        elif kind in ("fence", "code_block", "colon_fence"):
            code = token.content.rstrip("\n")
            if code.strip():
                if item_started:
                    item_started[-1] = True
                yield located(CodeSnippet(code, metadata=ElementMetadata()), token.map)
        elif kind == "table_open":
            end = next(i for i in range(index, len(tokens)) if tokens[i].type == "table_close")
            rows = _table_rows(tokens[index:end + 1])
            rendered = _markdown().renderer.render(tokens[index:end + 1], _markdown().options, {})
            text = "\n".join(" ".join(row) for row in rows).strip()
            if text:
                yield located(Table(text, metadata=ElementMetadata(text_as_html=rendered.strip())), token.map)
            index = end
        elif kind == "html_block":
            yield from _html_block(token.content, token.map)
        index += 1


def _inline_text(inline) -> str:
    """The text of an inline token as a reader sees it: markup, links' targets and raw HTML dropped,
    a MyST role's text as Sphinx shows it."""
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
            yield located(prose_element(text), line_map)
        else:
            yield located(Title(text, metadata=ElementMetadata(category_depth=level - 1)), line_map)


# --- MyST directives ---


def is_directive(token) -> bool:
    """Whether a fence token is a MyST directive (its info string starts with `{name}`)."""
    return _DIRECTIVE_INFO.match(token.info.strip()) is not None


def directive_elements(token, nesting: int) -> Iterator[Located]:
    """The elements of one directive fence (see the module docstring), with lines in the page."""
    from unstructured.documents.elements import CodeSnippet, ElementMetadata, Text

    match = _DIRECTIVE_INFO.match(token.info.strip())
    name, argument = match[1].lower(), " ".join(match[2].split())
    body, skipped = _without_options(token.content)
    # The fence's first line is the opening fence; its body starts on the next (1-based: map[0] + 2).
    first_line = (token.map[0] + 2 + skipped) if token.map else None
    if name in DROPPED_DIRECTIVES:
        return
    if name in _MYST_CODE:
        code = body.rstrip("\n")
        if code.strip():
            yield _spanned(CodeSnippet(code, metadata=ElementMetadata()), first_line, code.count("\n"))
        return
    if name == "eval-rst":
        yield from _shifted(rst_located(body), first_line)
        return
    if nesting >= MAX_NESTING:
        inner = [_spanned(prose_element(" ".join(body.split())), first_line, body.count("\n"))] if body.strip() else []
    else:
        inner = list(_shifted(markdown_located(body, nesting + 1), first_line))
    label = _label(name, argument)
    if label is None:  # not an admonition: its name and argument, then its body
        if argument:
            yield _spanned(Text(f"{name}: {argument}", metadata=ElementMetadata()), first_line and first_line - 1 - skipped, 0)
        yield from inner
        return
    yield from _led(label, inner, first_line)


def _label(name: str, argument: str) -> str | None:
    """The label an admonition leads its body with, or None for a directive that is not one."""
    if name in VERSION_LABELS:
        return f"{VERSION_LABELS[name]} {argument}".strip()
    if name in FIXED_LABELS:
        return FIXED_LABELS[name]
    if name == "admonition":
        return argument or "Note"
    if name in _ADMONITIONS:
        return name.capitalize() + (f" ({argument})" if argument else "")
    return None


def _led(label: str, inner: list[Located], line: int | None) -> Iterator[Located]:
    """The body with its first prose element led by `label`; a lone label when it has none."""
    from unstructured.documents.elements import ElementMetadata, Text

    if inner and inner[0].element.category in ("NarrativeText", "UncategorizedText", "ListItem"):
        inner[0].element.text = f"{label}: {inner[0].element.text}"
    else:
        yield Located(Text(f"{label}:", metadata=ElementMetadata()), line, line)
    yield from inner


def _without_options(body: str) -> tuple[str, int]:
    """The body without its leading options (and the blank lines after them), and how many lines they took."""
    lines = body.splitlines(keepends=True)
    count = 0
    if lines and lines[0].strip() == "---":
        end = next((i for i in range(1, len(lines)) if lines[i].strip() == "---"), None)
        count = end + 1 if end is not None else 0
    while count < len(lines) and _OPTION.match(lines[count].rstrip("\n")):
        count += 1
    while count < len(lines) and not lines[count].strip():
        count += 1
    return "".join(lines[count:]), count


def _spanned(element, line: int | None, extra_lines: int) -> Located:
    return Located(element, line, line + extra_lines if line else None)


def _shifted(located: list[Located], first_line: int | None) -> Iterator[Located]:
    """Elements of a directive's body, their lines moved from the body's to the page's."""
    for item in located:
        if first_line is None or item.line_start is None:
            yield Located(item.element, None, None)
        else:
            yield Located(item.element, item.line_start + first_line - 1, (item.line_end or item.line_start) + first_line - 1)
