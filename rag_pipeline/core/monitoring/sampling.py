"""Production query sampling: read the query log, draw a deterministic stratified sample, run it
through the current retrieval with each query's own trusted caller context, and measure what can
be measured without reference answers."""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

from rag_pipeline.config import ConfigError
from rag_pipeline.core.bounded import bounded_lines, size_text
from rag_pipeline.core.evaluation.scoring.metrics import nearest_rank_quantile
from rag_pipeline.core.models import SearchFilters
from rag_pipeline.core.retrieval.fusion import rollup_documents
from rag_pipeline.core.retrieval.retriever import Retriever


@dataclass(frozen=True)
class LoggedQuery:
    timestamp: datetime
    query: str
    tenant: str | None
    roles: tuple[str, ...]
    session_id: str | None = None
    feedback: str | None = None
    latency_ms: float | None = None
    source: str = ""  # file:line, for tracing a sampled query back to the log


@dataclass
class QueryLog:
    queries: list[LoggedQuery]
    malformed: list[dict] = field(default_factory=list)
    files: int = 0


def _timestamp(stamp: object) -> datetime:
    """An ISO 8601 date-time (string or parsed by Parquet), or Unix epoch seconds or milliseconds."""
    if isinstance(stamp, datetime):
        return stamp
    if isinstance(stamp, (int, float)) and not isinstance(stamp, bool):
        # Epoch milliseconds pass 1e11 in 1973 as seconds would in 5138: the size tells them apart.
        return datetime.fromtimestamp(stamp / 1000 if stamp > 1e11 else stamp, UTC)
    try:
        return datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"field 'timestamp' is not an ISO date-time or epoch: {stamp!r}") from exc


def _parse_line(raw: object, where: str) -> LoggedQuery:
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    query = raw.get("query")
    if not isinstance(query, str) or not query.strip():
        raise ValueError("field 'query' missing or empty")
    timestamp = _timestamp(raw.get("timestamp"))
    roles = raw.get("roles") or []
    if isinstance(roles, str):
        roles = [r.strip() for r in roles.split(",") if r.strip()]
    if not isinstance(roles, list):
        raise ValueError("field 'roles' must be a list")
    latency = raw.get("latency_ms")
    return LoggedQuery(
        # Compared as naive UTC, so that daily windows mean UTC days.
        timestamp=timestamp.astimezone(UTC).replace(tzinfo=None) if timestamp.tzinfo else timestamp,
        query=" ".join(query.split()),
        tenant=raw.get("tenant") or None,
        roles=tuple(str(r) for r in roles),
        session_id=raw.get("session_id"),
        feedback=raw.get("feedback"),
        latency_ms=float(latency) if isinstance(latency, (int, float)) else None,
        source=where,
    )


JSON_LINES_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
# One logged query is a line of a few hundred bytes; a line (or a Parquet record's query) past this
# is refused with its file and line, never parsed, embedded or searched (a 50 MB line once kept
# `monitor` busy for minutes at 3 GB), and the rest of the day is read on.
MAX_QUERY_LOG_LINE_BYTES = 64 * 1024
# Parquet records are read this many at a time.
_PARQUET_BATCH = 4096


def _too_long(size: int) -> str:
    return (f"line of {size_text(size)}, over the {size_text(MAX_QUERY_LOG_LINE_BYTES)} limit for one logged query: "
            "skipped unread")


def _json_lines(log: QueryLog, path: Path, name: str) -> None:
    """The queries of one JSON-lines file (gzipped or not), each line read within its limit."""
    opener = gzip.open if path.name.endswith(".gz") else open
    number = 0
    try:
        with opener(path, "rb") as handle:
            for line in bounded_lines(handle, MAX_QUERY_LOG_LINE_BYTES):
                number = line.number
                if line.data is None:
                    log.malformed.append({"file": name, "line": line.number, "reason": _too_long(line.size)})
                elif line.data.strip():
                    _read_json_line(log, line.data, name, line.number)
    except (OSError, EOFError) as exc:  # a truncated or corrupt gzip stream: what came before it stands
        log.malformed.append({"file": name, "line": number + 1, "reason": f"cannot be read on from here ({exc}): "
                              "the rest of the file is skipped"})


def _parquet_records(log: QueryLog, path: Path, name: str) -> None:
    """The queries of one Parquet file, a batch of records at a time."""
    import pyarrow.parquet as pq

    number = 0
    for batch in pq.ParquetFile(path).iter_batches(batch_size=_PARQUET_BATCH):
        for record in batch.to_pylist():
            number += 1
            query = record.get("query")
            if isinstance(query, str) and len(query) > MAX_QUERY_LOG_LINE_BYTES:
                log.malformed.append({"file": name, "line": number, "reason": (
                    f"query of {len(query):,} characters, over the {size_text(MAX_QUERY_LOG_LINE_BYTES)} limit "
                    "for one logged query: skipped")})
                continue
            try:
                log.queries.append(_parse_line(record, f"{name}:{number}"))
            except ValueError as exc:
                log.malformed.append({"file": name, "line": number, "reason": str(exc)})


def _read_json_line(log: QueryLog, line: bytes, name: str, number: int) -> None:
    """Parse one line into the log, or record why it is malformed (bad bytes, bad JSON, bad fields)."""
    try:
        log.queries.append(_parse_line(json.loads(line.decode("utf-8")), f"{name}:{number}"))
    except UnicodeDecodeError as exc:
        log.malformed.append({"file": name, "line": number, "reason": f"not UTF-8 (byte {exc.start})"})
    except json.JSONDecodeError as exc:
        log.malformed.append({"file": name, "line": number, "reason": f"invalid JSON ({exc.msg})"})
    except ValueError as exc:
        log.malformed.append({"file": name, "line": number, "reason": str(exc)})


def read_query_log(folder: Path) -> QueryLog:
    """Every query in the folder's JSON-lines (.jsonl, .ndjson, optionally gzipped) and Parquet
    files, subfolders included; malformed lines are counted and reported with their file and line
    number, never fatal."""
    log = QueryLog(queries=[])
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"query log folder {folder} does not exist: fix monitoring.query_log in the config")
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        name = path.relative_to(folder).as_posix()
        if path.name.endswith(JSON_LINES_SUFFIXES):
            log.files += 1
            _json_lines(log, path, name)
        elif path.suffix == ".parquet":
            log.files += 1
            _parquet_records(log, path, name)
    log.queries.sort(key=lambda q: (q.timestamp, q.source))
    return log


# Refused lines named one by one (in the drift report, the asset's table, `monitor`'s output);
# the rest are counted.
MAX_REFUSED_SHOWN = 20


def refused_lines(log: QueryLog, limit: int = MAX_REFUSED_SHOWN) -> list[dict]:
    """The first `limit` refused lines as `{"where": "file:line", "reason": ...}`."""
    return [{"where": f"{m['file']}:{m['line']}", "reason": m["reason"]} for m in log.malformed[:limit]]


def window(queries: Sequence[LoggedQuery], day: date, days_back: int) -> list[LoggedQuery]:
    """Queries from the `days_back` days ending with `day` (inclusive)."""
    start = datetime.combine(day - timedelta(days=days_back - 1), datetime.min.time())
    end = datetime.combine(day + timedelta(days=1), datetime.min.time())
    return [q for q in queries if start <= q.timestamp < end]


def stratified_sample(queries: Sequence[LoggedQuery], size: int, seed: str) -> list[LoggedQuery]:
    """A deterministic sample of `size` queries, stratified by tenant (proportional allocation,
    largest remainder), seeded by `seed` (the partition's date): the same day gives the same sample."""
    if len(queries) <= size:
        return list(queries)
    strata: dict[str, list[LoggedQuery]] = defaultdict(list)
    for q in queries:
        strata[q.tenant or "(no tenant)"].append(q)
    quotas = {name: size * len(items) / len(queries) for name, items in strata.items()}
    allocation = {name: math.floor(quota) for name, quota in quotas.items()}
    for name in sorted(quotas, key=lambda n: (-(quotas[n] - allocation[n]), n))[: size - sum(allocation.values())]:
        allocation[name] += 1
    rng = random.Random(int(hashlib.sha256(seed.encode()).hexdigest()[:16], 16))
    sample: list[LoggedQuery] = []
    for name in sorted(strata):
        # Sorted first: the sample must not depend on the order the log was read in.
        items = sorted(strata[name], key=lambda q: (q.timestamp, q.source, q.query))
        sample.extend(rng.sample(items, allocation[name]))
    return sorted(sample, key=lambda q: (q.timestamp, q.source))


@dataclass
class SampledResult:
    query: LoggedQuery
    best_score: float | None
    no_result: bool
    top_docs: list[str]
    top_statuses: list[str]
    overlap: float | None
    latency_ms: float


@dataclass
class SampleReport:
    day: date
    window_queries: int
    results: list[SampledResult]
    threshold: float
    stale_docs: set[str] = field(default_factory=set)

    def measures(self) -> dict[str, float]:
        """Reference-free measures of the sample, keyed with units."""
        n = len(self.results)
        if n == 0:
            return {"sampled_queries": 0.0, "window_queries": float(self.window_queries)}
        best = sorted(r.best_score for r in self.results if r.best_score is not None)
        latencies = sorted(r.latency_ms for r in self.results)
        overlaps = [r.overlap for r in self.results if r.overlap is not None]
        hits = [d for r in self.results for d in r.top_docs]
        statuses = [s for r in self.results for s in r.top_statuses]
        return {
            "sampled_queries": float(n),
            "window_queries": float(self.window_queries),
            "no_result_rate": sum(1 for r in self.results if r.no_result) / n,
            "best_score_p10": nearest_rank_quantile(best, 0.10),
            "best_score_p50": nearest_rank_quantile(best, 0.50),
            "best_score_p90": nearest_rank_quantile(best, 0.90),
            "lexical_dense_overlap": sum(overlaps) / len(overlaps) if overlaps else float("nan"),
            "p50_latency_ms": nearest_rank_quantile(latencies, 0.50),
            "p95_latency_ms": nearest_rank_quantile(latencies, 0.95),
            "superseded_hit_share": statuses.count("superseded") / len(statuses) if statuses else 0.0,
            "stale_hit_share": sum(1 for d in hits if d in self.stale_docs) / len(hits) if hits else 0.0,
        }


def run_sample(
    sample: Sequence[LoggedQuery], retriever: Retriever, threshold: float, day: date, window_size: int,
    stale_docs: set[str] | None = None,
) -> SampleReport:
    """Each sampled query through the current hybrid retrieval with its own tenant and roles.

    no-result: the best dense cosine is under the no-result threshold calibrated by the golden
    evaluation; overlap: Jaccard similarity of the documents in the dense and BM25 top k;
    latency: each query searched once more on its own, wall clock.
    """
    filters = [SearchFilters(tenant=q.tenant, roles=q.roles) for q in sample]
    results = retriever.search_many([q.query for q in sample], filters, "hybrid")
    # Each query timed on its own, as the service answers it: a batch shares its time evenly.
    latencies = retriever.single_query_latencies([q.query for q in sample], filters, "hybrid")
    sampled = []
    k = retriever.config.k
    for query, result, latency in zip(sample, results, latencies, strict=True):
        dense = result.candidates.get("dense", [])
        best = max((h.score for h in dense), default=None)
        dense_docs = {d for d, _ in rollup_documents(dense[:k])}
        bm25_docs = {d for d, _ in rollup_documents(result.candidates.get("bm25", [])[:k])}
        union = dense_docs | bm25_docs
        sampled.append(
            SampledResult(
                query=query,
                best_score=best,
                no_result=best is None or best < threshold,
                top_docs=[d for d, _ in result.ranked_documents()[:k]],
                top_statuses=[h.status for h in result.hits],
                overlap=len(dense_docs & bm25_docs) / len(union) if union else None,
                latency_ms=latency,
            )
        )
    return SampleReport(day, window_size, sampled, threshold, stale_docs or set())
