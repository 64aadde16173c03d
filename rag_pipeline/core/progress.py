"""Progress of long work: a line every few percent, with the rate and the time left.

    progress = Progress("embedding", total=5183, report=print)
    for batch in batches:
        ...
        progress.advance(len(batch))

`report` receives lines such as "embedding: 1,296/5,183 (25%), 21.4/s, about 3 min 2 s left".
The Dagster assets pass their run log; the command line prints them (one line rewritten in
place on a terminal). Lines go to the Python logger `rag_pipeline.progress` too, so any process
can show them by configuring that logger.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

LOGGER = logging.getLogger("rag_pipeline.progress")
# Work this small finishes before a progress line would help anyone.
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
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.label = label
        self.total = total
        self.report = report
        self.every = max(1, every_percent)
        self.clock = clock
        self.started = clock()
        self.done = 0
        self._next_percent = self.every

    def advance(self, n: int = 1) -> None:
        self.done += n
        if self.total < MIN_TOTAL:
            return
        percent = int(100 * self.done / self.total)
        if percent < self._next_percent and self.done < self.total:
            return
        self._next_percent = (percent // self.every + 1) * self.every
        self._emit(self.line())

    def line(self) -> str:
        elapsed = max(self.clock() - self.started, 1e-9)
        rate = self.done / elapsed
        left = (self.total - self.done) / rate if rate > 0 else float("inf")
        tail = "done" if self.done >= self.total else (f"about {_duration(left)} left" if left != float("inf") else "")
        return (f"{self.label}: {self.done:,}/{self.total:,} ({100 * self.done / self.total:.0f}%), "
                f"{rate:.1f}/s, {tail}").rstrip(", ")

    def _emit(self, line: str) -> None:
        LOGGER.info(line)
        if self.report is not None:
            self.report(line)
