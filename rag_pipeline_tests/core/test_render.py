"""The one renderer: text written by others cannot break a table, open a tag or become a link."""

import json
import re

import pytest

from rag_pipeline.core import render

HOSTILE = [
    "evil<img src=x onerror=alert(9)>|x.md",
    "<script>alert(1)</script>",
    "[click me](javascript:alert(1))",
    "![pixel](https://tracker.example/p.png)",
    "<a href='vbscript:msgbox'>x</a>",
    "line one\nline two | with pipe\r\n",
    "`code` and ``double``",
    "# not a heading",
    "> not a quote",
    "www.example.com and data:text/html,<b>x</b>",
    "right-to-left \u202eoverride\u202c and bell \x07",
    "ONERROR = 1 OnLoad=2",
]
# What must never appear raw in rendered output (case-insensitive).
FORBIDDEN = re.compile(r"<script|<img|<a\s|onerror\s*=|onload\s*=|javascript:|vbscript:|data:|https?://|www\.", re.I)


@pytest.mark.parametrize("text", HOSTILE)
def test_inline_text_is_inert(text):
    out = render.inline(text)
    assert not FORBIDDEN.search(out), out
    assert "\n" not in out and "\r" not in out
    # No unescaped pipe, backtick or bracket survives.
    assert not re.search(r"(?<!\\)[|`\[\]]", out), out
    assert "\u202e" not in out and "\x07" not in out


def test_a_hostile_table_keeps_its_columns():
    rows = [{"doc": text, "n": i, "share": i / 7} for i, text in enumerate(HOSTILE)]
    table = render.table(rows, ["doc", "n", "share"])
    lines = table.splitlines()
    assert len(lines) == 2 + len(HOSTILE)
    for line in lines:
        # Cells are separated by unescaped pipes only: exactly 4 per row of 3 columns.
        assert len(re.findall(r"(?<!\\)\|", line)) == 4, line
    assert not FORBIDDEN.search(table)
    assert "| 0.143 |" in table  # floats for reading: 3 decimals


def test_cells_are_cut_and_rows_limited():
    rows = [{"a": "x" * 500}] * 60
    table = render.table(rows, ["a"], limit=50, max_cell_chars=100)
    assert table.count("…") == 50 + 1  # 50 cut cells and the "… and 10 more" line
    assert "and 10 more" in table
    assert max(len(line) for line in table.splitlines()) < 110


def test_markdown_built_by_us_passes_through():
    table = render.table([[render.Markdown("**overall**"), 1]], ["slice", "cases"])
    assert "| **overall** | 1 |" in table
    assert render.inline("**overall**") == "\\*\\*overall\\*\\*"


def test_printable_escapes_control_characters_for_terminals_and_logs():
    assert render.printable("a\nb\tc\x1b[31m") == "a\\nb\\tc\\u001b[31m"
    assert render.printable("plain ünïcödé 页面") == "plain ünïcödé 页面"


def test_safe_json_stays_valid_json_and_inert():
    value = {"query": "<script>x</script> javascript:alert(1) onerror=1 ```", "n": 1}
    text = render.safe_json(value)
    assert not FORBIDDEN.search(text) and "```" not in text
    assert json.loads(text) == value  # the escapes are JSON's own: a reader gets the text back


def test_numbers_and_missing_values():
    assert render.number(float("nan")) == "–"
    assert render.number(None) == "–"
    assert render.number(3) == "3"
    assert render.number(0.123456) == "0.123"
    assert render.table([], ["a"]) == "_none_"
