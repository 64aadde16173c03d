"""Records of a dataset file (JSON, JSON Lines or CSV), each with the line it starts on.

A JSON file is parsed whole, then scanned once for the offset of each record (an array's items,
or the items under a container key), so that every error can name its line.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rag_pipeline.core.evaluation.golden.cases import GoldenSetError
from rag_pipeline.core.evaluation.golden.lines import MAX_GOLDEN_FILE_BYTES, MAX_GOLDEN_LINE_BYTES, bounded_lines, check_file_size

_CONTAINERS = ("goldens", "test_cases", "samples", "data", "rows", "examples")
# Bound of an imported dataset (JSON is parsed whole, so this bounds its memory too).
MAX_IMPORT_FILE_BYTES = MAX_GOLDEN_FILE_BYTES

_WS = re.compile(r"[ \t\n\r]*")


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()


def _array_offsets(text: str, i: int) -> list[int]:
    """Offsets of the elements of the JSON array opening at `i`."""
    decoder, offsets = json.JSONDecoder(), []
    i = _skip(text, i + 1)
    while text[i] != "]":
        offsets.append(i)
        _, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return offsets


def _member_offset(text: str, i: int, key: str) -> int:
    """Offset of the value of `key` in the JSON object opening at `i`."""
    decoder = json.JSONDecoder()
    i = _skip(text, i + 1)
    while text[i] != "}":
        name, i = decoder.raw_decode(text, i)
        i = _skip(text, _skip(text, i) + 1)
        if name == key:
            return i
        _, i = decoder.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] == ",":
            i = _skip(text, i + 1)
    raise KeyError(key)


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    """The file's lines, bounded (`bounded_lines`); GoldenSetError at a line over its bound or not UTF-8."""
    for number, text, error in bounded_lines(path, max_file_bytes=MAX_IMPORT_FILE_BYTES, what="dataset to import"):
        if error is not None:
            raise GoldenSetError(f"{path.name} line {number}: {error}")
        yield number, text


def read_records(path: Path) -> tuple[list[tuple[int, dict]], str | None]:
    """(line, record) for every record of a JSON, JSONL or CSV file, and the JSON container key used."""
    check_file_size(path, MAX_IMPORT_FILE_BYTES, "dataset to import")
    if path.suffix.lower() == ".csv":
        csv.field_size_limit(MAX_GOLDEN_LINE_BYTES)
        reader = csv.DictReader(text for _, text in _lines(path))
        records, previous = [], 1
        try:
            for row in reader:
                records.append((previous + 1, {k: v for k, v in row.items() if k is not None}))
                previous = reader.line_num
        except csv.Error as exc:
            raise GoldenSetError(f"{path.name} line {reader.line_num}: {exc}") from None
        return records, None
    if not _json_lines(path):
        text = path.read_text(encoding="utf-8-sig")
        try:
            whole = json.loads(text)
        except json.JSONDecodeError as exc:
            raise GoldenSetError(f"{path.name} line {exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None
        return _container(path, text, whole)
    records = []
    for number, line in _lines(path):
        if line.strip():
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise GoldenSetError(f"{path.name} line {number}: invalid JSON ({exc.msg} at column {exc.colno})") from None
            records.append((number, record))
    return _objects(path, records), None


def _json_lines(path: Path) -> bool:
    """JSON Lines (streamed, a record a line) rather than one JSON document (parsed whole): the first
    non-blank line is a whole object that holds no list of records."""
    first = next((text for _, text in _lines(path) if text.strip()), "")
    try:
        value = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(value, dict) and not any(isinstance(value.get(k), list) for k in _CONTAINERS)


def _container(path: Path, text: str, whole: Any) -> tuple[list[tuple[int, dict]], str | None]:
    text = text.removeprefix("\ufeff")
    start = _skip(text, 0)
    container = next((k for k in _CONTAINERS if isinstance(whole.get(k), list)), None) if isinstance(whole, dict) else None
    if container is not None:
        items, start = whole[container], _member_offset(text, start, container)
    else:
        items = whole if isinstance(whole, list) else [whole]
    offsets = _array_offsets(text, start) if isinstance(items, list) and text[start] == "[" else [start]
    return _objects(path, [(text.count("\n", 0, o) + 1, item) for o, item in zip(offsets, items)]), container


def _objects(path: Path, records: list[tuple[int, Any]]) -> list[tuple[int, dict]]:
    for line, record in records:
        if not isinstance(record, dict):
            raise GoldenSetError(f"{path.name} line {line}: expected a JSON object, got {type(record).__name__}")
    return records
