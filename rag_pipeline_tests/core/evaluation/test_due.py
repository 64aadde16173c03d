"""`decide`: the rule of when the night evaluates, branch by branch, on plain facts."""

from __future__ import annotations

import hashlib
import json

from rag_pipeline.core.evaluation.due import (
    EMPTY_MANIFEST,
    FAILED,
    IN_PROGRESS,
    MATERIALIZED,
    NEVER,
    EvaluatedState,
    NightFacts,
    SourceState,
    decide,
)


def facts(*sources: SourceState, **fields) -> NightFacts:
    return NightFacts(**{"revision": "rev1", "config": "cfg1", "mode": "hybrid", "settings": "set1",
                         "sources": list(sources), **fields})


def served(source_id: str, manifest: str = "h", settings: str | None = "set1", attempt: str = MATERIALIZED) -> SourceState:
    return SourceState(source_id, attempt, manifest, settings)


def test_the_empty_manifest_is_what_the_store_hashes_for_a_source_serving_nothing():
    assert EMPTY_MANIFEST == hashlib.sha256(json.dumps([]).encode()).hexdigest()[:16]


def test_ingestion_in_flight_is_said_before_anything_else():
    decision = decide(facts(SourceState("a", NEVER), ingestion_in_flight=["run 1234abcd of __ASSET_JOB for a"]))
    assert not decision.evaluate and decision.reason.startswith("ingestion in flight (run 1234abcd")


def test_many_in_flight_are_counted_not_all_listed():
    decision = decide(facts(served("a"), ingestion_in_flight=[f"run {i}" for i in range(8)]))
    assert "run 4 and 3 more" in decision.reason


def test_a_source_behind_the_config_waits_unless_its_latest_run_failed():
    behind = decide(facts(served("a"), served("b", settings="set0")))
    assert not behind.evaluate and "b serve chunks built with other" in behind.reason
    # b tried since and failed: it is measured as it is served (the sources table says so).
    tried = decide(facts(served("a"), served("b", settings="set0", attempt=FAILED)))
    assert tried.evaluate
    # A switch recorded before the settings were kept says nothing about them: it does not wait.
    assert decide(facts(served("a"), served("b", settings=None))).evaluate


def test_a_source_in_progress_by_its_partition_status_serves_its_last_state():
    decision = decide(facts(served("a", attempt=IN_PROGRESS)))
    assert decision.evaluate and decision.state.index == {"a": "h"}


def test_states_compare_on_the_configured_sources_only():
    state = EvaluatedState("rev1", "cfg1", "hybrid", {"a": "h", "b": EMPTY_MANIFEST})
    earlier = EvaluatedState("rev1", "cfg1", "hybrid", {"a": "h", "gone": "x"})  # b served nothing then either
    assert earlier.covers(state, ["a", "b"])
    assert not earlier.covers(state, ["a", "b", "gone"])
    moved = EvaluatedState("rev2", "cfg2", "bm25", {"a": "h2"})
    assert moved.changes_from(state, ["a", "b"]) == ["golden revision rev1 -> rev2",
                                                      "retrieval config cfg1 (hybrid) -> cfg2 (bm25)",
                                                      "served index of a"]


def test_the_reason_of_an_evaluation_names_what_changed():
    earlier = EvaluatedState("rev1", "cfg1", "hybrid", {"a": "h", "b": "h"})
    decision = decide(facts(served("a"), served("b", "h2"), evaluated=[earlier]))
    assert decision.evaluate and decision.reason == "changed since the last evaluation: served index of b"
    assert decide(facts(served("a"), served("b"), evaluated=[earlier])).evaluate is False


def test_a_state_round_trips_through_the_cursor_and_an_older_cursor_is_none():
    state = EvaluatedState("rev1", "cfg1", "hybrid", {"a": "h"})
    assert EvaluatedState.from_json(json.loads(json.dumps(state.to_json()))) == state
    assert EvaluatedState.from_json({"revision": "rev1", "index_event": 7}) is None
    assert EvaluatedState.from_json(None) is None
    assert state.digest() == EvaluatedState("rev1", "cfg1", "hybrid", {"a": "h"}).digest() != \
        EvaluatedState("rev1", "cfg1", "hybrid", {"a": "h2"}).digest()
