"""Fenced code blocks as MkDocs and GitHub write them, made readable for Python-Markdown.

`unstructured` turns Markdown into HTML with Python-Markdown's `fenced_code` extension, which
accepts an opening fence followed by nothing, a language (```` ```python ````), `{attributes}` or
`hl_lines="..."`. MkDocs (pymdownx.superfences) and GitHub also allow attributes after the
language (```` ```python title="main.py" linenums="1" ````), a fence indented by up to three
spaces, and a closing fence longer than the opening one (CommonMark). Python-Markdown reads such a
block as prose: its code comments become headings (a `# comment` became a page's title and the
head of its breadcrumbs), and its closing fence opens a block that swallows the text after it.

`normalize_fences` rewrites only the fence lines of such blocks, to the form `fenced_code` reads
(```` ```python ````): the language is kept, the attributes (display hints) are dropped, and every
other line, and the number of lines, stays as it is, so line spans stay right.
"""

from __future__ import annotations

import re

# Part of the parser version: a change here changes elements, so documents parse again.
FENCES_VERSION = "1"
# An opening or closing fence: up to three spaces, then three or more backticks or tildes.
_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*?)(?P<end>\r?\n?)$")
# Info strings Python-Markdown's fenced_code reads as they are.
_ACCEPTED_INFO = re.compile(r"""^\s*(\{.*\}|\.?[\w#.+-]*\s*(hl_lines=("|')[^"']*\3)?)\s*$""")
_LANGUAGE = re.compile(r"^\.?([\w#.+-]+)")


def normalize_fences(text: str) -> str:
    """The text with every fenced code block in a form Python-Markdown's fenced_code reads (see the
    module docstring); the same number of lines."""
    lines = text.splitlines(keepends=True)
    opened: str | None = None  # the fence string of the open block, as rewritten
    for index, line in enumerate(lines):
        match = _FENCE.match(line)
        if match is None:
            continue
        fence, info, end = match["fence"], match["info"], match["end"]
        if opened is None:
            if fence[0] == "`" and "`" in info:
                continue  # CommonMark: a backtick fence's info string holds no backtick (inline code)
            if match["indent"] or not _ACCEPTED_INFO.match(info):
                language = _LANGUAGE.match(info.strip())
                lines[index] = fence + (language.group(1) if language else "") + end
            opened = fence
        elif fence[0] == opened[0] and len(fence) >= len(opened) and not info.strip():
            # A closing fence: Python-Markdown wants the opening fence exactly.
            lines[index] = opened + end
            opened = None
    return "".join(lines)
