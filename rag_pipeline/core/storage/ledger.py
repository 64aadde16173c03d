"""The ledger: the latest status of every (document, stage), with its reason, and the record of
every source's switches (last success, the last refusal or failed run and why, how many documents
each left served)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from rag_pipeline.core.models import STAGES
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import columns
from rag_pipeline.core.storage.staging import utcnow


@dataclass(frozen=True)
class HighPoint:
    """The most documents a source served in a window, and when it served them."""

    served_documents: int
    at: datetime


# The source's current documents (its latest discovery's supported ones), as `m`.
_CURRENT = "FROM discovery m WHERE m.source_id = ? AND m.supported"
# The same, each with its ledger rows `l`.
_WITH_LEDGER = "FROM discovery m JOIN ledger l ON l.doc_id = m.doc_id WHERE m.source_id = ? AND m.supported"
# A ledger row `l` that holds for the current version of `m`'s document (a row without a hash holds for any).
_HOLDS = "(l.content_hash IS NULL OR l.content_hash = m.content_hash)"
_STAGES = "(SELECT unnest(?::VARCHAR[]))"



class Ledger:
    def __init__(self, db: Database) -> None:
        self.db = db

    def coverage_facts(self, source_id: str, stages: list[str]) -> tuple:
        """What the coverage verdict needs of a source, counted by the database (joins of its latest
        discovery and the ledger, so a run at 100k documents does not read 600k ledger rows): the
        supported count, ok rows per stage, failed rows (holding for the current content), the
        uncovered documents, the stages those reached, and the skipped documents with their reason."""
        with self.db.session():
            supported = int(self.db.value(f"SELECT count(*) {_CURRENT}", [source_id]))
            counts = dict(self.db.rows(
                f"SELECT l.stage, count(*) {_WITH_LEDGER} "
                f"AND l.status = 'ok' AND {_HOLDS} GROUP BY l.stage", [source_id]))
            failures = self.db.dicts(
                f"SELECT l.* {_WITH_LEDGER} "
                f"AND l.status = 'failed' AND l.stage IN {_STAGES} AND {_HOLDS} ORDER BY m.doc_id", [source_id, stages])
            uncovered = [doc_id for (doc_id,) in self.db.rows(
                f"SELECT m.doc_id {_CURRENT} "
                "AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.doc_id = m.doc_id AND l.stage = 'queryable' "
                "AND l.status = 'ok' AND l.content_hash = m.content_hash) "
                f"AND NOT EXISTS (SELECT 1 FROM ledger l WHERE l.doc_id = m.doc_id AND l.status = 'failed' "
                f"AND l.stage IN {_STAGES} AND {_HOLDS}) ORDER BY m.doc_id", [source_id, stages])]
            reached = self.db.rows(
                f"SELECT m.doc_id, l.stage {_WITH_LEDGER} "
                f"AND l.status = 'ok' AND {_HOLDS} AND m.doc_id IN (SELECT unnest(?::VARCHAR[]))",
                [source_id, uncovered]) if uncovered else []
            skipped = [{"doc_id": d, "reason": r} for d, r in self.db.rows(
                "SELECT doc_id, skip_reason FROM discovery WHERE source_id = ? AND NOT supported ORDER BY doc_id", [source_id])]
        return supported, counts, failures, uncovered, reached, skipped

    def record(self, entries: Sequence[dict], run_id: str) -> None:
        """Upsert (doc_id, stage) rows: status ok / failed / skipped / deleted, with the reason."""
        if not entries:
            return
        now = utcnow()
        rows = [
            (e["doc_id"], e["source_id"], e["stage"], e["status"], e.get("content_hash"),
             e.get("parser_version"), e.get("reason"), now, run_id)
            for e in entries
        ]
        with self.db.transaction():
            self.db.execute(
                "DELETE FROM ledger l USING (SELECT unnest(?::VARCHAR[]) AS doc_id, unnest(?::VARCHAR[]) AS stage) k "
                "WHERE l.doc_id = k.doc_id AND l.stage = k.stage",
                [[r[0] for r in rows], [r[2] for r in rows]],
            )
            self.db.insert("ledger", columns("ledger"), rows)

    def rows(self, source_id: str | None = None, stages: Sequence[str] = (), doc_ids: Sequence[str] | None = None) -> list[dict]:
        """Every row (of the source; of these stages, when given; of these documents, when given)."""
        if source_id is None:
            return self.db.dicts("SELECT * FROM ledger ORDER BY doc_id, stage")
        if doc_ids is not None:
            if not doc_ids:
                return []
            return self.db.dicts("SELECT * FROM ledger WHERE source_id = ? AND stage IN (SELECT unnest(?::VARCHAR[])) "
                                 "AND doc_id IN (SELECT unnest(?::VARCHAR[])) ORDER BY doc_id, stage",
                                 [source_id, list(stages or STAGES), list(doc_ids)])
        if stages:
            return self.db.dicts("SELECT * FROM ledger WHERE source_id = ? AND stage IN (SELECT unnest(?::VARCHAR[])) "
                                 "ORDER BY doc_id, stage", [source_id, list(stages)])
        return self.db.dicts("SELECT * FROM ledger WHERE source_id = ? ORDER BY doc_id, stage", [source_id])

    def unproven(self, source_id: str) -> list[str]:
        """The source's served documents whose served version the ledger does not record as indexed
        (same bytes, same parser) and queryable: what a switch must record and probe, found by the
        database without reading the proven ones."""
        return [doc_id for (doc_id,) in self.db.rows(
            "SELECT d.doc_id FROM documents d WHERE d.source_id = ? AND ("
            "NOT EXISTS (SELECT 1 FROM ledger l WHERE l.doc_id = d.doc_id AND l.stage = 'indexed' AND l.status = 'ok' "
            "AND l.content_hash = d.content_hash AND l.parser_version IS NOT DISTINCT FROM d.parser_version) "
            "OR NOT EXISTS (SELECT 1 FROM ledger l WHERE l.doc_id = d.doc_id AND l.stage = 'queryable' AND l.status = 'ok' "
            "AND l.content_hash = d.content_hash)) ORDER BY d.doc_id", [source_id])]

    def document_history(self) -> dict[str, str | None]:
        """Every document id the ledger has ever recorded -> None, or its skip reason when its
        latest discovery skipped it (not a document): what golden labels are checked against."""
        rows = self.db.rows(
            "SELECT doc_id, max(CASE WHEN stage = 'discovered' AND status = 'skipped' THEN reason END), "
            "bool_or(stage <> 'deleted' AND (stage <> 'discovered' OR status <> 'skipped')) FROM ledger GROUP BY doc_id"
        )
        return {doc_id: None if is_document else reason for doc_id, reason, is_document in rows}

    def failures(self, source_id: str) -> dict[str, dict]:
        """Per document, its latest recorded failure (stage and reason), if any."""
        rows = self.db.dicts(
            "SELECT * FROM ledger WHERE source_id = ? AND status = 'failed' ORDER BY updated_at, stage", [source_id])
        return {r["doc_id"]: r for r in rows}

    def record_source_run(self, source_id: str, root: str | None, run_id: str, failure: str | None = None) -> None:
        """A switch of the source committed (`failure` None), or the run was refused or failed with
        this reason (what is served stays, and so does the time of the last success). `root` None
        keeps the root recorded before (a run that failed before it knew its source's root)."""
        now = utcnow()
        with self.db.transaction():
            previous = self.db.rows(
                "SELECT last_success_at, last_failure, last_failure_at, root FROM source_runs WHERE source_id = ?",
                [source_id])
            last_success, last_failure, last_failure_at, last_root = previous[0] if previous else (None, None, None, None)
            if failure is None:
                last_success, last_failure, last_failure_at = now, None, None
            else:
                last_failure, last_failure_at = failure, now
            self.db.execute("DELETE FROM source_runs WHERE source_id = ?", [source_id])
            self.db.insert("source_runs", columns("source_runs"),
                           [(source_id, root if root is not None else last_root, now, last_success, None, run_id,
                             last_failure, last_failure_at)])

    def source_record(self, source_id: str) -> dict | None:
        """The source's row of `source_runs` (root, last_success_at, last_failure, last_failure_at,
        run_id), or None for a source no run ever recorded."""
        rows = self.db.dicts("SELECT * FROM source_runs WHERE source_id = ?", [source_id])
        return rows[0] if rows else None

    def last_failure(self, source_id: str) -> str | None:
        """Why the source's latest run failed or its switch was refused, if it did (cleared by the next
        committed switch)."""
        return self.db.value("SELECT last_failure FROM source_runs WHERE source_id = ?", [source_id])

    def last_success(self, source_id: str) -> datetime | None:
        return self.db.value("SELECT last_success_at FROM source_runs WHERE source_id = ?", [source_id])

    def served_root(self, source_id: str) -> str | None:
        """The root the source's last switches read, if one of them ever committed."""
        return self.db.value("SELECT root FROM source_runs WHERE source_id = ? AND last_success_at IS NOT NULL", [source_id])

    # ---- served counts over time (the mass-delete guard's memory) ----------------------------

    def record_served(self, source_id: str, run_id: str, served_documents: int, mass_delete_allowed: bool = False) -> None:
        """How many documents the source serves after a committed switch (call inside the switch),
        or, with `mass_delete_allowed`, a run let through past the limit by the explicit flag: the
        high point is counted afresh from there."""
        self.db.insert("served_history", columns("served_history"),
                       [(source_id, utcnow(), served_documents, run_id, mass_delete_allowed)])

    def served_high_point(self, source_id: str, since: datetime) -> HighPoint | None:
        """The most documents the source served from `since` on, with the latest time it was
        recorded: the counts of switches since then, and the count in force at `since` (the last
        switch before it). Counted from the last run allowed past the mass-delete limit, if later."""
        with self.db.session():
            in_force = self.db.value("SELECT max(recorded_at) FROM served_history WHERE source_id = ? AND recorded_at <= ?",
                                     [source_id, since])
            allowed = self.db.value("SELECT max(recorded_at) FROM served_history WHERE source_id = ? AND mass_delete_allowed",
                                    [source_id])
            start = max(t for t in (in_force or since, allowed) if t is not None)
            rows = self.db.rows("SELECT served_documents, recorded_at FROM served_history WHERE source_id = ? "
                                "AND recorded_at >= ? ORDER BY served_documents DESC, recorded_at DESC LIMIT 1",
                                [source_id, start])
        return HighPoint(int(rows[0][0]), rows[0][1]) if rows else None

    # ---- which proofs each switch ran (when the next full proof is due) --------------------

    def record_proof(self, source_id: str, run_id: str, scope: str, reason: str) -> None:
        """The proofs a committed switch ran, `full` or `incremental`, and why (call inside the switch)."""
        self.db.insert("source_proofs", columns("source_proofs"), [(source_id, run_id, scope, reason, utcnow())])

    def last_full_proof(self, source_id: str) -> tuple[datetime, int] | None:
        """When the source's latest full proof committed, and how many switches committed since
        (None: no full proof on record)."""
        with self.db.session():
            at = self.db.value("SELECT max(proved_at) FROM source_proofs WHERE source_id = ? AND scope = 'full'",
                               [source_id])
            if at is None:
                return None
            since = self.db.value("SELECT count(*) FROM source_proofs WHERE source_id = ? AND proved_at > ?",
                                  [source_id, at])
        return at, int(since)
