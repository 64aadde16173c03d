"""Jupyter notebooks (`.ipynb`), read with nbformat, into `unstructured`'s elements.

Markdown cells are read as Markdown (`markdown_text.py`, MyST included), code cells are
CodeSnippets, and headings nest across cells as they do on the rendered page (a `##` in one cell
sits under the `#` of an earlier one). Outputs are left out: they are what the code printed or
drew, often megabytes of images, rarely text a reader searches for. Raw cells are left out too
(they are for nbconvert). Notebooks of every nbformat version nbformat reads are converted to
version 4 first; a notebook that breaks the schema in a detail (an unexpected key) is still read.
A file that is not JSON, or is JSON but not a notebook, fails alone with the reason.

A notebook has no lines a reader cites (it is JSON), so its elements carry no line span.
"""

from __future__ import annotations

import json
import warnings

from rag_pipeline.core.ingestion.markdown_text import markdown_located
from rag_pipeline.core.ingestion.structural_text import Located, with_parents

# Part of the parser version: a change to the rules here changes elements, so documents parse again.
NOTEBOOK_VERSION = "1"


class NotebookError(ValueError):
    """The file is not a notebook nbformat can read; the message says why and what to do."""


def notebook_elements(text: str) -> list[Located]:
    """`unstructured` elements of a notebook's cells, in order; NotebookError for a file that is not one."""
    from unstructured.documents.elements import CodeSnippet, ElementMetadata

    located: list[Located] = []
    for cell in _cells(text):
        source = cell.get("source") or ""
        source = "".join(source) if isinstance(source, list) else str(source)
        if not source.strip():
            continue
        if cell.get("cell_type") == "markdown":
            located.extend(Located(item.element, None, None) for item in markdown_located(source))
        elif cell.get("cell_type") == "code":
            located.append(Located(CodeSnippet(source.rstrip("\n"), metadata=ElementMetadata()), None, None))
    return with_parents(located)


def _cells(text: str) -> list:
    """The notebook's cells as nbformat 4 has them."""
    import nbformat

    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotebookError(f"not a Jupyter notebook: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
                            "save it again from Jupyter, or give it its real extension") from None
    except RecursionError:
        raise NotebookError("not a Jupyter notebook: JSON nested deeper than a notebook ever is") from None
    if not isinstance(raw, dict) or "nbformat" not in raw:
        raise NotebookError("valid JSON but not a Jupyter notebook (no \"nbformat\" version at its top): "
                            "give it its real extension, or exclude it")
    with warnings.catch_warnings():
        # Schema details (a missing cell id, an unexpected key) do not stop a notebook being read.
        warnings.simplefilter("ignore")
        try:
            notebook = nbformat.reads(text, as_version=4, capture_validation_error={})
        except Exception as exc:  # noqa: BLE001 - nbformat raises several types for a file it cannot convert
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise NotebookError(f"not a Jupyter notebook nbformat {nbformat.__version__} can read: {said}") from None
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        raise NotebookError("not a Jupyter notebook: its \"cells\" are not a list")
    return [cell for cell in cells if isinstance(cell, dict)]
