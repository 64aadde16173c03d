"""The tables, their version, and the forward migrations of older DuckDB files (data only: the
database applies them, `Database._prepare_schema`).

Every insert names its columns from `TABLES`, so adding a column never shifts another's values.
A database records its schema version; opening an older DuckDB file brings it forward in one
transaction, and a newer one is refused (an older rag_pipeline must not write into it).
"""

from __future__ import annotations

from rag_pipeline.core.errors import UnavailableError

SCHEMA_VERSION = 9

_TEXT, _TEXTS, _INT, _BIG, _BOOL, _TS, _DATE, _REAL, _REALS = (
    "VARCHAR", "VARCHAR[]", "INTEGER", "BIGINT", "BOOLEAN", "TIMESTAMP", "DATE", "DOUBLE PRECISION", "DOUBLE PRECISION[]",
)
_VECTOR = "{vector}"  # FLOAT[] in DuckDB, pgvector's vector in PostgreSQL

_DISCOVERY = [
    ("source_id", _TEXT), ("doc_id", _TEXT), ("rel_path", _TEXT), ("content_hash", _TEXT), ("meta_json", _TEXT),
    ("size", _BIG), ("file_type", _TEXT), ("supported", _BOOL), ("skip_reason", _TEXT), ("error", _TEXT),
    ("discovered_at", _TS), ("mtime_ns", _BIG), ("stat_key", _TEXT),
]
_CHUNK = [
    ("chunk_id", _TEXT), ("doc_id", _TEXT), ("source_id", _TEXT), ("ordinal", _INT), ("title", _TEXT),
    ("heading_path", _TEXTS), ("text", _TEXT), ("embed_text", _TEXT), ("text_hash", _TEXT), ("token_count", _INT),
    ("line_start", _INT), ("line_end", _INT), ("page_number", _INT),
]
# Access and lifecycle metadata, copied from the parsed document to its served rows.
_ACCESS = [("tenant", _TEXT), ("visibility", _TEXT), ("roles", _TEXTS), ("status", _TEXT), ("effective_date", _DATE)]

# A served document's row (its version kept apart in `history_documents`).
_HISTORY_DOCUMENT = [
    ("doc_id", _TEXT), ("source_id", _TEXT), ("rel_path", _TEXT), ("title", _TEXT), ("file_type", _TEXT),
    ("content_hash", _TEXT), *_ACCESS, ("supersedes", _TEXT), ("superseded_by", _TEXT),
    ("parser_version", _TEXT), ("chunk_count", _INT), ("indexed_at", _TS),
]

TABLES: dict[str, list[tuple[str, str]]] = {
    # Staging: what the stages write, never read by search.
    "discovery": _DISCOVERY,
    "parsed_docs": [
        ("doc_id", _TEXT), ("source_id", _TEXT), ("content_hash", _TEXT), ("meta_json", _TEXT), ("title", _TEXT),
        ("parser_version", _TEXT), ("parsed_at", _TS), *_ACCESS, ("supersedes", _TEXT), ("superseded_by", _TEXT),
    ],
    "elements": [
        ("doc_id", _TEXT), ("source_id", _TEXT), ("ordinal", _INT), ("category", _TEXT), ("text", _TEXT),
        ("heading_path", _TEXTS), ("page_number", _INT), ("table_html", _TEXT), ("line_start", _INT), ("line_end", _INT),
    ],
    "staged_chunks": [*_CHUNK, ("content_hash", _TEXT), ("chunking_fingerprint", _TEXT), ("embedded_identity", _TEXT)],
    "staged_postings": [("chunk_id", _TEXT), ("source_id", _TEXT), ("term", _TEXT), ("tf", _INT)],
    "embedding_cache": [("identity", _TEXT), ("text_hash", _TEXT), ("created_at", _TS), ("vector", _VECTOR)],
    # Documents whose staged rows a stage wrote since the source's last committed switch: what an
    # incremental switch compares with the served rows (cleared by the switch that commits).
    "staged_changes": [("source_id", _TEXT), ("doc_id", _TEXT)],
    # The committed manifest and the served index: changed only by the switch.
    "manifest": _DISCOVERY,
    "documents": [*_HISTORY_DOCUMENT, ("version", _TEXT)],
    # `analyzer`: the lexical analyzer its postings were made with (lexical.analyzer_identity).
    "chunks": [*_CHUNK, *_ACCESS, ("lex_len", _INT), ("analyzer", _TEXT)],
    "vectors": [("chunk_id", _TEXT), ("source_id", _TEXT), ("identity", _TEXT), ("vector", _VECTOR)],
    "postings": [("chunk_id", _TEXT), ("source_id", _TEXT), ("term", _TEXT), ("tf", _INT)],
    # The fingerprint of a source's inputs (names, sizes, times, settings) seen by the latest
    # discovery, and the one the last committed switch was built from: equal means nothing to do.
    "source_inputs": [("source_id", _TEXT), ("staged", _TEXT), ("committed", _TEXT)],
    # One token per source, replaced by every switch: in-memory copies of the index compare it.
    "served_versions": [("source_id", _TEXT), ("version", _TEXT)],
    "tombstones": [
        ("doc_id", _TEXT), ("source_id", _TEXT), ("title", _TEXT), ("opening_text", _TEXT), ("text_hashes", _TEXTS),
        ("deleted_at", _TS), ("run_id", _TEXT),
    ],
    # Index states (`states.py`): every served state of a source, numbered per source (`seq`); the
    # document versions each state served, as spans of states (a document served unchanged across
    # a hundred states is one row); the rows of versions no longer served that a retained state
    # needs (never searched); and the sources pinned to a state or disabled, by whom and why.
    "index_states": [
        ("source_id", _TEXT), ("seq", _INT), ("state_id", _TEXT), ("created_at", _TS), ("run_id", _TEXT),
        ("origin", _TEXT), ("manifest_hash", _TEXT), ("digest", _TEXT), ("documents", _INT), ("chunks", _INT),
        ("settings", _TEXT), ("model", _TEXT), ("revision", _TEXT), ("note", _TEXT),
    ],
    "served_spans": [("source_id", _TEXT), ("doc_id", _TEXT), ("version", _TEXT), ("first_seq", _INT), ("last_seq", _INT)],
    "history_documents": [("version", _TEXT), *_HISTORY_DOCUMENT],
    "history_chunks": [("version", _TEXT), *_CHUNK, *_ACCESS, ("lex_len", _INT), ("analyzer", _TEXT)],
    "history_vectors": [("version", _TEXT), ("chunk_id", _TEXT), ("identity", _TEXT), ("vector", _VECTOR)],
    "history_postings": [("version", _TEXT), ("chunk_id", _TEXT), ("term", _TEXT), ("tf", _INT)],
    "source_pins": [
        ("source_id", _TEXT), ("kind", _TEXT), ("state_id", _TEXT), ("pinned_by", _TEXT), ("reason", _TEXT),
        ("pinned_at", _TS),
    ],
    # The record of every document and stage, and of every switch.
    "ledger": [
        ("doc_id", _TEXT), ("source_id", _TEXT), ("stage", _TEXT), ("status", _TEXT), ("content_hash", _TEXT),
        ("parser_version", _TEXT), ("reason", _TEXT), ("updated_at", _TS), ("run_id", _TEXT),
    ],
    "source_runs": [
        ("source_id", _TEXT), ("root", _TEXT), ("last_run_at", _TS), ("last_success_at", _TS), ("manifest_hash", _TEXT),
        ("run_id", _TEXT), ("last_failure", _TEXT), ("last_failure_at", _TS),
    ],
    # How many documents each committed switch left a source serving, and the runs that were
    # allowed to delete past the mass-delete limit: the deletion guard's memory over time.
    "served_history": [
        ("source_id", _TEXT), ("recorded_at", _TS), ("served_documents", _INT), ("run_id", _TEXT),
        ("mass_delete_allowed", _BOOL),
    ],
    # The proofs each committed switch ran: `full` (the whole source) or `incremental` (what the run
    # changed), and why; what decides when the next full proof is due (core/ingestion/proof_scope.py).
    "source_proofs": [("source_id", _TEXT), ("run_id", _TEXT), ("scope", _TEXT), ("reason", _TEXT), ("proved_at", _TS)],
    # Records: evaluations, baselines, experiments, golden snapshots, production samples.
    "baselines": [("revision", _TEXT), ("eval_id", _TEXT), ("promoted_at", _TS), ("note", _TEXT), ("suite", _TEXT)],
    # Changes to the golden set made by a command (a case released from holdout, say): who, when, why.
    "golden_changes": [
        ("changed_at", _TS), ("change", _TEXT), ("case_ids", _TEXTS), ("old_revision", _TEXT), ("new_revision", _TEXT),
        ("changed_by", _TEXT), ("reason", _TEXT),
    ],
    # Exceptions to a gate rule: who, why, until which day (core/evaluation/gating/waivers.py).
    "gate_waivers": [("rule", _TEXT), ("waived_by", _TEXT), ("reason", _TEXT), ("until_day", _DATE), ("waived_at", _TS)],
    "experiments": [
        ("experiment_id", _TEXT), ("created_at", _TS), ("component", _TEXT), ("hypothesis", _TEXT),
        ("config_diff", _TEXT), ("baseline_eval", _TEXT), ("candidate_eval", _TEXT), ("deltas", _TEXT),
        ("worst_slice", _TEXT), ("worst_slice_delta", _REAL), ("decision", _TEXT), ("bundle", _BOOL),
    ],
    "production_samples": [
        ("day", _DATE), ("query", _TEXT), ("logged_at", _TS), ("tenant", _TEXT), ("roles", _TEXTS),
        ("log_source", _TEXT), ("best_score", _REAL), ("no_result", _BOOL), ("top_docs", _TEXTS), ("overlap", _REAL),
        ("latency_ms", _REAL),
    ],
    "monitoring_days": [("day", _DATE), ("kind", _TEXT), ("measures", _TEXT), ("created_at", _TS)],
    # Coverage gaps (core/monitoring/gaps.py): a row per gap a day listed, open (asked that day) or
    # closed that day; `members` is JSON [{query, tenant, roles, best_score}], `centroid` its identity.
    "coverage_gaps": [
        ("day", _DATE), ("gap_id", _TEXT), ("first_seen", _DATE), ("last_seen", _DATE), ("status", _TEXT),
        ("label", _TEXT), ("question_count", _INT), ("share", _REAL), ("best_score", _REAL), ("threshold", _REAL),
        ("nearest_doc", _TEXT), ("nearest_section", _TEXT), ("tenants", _TEXTS), ("members", _TEXT),
        ("centroid", _REALS), ("closed_by", _TEXT), ("created_at", _TS),
    ],
    "golden_snapshots": [("revision", _TEXT), ("path", _TEXT), ("content", _TEXT), ("saved_at", _TS)],
    "eval_runs": [
        ("eval_id", _TEXT), ("revision", _TEXT), ("mode", _TEXT), ("config_fingerprint", _TEXT), ("index_state", _TEXT),
        ("created_at", _TS), ("summary", _TEXT),
    ],
    "eval_cases": [
        ("eval_id", _TEXT), ("case_id", _TEXT), ("slice", _TEXT), ("split", _TEXT), ("weight", _REAL),
        ("answerable", _BOOL), ("first_gold_rank", _INT), ("best_score", _REAL), ("abstained", _BOOL), ("stale", _TEXTS),
        ("forbidden_retrieved", _TEXTS), ("latency_ms", _REAL), ("context_tokens", _INT), ("metrics", _TEXT),
        ("ranked_docs", _TEXTS), ("trace", _TEXT),
    ],
    # The retrieval score of each document in `eval_cases.ranked_docs` (same order), for the run
    # files other tools read. A table of its own: a database without it only gains the table.
    "eval_scores": [("eval_id", _TEXT), ("case_id", _TEXT), ("doc_scores", _REALS)],
    # Why each case moved against the baseline (`core/evaluation/attribution/`): one row per case
    # that moved, in the order shown (falls first), the whole finding as JSON. A table of its own too.
    "eval_case_changes": [
        ("eval_id", _TEXT), ("baseline_id", _TEXT), ("position", _INT), ("case_id", _TEXT), ("kind", _TEXT),
        ("change", _TEXT),
    ],
    "schema_version": [("version", _INT)],
}

# Lookups the pipeline makes per document or chunk, at every run and every search.
INDEXES = {
    "discovery": ["source_id", "doc_id"], "manifest": ["source_id", "doc_id"], "parsed_docs": ["doc_id"],
    "elements": ["doc_id"], "staged_chunks": ["doc_id", "chunk_id", "source_id"], "staged_postings": ["chunk_id"],
    "documents": ["doc_id", "source_id"], "chunks": ["chunk_id", "doc_id"],
    "vectors": ["chunk_id"], "postings": ["term", "chunk_id"], "ledger": ["doc_id, stage", "source_id"],
    "served_history": ["source_id, recorded_at"], "source_proofs": ["source_id, proved_at"],
    "staged_changes": ["source_id"],
    "eval_cases": ["eval_id"], "eval_scores": ["eval_id"], "eval_case_changes": ["eval_id"],
    "index_states": ["source_id, seq"], "served_spans": ["source_id, doc_id", "version"],
    "history_documents": ["version"], "history_chunks": ["version", "chunk_id"], "history_vectors": ["version"],
    "history_postings": ["version"], "coverage_gaps": ["day"],
}

# Keys that concurrent writers must never duplicate (unique indexes in PostgreSQL; DuckDB has one
# writer at a time, and `Database.insert_missing` checks the key in the same statement).
UNIQUE_KEYS = {"embedding_cache": ("identity", "text_hash")}

# Tables whose rows belong to one source; a purge of the source clears them all.
SOURCE_TABLES = (
    "manifest", "discovery", "parsed_docs", "elements", "staged_chunks", "staged_postings", "staged_changes",
    "documents", "chunks", "vectors", "postings", "source_runs", "served_versions", "source_inputs", "served_history",
    "source_proofs", "index_states", "served_spans", "source_pins",
)
# Tables holding something of a document (checked by the deletion proof).
DOCUMENT_TABLES = ("parsed_docs", "elements", "staged_chunks", "documents", "chunks")
CHUNK_TABLES = ("staged_postings", "vectors", "postings")


def columns(table: str) -> list[str]:
    return [name for name, _ in TABLES[table]]


def column_types(table: str, vector_type: str) -> dict[str, str]:
    return {name: kind.replace(_VECTOR, vector_type) for name, kind in TABLES[table]}


def create_statements(vector_type: str, dialect: str) -> list[str]:
    statements = [
        f"CREATE TABLE IF NOT EXISTS {table} ("
        + ", ".join(f"{name} {kind.replace(_VECTOR, vector_type)}" for name, kind in spec) + ")"
        for table, spec in TABLES.items()
    ]
    if dialect == "postgres":
        # DuckDB's own zonemaps serve its scans; in PostgreSQL every lookup above needs an index.
        statements += [
            f"CREATE INDEX IF NOT EXISTS {table}_{cols.replace(', ', '_')}_idx ON {table} ({cols})"
            for table, indexed in INDEXES.items() for cols in indexed
        ]
        statements += [f"CREATE UNIQUE INDEX IF NOT EXISTS {table}_key ON {table} ({', '.join(key)})"
                       for table, key in UNIQUE_KEYS.items()]
    return statements


# Databases written by earlier versions: version -> statements bringing it to the next one. Versions
# 1 and 2 existed only as DuckDB files; from 3 on, the statements are valid on both engines.
MIGRATIONS: dict[int, tuple[str, ...]] = {
    # 1 -> 2: the run protocol. The manifest becomes the committed one (written by the switch),
    # discovery stages its own; sources remember why their last switch was refused.
    1: (
        "ALTER TABLE manifest RENAME COLUMN meta_error TO error",
        "ALTER TABLE manifest ADD COLUMN mtime_ns BIGINT",
        "INSERT INTO discovery (source_id, doc_id, rel_path, content_hash, meta_json, size, file_type, supported, "
        "skip_reason, error, discovered_at, mtime_ns) SELECT * FROM manifest",
        "ALTER TABLE source_runs ADD COLUMN last_failure VARCHAR",
        "ALTER TABLE source_runs ADD COLUMN last_failure_at TIMESTAMP",
    ),
    # 2 -> 3: the access metadata of a parsed document as columns (both engines copy them to the
    # served rows without parsing JSON); the cache's vector last, like every vector column.
    2: (
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS tenant VARCHAR",
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS visibility VARCHAR",
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS roles VARCHAR[]",
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS status VARCHAR",
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS effective_date DATE",
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS supersedes VARCHAR",
        "ALTER TABLE parsed_docs ADD COLUMN IF NOT EXISTS superseded_by VARCHAR",
        """UPDATE parsed_docs SET
            tenant = json_extract_string(meta_json, '$.tenant'),
            visibility = json_extract_string(meta_json, '$.visibility'),
            roles = CAST(json_extract(meta_json, '$.roles') AS VARCHAR[]),
            status = json_extract_string(meta_json, '$.status'),
            effective_date = TRY_CAST(json_extract_string(meta_json, '$.effective_date') AS DATE),
            supersedes = json_extract_string(meta_json, '$.supersedes'),
            superseded_by = json_extract_string(meta_json, '$.superseded_by')""",
        "CREATE TABLE embedding_cache_v3 AS SELECT identity, text_hash, created_at, vector FROM embedding_cache",
        "DROP TABLE embedding_cache",
        "ALTER TABLE embedding_cache_v3 RENAME TO embedding_cache",
    ),
    # 3 -> 4: baselines are promoted per suite (full, pr); golden_changes and served_versions are new.
    3: (
        "ALTER TABLE baselines ADD COLUMN IF NOT EXISTS suite VARCHAR",
        "UPDATE baselines SET suite = 'full' WHERE suite IS NULL",
    ),
    # 4 -> 5: a discovered file's state when it was read (size, times, inode), so that the next
    # discovery reads only the files changed since; rows without one are read again once.
    4: (
        "ALTER TABLE discovery ADD COLUMN IF NOT EXISTS stat_key VARCHAR",
        "ALTER TABLE manifest ADD COLUMN IF NOT EXISTS stat_key VARCHAR",
    ),
    # 5 -> 6: index states and gate waivers. A served document's version (its rows' identity,
    # `states.py`), given to the documents already served by the first switch or restore that
    # records a state; the states', history's and waivers' tables are created with the missing tables.
    5: (
        "ALTER TABLE documents ADD COLUMN IF NOT EXISTS version VARCHAR",
    ),
    # 6 -> 7: coverage gaps and the causes of cases that moved (eval_case_changes); their tables are
    # created with the missing tables, nothing else changes.
    6: (),
    # 7 -> 8: the analyzer a served chunk's postings were made with. Rows served before have none,
    # so the next run of their source posts them again with the current analyzer.
    7: (
        "ALTER TABLE chunks ADD COLUMN IF NOT EXISTS analyzer VARCHAR",
        "ALTER TABLE history_chunks ADD COLUMN IF NOT EXISTS analyzer VARCHAR",
    ),
    # 8 -> 9: the record of each switch's proofs (`source_proofs`) and of the documents staged since
    # a source's last switch (`staged_changes`), created with the missing tables. A source without a
    # proof on record gets a full proof (every document compared and probed) at its next switch.
    8: (),
}


class SchemaError(UnavailableError):
    """The database cannot be used by this version of rag_pipeline."""
