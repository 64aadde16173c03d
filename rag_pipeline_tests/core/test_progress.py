"""Progress lines: every few percent, with the rate and the time left."""

from rag_pipeline.core.progress import Progress


def test_a_line_every_five_percent_with_rate_and_time_left():
    now = [0.0]
    lines: list[str] = []
    progress = Progress("embedding", 200, lines.append, every_percent=5, clock=lambda: now[0])
    for _ in range(200):
        now[0] += 0.5
        progress.advance()
    assert len(lines) == 20
    assert lines[0] == "embedding: 10/200 (5%), 2.0/s, about 1 min 35 s left"
    assert lines[-1] == "embedding: 200/200 (100%), 2.0/s, done"


def test_small_work_stays_quiet_and_big_steps_report_once():
    lines: list[str] = []
    small = Progress("parsing", 5, lines.append)
    for _ in range(5):
        small.advance()
    assert lines == []
    big = Progress("embedding", 1000, lines.append, clock=lambda: 1.0)
    big.advance(600)
    big.advance(400)
    assert [line.split(" (")[1].split(")")[0] for line in lines] == ["60%", "100%"]
