"""Undo: serve an earlier index state of a source again and pin it there, stop serving a source, and
let it go back to its files.

Each action is one transaction: the served rows swap (only the documents whose version differs),
the ledger says what is served and why, the new state is recorded and the pin written together, so
a kill leaves the source as it was or as asked, never between. A pinned source is left alone by
every ingestion (`switch.index_source`) until it is unpinned; the next run after that serves its
files again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from rag_pipeline.core.errors import InputError
from rag_pipeline.core.faults import kill_point
from rag_pipeline.core.ingestion.reports import ledger_entry
from rag_pipeline.core.storage import Store
from rag_pipeline.core.storage.states import IndexState, Pin, StateError


@dataclass(frozen=True)
class Undone:
    """What an action did: the state now served, its pin, and the documents it changed."""

    state: IndexState
    pin: Pin | None
    restored: int
    removed: int
    kept: int

    def summary(self) -> str:
        served = f"{self.state.documents} documents ({self.restored} restored, {self.removed} removed, {self.kept} unchanged)"
        return f"{self.state.source_id} now serves state {self.state.state_id}: {served}" + (
            f"; {self.pin.sentence()}" if self.pin else "")


def resolve(store: Store, source_id: str, to: str, baseline_index_state: dict[str, str] | None = None) -> IndexState:
    """The state `to` names: a state id of the source, or `baseline` (the state the promoted
    baseline was measured on: `baseline_index_state`, its evaluation's source -> manifest hash)."""
    if to == "baseline":
        if not baseline_index_state or source_id not in baseline_index_state:
            raise InputError(f"no promoted baseline measured source {source_id!r}: `rag-pipeline promote` one first, "
                             "or name a state (`rag-pipeline index list --source {source_id}`)")
        state = store.states.by_manifest(source_id, baseline_index_state[source_id])
        if state is None:
            raise StateError(f"the baseline's state of {source_id!r} (manifest {baseline_index_state[source_id]}) is not "
                             "kept any more (retention: lifecycle.keep_states, keep_state_days)")
        return state
    state = store.states.get(to)
    if state.source_id != source_id:
        raise StateError(f"state {to} is a state of {state.source_id!r}, not of {source_id!r}")
    return state


def restore(store: Store, source_id: str, state: IndexState, by: str, reason: str) -> Undone:
    """Serve exactly what `state` served, and pin the source there."""
    _require(by, reason)
    return _serve(store, source_id, state, "restore", "pinned", by, reason)


def disable(store: Store, source_id: str, by: str, reason: str) -> Undone:
    """Serve nothing of the source (a leak, a poisoned source) until it is enabled."""
    _require(by, reason)
    return _serve(store, source_id, None, "disable", "disabled", by, reason)


def unpin(store: Store, source_id: str) -> Pin:
    """Let the source follow its files again: its next ingestion serves what they hold."""
    with store.transaction():
        pin = store.states.unpin(source_id)
        if pin is None:
            raise InputError(f"source {source_id!r} is not pinned or disabled: nothing to undo")
        store.staging.forget_committed_inputs(source_id)
    return pin


def _require(by: str, reason: str) -> None:
    if not by.strip() or not reason.strip():
        raise InputError("say who does this and why (--by NAME --reason TEXT): the pin shows both to everyone")


# What the ledger says of an action, by its origin.
_DONE = {"restore": "restored", "disable": "disabled"}


def _serve(store: Store, source_id: str, state: IndexState | None, origin: str, kind: str, by: str,
           reason: str) -> Undone:
    run_id = f"{origin}-{uuid.uuid4().hex[:12]}"
    what = f"state {state.state_id}" if state else "nothing"
    done = _DONE[origin]
    with store.transaction():
        kill_point(f"{origin}:begin")
        swap = store.states.restore(source_id, state)
        kill_point(f"{origin}:swapped")
        ledger = [ledger_entry(d["doc_id"], source_id, d["content_hash"], stage, "ok",
                               f"{done} to {what} by {by}: {reason} (proven when that state was first served)",
                               parser_version=d["parser_version"])
                  for d in swap.arrived for stage in ("indexed", "queryable")]
        ledger += [{"doc_id": doc_id, "source_id": source_id, "stage": stage, "status": "deleted",
                    "reason": f"not served: {done} to {what} by {by}: {reason}"}
                   for doc_id in swap.removed for stage in ("indexed", "queryable")]
        store.ledger.record(ledger, run_id)
        new = store.states.record(source_id, run_id, origin, state.settings if state else "", state.model if state else "",
                                  store.served.manifest_hash(source_id), note=f"{what}, by {by}: {reason}")
        pin = store.states.pin(source_id, kind, state.state_id if state else new.state_id, by, reason)
        store.staging.forget_committed_inputs(source_id)
    kill_point(f"{origin}:committed")
    return Undone(new, pin, len(swap.arrived), len(swap.removed), swap.kept)
