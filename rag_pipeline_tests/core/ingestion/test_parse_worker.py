"""The parser in its own process: a document that overruns or kills the parser fails alone."""

import threading
import time

import pytest

from rag_pipeline.core.ingestion.parse_worker import ParserProcess
from rag_pipeline.core.ingestion.parsing import ParseError, ParseJob

pytestmark = pytest.mark.slow

SLOW_MARKDOWN = ("# Long\n\n" + "\n\n".join(f"Paragraph {i} holds a sentence for the parser." for i in range(30000))).encode()


def _job(name: str, data: bytes, file_type: str = "md") -> ParseJob:
    return ParseJob(f"s:{name}", name, file_type, data, "hash", None, None)


@pytest.fixture
def parser():
    process = ParserProcess()
    yield process
    process.close()


def test_a_document_is_parsed_in_the_worker(parser):
    doc = parser.parse(_job("a.md", b"# Title\n\nSome body text.\n"), timeout_s=60)
    assert [e.category for e in doc.elements][0] == "Title" and len(doc.elements) == 2
    assert doc.elements[1].heading_path == ("Title",) and doc.elements[1].line_start == 3


def test_the_parsers_own_error_is_the_reason(parser):
    with pytest.raises(ParseError, match="invalid pdf header"):
        parser.parse(_job("bad.pdf", b"hello, not a pdf", "pdf"), timeout_s=60)


def test_an_overrun_is_stopped_and_the_next_document_parses(parser):
    started = time.monotonic()
    with pytest.raises(ParseError, match=r"longer than 0.5 s \(limits.max_parse_seconds\)"):
        parser.parse(_job("slow.md", SLOW_MARKDOWN), timeout_s=0.5)
    assert time.monotonic() - started < 30  # stopped, not waited for
    assert parser.parse(_job("b.md", b"# Next\n\nStill fine.\n"), timeout_s=60).title == "Next"


def test_a_dead_parser_fails_only_its_document(parser):
    parser.parse(_job("warm.md", b"# Warm\n\nup.\n"), timeout_s=60)
    assert parser.running()
    killer = threading.Timer(0.5, parser.kill)
    killer.start()
    with pytest.raises(ParseError, match="parser process died while parsing .*killed by SIGKILL"):
        parser.parse(_job("slow.md", SLOW_MARKDOWN), timeout_s=120)
    killer.join()
    assert parser.parse(_job("c.md", b"# After\n\nrestarted.\n"), timeout_s=60).title == "After"


def test_an_interrupted_parse_leaves_no_reply_for_the_next_document(parser):
    """Ctrl-C (or a run's termination) while the worker parses: the next document must get its
    own elements, not the reply meant for the interrupted one."""
    import signal

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    parser.parse(_job("warm.md", b"# Warm\n\nup.\n"), timeout_s=60)
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with pytest.raises(KeyboardInterrupt):
            parser.parse(_job("slow.md", SLOW_MARKDOWN), timeout_s=120)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert parser.parse(_job("next.md", b"# Next page\n\nIts own text.\n"), timeout_s=120).title == "Next page"
    assert parser.parse(_job("last.md", b"# Last page\n\nIts own text.\n"), timeout_s=120).title == "Last page"


def test_the_worker_keeps_only_its_pipe_and_standard_streams(tmp_path):
    import os

    held = open(tmp_path / "held.txt", "w")  # a descriptor of this process the worker must not keep
    process = ParserProcess()
    try:
        assert process.parse(_job("a.md", b"# Title\n\nBody.\n"), timeout_s=120).title == "Title"
        fds = {int(fd) for fd in os.listdir(f"/proc/{process.pid}/fd")}
        assert held.fileno() not in fds
        assert len(fds) == 4, fds  # stdin, stdout, stderr and its end of the pipe
        pid = process.pid
        process.close()  # the parent's end closes: the worker is stopped and reaped
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        process.close()
        held.close()
