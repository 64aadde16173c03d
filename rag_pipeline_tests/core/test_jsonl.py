"""JSON Lines written by people: read a line at a time, a line over its limit refused with its number."""

from __future__ import annotations

import re

import pytest

from rag_pipeline.core.jsonl import MAX_RECORD_BYTES, records


def test_records_with_a_byte_order_mark_and_blank_lines(tmp_path):
    path = tmp_path / "v.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n{"b": 2}\n')
    assert list(records(path)) == [(1, {"a": 1}), (3, {"b": 2})]


@pytest.mark.parametrize(("content", "message"), [
    (b'{"a": 1}\n{"x": "' + b"y" * MAX_RECORD_BYTES + b'"}\n', "line 2: 1.0 MB, over the 1.0 MB limit for one record"),
    (b'{"a": 1}\n[1, 2]\n', "line 2: expected a JSON object, got list"),
    (b'{"a": "caf\xe9"}\n', "line 1: not UTF-8 text (byte 10)"),
])
def test_a_bad_line_names_the_file_and_line(tmp_path, content, message):
    path = tmp_path / "v.jsonl"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=re.escape(message)) as excinfo:
        list(records(path))
    assert str(path) in str(excinfo.value)
