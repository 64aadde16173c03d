"""The parser in a process of its own, bounded, so that one document can only fail itself.

A document that makes `unstructured` spin for minutes, eat memory or crash (a parser bug, a
decompression bomb) must not hold or sink its source, nor the machine. Each document's bytes go
to a long-lived worker process over a `multiprocessing.connection` pipe, and:
- its parse may take at most the source's `limits.max_parse_seconds`: a worker that overruns is
  killed, and the next document gets a new one;
- the worker's address space is capped at `limits.max_parser_memory_mb` (RLIMIT_AS, set by the
  worker on itself before it imports a parser): an allocation past it fails inside the worker,
  whose document fails with the limit as its reason, and the worker is replaced;
- a worker that dies is reported with its exit status;
- the worker dies with its parent, whatever kills the parent (kill -9 included): the kernel sends
  it SIGKILL when the thread that started it ends (PR_SET_PDEATHSIG, asked for only when the
  main thread starts it: that thread ends with the process), and a watchdog thread in the worker
  leaves as soon as its parent process is gone (the kernel then gives it another parent).
The worker imports `unstructured` once, so a document's cost is one round trip.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from multiprocessing.connection import Connection, Pipe

from rag_pipeline.core.ingestion.parsing import WARM_UP_TYPES, ParseError, ParseJob
from rag_pipeline.core.models import ParsedDocument

# Importing a partitioner and loading spaCy take seconds (more on a busy machine); this bounds
# the wait for a worker that hangs while starting, not any document's parse.
WARM_UP_TIMEOUT_S = 600.0
# How often the worker's watchdog looks for its parent.
WATCHDOG_INTERVAL_S = 0.25
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
# The worker's libraries see one CPU each: the pipeline runs one worker per CPU, and the thread
# teams of BLAS and glibc's per-thread malloc arenas would only add address space and contention.
_WORKER_ENV = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MALLOC_ARENA_MAX": "2",
               "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "DO_NOT_TRACK": "1", "UNSTRUCTURED_DISABLE_NOTICE": "1"}


class ParserProcess:
    """A worker process running `parsing.parse_job`; `parse` raises ParseError for any failure."""

    def __init__(self, memory_limit_mb: int | None = None) -> None:
        self.memory_limit_mb = memory_limit_mb
        self._process: subprocess.Popen | None = None
        self._connection: Connection | None = None
        self._warm: set[str] = set()
        self._lock = threading.Lock()
        # The largest resident memory (bytes) any of its workers used, by the worker's own count
        # or, for one that was stopped or died, the kernel's.
        self.peak_memory_bytes = 0

    def parse(self, job: ParseJob, timeout_s: float) -> ParsedDocument:
        with self._lock:
            if job.file_type not in self._warm:
                self._call(("warm", job.file_type), WARM_UP_TIMEOUT_S, f"starting the {job.file_type} parser")
                self._warm.add(job.file_type)
            status, payload = self._call(("parse", job), timeout_s, "parsing", limit=True)
        if status == "error":
            raise ParseError(payload)
        return payload

    def use_memory_limit(self, memory_limit_mb: int | None) -> None:
        """Parse the next documents under this limit (a worker running under another one is replaced)."""
        with self._lock:
            if memory_limit_mb != self.memory_limit_mb:
                self._stop()
                self.memory_limit_mb = memory_limit_mb

    def _call(self, request: tuple, timeout_s: float, what: str, limit: bool = False) -> tuple[str, object]:
        connection = self._ensure_started()
        try:
            connection.send(request)
            if not connection.poll(timeout_s):
                raise TimeoutError
            status, payload, peak = connection.recv()
        except TimeoutError:
            self._stop()
            if limit:
                raise ParseError(
                    f"parsing took longer than {timeout_s:g} s (limits.max_parse_seconds): the parser was stopped"
                ) from None
            raise ParseError(f"the parser did not answer within {timeout_s:g} s while {what}") from None
        except (EOFError, OSError):
            code = self._stop()
            raise ParseError(f"the parser process died while {what} ({_describe_exit(code)}); the document may be "
                             f"corrupt or need more memory than {self._memory_limit_text()}") from None
        except BaseException:
            # Interrupted between a request and its reply (Ctrl-C, a run's termination): the
            # worker's reply would be read by the next request, as another document's content.
            # The worker goes; the next request starts a new one.
            self._stop()
            raise
        self.peak_memory_bytes = max(self.peak_memory_bytes, peak)
        if status == "memory":
            self._stop()  # an allocation failed somewhere inside it: a new worker for the next document
            said = f" ({payload})" if payload else ""
            raise ParseError(f"the parser reached its memory limit while {what}: {self._memory_limit_text()}{said}; "
                             "raise limits.max_parser_memory_mb if the document is genuine")
        if status == "crash":
            raise ParseError(f"the parser failed while {what}: {payload}")
        return status, payload

    def _memory_limit_text(self) -> str:
        if self.memory_limit_mb is None:
            return "the machine has"
        return f"its {self.memory_limit_mb:,} MB address space (limits.max_parser_memory_mb)"

    def _ensure_started(self, warm_file_types: Iterable[str] = ()) -> Connection:
        if self._process is None or _exited(self._process):
            if self._process is not None:
                self._stop()
            self._warm.clear()
            ours, theirs = Pipe()
            command = [sys.executable, "-m", "rag_pipeline.core.ingestion.parse_worker", "--fd", str(theirs.fileno()),
                       "--parent", str(os.getpid())]
            if self.memory_limit_mb is not None:
                command += ["--memory-mb", str(self.memory_limit_mb)]
            if threading.current_thread() is threading.main_thread():
                command.append("--die-with-parent-thread")
            if warm_file_types:
                # The worker warms these parsers up on its own, before it reads its first request.
                command += ["--warm", ",".join(sorted(warm_file_types))]
            try:
                self._process = subprocess.Popen(command, pass_fds=(theirs.fileno(),), env={**os.environ, **_WORKER_ENV})
            finally:
                theirs.close()
            self._connection = ours
        return self._connection

    def start(self, warm_file_types: Iterable[str]) -> None:
        """Start the worker now, warming up the parsers of `warm_file_types` while the caller goes on."""
        with self._lock:
            self._ensure_started(warm_file_types)

    def _stop(self) -> int | None:
        process, self._process = self._process, None
        connection, self._connection = self._connection, None
        self._warm.clear()
        if connection is not None:
            connection.close()
        if process is None:
            return None
        if not _exited(process):
            os.kill(process.pid, signal.SIGKILL)
        if process.returncode is None:
            # Reaped here, with the kernel's account of its peak memory (ru_maxrss is in KiB; it
            # may include the parent's own peak at the fork, so it errs high, never low).
            try:
                _, status, usage = os.wait4(process.pid, 0)
            except ChildProcessError:  # reaped elsewhere: its status is gone
                return None
            process.returncode = os.waitstatus_to_exitcode(status)
            self.peak_memory_bytes = max(self.peak_memory_bytes, usage.ru_maxrss * 1024)
        return process.returncode

    def close(self) -> None:
        with self._lock:
            self._stop()

    def running(self) -> bool:
        process = self._process
        return process is not None and not _exited(process)

    @property
    def pid(self) -> int | None:
        process = self._process
        return process.pid if process is not None else None

    def kill(self) -> None:
        """Kill the worker now, even while another thread waits for its reply (that thread then
        sees it die and fails its document); the next request starts a new one."""
        process = self._process
        if process is not None and not _exited(process):
            os.kill(process.pid, signal.SIGKILL)


def _exited(process: subprocess.Popen) -> bool:
    """Whether the worker has ended, without reaping it: `_stop` reaps it with its resource use
    (and, unreaped, its pid cannot be given to another process meanwhile)."""
    if process.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


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


def start_parser_early(file_types: set[str], memory_limit_mb: int | None) -> None:
    """Start the first process-wide worker now, importing the parsers of `file_types` on the other
    core while this process imports Dagster (each takes about 2 s): for a command that knows it
    will parse documents of these types."""
    if file_types:
        parser = shared_parsers(1)[0]
        parser.use_memory_limit(memory_limit_mb)
        parser.start(file_types & set(WARM_UP_TYPES))


# A new worker costs an interpreter's start with unstructured and spaCy (about 2 s of CPU);
# below this many documents a second one costs more than it saves.
PARALLEL_MIN_DOCUMENTS = 40


def default_parse_workers() -> int:
    """One worker per CPU this process may use, at most 2: the model's encoding wants a core too."""
    return max(1, min(2, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


def parse_workers_for(configured: int, documents: int) -> int:
    """How many workers parse `documents` at once: as configured, else `default_parse_workers`
    when they are already running or there is enough to parse."""
    if configured:
        return max(1, min(configured, documents))
    with _shared_lock:
        running = sum(1 for worker in _shared if worker.running())
    wanted = default_parse_workers()
    if running < wanted and documents < PARALLEL_MIN_DOCUMENTS:
        wanted = max(1, running)
    return max(1, min(wanted, documents))


# ---- the worker's side --------------------------------------------------------------------


def _die_with_parent(parent: int, with_thread: bool) -> None:
    """Leave when the parent process is gone: at once by the kernel's signal when asked (the parent
    thread's end), and by a watchdog thread in any case."""
    if with_thread:
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the parent died before the signal was asked for
        os._exit(1)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(WATCHDOG_INTERVAL_S)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watchdog", daemon=True).start()


def _peak_memory_bytes() -> int:
    """The most resident memory this worker has held (VmHWM), in bytes. Not `ru_maxrss`: Linux
    carries the parent's high-water mark into a child across fork and exec, so a fresh worker
    started by a 1 GB process would report 1 GB before reading anything."""
    return _status_bytes("VmHWM:") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _address_space_peak() -> int:
    """The most address space this process has held (VmPeak), in bytes."""
    return _status_bytes("VmPeak:")


def _status_bytes(field: str) -> int:
    """A size field of /proc/self/status (given in kB), in bytes; 0 where there is none."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


# An error raised after the worker's address space came this close to its cap is taken for an
# allocation the cap refused: libraries report one in their own words (libxml2: "unknown error"),
# and documents within the other limits peak far below it.
NEAR_THE_CAP = 0.75


def serve(connection: Connection, warm: Iterable[str] = (), memory_limit: int | None = None) -> None:
    """The worker's loop: one request in, one reply out, until the parent closes its end."""
    import logging

    # Anything a library prints goes to stderr, never into the parent's standard output (which
    # may be a `--json` report).
    os.dup2(2, 1)
    from rag_pipeline.core.ingestion import parsing

    # Library warnings are collected per document into the failure reason, not printed.
    logging.basicConfig(handlers=[logging.NullHandler()], level=logging.WARNING)
    logging.captureWarnings(True)
    for file_type in warm:
        try:
            parsing.warm_up(file_type)
        except Exception:  # noqa: BLE001 - the parent's own warm-up request reports it
            pass
    while True:
        try:
            kind, payload = connection.recv()
        except EOFError:
            return
        try:
            if kind == "warm":
                parsing.warm_up(payload)
                reply: tuple[str, object] = ("ok", None)
            else:
                reply = ("ok", parsing.parse_job(payload))
        except MemoryError:
            reply = ("memory", None)
        except ParseError as exc:
            reply = ("error", str(exc))
        except Exception as exc:  # noqa: BLE001 - any parser bug becomes this document's reason
            reply = ("crash", f"{type(exc).__name__}: {exc}")
        if reply[0] in ("error", "crash") and memory_limit and _address_space_peak() >= NEAR_THE_CAP * memory_limit:
            reply = ("memory", reply[1])
        try:
            connection.send((*reply, _peak_memory_bytes()))
        except MemoryError:
            connection.send(("memory", None, _peak_memory_bytes()))


def main(argv: list[str] | None = None) -> None:
    import argparse

    parser = argparse.ArgumentParser(description="A parser worker (started by ParserProcess).")
    parser.add_argument("--fd", type=int, required=True, help="this end of the parent's pipe")
    parser.add_argument("--parent", type=int, required=True, help="the parent's pid: the worker leaves when it is gone")
    parser.add_argument("--die-with-parent-thread", action="store_true", help="ask the kernel for SIGKILL when the "
                                                                              "thread that started the worker ends")
    parser.add_argument("--memory-mb", type=int, default=None, help="cap on the worker's address space")
    parser.add_argument("--warm", default="", help="parsers to import before the first request (md,html,...)")
    args = parser.parse_args(argv)
    _die_with_parent(args.parent, args.die_with_parent_thread)
    limit = args.memory_mb * 1024 * 1024 if args.memory_mb is not None else None
    if limit is not None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    # The parser never needs torch (spaCy's small English model runs on numpy), but thinc, under
    # unstructured's spaCy, imports it whenever it is installed (thinc/compat.py, with no switch to
    # say otherwise), and it stays installed to export the embedding model: a second of CPU and
    # about 300 MB per worker. A `None` entry is Python's documented way to make an import fail.
    sys.modules["torch"] = None
    connection = Connection(args.fd)
    try:
        serve(connection, [t for t in args.warm.split(",") if t], limit)
    except MemoryError:
        os._exit(3)  # out of its memory outside a document (while warming up): the parent reports the limit
    finally:
        sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
