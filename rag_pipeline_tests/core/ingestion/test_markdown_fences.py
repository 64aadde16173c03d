"""MkDocs fences with attributes are code, not prose: through the real `unstructured` parser."""

import pytest

from rag_pipeline.core.ingestion.markdown_fences import normalize_fences
from rag_pipeline.core.ingestion.parsing import ParseJob, parse_job

PAGE = '''# Middleware

Middleware wraps the whole application.

```python title="main.py" linenums="1"
# Add the CORS middleware to every route
app = Application(middleware=[Middleware(CORSMiddleware)])
```

  ~~~~ yaml title="mkdocs.yml"
  # a comment in the config
  site_name: Docs
  ~~~~~~

```
# a plain fence still works
```

Use `` ```python `` to open a fence in prose.

## Order

Middleware runs in the order it is listed.
'''


def test_fence_lines_are_rewritten_and_nothing_else():
    out = normalize_fences(PAGE)
    before, after = PAGE.splitlines(), out.splitlines()
    assert len(before) == len(after), "line spans stay right"
    changed = {i + 1: (b, a) for i, (b, a) in enumerate(zip(before, after)) if b != a}
    assert changed == {
        5: ('```python title="main.py" linenums="1"', "```python"),
        10: ('  ~~~~ yaml title="mkdocs.yml"', "~~~~yaml"),
        13: ("  ~~~~~~", "~~~~"),
    }


@pytest.mark.parametrize("info", ["", "python", ".python", "{.python .numbered}", 'python hl_lines="1 2"'])
def test_fences_python_markdown_reads_are_left_alone(info):
    text = f"```{info}\n# code\n```\n"
    assert normalize_fences(text) == text


def test_a_code_comment_is_never_a_heading_of_the_page():
    doc = parse_job(ParseJob("docs:middleware.md", "middleware.md", "md", PAGE.encode(), "h"))
    titles = [e.text for e in doc.elements if e.category == "Title"]
    assert titles == ["Middleware", "Order"]
    assert doc.title == "Middleware"
    code = [e for e in doc.elements if e.category == "CodeSnippet"]
    assert any("# Add the CORS middleware to every route" in e.text for e in code)
    assert any("site_name: Docs" in e.text for e in code)
    order = next(e for e in doc.elements if e.text.startswith("Middleware runs in the order"))
    assert order.heading_path == ("Middleware", "Order"), "breadcrumbs come from headings, not from code"
