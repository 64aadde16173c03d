"""A stage waiting on one long item (an embedding call, a document's parse) still reports: its wait
calls the progress's tick until the item is done, and an error of the item reaches the stage."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np
import pytest

from rag_pipeline.core.ingestion import parse_pool, stages


class Held:
    """An embedder whose call returns only once the test lets it (after a few ticks)."""

    def __init__(self, fail: bool = False) -> None:
        self.release = threading.Event()
        self.fail = fail

    def encode(self, texts):
        assert self.release.wait(30), "never released"
        if self.fail:
            raise RuntimeError("the model ran out of memory")
        return np.ones((len(texts), 4), dtype=np.float32)


def _ticks_then(release: threading.Event, ticks: list[int], after: int = 3):
    def tick() -> None:
        ticks.append(1)
        if len(ticks) >= after:
            release.set()

    return tick


def test_a_long_embedding_call_ticks_until_it_returns(monkeypatch):
    monkeypatch.setattr(stages, "TICK_SECONDS", 0.01)
    embedder, ticks = Held(), []
    vectors = stages._encoded(embedder, ["a", "b"], _ticks_then(embedder.release, ticks))
    assert len(ticks) >= 3 and vectors.shape == (2, 4)
    failing, ticks = Held(fail=True), []
    with pytest.raises(RuntimeError, match="ran out of memory"):
        stages._encoded(failing, ["a"], _ticks_then(failing.release, ticks))


def test_a_long_parse_ticks_until_its_result_comes(monkeypatch):
    monkeypatch.setattr(parse_pool, "TICK_SECONDS", 0.01)
    future: Future = Future()
    ticks: list[int] = []
    done = threading.Event()
    threading.Thread(target=lambda: (done.wait(30), future.set_result("parsed")), daemon=True).start()
    assert parse_pool._waited(future, _ticks_then(done, ticks, after=4)) == "parsed"
    assert len(ticks) >= 4
