"""The warm process: Python, Dagster, the parsers and the model loaded once; each command a fork.

A command in a fresh process pays seconds before its first useful step: Python with Dagster and
the definitions, the parser's start (unstructured and spaCy) and the model's load (torch and
transformers). For a one-page edit that is most of the run. `rag-pipeline warm start` starts a
process that pays them once and then waits on a Unix socket. Every later `rag-pipeline` command
of the same installation hands it its arguments, environment, working folder and standard
streams, and runs in a fork of it: a process of its own (its crash, its kill, its memory are its
own), with everything already imported. When no warm process of this installation answers, the
command runs in its own process, as always.

A fork copies the forking thread only, and hangs where a thread pool of the parent had run
(torch's, after an inference). So the warm process only imports and loads: it runs no thread,
opens no database or Dagster instance and encodes nothing.

The protocol, one connection per command: the client sends one frame (an 8-byte length and a
JSON object) with its three standard streams attached (SCM_RIGHTS); the command's process
answers `{"pid": ...}` once forked and `{"exit": code}` at the end; the warm process answers
`{"exit": 128 + signal}` for a command killed by a signal. This module imports only the
standard library until it serves: the client side runs before anything else of a command.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import struct
import sys
import threading
import time
from pathlib import Path

WARM_ENV = "RAG_PIPELINE_WARM"  # "0": never hand a command to a warm process
DEFAULT_IDLE_MINUTES = 60.0
HANDSHAKE_TIMEOUT_S = 10.0  # a client that connects but sends no request is dropped after this
_HEADER = struct.Struct(">Q")
# Environment variables that libraries read when they are imported (thread counts, offline
# switches, import paths): a warm process loaded under other values is another installation.
_IMPORT_TIME_ENV = ("HF_", "TRANSFORMERS_", "TOKENIZERS_", "TORCH", "OMP_", "MKL_", "OPENBLAS_", "PYTHON",
                    "UNSTRUCTURED_", "SPACY", "CUDA", "LD_")
_FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


# --- where a warm process listens ------------------------------------------------------------


def cache_folder() -> Path:
    """The tool's cache ($RAG_PIPELINE_CACHE, else ~/.cache/rag_pipeline)."""
    base = os.environ.get("RAG_PIPELINE_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rag_pipeline")
    return Path(base)


def warm_folder() -> Path:
    return cache_folder() / "warm"


def _private_warm_folder() -> Path:
    """The warm folder, made when missing, that only its user can open (the sockets live there)."""
    folder = warm_folder()
    folder.mkdir(parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    return folder


def installation_fingerprint() -> str:
    """What a warm process must share with a command to run it: the interpreter, this package's
    files (path, size, mtime), the installed distributions and the import-time environment.
    An edited source file or a `pip install` makes a new fingerprint; the old process then
    serves nobody and leaves when idle."""
    import rag_pipeline

    # The environment's prefix and the real interpreter: `.venv/bin/python` and the console
    # script's `.venv/bin/python3.11` are one installation.
    digest = hashlib.sha256(f"{sys.prefix}\n{os.path.realpath(sys.executable)}\n{sys.version}\n".encode())
    package = Path(rag_pipeline.__file__).resolve().parent
    digest.update(str(package).encode())
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    import site

    for folder in sorted({*site.getsitepackages(), site.getusersitepackages()}):
        if os.path.isdir(folder):
            names = sorted(n for n in os.listdir(folder) if n.endswith((".dist-info", ".egg-info", ".pth")))
            digest.update(f"{folder}:{','.join(names)}\n".encode())
    for name in sorted(os.environ):
        if name.startswith(_IMPORT_TIME_ENV):
            digest.update(f"{name}={os.environ[name]}\n".encode())
    return digest.hexdigest()[:16]


def socket_path(fingerprint: str) -> Path:
    return warm_folder() / f"{fingerprint}.sock"


# --- frames ----------------------------------------------------------------------------------


def _send(connection: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    frame = _HEADER.pack(len(body)) + body
    if fds:
        socket.send_fds(connection, [frame], fds)
    else:
        connection.sendall(frame)


def _receive(connection: socket.socket, want_fds: int = 0) -> tuple[dict | None, list[int]]:
    """One frame (None at end of stream) and the descriptors that came with it. Reads exactly
    one frame's bytes: a command's two frames (its pid, its exit) may arrive in one packet."""
    header, fds = _read_exactly(connection, _HEADER.size, want_fds)
    body = _read_exactly(connection, _HEADER.unpack(header)[0])[0] if header is not None else None
    if body is None:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(body), fds


def _read_exactly(connection: socket.socket, size: int, want_fds: int = 0) -> tuple[bytes | None, list[int]]:
    data, fds = b"", []
    while len(data) < size:
        if want_fds and not data:  # descriptors come with the first bytes of their message
            chunk, received, _, _ = socket.recv_fds(connection, size, want_fds)
            fds = list(received)
        else:
            chunk = connection.recv(size - len(data))
        if not chunk:
            for fd in fds:
                os.close(fd)
            return None, []
        data += chunk
    return data, fds


# --- the client: every command, before anything else ------------------------------------------


def run_in_warm_process(argv: list[str]) -> int | None:
    """Run the command in the warm process of this installation and return its exit code, or
    None when there is none to run it (then the caller runs the command itself)."""
    if os.environ.get(WARM_ENV) == "0" or (argv and argv[0] == "warm"):
        return None
    path = socket_path(installation_fingerprint())
    if not path.exists():
        return None
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(str(path))
    except ConnectionRefusedError:
        _remove_stale_socket(path)
        return None
    except OSError:
        return None
    with connection:
        request = {"argv": list(argv), "cwd": os.getcwd(), "env": dict(os.environ)}
        try:
            _send(connection, request, _standard_streams())
            started, _ = _receive(connection)
        except OSError:
            started = None
        if started is None or "pid" not in started:
            return None  # stopping, or gone between connect and fork: nothing ran
        return _wait_for_exit(connection, int(started["pid"]))


def _standard_streams() -> list[int]:
    """fds 0, 1 and 2, with /dev/null standing in for a closed one."""
    fds = []
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            fds.append(os.open(os.devnull, mode))
    return fds


def _wait_for_exit(connection: socket.socket, pid: int) -> int:
    """Forward the signals a user sends (Ctrl-C, a terminal closing, a kill) to the command's
    process, and wait for its exit code."""

    def forward(signum, _frame):
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in _FORWARDED_SIGNALS}
    try:
        while True:
            try:
                reply, _ = _receive(connection)
                break
            except InterruptedError:
                continue
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if reply is None or "exit" not in reply:
        print(f"error: the command's process (pid {pid}, forked from the warm process) ended without "
              "an exit status; the warm process itself was probably stopped. Run the command again "
              f"(or set {WARM_ENV}=0 to run it without the warm process).", file=sys.stderr)
        return 1
    return int(reply["exit"])


def _remove_stale_socket(path: Path) -> None:
    """A socket file nobody listens on is left by a warm process that was killed."""
    try:
        path.unlink()
    except OSError:
        pass


# --- control: start, stop, status -------------------------------------------------------------


def _control(path: Path, message: dict, timeout_s: float = 10.0) -> dict | None:
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    connection.settimeout(timeout_s)
    try:
        connection.connect(str(path))
        _send(connection, message)
        reply, _ = _receive(connection)
        return reply
    except ConnectionRefusedError:
        _remove_stale_socket(path)
        return None
    except OSError:
        return None
    finally:
        connection.close()


def status(path: Path) -> dict | None:
    """What the warm process behind `path` says of itself, or None when none answers."""
    return _control(path, {"control": "status"})


def all_statuses() -> list[tuple[Path, dict]]:
    """Every warm process of this cache folder that answers, this installation's or not."""
    folder = warm_folder()
    found = []
    for path in sorted(folder.glob("*.sock")) if folder.is_dir() else []:
        reply = status(path)
        if reply is not None:
            found.append((path, reply))
    return found


def stop(path: Path) -> bool:
    """Ask the warm process behind `path` to stop (it lets running commands finish)."""
    return _control(path, {"control": "stop"}) is not None


def start(config_path: str | None, idle_minutes: float, timeout_s: float = 600.0) -> dict:
    """Start this installation's warm process (detached) and wait until it serves; return its
    status. An already running one is kept."""
    import subprocess

    path = socket_path(installation_fingerprint())
    running = status(path)
    if running is not None:
        return {**running, "already_running": True}
    _private_warm_folder()
    log_path = path.with_suffix(".log")
    command = [sys.executable, "-m", "rag_pipeline.warm", "--idle-minutes", str(idle_minutes)]
    if config_path:
        command += ["--config", str(Path(config_path).resolve())]
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log_path.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the warm process exited with code {process.returncode} while loading; "
                               f"its log ({log_path}) ends with:\n{tail}")
        reply = status(path) if path.exists() else None
        if reply is not None:
            return {**reply, "already_running": False}
        time.sleep(0.2)
    process.kill()
    raise RuntimeError(f"the warm process did not serve within {timeout_s:g} s; see {log_path}")


# --- the warm process -------------------------------------------------------------------------


class WarmProcess:
    """Loads once, then forks one process per command until stopped or idle."""

    def __init__(self, config_path: str | None, idle_seconds: float) -> None:
        self.config_path = config_path
        self.idle_seconds = idle_seconds
        self.fingerprint = installation_fingerprint()
        self.path = socket_path(self.fingerprint)
        self.started_at = time.time()
        self.served = 0
        self.loaded: list[str] = []
        self.parsers: set[str] = set()
        self.commands: dict[int, socket.socket] = {}
        self.stopping = False

    def load(self) -> None:
        """Import and load what commands need, without running any thread or inference."""
        import gc

        import rag_pipeline.cli
        import rag_pipeline.runner  # noqa: F401 - Dagster, the definitions, the stores
        from rag_pipeline.config import EmbeddingConfig, load_config
        from rag_pipeline.core.ingestion import parsing

        _import_run_time_modules()
        self.loaded.append("dagster and the definitions")
        for file_type in ("md", "html", "txt", "docx", "pdf"):
            parsing.warm_up(file_type)
            self.parsers.add(file_type)
        self.loaded.append("parsers: " + ", ".join(sorted(self.parsers)))
        embedding = load_config(self.config_path).embedding if self.config_path else EmbeddingConfig()
        if embedding.kind != "hashing":
            from rag_pipeline.core.ingestion.embedding import make_embedder

            embedder = make_embedder(embedding)
            embedder.model  # noqa: B018 - loads it, for every embedder of this model in the forks
            self.loaded.append(f"model: {embedder.identity}")
        if threading.active_count() != 1:
            names = ", ".join(t.name for t in threading.enumerate() if t is not threading.main_thread())
            raise RuntimeError(f"loading started threads ({names}): forks of this process would copy their locks")
        gc.collect()
        gc.freeze()  # what is loaded is never collected: forks share its pages instead of copying them

    def serve(self) -> None:
        _private_warm_folder()
        if status(self.path) is not None:
            print(f"a warm process already serves {self.path}", file=sys.stderr)
            return
        _remove_stale_socket(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        os.chmod(self.path, 0o600)
        listener.listen(16)
        listener.settimeout(1.0)
        inode = self.path.stat().st_ino
        signal.signal(signal.SIGTERM, lambda *_: setattr(self, "stopping", True))
        print(f"warm process {os.getpid()} serves {self.path}: {'; '.join(self.loaded)}", flush=True)
        last_activity = time.monotonic()
        try:
            while True:
                if self._reap():
                    last_activity = time.monotonic()
                if self.stopping and not self.commands:
                    return
                if not self.commands and time.monotonic() - last_activity > self.idle_seconds:
                    print(f"idle for {self.idle_seconds:g} s: leaving", flush=True)
                    return
                try:
                    connection, _ = listener.accept()
                except (TimeoutError, InterruptedError):
                    continue
                last_activity = time.monotonic()
                self._handle(connection, listener)
        finally:
            listener.close()
            try:
                if self.path.stat().st_ino == inode:
                    self.path.unlink()
            except OSError:
                pass

    def _handle(self, connection: socket.socket, listener: socket.socket) -> None:
        connection.settimeout(HANDSHAKE_TIMEOUT_S)
        try:
            uid = struct.unpack("3i", connection.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[1]
            request, fds = _receive(connection, want_fds=3)
        except (OSError, ValueError):
            connection.close()
            return
        if request is None or uid != os.getuid():
            for fd in fds:
                os.close(fd)
            connection.close()
            return
        if "control" in request:
            self._answer_control(connection, request["control"])
            return
        if self.stopping or len(fds) != 3:
            for fd in fds:
                os.close(fd)
            connection.close()  # the client runs the command itself
            return
        pid = os.fork()
        if pid == 0:
            listener.close()
            for other in self.commands.values():
                other.close()
            _run_command(connection, request, fds, self.parsers)  # never returns
        for fd in fds:
            os.close(fd)
        connection.settimeout(None)
        self.commands[pid] = connection
        self.served += 1
        print(f"command {self.served} (pid {pid}): rag-pipeline {' '.join(request['argv'])}", flush=True)

    def _answer_control(self, connection: socket.socket, command: str) -> None:
        with connection:
            if command == "stop":
                self.stopping = True
                _remove_stale_socket(self.path)  # new commands run on their own at once
            try:
                _send(connection, {"pid": os.getpid(), "fingerprint": self.fingerprint, "started_at": self.started_at,
                                   "served": self.served, "running": len(self.commands), "loaded": self.loaded,
                                   "idle_seconds": self.idle_seconds, "stopping": self.stopping})
            except OSError:
                pass

    def _reap(self) -> bool:
        """Collect finished commands; a command killed by a signal gets its status sent from here."""
        reaped = False
        while self.commands:
            try:
                pid, status_code = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            connection = self.commands.pop(pid, None)
            reaped = True
            if connection is None:
                continue
            if os.WIFSIGNALED(status_code):
                signum = os.WTERMSIG(status_code)
                print(f"pid {pid} was killed by signal {signum}", flush=True)
                try:
                    _send(connection, {"exit": 128 + signum})
                except OSError:
                    pass
            connection.close()
        return reaped


# What a command imports on its first run beyond the definitions (found by listing a fork's new
# modules after an ingest, with and without $DAGSTER_HOME). Missing ones (another version) are
# skipped: they only cost the fork their import.
_RUN_TIME_MODULES = (
    "duckdb", "rag_pipeline.core.storage.duckdb", "pyarrow.pandas_compat", "upath", "dotenv",
    "dagster._core.execution.execute_in_process", "dagster._core.executor.in_process",
    "dagster._core.instance.runs", "dagster._core.storage.sqlite_storage",
    "dagster._core.storage.local_compute_log_manager", "dagster._core.secrets.env_file",
    "dagster._core.storage.event_log.sqlite", "dagster._core.storage.runs.sqlite",
    "dagster._core.storage.schedules.sqlite", "watchdog.observers.polling", "upath.implementations.local",
    "dagster._core.execution.plan.active", "dagster._core.instance.runs.run_domain",
    "dagster._core.system_config.composite_descent", "pyarrow.vendored.version",
    "dagster._core.definitions.repository_definition.repository_data_builder",
)


def _import_run_time_modules() -> None:
    """Import what commands import on their first run, and make and drop an instance in memory
    (its storages and migrations), so that no fork imports them again. No connection is
    opened: DuckDB's would start its threads."""
    import importlib

    import dagster as dg

    for name in _RUN_TIME_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    with dg.DagsterInstance.ephemeral():
        pass


def _run_command(connection: socket.socket, request: dict, fds: list[int], parsers: set[str]) -> None:
    """In the fork: become the client's command (its streams, folder, environment), run it, exit."""
    code = 1
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in zip((0, 1, 2), fds):
            os.dup2(fd, target)
            os.close(fd)
        _reopen_standard_streams(request["env"])
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        argv = list(request["argv"])
        sys.argv = ["rag-pipeline", *argv]
        connection.settimeout(None)  # the handshake's limit, not the command's: it may run for hours
        _send(connection, {"pid": os.getpid()})
        from rag_pipeline.core.ingestion.parse_worker import default_parse_workers, start_forked_parsers

        start_forked_parsers(parsers, default_parse_workers())  # while this process still runs one thread
        finished = threading.Event()
        threading.Thread(target=_die_with_client, args=(connection, finished), name="client-watch", daemon=True).start()
        from rag_pipeline.cli import main

        try:
            code = main(argv)
        except SystemExit as exit_:
            code = _exit_code(exit_.code)
        except KeyboardInterrupt:  # Ctrl-C, forwarded by the client: the shell's code for it
            print("interrupted", file=sys.stderr)
            code = 128 + signal.SIGINT
        except BaseException:  # noqa: BLE001 - what an uncaught exception does to any command
            import traceback

            traceback.print_exc()
            code = 1
        finished.set()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        _send(connection, {"exit": code})
    finally:
        os._exit(code)


def _exit_code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def _reopen_standard_streams(env: dict) -> None:
    """Python's stream objects were made for the warm process's streams: make them for the
    client's (a terminal is line-buffered, PYTHONUNBUFFERED is honoured)."""
    import io

    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8")
    for fd, name in ((1, "stdout"), (2, "stderr")):
        stream = io.TextIOWrapper(io.FileIO(fd, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace" if fd == 2 else "strict",
                                  line_buffering=os.isatty(fd) or fd == 2, write_through=unbuffered)
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _die_with_client(connection: socket.socket, finished: threading.Event) -> None:
    """A client that dies (kill -9, a lost terminal) takes its command with it, as the command
    would die with its own process; SIGKILL, so the run protocol recovers it like any kill."""
    try:
        while connection.recv(1 << 10):
            pass
    except OSError:
        pass
    if not finished.is_set():
        os.kill(os.getpid(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    """`python -m rag_pipeline.warm`: the warm process itself (started by `rag-pipeline warm start`)."""
    import argparse

    parser = argparse.ArgumentParser(description="the warm process of rag-pipeline (start it with `rag-pipeline warm start`)")
    parser.add_argument("--config", default=None)
    parser.add_argument("--idle-minutes", type=float, default=DEFAULT_IDLE_MINUTES)
    args = parser.parse_args(argv)
    # The environment stays the starter's, as it is part of the fingerprint commands look for.
    warm = WarmProcess(args.config, args.idle_minutes * 60)
    warm.load()
    warm.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
