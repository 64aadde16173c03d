"""Gate waivers: an exception to one gate rule, with an owner, a reason and an end date.

A team that knows why a rule fails (a slice whose pages move next week, a metric that dips while
its labels are rewritten) records a waiver instead of loosening the policy for everyone: while it
is active (until its date, inclusive, in UTC) that rule's regression is shown as WAIVED, with who
waived it, why and until when, in every report, and does not fail the gate; it still holds the
baseline (a waived regression is never promoted). After its date it expires by itself and the rule
gates again. Waivers live in the store (`gate_waivers`), so the CI job, the nightly evaluation and
the command line see the same ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.evaluation.gating.policy import GatePolicy


@dataclass(frozen=True)
class Waiver:
    rule: str
    waived_by: str
    reason: str
    until: date
    waived_at: datetime | None = None

    def active(self, today: date) -> bool:
        """In force on `today` (a UTC day): through its last day, inclusive."""
        return today <= self.until

    def describe(self) -> str:
        """Who, until when, why: the words every report shows beside the rule."""
        return f"waived by {self.waived_by} until {self.until.isoformat()} (UTC): {self.reason}"

    @classmethod
    def from_row(cls, row: Mapping) -> Waiver:
        until = row["until_day"]
        return cls(row["rule"], row["waived_by"], row["reason"],
                   until if isinstance(until, date) else date.fromisoformat(str(until)), row.get("waived_at"))


def utc_today() -> date:
    return datetime.now(UTC).date()


def known_rules(policy: GatePolicy, slices: Iterable[str]) -> list[str]:
    """Every rule name under which the gate can report a regression with this policy, for these
    slices (of the golden set and of stored evaluations): the names a waiver may name."""
    rules = set(policy.headline_metrics)
    if any(metric.startswith("answer_") for metric in policy.headline_metrics):
        rules.add("grader calibrated")
    for name in policy.protected_slices:
        rules |= {f"protected slice {name} {policy.slice_metric}", f"protected slice {name} abstain_rate"}
    rules |= {f"slice {name} forbidden_leak_cases" for name in {*slices, *policy.protected_slices}}
    if policy.context_tokens_budget is not None:
        rules.add("context size budget")
    return sorted(rules)


def new_waiver(rule: str, waived_by: str, reason: str, until: date, today: date, known: Sequence[str]) -> Waiver:
    """A waiver to record, or an InputError saying what is wrong with it (exit 2): an unknown rule
    (the known ones listed), a date already past, nobody named, no reason given."""
    rule, waived_by, reason = rule.strip(), waived_by.strip(), reason.strip()
    if rule not in known:
        raise InputError(f"--rule {rule!r} is not a rule this gate knows; a waiver names one of: "
                         + "; ".join(known))
    if until < today:
        raise InputError(f"--until {until.isoformat()} is in the past (today is {today.isoformat()}, UTC): "
                         "a waiver ends on a day to come")
    if not waived_by:
        raise InputError("--by is empty: a waiver needs the name of whoever owns the exception")
    if not reason:
        raise InputError("--reason is empty: a waiver says why the rule may fail until then")
    return Waiver(rule, waived_by, reason, until)


def active_waivers(waivers: Iterable[Waiver], today: date) -> dict[str, Waiver]:
    """Rule -> the waiver in force on `today` (of several, the one that lasts longest)."""
    active: dict[str, Waiver] = {}
    for waiver in waivers:
        if waiver.active(today) and (waiver.rule not in active or waiver.until > active[waiver.rule].until):
            active[waiver.rule] = waiver
    return active


def waiver_rows(waivers: Sequence[Waiver], today: date) -> list[dict]:
    """The waivers as rows for a listing: rule, state (active or expired), by, until, reason."""
    return [{"rule": w.rule, "state": "active" if w.active(today) else "expired", "by": w.waived_by,
             "until": w.until.isoformat(), "reason": w.reason}
            for w in sorted(waivers, key=lambda w: (not w.active(today), w.until, w.rule))]
