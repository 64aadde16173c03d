"""The parser in a process of its own, so that one document can only fail itself.

A document that makes `unstructured` spin for minutes, eat memory or crash (a parser bug, a
decompression bomb) must not hold or sink its source. The pipeline sends each document's bytes
to one long-lived worker process over a pipe and waits at most the source's
`limits.max_parse_seconds`; a worker that overruns is killed (and restarted for the next
document), a worker that dies is reported with its exit status. The worker imports
`unstructured` once, so the per-document cost is one round trip.

Frames on the pipes are an 8-byte big-endian length and a pickle (both ends are this module).
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import BinaryIO

from rag_pipeline.core.ingestion.parsing import WARM_UP_TYPES, ParseError, ParseJob
from rag_pipeline.core.models import ParsedDocument

_HEADER = struct.Struct(">Q")
# Importing a partitioner and loading spaCy take seconds (more on a busy machine); this bounds
# the wait for a worker that hangs while starting, not any document's parse.
WARM_UP_TIMEOUT_S = 600.0


class ParserProcess:
    """A worker process running `parsing.parse_job`; `parse` raises ParseError for any failure."""

    def __init__(self) -> None:
        self._process: subprocess.Popen | ForkedWorker | None = None
        self._warm: set[str] = set()
        self._lock = threading.Lock()

    def parse(self, job: ParseJob, timeout_s: float) -> ParsedDocument:
        with self._lock:
            if job.file_type not in self._warm:
                self._call(("warm", job.file_type), WARM_UP_TIMEOUT_S, f"starting the {job.file_type} parser")
                self._warm.add(job.file_type)
            status, payload = self._call(("parse", job), timeout_s, "parsing", limit=True)
        if status == "error":
            raise ParseError(payload)
        return payload

    def _call(self, request: tuple, timeout_s: float, what: str, limit: bool = False) -> tuple[str, object]:
        process = self._ensure_started()
        try:
            _write_frame(process.stdin, request)
            reply = _read_frame(process.stdout, time.monotonic() + timeout_s)
        except TimeoutError:
            self._stop()
            if limit:
                raise ParseError(
                    f"parsing took longer than {timeout_s:g} s (limits.max_parse_seconds): the parser was stopped"
                ) from None
            raise ParseError(f"the parser did not answer within {timeout_s:g} s while {what}") from None
        except (EOFError, BrokenPipeError, OSError):
            code = self._stop()
            raise ParseError(f"the parser process died while {what} ({_describe_exit(code)}); "
                             "the document may be corrupt or too large for the memory available") from None
        except BaseException:
            # Interrupted between a request and its reply (Ctrl-C, a run's termination): the
            # worker's reply would be read by the next request, as another document's content.
            # The worker goes; the next request starts a new one.
            self._stop()
            raise
        status, payload = reply
        if status == "crash":
            raise ParseError(f"the parser failed while {what}: {payload}")
        return status, payload

    def _ensure_started(self, warm_file_types: Iterable[str] = ()) -> subprocess.Popen | ForkedWorker:
        if self._process is None or self._process.poll() is not None:
            self._warm.clear()
            # The worker warms these parsers up on its own, before it reads its first request.
            warm = ["--warm", ",".join(sorted(warm_file_types))] if warm_file_types else []
            self._process = subprocess.Popen(
                [sys.executable, "-m", "rag_pipeline.core.ingestion.parse_worker", *warm],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True,
            )
        return self._process

    def start(self, warm_file_types: Iterable[str]) -> None:
        """Start the worker now, warming up the parsers of `warm_file_types` while the caller goes on."""
        with self._lock:
            self._ensure_started(warm_file_types)

    def adopt(self, worker: ForkedWorker, warm_file_types: set[str]) -> None:
        """Use an already started worker whose parsers for `warm_file_types` are loaded."""
        with self._lock:
            self._stop()
            self._process = worker
            self._warm = set(warm_file_types)

    def _stop(self) -> int | None:
        process, self._process = self._process, None
        self._warm.clear()
        if process is None:
            return None
        if process.poll() is None:
            process.kill()
        code = process.wait()
        for stream in (process.stdin, process.stdout):
            try:
                stream.close()
            except OSError:
                pass
        return code

    def close(self) -> None:
        with self._lock:
            self._stop()

    def running(self) -> bool:
        process = self._process
        return process is not None and process.poll() is None

    def kill(self) -> None:
        """Kill the worker now, even while another thread waits for its reply (that thread then
        sees it die and fails its document); the next request starts a new one."""
        process = self._process
        if process is not None and process.poll() is None:
            process.kill()


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "no exit status"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


# The process-wide parser workers, started on first use (a run that parses nothing starts none).
_shared: list[ParserProcess] = []
_shared_lock = threading.Lock()


def shared_parsers(count: int) -> list[ParserProcess]:
    """`count` process-wide parser workers (more are added when a source asks for more)."""
    with _shared_lock:
        while len(_shared) < count:
            worker = ParserProcess()
            atexit.register(worker.close)
            _shared.append(worker)
        return _shared[:count]


def start_parser_early(file_types: set[str]) -> None:
    """Start the first process-wide worker now, importing the parsers of `file_types` on the other
    core while this process imports Dagster (each takes about 2 s): for a command that knows it
    will parse documents of these types."""
    if file_types:
        shared_parsers(1)[0].start(file_types & set(WARM_UP_TYPES))


# A new worker costs an interpreter's start with unstructured and spaCy (about 2 s of CPU, while
# the model loads beside it); below this many documents a second one costs more than it saves.
PARALLEL_MIN_DOCUMENTS = 40


def default_parse_workers() -> int:
    """One worker per CPU this process may use, at most 2: the model's encoding wants a core too."""
    return max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def parse_workers_for(configured: int, documents: int) -> int:
    """How many workers parse `documents` at once: as configured, else `default_parse_workers`
    when they are already running (forked from the warm process) or there is enough to parse."""
    if configured:
        return max(1, min(configured, documents))
    with _shared_lock:
        running = sum(1 for worker in _shared if worker.running())
    wanted = default_parse_workers()
    if running < wanted and documents < PARALLEL_MIN_DOCUMENTS:
        wanted = max(1, running)
    return max(1, min(wanted, documents))


class ForkedWorker:
    """A parser worker forked from this process, for a process that has already imported the
    parsers (a command forked from the warm process): no interpreter to start, nothing to import.

    It offers what `ParserProcess` uses of a `subprocess.Popen`. Fork only while this process
    runs a single thread: a fork copies only the forking thread, and with it any lock another
    thread held. A worker that overruns or dies is replaced by a plain `Popen` one."""

    def __init__(self) -> None:
        requests_read, requests_write = os.pipe()
        replies_read, replies_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the worker: keep the standard streams and its two pipe ends, nothing else
            code = 0
            try:
                _close_all_but({0, 1, 2, requests_read, replies_write})
                _serve(os.fdopen(requests_read, "rb"), os.fdopen(replies_write, "wb"))
            except BaseException:  # noqa: BLE001 - said on stderr; the parent sees the exit code
                import traceback

                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(requests_read)
        os.close(replies_write)
        self.pid = pid
        self.returncode: int | None = None
        self.stdin = os.fdopen(requests_write, "wb")
        self.stdout = os.fdopen(replies_read, "rb")

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def kill(self) -> None:
        if self.poll() is None:
            os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        if self.returncode is None:
            _, status = os.waitpid(self.pid, 0)
            self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode


def _close_all_but(keep: set[int]) -> None:
    low = 0
    for fd in sorted(keep):
        if low < fd:  # closerange(n, n) would close everything (close_range's upper bound wraps)
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def start_forked_parsers(warm_file_types: set[str], count: int) -> None:
    """Make the first `count` process-wide parsers workers forked from this process (see `ForkedWorker`)."""
    for parser in shared_parsers(count):
        parser.adopt(ForkedWorker(), warm_file_types)


def _write_frame(stream: BinaryIO, value: object) -> None:
    body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(body)) + body)
    stream.flush()


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    chunks, remaining = [], size
    while remaining:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def _read_frame(stream: BinaryIO, deadline: float | None = None):
    fd = stream.fileno()
    (size,) = _HEADER.unpack(_read_exactly(fd, _HEADER.size, deadline))
    return pickle.loads(_read_exactly(fd, size, deadline))


def _serve(requests: BinaryIO | None = None, replies: BinaryIO | None = None, warm: Sequence[str] = ()) -> None:
    """The worker's loop: one request in, one reply out, until the parent closes the pipe.

    Started as its own interpreter (`python -m`), it reads stdin and answers on stdout; forked
    (`ForkedWorker`), it is handed its two pipe ends. The parsers of `warm` are warmed up first."""
    import logging

    if requests is None:
        # The parser never needs torch (spaCy's small English model runs on numpy), but thinc, under
        # unstructured's spaCy, imports it whenever it is installed: a second of CPU and 300 MB per worker.
        sys.modules.setdefault("torch", None)
        # Frames go to the original stdout; anything a library prints goes to stderr instead.
        replies = os.fdopen(os.dup(1), "wb")
        requests = sys.stdin.buffer
    os.dup2(2, 1)
    from rag_pipeline.core.ingestion import parsing

    parsing.defer_unused_imports()

    # Offline and quiet wherever the parser runs (it is started by tests and tools too).
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK", "UNSTRUCTURED_DISABLE_NOTICE"):
        os.environ.setdefault(name, "1")
    # Library warnings are collected per document into the failure reason, not printed. The
    # handlers a forked worker inherits are dropped, not closed: their files are not its own.
    for handler in list(logging.root.handlers):
        logging.root.removeHandler(handler)
    logging.basicConfig(handlers=[logging.NullHandler()], level=logging.WARNING)
    logging.captureWarnings(True)
    for file_type in warm:
        try:
            parsing.warm_up(file_type)
        except Exception:  # noqa: BLE001 - the parent's own warm-up request reports it
            pass
    while True:
        try:
            kind, payload = _read_frame(requests)
        except EOFError:
            return
        try:
            if kind == "warm":
                parsing.warm_up(payload)
                reply: tuple[str, object] = ("ok", None)
            else:
                reply = ("ok", parsing.parse_job(payload))
        except ParseError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - any parser bug becomes this document's reason
            reply = ("crash", f"{type(exc).__name__}: {exc}")
        _write_frame(replies, reply)


if __name__ == "__main__":
    _arguments = sys.argv[1:]
    _serve(warm=_arguments[1].split(",") if _arguments[:1] == ["--warm"] and len(_arguments) > 1 else ())
