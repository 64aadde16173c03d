"""Progress lines: at least every 10 seconds, or every 5% if that comes first, never within 2 seconds
of the last one; done/total, the rate and the time left. The clock is injected: no test sleeps."""

from rag_pipeline.core.progress import Progress


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _progress(total: int, clock: Clock, lines: list[tuple[float, str]], label: str = "embedding") -> Progress:
    return Progress(label, total, lambda line: lines.append((clock.now, line)), clock=clock)


def test_a_line_every_five_percent_with_rate_and_time_left():
    clock, lines = Clock(), []
    progress = _progress(200, clock, lines)
    for _ in range(200):
        clock.now += 0.5
        progress.advance()
    assert len(lines) == 20
    assert lines[0] == (5.0, "embedding: 10/200 (5%), 2.0/s, about 1 min 35 s left")
    assert lines[-1] == (100.0, "embedding: 200/200 (100%), 2.0/s, done")


def test_slow_work_reports_every_ten_seconds_between_percent_steps():
    """1,939 chunks at 0.25 s each: 5% is 24 s of work, yet a line comes every 10 s."""
    clock, lines = Clock(), []
    progress = _progress(1939, clock, lines)
    for _ in range(1939):
        clock.now += 0.25
        progress.advance()
    gaps = [later - earlier for (earlier, _), (later, _) in zip(lines, lines[1:])]
    assert lines[0][0] == 10.0 and max(gaps) <= 10.0
    assert lines[0][1] == "embedding: 40/1,939 (2%), 4.0/s, about 7 min 55 s left"
    assert lines[-1][1] == "embedding: 1,939/1,939 (100%), 4.0/s, done"


def test_fast_work_never_reports_more_often_than_every_two_seconds():
    clock, lines = Clock(), []
    progress = _progress(10_000, clock, lines)
    for _ in range(10_000):
        clock.now += 0.001  # 5% every 0.5 s
        progress.advance()
    times = [at for at, _ in lines[:-1]]  # the last line ("done") always comes
    assert all(later - earlier >= 2.0 - 1e-9 for earlier, later in zip(times, times[1:]))
    assert len(lines) == 5 and lines[-1][1].endswith("done")
    quick, said = Clock(), []
    burst = _progress(1000, quick, said)
    quick.now = 0.4
    burst.advance(999)
    quick.now = 0.5
    burst.advance()
    assert [line for _, line in said] == ["embedding: 1,000/1,000 (100%), 2000.0/s, done"]


def test_a_long_wait_for_one_item_still_reports_through_ticks():
    """Three documents, the first of which takes 35 s to parse: the waiting loop ticks every second."""
    clock, lines = Clock(), []
    progress = _progress(3, clock, lines, label="docs: parsing")
    for _ in range(35):
        clock.now += 1.0
        progress.tick()
    progress.advance()
    clock.now += 1.0
    progress.advance(2)
    assert lines == [(10.0, "docs: parsing: 0/3 (0%), 0.0/s"), (20.0, "docs: parsing: 0/3 (0%), 0.0/s"),
                     (30.0, "docs: parsing: 0/3 (0%), 0.0/s"), (36.0, "docs: parsing: 3/3 (100%), 0.1/s, done")]


def test_small_work_that_is_quick_stays_quiet():
    clock, lines = Clock(), []
    small = _progress(5, clock, lines, label="parsing")
    for _ in range(5):
        clock.now += 0.5
        small.advance()
    assert lines == []
