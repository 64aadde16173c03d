"""MyST directives in Markdown: ```` ```{note} ```` fences and `:::{note}` colon fences, read as the
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
from collections.abc import Iterator

from rag_pipeline.core.ingestion.rst_text import CODE_DIRECTIVES, DROPPED_DIRECTIVES, FIXED_LABELS, VERSION_LABELS
from rag_pipeline.core.ingestion.structural_text import Located, prose_element

# Part of the parser version: a change to the rules here changes elements, so documents parse again.
MYST_VERSION = "1"
MAX_NESTING = 8
_DIRECTIVE_INFO = re.compile(r"^\{([A-Za-z0-9][\w.+:-]*)\}\s*(.*)$", re.DOTALL)
_OPTION = re.compile(r"^:[\w.+-]+:(\s.*)?$")
_ADMONITIONS = {"note", "warning", "tip", "important", "caution", "danger", "error", "hint", "attention"}
_MYST_CODE = CODE_DIRECTIVES | {"code-cell"}


def is_directive(token) -> bool:
    """Whether a fence token is a MyST directive (its info string starts with `{name}`)."""
    return _DIRECTIVE_INFO.match(token.info.strip()) is not None


def directive_elements(token, nesting: int) -> Iterator[Located]:
    """The elements of one directive fence (see the module docstring), with lines in the page."""
    from unstructured.documents.elements import CodeSnippet, ElementMetadata, Text

    from rag_pipeline.core.ingestion.structural_text import markdown_located

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
        from rag_pipeline.core.ingestion.rst_text import rst_located

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
