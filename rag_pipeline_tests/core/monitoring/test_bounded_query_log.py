"""The query log is read within limits: a huge line is refused with its file and line, unread,
and the rest of the day is read on."""

from __future__ import annotations

import gzip
import io
import json
import tracemalloc

import pytest

from rag_pipeline.core.bounded import bounded_lines
from rag_pipeline.core.monitoring.sampling import MAX_QUERY_LOG_LINE_BYTES, read_query_log

HUGE = 50 * 1024 * 1024


def _line(hour: int, query: str) -> bytes:
    return json.dumps({"timestamp": f"2026-11-20T{hour:02d}:00:00Z", "query": query, "tenant": "acme"}).encode() + b"\n"


def _huge_line() -> bytes:
    # Valid JSON: parsed, its 50 MB query would be embedded and searched.
    return b'{"timestamp": "2026-11-20T09:30:00Z", "query": "' + b"refund " * (HUGE // 7) + b'"}\n'


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz"])
def test_a_50_mb_line_is_refused_unread_and_the_day_goes_on(tmp_path, suffix):
    payload = _line(8, "how long do refunds take") + _huge_line() + _line(10, "sso setup")
    path = tmp_path / f"2026-11-20{suffix}"
    path.write_bytes(gzip.compress(payload, compresslevel=1) if suffix.endswith(".gz") else payload)
    tracemalloc.start()
    try:
        log = read_query_log(tmp_path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [q.query for q in log.queries] == ["how long do refunds take", "sso setup"]
    assert [(m["file"], m["line"]) for m in log.malformed] == [(path.name, 2)]
    assert "line of 50.0 MB, over the 64 KB limit for one logged query: skipped unread" in log.malformed[0]["reason"]
    # The line was read past in blocks, never held: the peak stays far below its size.
    assert peak < 8 * 1024 * 1024, peak


def test_a_broken_gzip_keeps_the_lines_before_the_break(tmp_path):
    whole = gzip.compress(b"".join(_line(h, f"query {h}") for h in range(8, 20)))
    (tmp_path / "2026-11-20.jsonl.gz").write_bytes(whole[: len(whole) - 12])  # the trailer and a little more are gone
    log = read_query_log(tmp_path)
    assert log.queries and all(q.query.startswith("query ") for q in log.queries)
    assert len(log.malformed) == 1 and "the rest of the file is skipped" in log.malformed[0]["reason"]


def test_a_parquet_record_with_a_huge_query_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    queries = ["refunds", "x" * (MAX_QUERY_LOG_LINE_BYTES + 1), "sso"]
    pq.write_table(pa.table({"timestamp": ["2026-11-20T08:00:00Z"] * 3, "query": queries}), tmp_path / "day.parquet")
    log = read_query_log(tmp_path)
    assert [q.query for q in log.queries] == ["refunds", "sso"]
    assert [(m["file"], m["line"]) for m in log.malformed] == [("day.parquet", 2)]


@pytest.mark.parametrize(("data", "expected"), [
    (b"abc\n" + b"x" * 10 + b"\n", [b"abc\n", b"x" * 10 + b"\n"]),  # exactly at the limit: kept
    (b"x" * 10 + b"\r\n", [b"x" * 10 + b"\r\n"]),  # the line break does not count
    (b"y" * 11 + b"\nok", [None, b"ok"]),  # one byte over: refused; a last line without a break is read
    (b"z" * 11, [None]),  # over the limit and never ended
    (b"z" * 30 + b"\n\n", [None, b"\n"]),
])
def test_bounded_lines_edges(data, expected):
    lines = list(bounded_lines(io.BytesIO(data), 10))
    assert [line.data for line in lines] == expected
    assert [line.number for line in lines] == list(range(1, len(expected) + 1))
    assert sum(line.size for line in lines) == len(data)
