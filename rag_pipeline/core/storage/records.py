"""Records: evaluations with their per-case traces, promoted baselines, the experiment log,
golden-set snapshots, production samples and the monitoring measures of each day."""

from __future__ import annotations

import json
from datetime import date

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.faults import kill_point
from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import columns
from rag_pipeline.core.storage.staging import utcnow


class Records:
    def __init__(self, db: Database) -> None:
        self.db = db

    # ---- evaluations -----------------------------------------------------------------------

    def save_evaluation(self, result) -> None:
        """Persist one evaluation (an `EvalResult`): its summary and every case with its trace."""
        cases = [
            (result.eval_id, c.case.id, c.case.slice, c.case.split, c.case.weight, c.case.answerable,
             c.first_gold_rank, c.best_score, c.abstained, list(c.stale_docs), list(c.forbidden_retrieved), c.latency_ms,
             c.context_tokens, json.dumps(c.metrics), list(c.ranked_docs[:100]), json.dumps(c.shown_trace))
            for c in result.cases
        ]
        run = (result.eval_id, result.revision, result.mode, result.config_fingerprint, json.dumps(result.index_state),
               result.created_at, json.dumps(result.as_json(), default=str))
        scores = [(result.eval_id, c.case.id, [float(s) for s in c.doc_scores[:100]]) for c in result.cases]
        kill_point("eval:scored")
        with self.db.transaction():
            self.db.insert("eval_runs", columns("eval_runs"), [run])
            kill_point("eval:half-saved")
            self.db.insert("eval_cases", columns("eval_cases"), cases)
            self.db.insert("eval_scores", columns("eval_scores"), scores)
        kill_point("eval:saved")

    def evaluation_summary(self, eval_id: str) -> dict:
        summary = self.db.value("SELECT summary FROM eval_runs WHERE eval_id = ?", [eval_id])
        if summary is None:
            raise InputError(f"no evaluation {eval_id!r} in {self.db.describe()}: `rag-pipeline eval` prints the id of each evaluation it stores, and its report names it")
        return json.loads(summary)

    def evaluation_record(self, eval_id: str) -> dict:
        """An evaluation's summary plus `cases`: case id -> metrics, for scored cases (the gate's input),
        `case_slices`: case id -> slice, and `case_abstained`: unanswerable case id -> abstained."""
        record = self.evaluation_summary(eval_id)
        rows = self.db.rows("SELECT case_id, slice, metrics, answerable, abstained FROM eval_cases WHERE eval_id = ?",
                            [eval_id])
        record["cases"] = {case_id: json.loads(m) for case_id, _, m, _, _ in rows if m and m != "{}"}
        record["case_slices"] = {case_id: slice_name for case_id, slice_name, _, _, _ in rows}
        record["case_abstained"] = {case_id: bool(abstained) for case_id, _, _, answerable, abstained in rows
                                    if answerable is False and abstained is not None}
        return record

    def latest_evaluation(self, revision: str | None = None) -> str | None:
        if revision is None:
            return self.db.value("SELECT eval_id FROM eval_runs ORDER BY created_at DESC LIMIT 1")
        return self.db.value("SELECT eval_id FROM eval_runs WHERE revision = ? ORDER BY created_at DESC LIMIT 1", [revision])

    def case_traces(self, eval_id: str) -> dict[str, dict]:
        """Case id -> its stored trace (a holdout case's is withheld)."""
        rows = self.db.rows("SELECT case_id, trace FROM eval_cases WHERE eval_id = ? ORDER BY case_id", [eval_id])
        return {case_id: json.loads(trace) if trace else {} for case_id, trace in rows}

    def failed_cases(self, eval_id: str, k: int = 10) -> list[dict]:
        """Cases of a stored evaluation whose gold documents all missed the top `k` (or that leaked a
        forbidden document): case id, slice, split, first gold rank, ranked documents, trace."""
        rows = self.db.dicts(
            "SELECT case_id, slice, split, first_gold_rank, ranked_docs, forbidden_retrieved, trace FROM eval_cases "
            "WHERE eval_id = ? AND ((answerable AND coalesce(array_length(stale, 1), 0) = 0 "
            "AND (first_gold_rank IS NULL OR first_gold_rank > ?)) OR coalesce(array_length(forbidden_retrieved, 1), 0) > 0) "
            "ORDER BY case_id", [eval_id, k])
        for row in rows:
            row["trace"] = json.loads(row["trace"]) if row["trace"] else {}
        return rows

    def latest_no_result_threshold(self) -> tuple[str, float] | None:
        """(eval id, threshold) calibrated by the latest dense or hybrid evaluation, if any."""
        rows = self.db.rows("SELECT eval_id, summary FROM eval_runs WHERE mode <> 'bm25' ORDER BY created_at DESC LIMIT 1")
        if not rows:
            return None
        return rows[0][0], float(json.loads(rows[0][1])["no_result_threshold"])

    def case_rows(self, eval_id: str) -> list[dict]:
        """Every case of a stored evaluation: case id, slice, split, answerable, first gold rank,
        abstained, stale labels, forbidden documents retrieved, ranked documents (for CI reports)."""
        return self.db.dicts(
            "SELECT case_id, slice, split, answerable, first_gold_rank, abstained, stale, forbidden_retrieved, ranked_docs "
            "FROM eval_cases WHERE eval_id = ? ORDER BY case_id", [eval_id])

    def ranked_runs(self, eval_id: str) -> list[tuple[str, list[str], list[float] | None]]:
        """(case id, ranked documents, their retrieval scores or None when not stored) of every case."""
        rows = self.db.rows(
            "SELECT c.case_id, c.ranked_docs, s.doc_scores FROM eval_cases c LEFT JOIN eval_scores s "
            "ON s.eval_id = c.eval_id AND s.case_id = c.case_id WHERE c.eval_id = ? ORDER BY c.case_id", [eval_id])
        return [(case_id, list(docs or []), list(scores) if scores is not None else None) for case_id, docs, scores in rows]

    def save_case_changes(self, eval_id: str, baseline_id: str, changes: list[dict]) -> None:
        """Keep why each case of an evaluation moved against `baseline_id` (its `CaseChange.as_json()`
        rows, in the order shown), replacing what was kept for it before."""
        rows = [(eval_id, baseline_id, position, c["case_id"], c["cause"]["kind"], json.dumps(c, default=str))
                for position, c in enumerate(changes)]
        with self.db.transaction():
            self.db.execute("DELETE FROM eval_case_changes WHERE eval_id = ?", [eval_id])
            self.db.insert("eval_case_changes", columns("eval_case_changes"), rows)

    def case_changes(self, eval_id: str) -> list[dict]:
        """Why each case of the evaluation moved against its baseline, falls first ([] when none moved
        or it had no baseline)."""
        rows = self.db.rows("SELECT change FROM eval_case_changes WHERE eval_id = ? ORDER BY position", [eval_id])
        return [json.loads(change) for (change,) in rows]

    # ---- baselines and experiments ---------------------------------------------------------

    def evaluated_manifests(self, since) -> dict[str, set[str]]:
        """Source -> the manifest hashes it served for a baseline's evaluation or any evaluation since
        `since` (what index-state retention must keep)."""
        rows = self.db.rows("SELECT index_state FROM eval_runs WHERE created_at >= ? OR eval_id IN "
                            "(SELECT eval_id FROM baselines)", [since])
        measured: dict[str, set[str]] = {}
        for (index_state,) in rows:
            for source_id, manifest_hash in json.loads(index_state or "{}").items():
                measured.setdefault(source_id, set()).add(manifest_hash)
        return measured

    def evaluations_measured(self, source_id: str) -> list[dict]:
        """Every evaluation's id, time and the manifest hash it measured of the source, oldest first."""
        rows = self.db.rows("SELECT eval_id, created_at, index_state FROM eval_runs ORDER BY created_at")
        return [{"eval_id": eval_id, "created_at": created_at, "manifest_hash": json.loads(state or "{}").get(source_id)}
                for eval_id, created_at, state in rows]

    def evaluations_of(self, index_state: dict[str, str], config_fingerprint: str | None = None) -> list[str]:
        """Ids of the evaluations that measured exactly this index state (source -> manifest hash),
        with this config when given, newest first."""
        rows = self.db.rows("SELECT eval_id, index_state, config_fingerprint FROM eval_runs ORDER BY created_at DESC")
        return [eval_id for eval_id, state, fingerprint in rows
                if json.loads(state or "{}") == index_state and config_fingerprint in (None, fingerprint)]

    def baseline(self, revision: str, suite: str = "full") -> str | None:
        """The promoted baseline evaluation of a golden revision and suite, if any."""
        return self.db.value("SELECT eval_id FROM baselines WHERE revision = ? AND suite = ? "
                             "ORDER BY promoted_at DESC LIMIT 1", [revision, suite])

    def latest_baseline(self, suite: str = "full") -> tuple[str, str] | None:
        rows = self.db.rows("SELECT revision, eval_id FROM baselines WHERE suite = ? ORDER BY promoted_at DESC LIMIT 1", [suite])
        return (rows[0][0], rows[0][1]) if rows else None

    def promote(self, revision: str, eval_id: str, note: str, suite: str = "full") -> None:
        kill_point("promote:decided")
        self.db.insert("baselines", columns("baselines"), [(revision, eval_id, utcnow(), note, suite)])
        kill_point("promote:stored")

    # ---- changes to the golden set ---------------------------------------------------------

    def record_golden_change(self, change: str, case_ids: list[str], old_revision: str, new_revision: str,
                             changed_by: str, reason: str) -> None:
        """Record a change of the golden set, once: a command that died before it replaced the file
        and runs again makes the same change, which is not recorded twice."""
        with self.db.transaction():
            if self.db.value("SELECT count(*) FROM golden_changes WHERE change = ? AND old_revision = ? AND new_revision = ?",
                             [change, old_revision, new_revision]):
                return
            self.db.insert("golden_changes", columns("golden_changes"),
                           [(utcnow(), change, list(case_ids), old_revision, new_revision, changed_by, reason)])

    def golden_changes(self) -> list[dict]:
        return self.db.dicts("SELECT * FROM golden_changes ORDER BY changed_at")

    # ---- gate waivers ----------------------------------------------------------------------

    def add_waiver(self, rule: str, waived_by: str, reason: str, until_day: date) -> None:
        """Record an exception to one gate rule, in force through `until_day` (UTC)."""
        self.db.insert("gate_waivers", columns("gate_waivers"), [(rule, waived_by, reason, until_day, utcnow())])

    def waivers(self) -> list[dict]:
        """Every waiver ever recorded, active or expired, oldest first."""
        return self.db.dicts("SELECT * FROM gate_waivers ORDER BY waived_at, rule")

    def log_experiment(self, row: dict) -> None:
        """Log one experiment, once per experiment id (a command run again after a kill logs it once)."""
        if self.db.value("SELECT count(*) FROM experiments WHERE experiment_id = ?", [row["experiment_id"]]):
            return
        self.db.insert("experiments", columns("experiments"), [(
            row["experiment_id"], row["created_at"], row["component"], row["hypothesis"], json.dumps(row["config_diff"]),
            row["baseline_eval"], row["candidate_eval"], json.dumps(row["deltas"]), row["worst_slice"],
            row["worst_slice_delta"], row["decision"], row["bundle"],
        )])

    def experiment_log(self) -> list[dict]:
        rows = self.db.dicts("SELECT * FROM experiments ORDER BY created_at")
        for row in rows:
            row["config_diff"] = json.loads(row["config_diff"])
            row["deltas"] = json.loads(row["deltas"])
        return rows

    # ---- golden snapshots ------------------------------------------------------------------

    def snapshot_golden(self, revision: str, path: str, content: str) -> None:
        """Keep the text of a golden-set revision, so that it stays evaluable after the file moves on
        (a store opened by a reading command keeps none: it writes nothing)."""
        if self.db.read_only or self.golden_snapshot(revision) is not None:
            return
        with self.db.transaction():
            if self.golden_snapshot(revision) is None:
                self.db.insert("golden_snapshots", columns("golden_snapshots"), [(revision, path, content, utcnow())])

    def golden_snapshot(self, revision: str) -> str | None:
        return self.db.value("SELECT content FROM golden_snapshots WHERE revision = ?", [revision])

    # ---- production samples and monitoring -------------------------------------------------

    def save_sample(self, day: date, results, measures: dict) -> None:
        """Replace one day's production sample and its measures."""
        rows = [
            (day, r.query.query, r.query.timestamp, r.query.tenant, list(r.query.roles), r.query.source,
             r.best_score, r.no_result, list(r.top_docs), r.overlap, r.latency_ms)
            for r in results
        ]
        with self.db.transaction():
            self.db.execute("DELETE FROM production_samples WHERE day = ?", [day])
            self.db.insert("production_samples", columns("production_samples"), rows)
            self.save_monitoring(day, "sample", measures)

    def sample_rows(self, day: date) -> list[dict]:
        return self.db.dicts("SELECT * FROM production_samples WHERE day = ? ORDER BY logged_at, log_source", [day])

    def save_monitoring(self, day: date, kind: str, measures: dict) -> None:
        with self.db.transaction():
            self.db.execute("DELETE FROM monitoring_days WHERE day = ? AND kind = ?", [day, kind])
            self.db.insert("monitoring_days", columns("monitoring_days"), [(day, kind, json.dumps(measures), utcnow())])

    def monitoring_history(self, kind: str, until: date) -> list[dict]:
        rows = self.db.rows("SELECT day, measures FROM monitoring_days WHERE kind = ? AND day <= ? ORDER BY day", [kind, until])
        return [{"day": day, **json.loads(measures)} for day, measures in rows]
