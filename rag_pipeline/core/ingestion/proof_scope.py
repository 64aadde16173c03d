"""Which proofs a switch runs: those of what its run changed (incremental), or the whole source's (full).

An incremental switch proves the documents its run changed; a full one proves every document the
source serves, as if none had been proven before. A full proof is due at the source's first switch,
when asked for (a forced run, the nightly schedule), every `lifecycle.full_proof_every_runs`-th
switch and once the last full proof is `lifecycle.full_proof_hours` old: whatever an incremental
proof cannot see (a row changed behind the pipeline's back) is found within that many runs or hours.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from rag_pipeline.config import LifecycleConfig
from rag_pipeline.core.storage import Store, utcnow
from rag_pipeline.core.verdicts import Verdict

FULL, INCREMENTAL = "full", "incremental"


@dataclass(frozen=True)
class ProofScope:
    """`full` or `incremental`, and why, in a sentence for the check's metadata."""

    full: bool
    reason: str

    @property
    def name(self) -> str:
        return FULL if self.full else INCREMENTAL

    def stated(self, verdict: Verdict) -> Verdict:
        """The verdict of a proof this switch ran, saying which proof it was (`proof`: full or
        incremental) and why (`proof_reason`), in its summary and metadata."""
        what = ("full proof: every served document probed again, every tombstone and orphan checked" if self.full
                else "incremental proof: probes and deletion checks of what this run changed")
        return replace(verdict, summary=f"{verdict.summary} ({what})",
                       texts={**verdict.texts, "proof": self.name, "proof_reason": self.reason})


def proof_scope(store: Store, source_id: str, lifecycle: LifecycleConfig, requested: str | None = None,
                now: datetime | None = None) -> ProofScope:
    """The proofs the source's next switch runs. `requested`: why the caller wants a full proof
    (a forced run, the nightly schedule), or None to let the record and `lifecycle` decide."""
    if requested:
        return ProofScope(True, requested)
    latest = store.states.latest(source_id)
    if latest is not None and latest.origin != "switch":
        return ProofScope(True, f"the source serves a state set by `{latest.origin}` ({latest.state_id}) since its last "
                                "switch: every served row is compared with the staged ones")
    last = store.ledger.last_full_proof(source_id)
    if last is None:
        return ProofScope(True, "no full proof of the source on record (its first switch, or one from before proofs were recorded)")
    at, since = last
    every = lifecycle.full_proof_every_runs
    if since + 1 >= every:
        return ProofScope(True, f"every {every} switches (lifecycle.full_proof_every_runs): {since} since the last full proof")
    age = ((now or utcnow()) - at).total_seconds() / 3600
    if age >= lifecycle.full_proof_hours:
        return ProofScope(True, f"the last full proof is {age:.1f} h old (lifecycle.full_proof_hours: "
                                f"{lifecycle.full_proof_hours:g})")
    return ProofScope(False, f"the documents this run changed; the whole source was proven {age:.1f} h and {since} "
                             f"switch(es) ago, next at the latest in {every - since - 1} switch(es) or "
                             f"{lifecycle.full_proof_hours - age:.1f} h")
