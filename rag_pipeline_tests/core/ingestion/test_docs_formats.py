"""The formats docs teams write: Sphinx's reStructuredText, MyST Markdown and Jupyter notebooks, read
by their structure into the same elements as Markdown (headings with their nesting, code as code,
admonitions with their label), on a real Sphinx tree and on real notebooks; a page or notebook that
cannot be read fails alone with its reason."""

from __future__ import annotations

import base64
import json

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from rag_pipeline.config import ChunkingConfig, DocumentLimits, EmbeddingConfig, LifecycleConfig, SourceConfig
from rag_pipeline.core.embedding.hashing import HashingEmbedder
from rag_pipeline.core.ingestion.parse_worker import ParserProcess
from rag_pipeline.core.ingestion.parsing import ParseError, ParseJob, parse_job, parser_version
from rag_pipeline.core.ingestion.stages import ingest_source
from rag_pipeline.core.storage import duckdb_store
from rag_pipeline_tests.conftest import write_tree
from rag_pipeline_tests.corpora import sphinx_docs

EMBEDDER = HashingEmbedder(EmbeddingConfig(kind="hashing"))


def _parse(name: str, text: str | bytes):
    data = text if isinstance(text, bytes) else text.encode()
    return parse_job(ParseJob(f"s:{name}", name, name.rsplit(".", 1)[1], data, "hash"))


def _ingest(tmp_path, source: SourceConfig):
    store = duckdb_store(tmp_path / "index.duckdb")
    reports = ingest_source(source, store, EMBEDDER, ChunkingConfig(), LifecycleConfig(), "r1")
    return store, reports


def _chunks(store, doc_id: str) -> list[tuple[tuple[str, ...], str, str]]:
    rows = store.db.rows("SELECT heading_path, text, embed_text FROM chunks WHERE doc_id = ? ORDER BY ordinal", [doc_id])
    return [(tuple(path), text, embed_text) for path, text, embed_text in rows]


# --- reStructuredText -----------------------------------------------------------------------------

SPHINX_PAGE = """\
.. _top:

===============
 Writing tests
===============

Use :func:`pytest.fixture` for set-up, see :ref:`the guide <fixtures-guide>` and
:py:meth:`~pkg.Client.close`; the current release is |release|.

.. |release| replace:: 8.1

.. toctree::
   :maxdepth: 2

   install
   usage

Fixtures
========

.. note::

   A fixture runs once per test unless its scope says otherwise.

.. code-block:: python
   :caption: conftest.py
   :emphasize-lines: 2

   @pytest.fixture
   def client():
       return Client()

.. versionadded:: 8.0 The ``scope`` argument.

Parametrize
-----------

.. autofunction:: pytest.mark.parametrize

.. literalinclude:: ../../../../etc/passwd
   :language: text

.. include:: /etc/passwd

.. tab-set::

   .. tab-item:: Unix

      Run ``pytest -q`` in a shell.

Markers
^^^^^^^

:param name: the marker's name
:returns: nothing

Run it::

    pytest -m slow

.. warning:: Markers must be registered.
"""


def test_sphinx_rst_keeps_headings_code_and_admonitions_and_reads_no_other_file(capfd):
    doc = _parse("guide.rst", SPHINX_PAGE)
    by_text = {e.text: e for e in doc.elements}
    titles = [(e.text, e.heading_path) for e in doc.elements if e.category == "Title"]
    # Overline and underline, then three more adornment styles: each nests under the one before.
    assert titles == [("Writing tests", ("Writing tests",)),
                      ("Fixtures", ("Writing tests", "Fixtures")),
                      ("Parametrize", ("Writing tests", "Fixtures", "Parametrize")),
                      ("Markers", ("Writing tests", "Fixtures", "Parametrize", "Markers"))]
    assert doc.title == "Writing tests"
    assert by_text["Use pytest.fixture for set-up, see the guide and close; the current release is 8.1."].category \
        == "NarrativeText"
    assert by_text["Note: A fixture runs once per test unless its scope says otherwise."].heading_path \
        == ("Writing tests", "Fixtures")
    code = by_text["@pytest.fixture\ndef client():\n    return Client()"]
    assert code.category == "CodeSnippet" and (code.line_start, code.line_end) == (29, 31)
    assert "Added in version 8.0: The scope argument." in by_text
    assert by_text["autofunction: pytest.mark.parametrize"].heading_path == ("Writing tests", "Fixtures", "Parametrize")
    # The directive's text, never the file: nothing of /etc/passwd, whichever way it was named.
    assert "literalinclude: ../../../../etc/passwd" in by_text
    assert not any("root:" in e.text for e in doc.elements)
    assert "Run pytest -q in a shell." in by_text  # an unknown directive's content is read
    assert by_text["pytest -m slow"].category == "CodeSnippet"
    assert by_text["param name: the marker's name"].category == "ListItem"
    assert "Warning: Markers must be registered." in by_text
    # The toctree's entries and the targets give no element.
    assert not any(e.text in ("install", "usage", "top") for e in doc.elements)
    # docutils' complaints (the include it may not read) went nowhere near the terminal.
    captured = capfd.readouterr()
    assert "ERROR" not in captured.err + captured.out and "WARNING" not in captured.err + captured.out


def test_a_page_docutils_complains_about_still_parses_and_one_it_cannot_read_fails_with_its_line(capfd):
    # Inconsistent title levels, an unknown substitution, a bad indentation: warnings and errors.
    odd = ("Top\n===\n\nSub\n---\n\nOther\n===\n\nText with |nothing| defined.\n\n   badly indented\n  text\n\n"
           "Last\n----\n\nThe end of the page.\n")
    doc = _parse("odd.rst", odd)
    assert "The end of the page." in [e.text for e in doc.elements]
    long_line = "Title\n=====\n\n" + "x" * 10_001 + "\n"
    with pytest.raises(ParseError, match="docutils could not read it: Line 4 exceeds the line-length-limit"):
        _parse("long.rst", long_line)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""


def test_roles_and_directives_docutils_does_not_know_become_their_text():
    page = (":doc:`Installing <install>` needs :term:`virtualenv`, :class:`!Session` and :mod:`os.path`.\n\n"
            ".. mermaid::\n\n   graph TD; A-->B\n\n.. automodule:: click\n   :members:\n")
    texts = [e.text for e in _parse("roles.rst", page).elements]
    assert texts == ["Installing needs virtualenv, Session and os.path.", "graph TD; A-->B", "automodule: click"]


@pytest.mark.slow
def test_a_real_sphinx_docs_tree_ingests_with_headings_in_breadcrumbs_and_code_as_code(tmp_path, capfd):
    """click 8.1.7's docs (its PyPI sdist): every page served, sections as breadcrumbs, code as code,
    no reStructuredText markup left in any chunk, nothing printed by docutils."""
    docs = sphinx_docs("click", "8.1.7")
    pages = sorted(p.name for p in docs.glob("*.rst"))
    assert len(pages) >= 20
    store, reports = _ingest(tmp_path, SourceConfig(name="click", path=docs))
    assert reports["parsed"].failures == [] and reports["indexed"].switched
    assert {d["doc_id"] for d in store.served.indexed_documents("click")} == {f"click:{p}" for p in pages}
    (options,) = store.staging.load_parsed(["click:options.rst"])
    counting = [e for e in options.elements if e.heading_path == ("Options", "Counting")]
    assert [e.category for e in counting][:3] == ["Title", "NarrativeText", "CodeSnippet"]
    assert "@click.option('-v', '--verbose', count=True)" in counting[2].text
    chunks = _chunks(store, "click:options.rst")
    section = next(c for c in chunks if c[0] == ("Options", "Counting"))
    assert section[2].startswith("Options > Counting\n") and "count=True" in section[1]
    assert any("autofunction: echo" in text for _, text, _ in _chunks(store, "click:api.rst"))
    everything = "\n".join(text for doc in pages for _, text, _ in _chunks(store, f"click:{doc}"))
    for markup in (":func:`", ":ref:`", ":class:`", ".. code-block::", ".. note::", "versionadded::"):
        assert markup not in everything
    captured = capfd.readouterr()
    assert "(ERROR/" not in captured.err and "(WARNING/" not in captured.err


# --- MyST -----------------------------------------------------------------------------------------

MYST_PAGE = """\
# Configuration

Call {py:func}`httpx.Client` with {ref}`a timeout <timeouts>`.

```{note}
:class: tip

Timeouts apply **per request**.
```

## Proxies

:::{warning}
Proxies are read from the environment.
:::

```{code-block} python
:caption: proxy.py

client = httpx.Client(proxy="http://localhost:8030")
```

```{toctree}
advanced
```

```{autofunction} httpx.get
```

```{eval-rst}
.. versionchanged:: 0.28 The ``proxies`` argument is gone.
```
"""


def test_myst_directives_are_read_as_their_rst_twins():
    doc = _parse("config.md", MYST_PAGE)
    found = [(e.category, e.text, e.heading_path, e.line_start) for e in doc.elements]
    assert found == [
        ("Title", "Configuration", ("Configuration",), 1),
        ("NarrativeText", "Call httpx.Client with a timeout.", ("Configuration",), 3),
        ("NarrativeText", "Note: Timeouts apply per request.", ("Configuration",), 8),
        ("Title", "Proxies", ("Configuration", "Proxies"), 11),
        ("NarrativeText", "Warning: Proxies are read from the environment.", ("Configuration", "Proxies"), 14),
        ("CodeSnippet", 'client = httpx.Client(proxy="http://localhost:8030")', ("Configuration", "Proxies"), 20),
        ("UncategorizedText", "autofunction: httpx.get", ("Configuration", "Proxies"), 27),
        ("NarrativeText", "Changed in version 0.28: The proxies argument is gone.", ("Configuration", "Proxies"), 31),
    ]


def test_plain_markdown_fences_stay_code_and_mkdocstrings_lines_are_no_fences():
    doc = _parse("plain.md", "# Use\n\n```python\n{x: 1}\n```\n\n::: httpx.get\n\n## Client\n\n::: httpx.Client\n")
    assert [(e.category, e.text, e.heading_path) for e in doc.elements] == [
        ("Title", "Use", ("Use",)), ("CodeSnippet", "{x: 1}", ("Use",)), ("UncategorizedText", "::: httpx.get", ("Use",)),
        ("Title", "Client", ("Use", "Client")), ("UncategorizedText", "::: httpx.Client", ("Use", "Client"))]


# --- notebooks ------------------------------------------------------------------------------------

PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64).decode()


def _notebook(cells) -> str:
    return nbformat.writes(new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                        "language": "python"}}))


def _analysis() -> str:
    load = new_code_cell("import pandas as pd\nsales = pd.read_csv('sales.csv')", outputs=[
        new_output("stream", name="stdout", text="PRINTED_BY_THE_CODE 1,204 rows\n"),
        new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure size 640x480>"}),
    ])
    return _notebook([
        new_markdown_cell("# Sales analysis\n\nWe load last quarter's sales and look for gaps."),
        load,
        new_markdown_cell("## Cleaning\n\nRows without a region are dropped before totals are taken."),
        new_code_cell("sales = sales.dropna(subset=['region'])"),
        new_markdown_cell("```{note}\nRegions are the sales team's, not the tax office's.\n```"),
        new_markdown_cell("### Totals by region"),
        new_code_cell("sales.groupby('region').amount.sum()",
                      outputs=[new_output("execute_result", data={"text/plain": "region\nnorth 10"}, execution_count=3)]),
    ])


def test_a_notebook_keeps_headings_across_cells_and_code_and_leaves_outputs_out():
    doc = _parse("analysis.ipynb", _analysis())
    found = [(e.category, e.text, e.heading_path) for e in doc.elements]
    assert found == [
        ("Title", "Sales analysis", ("Sales analysis",)),
        ("NarrativeText", "We load last quarter's sales and look for gaps.", ("Sales analysis",)),
        ("CodeSnippet", "import pandas as pd\nsales = pd.read_csv('sales.csv')", ("Sales analysis",)),
        ("Title", "Cleaning", ("Sales analysis", "Cleaning")),
        ("NarrativeText", "Rows without a region are dropped before totals are taken.", ("Sales analysis", "Cleaning")),
        ("CodeSnippet", "sales = sales.dropna(subset=['region'])", ("Sales analysis", "Cleaning")),
        ("NarrativeText", "Note: Regions are the sales team's, not the tax office's.", ("Sales analysis", "Cleaning")),
        ("Title", "Totals by region", ("Sales analysis", "Cleaning", "Totals by region")),
        ("CodeSnippet", "sales.groupby('region').amount.sum()", ("Sales analysis", "Cleaning", "Totals by region")),
    ]
    assert doc.title == "Sales analysis"
    assert all(e.line_start is None for e in doc.elements)  # a notebook is JSON: no lines to cite


def test_a_folder_of_notebooks_ingests_and_a_broken_one_fails_alone(tmp_path):
    old = nbformat.v3.new_notebook(worksheets=[nbformat.v3.new_worksheet(cells=[
        nbformat.v3.new_heading_cell("Old format", level=1), nbformat.v3.new_text_cell("markdown", "Written in 2014.")])])
    root = write_tree(tmp_path / "notebooks", {
        "analysis.ipynb": _analysis(),
        "old.ipynb": nbformat.v3.writes_json(old),
        "broken.ipynb": _analysis()[:200],
        "settings.ipynb": json.dumps({"theme": "dark", "cells": "none"}),
    })
    store, reports = _ingest(tmp_path, SourceConfig(name="nb", path=root))
    failures = {f.doc_id: f.reason for f in reports["parsed"].failures}
    assert failures["nb:broken.ipynb"].startswith("not a Jupyter notebook: not valid JSON (line ")
    assert failures["nb:settings.ipynb"].startswith("valid JSON but not a Jupyter notebook")
    assert {d["doc_id"] for d in store.served.indexed_documents("nb")} == {"nb:analysis.ipynb", "nb:old.ipynb"}
    chunks = _chunks(store, "nb:analysis.ipynb")
    assert any(path == ("Sales analysis", "Cleaning") and embed.startswith("Sales analysis > Cleaning\n")
               and "dropna" in text for path, text, embed in chunks)
    everything = " ".join(text for _, text, _ in chunks)
    assert "PRINTED_BY_THE_CODE" not in everything and PNG[:20] not in everything and "north 10" not in everything
    assert _chunks(store, "nb:old.ipynb")[0][1].startswith("Old format")


# --- bombs and limits -----------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["rst nested 2,000 deep", "notebook JSON nested 100,000 deep"])
def test_a_deeply_nested_page_is_refused_alone_by_the_worker(kind):
    if kind.startswith("rst"):
        job = ParseJob("s:deep.rst", "deep.rst", "rst",
                       "".join(" " * (2 * i) + "- item\n\n" for i in range(2000)).encode(), "h")
        expected = "nested deeper than docutils can follow"
    else:
        cells = '[{"cell_type": "markdown", "metadata": {}, "source": "# Deep"}]'
        bomb = '{"nbformat": 4, "nbformat_minor": 5, "metadata": {"x": ' + "[" * 100_000 + "]" * 100_000 + "}, "
        job = ParseJob("s:deep.ipynb", "deep.ipynb", "ipynb", (bomb + f'"cells": {cells}}}').encode(), "h")
        expected = "JSON nested deeper than a notebook ever is"
    parser = ParserProcess(DocumentLimits().max_parser_memory_mb)
    try:
        with pytest.raises(ParseError, match=expected):
            parser.parse(job, 120)
        # The worker goes on with the next document.
        assert parser.parse(ParseJob("s:a.rst", "a.rst", "rst", b"After\n=====\n\nThe next page.\n", "h"), 120).title == "After"
    finally:
        parser.close()


def test_a_huge_page_or_notebook_is_refused_by_its_types_limits(tmp_path):
    huge_cells = [new_markdown_cell(f"Paragraph {n} of a notebook nobody wrote by hand.") for n in range(300)]
    root = write_tree(tmp_path / "docs", {
        "big.rst": "Big\n===\n\n" + "A line of a page far too long to be a page.\n" * 40_000,
        "cells.ipynb": _notebook(huge_cells),
        "small.rst": "Small\n=====\n\nA page a person wrote.\n",
    })
    limits = DocumentLimits(max_file_mb_by_type={"rst": 1.0}, max_elements=200)
    store, reports = _ingest(tmp_path, SourceConfig(name="docs", path=root, limits=limits))
    failures = {f.doc_id: f.reason for f in reports["parsed"].failures}
    assert "over the 1.0 MB limit for rst files (limits.max_file_mb_by_type.rst): refused before parsing" in failures["docs:big.rst"]
    assert failures["docs:cells.ipynb"].startswith("300 elements (headings, paragraphs, list items...), over the 200 limit")
    assert {d["doc_id"] for d in store.served.indexed_documents("docs")} == {"docs:small.rst"}


def test_the_parser_version_names_each_reader_so_a_new_one_parses_documents_again():
    version = parser_version()
    for reader in ("docutils ", "nbformat ", "mdit-py-plugins ", "markdown-it-py ", "rst ", "ipynb ", "myst "):
        assert reader in version
