"""reStructuredText as Sphinx writes it, read by its structure with docutils, into `unstructured`'s elements.

docutils parses the page into its document tree (sections of any adornment style, nested as the
page orders them); the tree is walked into the same elements as Markdown (`markdown_text.py`, `structural_text.py`):
- a section's title is a Title with `category_depth` = its nesting level - 1;
- a paragraph is prose; the first paragraph of a list item, a field (`:param x: ...`), an option
  or a definition list's term is a ListItem;
- literal blocks (`::`), doctest blocks and code directives (`code-block`, `code`, `sourcecode`,
  doctest and example directives) are CodeSnippets, their text as written;
- tables (grid, simple, `list-table`, `csv-table` written inline) are Tables with `text_as_html`;
- admonitions (`note`, `warning`, ..., `admonition`, Sphinx's `versionadded`, `versionchanged`,
  `deprecated`, `versionremoved`, `seealso`, `todo`) keep their body, the first element led by
  their label ("Note: ...", "Added in version 2.0: ...");
- `toctree`, `index`, `highlight`, `currentmodule` and link targets (`.. _label:`) give nothing;
  comments, substitution definitions and images neither;
- any other directive (Sphinx's `autofunction`, `literalinclude`, an extension's) becomes its
  text: "autofunction: pkg.mod.func", then its content read as reStructuredText. Nothing is ever
  read from another file (`include`, `literalinclude`, `csv-table :file:`, `raw`);
- roles docutils does not know (`:func:`, `:ref:`, `:class:`, `:doc:`, ...) become the text Sphinx
  shows: `:func:`pytest.fixture`` is "pytest.fixture", `:ref:`Title <label>`` is "Title",
  `:meth:`~a.B.c`` is "c"; a substitution `|name|` its definition's text (one level: a definition
  is never expanded into another, so no substitution can blow up).

Only the parser runs (no docutils transforms). docutils' warnings and errors about a page are
collected, never printed, and do not fail it; a page it cannot read at all (a line over its
length limit, nesting deeper than it can follow) fails alone with docutils' reason and line.
Each element's line span comes from the tree (1-based, inclusive).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import lru_cache

from rag_pipeline.core.ingestion.structural_text import Located, prose_element, table_html, with_parents

# Part of the parser version: a change to the rules here changes elements, so documents parse again.
RST_VERSION = "1"

# Directives whose content is code: Sphinx's, sphinx.ext.doctest's, IPython's, and the example
# directives of the Pallets projects (click:example, click:run), which hold Python.
CODE_DIRECTIVES = frozenset({"code", "code-block", "sourcecode", "testcode", "testoutput", "testsetup", "testcleanup",
                             "doctest", "ipython", "jupyter-execute", "click:example", "click:run"})
# Directives that hold no text a reader looks for: navigation, index entries, highlighting defaults.
DROPPED_DIRECTIVES = frozenset({"toctree", "index", "highlight", "currentmodule", "tabularcolumns", "sectionauthor",
                                "moduleauthor", "codeauthor", "contents"})
# Sphinx's admonitions docutils does not have, with the label Sphinx prints.
VERSION_LABELS = {"versionadded": "Added in version", "versionchanged": "Changed in version",
                  "deprecated": "Deprecated since version", "versionremoved": "Removed in version"}
FIXED_LABELS = {"seealso": "See also", "todo": "To do"}

_DIRECTIVE = re.compile(r"^[ \t]*\.\.[ \t]+([A-Za-z0-9][\w.+:-]*?)[ \t]*::", re.MULTILINE)
_ROLE = re.compile(r":([A-Za-z0-9][\w.+-]*(?::[\w.+-]+)*):`")
_TITLED_TARGET = re.compile(r"^(?P<title>.*?)\s*<(?P<target>[^<>]+)>$", re.DOTALL)
_SPACES = re.compile(r"\s+")


class RstError(ValueError):
    """The page cannot be read at all; the message says why and where."""


def role_text(text: str) -> str:
    """What Sphinx shows for a cross-reference role's text: the title of `Title <target>`, the last
    part of `~a.b.c`, the target itself otherwise (a leading `!` only turns the link off)."""
    text = text.strip()
    titled = _TITLED_TARGET.match(text)
    if titled and titled["title"]:
        return titled["title"]
    text = text.lstrip("!")
    if text.startswith("~"):
        return text[1:].rsplit(".", 1)[-1]
    return text


def rst_elements(text: str) -> list[Located]:
    """`unstructured` elements of a reStructuredText page, in document order; RstError when docutils
    cannot read it at all."""
    return with_parents(rst_located(text))


def rst_located(text: str) -> list[Located]:
    """The elements of a reStructuredText text with their line spans in it, parents not yet set."""
    document, messages = _parse(text)
    located = list(_Walker(_substitutions(document)).blocks(document.children, 0))
    if not located and messages:
        raise RstError(f"docutils could not read it: {messages[0]}")
    return located


# --- docutils -----------------------------------------------------------------------------------


def _parse(text: str):
    """The document tree of `text` and docutils' messages about it ("line N: ..."), errors first."""
    from docutils import utils
    from docutils.parsers.rst import Parser

    _register_names(text)
    document = utils.new_document("<page>", _settings())
    messages: list[tuple[int, str]] = []

    def observe(message) -> None:
        if message["level"] >= 2:  # warnings and worse
            line = message.get("line")
            where = f"line {line}: " if line else ""
            messages.append((-message["level"], f"{where}{message.children[0].astext() if message.children else ''}"))

    document.reporter.attach_observer(observe)
    try:
        Parser().parse(text, document)
    except RecursionError:
        raise RstError("nested deeper than docutils can follow (lists, quotes or directives inside one another, "
                       "hundreds deep): not a page a person wrote; split or flatten it") from None
    return document, [said for _, said in sorted(messages, key=lambda item: item[0])]


@lru_cache(maxsize=1)
def _settings():
    """docutils' settings: report nothing (the observer collects messages), never halt, never read
    another file or pass raw markup through."""
    import io

    from docutils.frontend import get_default_settings
    from docutils.parsers.rst import Parser

    settings = get_default_settings(Parser)
    settings.report_level = 5
    settings.halt_level = 5
    settings.warning_stream = io.StringIO()
    settings.file_insertion_enabled = False
    settings.raw_enabled = False
    settings.pep_references = False
    settings.rfc_references = False
    settings.syntax_highlight = "none"
    return settings


@lru_cache(maxsize=1)
def _scratch():
    """A document and language module to ask docutils which names it knows."""
    from docutils import utils
    from docutils.parsers.rst.languages import get_language

    return utils.new_document("<names>", _settings()), get_language("en")


def _register_names(text: str) -> None:
    """Register Sphinx's directives once, and a generic handler for every directive and role of
    `text` docutils does not know (registration is process-wide and kept)."""
    from docutils.parsers.rst import directives, roles

    classes = _directive_classes()
    document, language = _scratch()
    for name in {match.lower() for match in _DIRECTIVE.findall(text)}:
        if directives.directive(name, language, document)[0] is None:
            directives.register_directive(name, classes["generic"])
    for name in {match.lower() for match in _ROLE.findall(text)}:
        if roles.role(name, language, 0, document.reporter)[0] is None:
            roles.register_local_role(name, _text_role)


def _text_role(name, rawtext, text, lineno, inliner, options=None, content=None):
    """A role docutils does not know (Sphinx's cross-references): the text Sphinx shows."""
    from docutils import nodes, utils

    return [nodes.literal(rawtext, role_text(utils.unescape(text)))], []


@lru_cache(maxsize=1)
def _directive_classes() -> dict[str, type]:
    """Sphinx's directives as docutils directives, registered once; returns the generic one too."""
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives

    class AnyOptions(dict):
        """Accepts every option (Sphinx's `:caption:`, `:members:`...): its value is kept as text."""

        def __missing__(self, key):
            return directives.unchanged

        def __bool__(self) -> bool:  # docutils looks for options only when a directive has some
            return True

    class Code(Directive):
        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = AnyOptions()

        def run(self):
            code = "\n".join(self.content)
            block = nodes.literal_block(code, code)
            block.line = self.content_offset + 1
            return [block]

    class Dropped(Directive):
        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = AnyOptions()

        def run(self):
            return []

    class Labelled(Directive):
        """An admonition with Sphinx's label; the version directives' label carries the version,
        and the rest of their line leads the body."""

        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = AnyOptions()

        def run(self):
            box = nodes.admonition()
            box.line = self.lineno
            if self.name in VERSION_LABELS:
                version, _, said = (self.arguments[0] if self.arguments else "").partition(" ")
                box += nodes.title(text=f"{VERSION_LABELS[self.name]} {version}".strip())
                if said.strip():
                    inline, _ = self.state.inline_text(said.strip(), self.lineno)
                    paragraph = nodes.paragraph(said, "", *inline)
                    paragraph.line = self.lineno
                    box += paragraph
            else:
                box += nodes.title(text=FIXED_LABELS[self.name])
                if self.arguments:  # `.. seealso:: module zipfile` puts its text on the directive's line
                    inline, _ = self.state.inline_text(self.arguments[0], self.lineno)
                    paragraph = nodes.paragraph(self.arguments[0], "", *inline)
                    paragraph.line = self.lineno
                    box += paragraph
            self.state.nested_parse(self.content, self.content_offset, box)
            return [box]

    class Generic(Directive):
        """A directive docutils does not know: "name: arguments", then its content as reStructuredText."""

        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = AnyOptions()

        def run(self):
            found = []
            if self.arguments:
                said = f"{self.name}: {_SPACES.sub(' ', self.arguments[0]).strip()}"
                paragraph = nodes.paragraph(said, said)
                paragraph.line = self.lineno
                found.append(paragraph)
            if self.content:
                holder = nodes.container()
                self.state.nested_parse(self.content, self.content_offset, holder)
                found.extend(holder.children)
            return found

    for name in CODE_DIRECTIVES:
        directives.register_directive(name, Code)
    for name in DROPPED_DIRECTIVES:
        directives.register_directive(name, Dropped)
    for name in (*VERSION_LABELS, *FIXED_LABELS):
        directives.register_directive(name, Labelled)
    return {"generic": Generic}


def _substitutions(document) -> dict[str, str]:
    """Each substitution definition's text, as written (its own references are not expanded)."""
    from docutils import nodes

    found = {}
    for definition in document.findall(nodes.substitution_definition):
        for name in definition["names"]:
            found[name.lower()] = definition.astext()
    return found


# --- the walk -----------------------------------------------------------------------------------


class _Walker:
    """docutils' block nodes to Located elements."""

    def __init__(self, substitutions: dict[str, str]) -> None:
        self.substitutions = substitutions

    def blocks(self, children, depth: int, first_item: bool = False) -> Iterator[Located]:
        """Elements of a run of sibling block nodes; `depth`: the section level they are in;
        `first_item`: their first paragraph opens a list item."""
        for node in children:
            for located in self.block(node, depth, first_item):
                first_item = False
                yield located

    def block(self, node, depth: int, first_item: bool = False) -> Iterator[Located]:
        from docutils import nodes
        from unstructured.documents.elements import CodeSnippet, ElementMetadata, ListItem, Table, Title

        if isinstance(node, (nodes.comment, nodes.target, nodes.substitution_definition, nodes.system_message,
                             nodes.pending, nodes.raw, nodes.image, nodes.transition, nodes.docinfo, nodes.meta,
                             nodes.label)) or isinstance(node, nodes.Invisible):
            return
        if isinstance(node, nodes.section):
            title = node.next_node(nodes.title)
            text = self.text(title) if title is not None else ""
            if text:
                yield self.located(Title(text, metadata=ElementMetadata(category_depth=depth)), title, heading=True)
            yield from self.blocks([c for c in node.children if c is not title], depth + 1)
        elif isinstance(node, (nodes.literal_block, nodes.doctest_block)):
            code = node.astext().rstrip("\n")
            if code.strip():
                yield self.located(CodeSnippet(code, metadata=ElementMetadata()), node)
        elif isinstance(node, nodes.paragraph):
            text = self.text(node)
            if text:
                element = ListItem(text, metadata=ElementMetadata()) if first_item else prose_element(text)
                yield self.located(element, node)
        elif isinstance(node, nodes.Admonition):
            yield from self.admonition(node, depth)
        elif isinstance(node, nodes.table):
            rows = self.table_rows(node)
            if rows:
                text = "\n".join(" ".join(row) for row in rows)
                yield self.located(Table(text, metadata=ElementMetadata(text_as_html=table_html(rows))), node)
        elif isinstance(node, (nodes.bullet_list, nodes.enumerated_list)):
            for item in node.children:
                yield from self.blocks(item.children, depth, first_item=True)
        elif isinstance(node, (nodes.definition_list_item, nodes.field, nodes.option_list_item)):
            yield from self.term(node, depth)
        elif isinstance(node, nodes.topic) and "contents" in node.get("classes", ()):
            return
        elif isinstance(node, (nodes.title, nodes.rubric, nodes.caption, nodes.attribution, nodes.line_block,
                               nodes.math_block)):
            text = self.text(node)
            if text:
                yield self.located(prose_element(text), node)
        elif isinstance(node, nodes.TextElement) and not node.children and not node.astext().strip():
            return
        elif isinstance(node, nodes.TextElement):
            text = self.text(node)
            if text:
                yield self.located(prose_element(text), node)
        else:  # containers: lists' parts, block quotes, figures, topics, footnotes, compounds...
            yield from self.blocks(node.children, depth)

    def term(self, node, depth: int) -> Iterator[Located]:
        """A term and its definition (a glossary entry, a field, an option): one ListItem "term:
        first paragraph", then the rest of the definition."""
        from docutils import nodes
        from unstructured.documents.elements import ElementMetadata, ListItem

        head = node.children[0]
        body = [c for part in node.children[1:] if isinstance(part, (nodes.definition, nodes.field_body,
                                                                      nodes.description)) for c in part.children]
        term = self.text(head)
        if body and isinstance(body[0], nodes.paragraph):
            said = self.text(body.pop(0))
            term = f"{term}: {said}" if term and said else term or said
        if term:
            yield self.located(ListItem(term, metadata=ElementMetadata()), head)
        yield from self.blocks(body, depth)

    def admonition(self, node, depth: int) -> Iterator[Located]:
        """An admonition's body, its first element led by its label."""
        from docutils import nodes
        from unstructured.documents.elements import ElementMetadata, Text

        title = node.next_node(nodes.title) if isinstance(node, nodes.admonition) else None
        label = self.text(title) if title is not None else type(node).__name__.capitalize()
        body = [c for c in node.children if c is not title]
        led = False
        for located in self.blocks(body, depth):
            element = located.element
            if not led and element.category in ("NarrativeText", "UncategorizedText", "ListItem"):
                element.text = f"{label}: {element.text}"
            elif not led:
                yield Located(Text(f"{label}:", metadata=ElementMetadata()), located.line_start, located.line_start)
            led = True
            yield located
        if not led and label:
            yield self.located(Text(label, metadata=ElementMetadata()), node)

    def text(self, node) -> str:
        """A node's text as a reader sees it: substitutions replaced, white space collapsed."""
        return _SPACES.sub(" ", "".join(self._pieces(node))).strip()

    def _pieces(self, node) -> Iterator[str]:
        from docutils import nodes

        for child in node.children:
            if isinstance(child, nodes.Text):
                yield str(child)
            elif isinstance(child, nodes.substitution_reference):
                yield self.substitutions.get(child["refname"].lower(), child.astext())
            elif isinstance(child, nodes.option) and child.parent.index(child):
                yield ", " + child.astext()  # `-v, --verbose`: options of one item, as written
            elif not isinstance(child, nodes.system_message):  # docutils' complaint is not the page's text
                yield from self._pieces(child)

    def table_rows(self, table) -> list[list[str]]:
        from docutils import nodes

        rows = []
        for row in table.findall(nodes.row):
            cells = [self.text(entry) for entry in row.children if isinstance(entry, nodes.entry)]
            if any(cells):
                rows.append(cells)
        return rows

    def located(self, element, node, heading: bool = False) -> Located:
        """The element with the lines `node` covers (a title: the lines of its text and adornment)."""
        start = _line(node)
        if start is None:
            return Located(element, None, None)
        if heading:
            # docutils gives a title the line of its underline; the text is above it.
            return Located(element, max(start - 1, 1), start)
        raw = node.rawsource or ""
        end = start + max(raw.strip("\n").count("\n"), element.text.count("\n") if element.category == "CodeSnippet" else 0)
        return Located(element, start, end)


def _line(node) -> int | None:
    """The node's 1-based line, else the nearest one an ancestor knows."""
    while node is not None:
        if getattr(node, "line", None):
            return node.line
        node = node.parent
    return None
