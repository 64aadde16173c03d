"""When the night evaluates: once per settled state of what is served, the golden set and the config.

An evaluation measures what the sources serve, on one golden revision, with one retrieval config.
It is worth a run only when one of these three differs from what the last evaluation measured,
and only once ingestion has settled: an evaluation started while a source is still switching
measures a half-updated index, and one started before the first ingestion measures an empty one.

`decide` is the whole rule, over facts the Dagster layer gathers from its instance
(`defs/night_state.py`): plain data in, a `Decision` with its reason out, so that every branch is
tested without a deployment and the sensor's skip reason says which branch it took.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# What a source that serves nothing hashes to (`ServedIndex.manifest_hash` of no rows), so that an
# evaluation's `index_state` and the instance's view of a never-served source compare equal.
EMPTY_MANIFEST = hashlib.sha256(b"[]").hexdigest()[:16]

# The latest ingestion attempt of a source's partition, as Dagster counts it.
NEVER, IN_PROGRESS, FAILED, MATERIALIZED = "never", "in_progress", "failed", "materialized"


@dataclass(frozen=True)
class EvaluatedState:
    """What one evaluation measures: the golden revision, the retrieval config's fingerprint and
    mode, and per source the manifest hash of what it served."""

    revision: str
    config: str
    mode: str
    index: Mapping[str, str]

    def covers(self, other: EvaluatedState, sources: Sequence[str]) -> bool:
        """Whether an evaluation of this state measured `other` too, on the configured `sources` (a
        source missing from either side served nothing)."""
        return ((self.revision, self.config, self.mode) == (other.revision, other.config, other.mode)
                and all(self.index.get(s, EMPTY_MANIFEST) == other.index.get(s, EMPTY_MANIFEST) for s in sources))

    def changes_from(self, earlier: EvaluatedState, sources: Sequence[str]) -> list[str]:
        """What differs from an earlier evaluated state, in words (for the log and the run's tag)."""
        changes = []
        if self.revision != earlier.revision:
            changes.append(f"golden revision {earlier.revision} -> {self.revision}")
        if self.config != earlier.config or self.mode != earlier.mode:
            changes.append(f"retrieval config {earlier.config} ({earlier.mode}) -> {self.config} ({self.mode})")
        moved = [s for s in sources if self.index.get(s, EMPTY_MANIFEST) != earlier.index.get(s, EMPTY_MANIFEST)]
        if moved:
            changes.append("served index of " + ", ".join(moved))
        return changes

    def digest(self) -> str:
        """A short stable id of the state (the evaluation run's key: one run per state)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).hexdigest()[:12]

    def to_json(self) -> dict:
        return {"revision": self.revision, "config": self.config, "mode": self.mode, "index": dict(self.index)}

    @classmethod
    def from_json(cls, value: object) -> EvaluatedState | None:
        """The state from its JSON, or None for anything else (a cursor written by an older version)."""
        if not isinstance(value, Mapping) or not isinstance(value.get("index"), Mapping):
            return None
        try:
            return cls(str(value["revision"]), str(value["config"]), str(value["mode"]),
                       {str(k): str(v) for k, v in value["index"].items()})
        except KeyError:
            return None


@dataclass(frozen=True)
class SourceState:
    """One configured source as the instance records it: its latest ingestion attempt (NEVER,
    IN_PROGRESS, FAILED, MATERIALIZED), the manifest hash of what its last switch served, and the
    settings (chunking, model, parser) that switch's chunks and vectors were built with."""

    source_id: str
    attempt: str
    manifest_hash: str | None = None
    settings: str | None = None


@dataclass(frozen=True)
class NightFacts:
    """What the evaluation sensor sees at one look."""

    revision: str
    config: str
    mode: str
    # The settings fingerprint the config asks for (`core/ingestion/inputs.py::settings_fingerprint`).
    settings: str
    sources: Sequence[SourceState]
    # Ingestion runs and backfills queued, running or still requesting runs, each in a few words.
    ingestion_in_flight: Sequence[str] = ()
    # Evaluation runs queued or running.
    evaluations_in_flight: Sequence[str] = ()
    # States already evaluated or requested: the latest evaluation's, the sensor's last request.
    evaluated: Sequence[EvaluatedState] = field(default_factory=tuple)

    @property
    def source_ids(self) -> list[str]:
        return [s.source_id for s in self.sources]

    def served_state(self) -> EvaluatedState:
        """The state an evaluation started now would measure."""
        return EvaluatedState(self.revision, self.config, self.mode,
                              {s.source_id: s.manifest_hash or EMPTY_MANIFEST for s in self.sources})


@dataclass(frozen=True)
class Decision:
    """Evaluate `state` now, or wait; `reason` says why either way."""

    evaluate: bool
    reason: str
    state: EvaluatedState | None = None


def _names(items: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def decide(facts: NightFacts) -> Decision:
    """Evaluate once ingestion has settled and the state differs from every one already evaluated.

    Waits while any ingestion run or backfill is in flight (whatever launched it), while a
    configured source was never ingested (a fresh deployment's first look), while a source serves
    chunks built with other settings than the config's and has not failed since (a chunking or
    model change waits for the re-ingestion it needs, instead of measuring the old index under the
    new config's name), and while an evaluation runs. A source whose latest run failed does not
    hold the night back: it is measured as it is served, and the evaluation's `sources` table says so.
    """
    if facts.ingestion_in_flight:
        return Decision(False, f"ingestion in flight ({_names(list(facts.ingestion_in_flight))}): evaluate once "
                               "the index settles")
    never = [s.source_id for s in facts.sources if s.attempt == NEVER]
    if never:
        return Decision(False, f"source(s) {_names(never)} never ingested: waiting for their first ingestion "
                               "before evaluating (the nightly suite, the source-change sensor or a backfill runs it)")
    behind = [s.source_id for s in facts.sources
              if s.settings is not None and s.settings != facts.settings and s.attempt != FAILED]
    if behind:
        return Decision(False, f"source(s) {_names(behind)} serve chunks built with other chunking, model or parser "
                               f"settings than the config's ({facts.settings}): waiting for their next ingestion")
    if not any(s.manifest_hash is not None for s in facts.sources):
        return Decision(False, "no source serves anything yet (every ingestion so far failed): nothing to evaluate")
    if facts.evaluations_in_flight:
        return Decision(False, f"an evaluation is in flight ({_names(list(facts.evaluations_in_flight))}): "
                               "compare with what it evaluated once it ends")
    sources, state = facts.source_ids, facts.served_state()
    if any(earlier.covers(state, sources) for earlier in facts.evaluated):
        return Decision(False, f"golden revision {facts.revision} already evaluated on what every source serves "
                               f"now, with this config ({facts.config}, {facts.mode})")
    if not facts.evaluated:
        return Decision(True, "no evaluation yet", state)
    return Decision(True, "changed since the last evaluation: " + "; ".join(state.changes_from(facts.evaluated[0], sources)),
                    state)
