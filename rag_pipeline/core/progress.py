"""Progress of long work: a line at least every 10 seconds, with done/total, the rate and the time left.

    progress = Progress("embedding", total=5183, report=print)
    for batch in batches:
        ...
        progress.advance(len(batch))

`report` receives lines such as "embedding: 1,296/5,183 (25%), 21.4/s, about 3 min 2 s left".
A line comes when `every_seconds` (10 s) passed since the last one, or sooner when the work
crossed another `every_percent` (5%) step, but never within `min_seconds` (2 s) of the last one:
fast work does not flood a log, slow work is never silent for long. The last line ("done") always
comes. A caller that waits for one long item calls `tick()` meanwhile, so the line still comes
on time. The Dagster assets pass their run log; the command line prints them (one line rewritten
in place on a terminal). Lines go to the Python logger `rag_pipeline.progress` too, so any process
can show them by configuring that logger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LOGGER = logging.getLogger("rag_pipeline.progress")
# Work this small gets no line for a percent step (a step is one item); the time floor still holds.
MIN_TOTAL = 20


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


class Progress:
    def __init__(self, label: str, total: int, report: Callable[[str], None] | None = None, every_percent: int = 5,
                 clock: Callable[[], float] = time.monotonic, every_seconds: float = 10.0,
                 min_seconds: float = 2.0) -> None:
        self.label = label
        self.total = total
        self.report = report
        self.every = max(1, every_percent)
        self.every_seconds = every_seconds
        self.min_seconds = min_seconds
        self.clock = clock
        self.started = clock()
        self.done = 0
        self._next_percent = self.every
        self._last_line: float | None = None
        self._finished = False

    def advance(self, n: int = 1) -> None:
        """`n` more items are done."""
        self.done += n
        self._maybe_report()

    def tick(self) -> None:
        """Nothing finished yet: report anyway if the last line is `every_seconds` old."""
        self._maybe_report()

    def _maybe_report(self) -> None:
        if self._finished or self.total <= 0:
            return
        now = self.clock()
        since = now - (self._last_line if self._last_line is not None else self.started)
        if self.done >= self.total:
            self._finished = True
            if self.total >= MIN_TOTAL or self._last_line is not None:
                self._emit(self.line(), now)
            return
        percent = int(100 * self.done / self.total)
        stepped = self.total >= MIN_TOTAL and percent >= self._next_percent
        if since >= self.every_seconds or (stepped and since >= self.min_seconds):
            self._emit(self.line(), now)

    def line(self) -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        tail = "done" if self.done >= self.total else (f"about {_duration(left)} left" if left != float("inf") else "")
        return (f"{self.label}: {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%), "
                f"{rate:.1f}/s, {tail}").rstrip(", ")

    def _emit(self, line: str, now: float) -> None:
        self._last_line = now
        self._next_percent = (int(100 * self.done / self.total) // self.every + 1) * self.every
        LOGGER.info(line)
        if self.report is not None:
            self.report(line)
