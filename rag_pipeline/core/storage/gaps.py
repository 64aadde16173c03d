"""Coverage gaps by day: each day's listed gaps (open that day, or closed that day), replaced whole
when the day is monitored again."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import date

from rag_pipeline.core.storage.database import Database
from rag_pipeline.core.storage.schema import columns
from rag_pipeline.core.storage.staging import utcnow


class GapRecords:
    def __init__(self, db: Database) -> None:
        self.db = db

    def save_day(self, day: date, rows: Sequence[Mapping]) -> None:
        """Replace the gaps of one day (rows keyed by the table's column names)."""
        names = [c for c in columns("coverage_gaps") if c != "created_at"]
        now = utcnow()
        with self.db.transaction():
            self.db.execute("DELETE FROM coverage_gaps WHERE day = ?", [day])
            self.db.insert("coverage_gaps", [*names, "created_at"], [(*(row[n] for n in names), now) for row in rows])

    def of_day(self, day: date) -> list[dict]:
        """The gaps a day listed, largest first (open before closed)."""
        return self.db.dicts("SELECT * FROM coverage_gaps WHERE day = ? ORDER BY status DESC, question_count DESC, "
                             "gap_id", [day])

    def open_before(self, day: date) -> list[dict]:
        """Each gap's latest row from a day before `day`, when that row leaves it open."""
        latest: dict[str, dict] = {}
        for row in self.db.dicts("SELECT * FROM coverage_gaps WHERE day < ? ORDER BY day", [day]):
            latest[row["gap_id"]] = row
        return [row for row in latest.values() if row["status"] == "open"]

    def peak_shares_before(self, day: date) -> dict[str, float]:
        """The largest share of a day each gap held while open on a day before `day`, by gap id."""
        rows = self.db.dicts("SELECT gap_id, max(share) AS peak FROM coverage_gaps WHERE day < ? AND status = 'open' "
                             "GROUP BY gap_id", [day])
        return {row["gap_id"]: float(row["peak"]) for row in rows}

    def still_open(self) -> list[dict]:
        """Each gap's latest row, when no later day closed it: the gaps open now."""
        return self.open_before(date.max)

    def traffic(self, until: date) -> list[dict]:
        """(day, gap_id, label, question_count, share, status) of every listed gap up to `until`, by day."""
        return self.db.dicts("SELECT day, gap_id, label, question_count, share, status FROM coverage_gaps "
                             "WHERE day <= ? ORDER BY day, gap_id", [until])
