"""docs/performance.md is written by the benchmarks, never by hand: each script owns one section.

A section sits between two HTML comments naming the script (`<!-- benchmarks/ingest.py -->` and
`<!-- /benchmarks/ingest.py -->`); `write_section` replaces it (or appends it the first time) and
stamps it with the date, the machine and the command that produced it. Sections of other scripts
are left as they are, so one benchmark can be re-run on its own.
"""

from __future__ import annotations

import os
import platform
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
_HEADER = """# Performance

Every figure on this page was written by a script in `benchmarks/` (the command is under each
heading), on the machine named there. Re-run a script to refresh its section; `make bench` runs
the ingestion benchmark. Nothing here is edited by hand.
"""


def machine() -> str:
    """One line naming the machine: CPUs this process may use, memory, OS and Python."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    try:
        with open("/proc/meminfo") as handle:
            kib = int(next(line for line in handle if line.startswith("MemTotal")).split()[1])
        memory = f"{kib / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        memory = "memory unknown"
    return f"{cpus} CPUs, {memory}, {platform.system()} {platform.machine()}, Python {platform.python_version()}"


def commit() -> str:
    """The checkout's commit, `+changes` when its tracked files differ from it: what was measured. The
    scripts' own outputs (docs/, benchmarks/results/) do not count: a run writes them before its section."""
    root = PAGE.parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".", ":!docs", ":!benchmarks/results"],
                               cwd=root).returncode
    except (OSError, subprocess.CalledProcessError):
        return "commit unknown"
    return head + ("+changes" if dirty else "")


@dataclass(frozen=True)
class Timed:
    """A finished command: its result, wall seconds, and CPU seconds (user + system) of its whole
    process tree (every descendant the command waited for, as the kernel accounts them)."""

    done: subprocess.CompletedProcess
    wall_s: float
    cpu_s: float


def timed(command: list[str], **kwargs) -> Timed:
    """Run `command` (subprocess.run's keywords) and time it as a whole process tree."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, **kwargs)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return Timed(done, wall, cpu)


def machine_load(at_start: tuple[float, float, float]) -> str:
    """The machine's load average (1, 5 and 15 minutes) at the start and the end: the figures share
    the CPUs with whatever else ran then."""
    at_end = os.getloadavg()
    return (f"Load average of the machine (1, 5, 15 min) at the start: {', '.join(f'{v:.1f}' for v in at_start)}; "
            f"at the end: {', '.join(f'{v:.1f}' for v in at_end)}.")


def server_cpu_s(pid: int) -> float:
    """CPU seconds a running server has used so far: user + system of `pid` and of every live process
    under it, each with the times of its children already reaped (so every process that ever ran
    under the server counts once). From /proc (Linux); a process that ends meanwhile is skipped."""
    ticks = os.sysconf("SC_CLK_TCK")
    children: dict[int, list[int]] = {}
    times: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # After the name: state, ppid, ... utime (14th field of the line), stime, cutime, cstime.
        children.setdefault(int(fields[1]), []).append(int(entry.name))
        times[int(entry.name)] = sum(int(x) for x in fields[11:15])
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += times.get(current, 0)
        todo += children.get(current, [])
    return total / ticks


CPUACCT = Path("/sys/fs/cgroup/cpuacct")  # cgroup v1's CPU accounting hierarchy
CGROUP_METHOD = ("the kernel's CPU accounting (a cpuacct cgroup holding this process and every process started "
                 "while it was measured, daemons included)")
RUSAGE_METHOD = ("getrusage: this process and the children it waited for (processes that outlived their "
                 "parent, such as daemons, are not counted: cgroups were not writable here)")


class TreeCPU:
    """CPU seconds (user + system) of a process tree, measured by `tree_cpu`: `so_far()` within its
    block (intervals are differences), `cpu_s` once the block has ended, and `method`, which
    measure gave them (CGROUP_METHOD or RUSAGE_METHOD)."""

    def __init__(self, group: Path | None) -> None:
        self.group = group
        self.method = CGROUP_METHOD if group is not None else RUSAGE_METHOD
        self.started = 0.0 if group is not None else _rusage_cpu()
        self.cpu_s: float | None = None

    def so_far(self) -> float:
        """CPU seconds of the tree since the block began."""
        if self.group is not None:
            return int((self.group / "cpuacct.usage").read_text()) / 1e9
        return _rusage_cpu() - self.started


def _own_cpuacct() -> Path | None:
    """This process's cpuacct cgroup folder, or None where cgroup v1's cpuacct is not mounted."""
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "cpuacct" in controllers.split(","):
                folder = CPUACCT / path.lstrip("/")
                return folder if (folder / "cpuacct.usage").exists() else None
    except (OSError, ValueError):
        pass
    return None


def _rusage_cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@contextmanager
def tree_cpu(label: str) -> Iterator[TreeCPU]:
    """The CPU of this process and of every process it starts within the block (their children, and
    daemons that outlive their parent, included), as the kernel accounts it: the process moves into
    a new cpuacct cgroup under its own (children inherit it) for the block, and back after it. Where
    cgroups cannot be made (no cgroup v1, not root), getrusage of this process and its waited-for
    children instead; `method` says which."""
    parent = _own_cpuacct()
    group = None
    if parent is not None:
        group = parent / f"bench-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)}-{os.getpid()}-{time.monotonic_ns()}"
        try:
            group.mkdir()
            (group / "cgroup.procs").write_text(str(os.getpid()))
        except OSError:
            if group.exists():
                group.rmdir()
            group = None
    meter = TreeCPU(group)
    try:
        yield meter
    finally:
        meter.cpu_s = meter.so_far()
        if group is not None:
            _release(group, parent)


def _release(group: Path, parent: Path) -> None:
    """Remove the measure's cgroup: this process and whatever it started that still lives (a server
    stopping, process-wide workers) go back to `parent`, where their CPU counts from now on."""
    for _ in range(10):  # a process may fork while the others move: until the cgroup is empty
        try:
            group.rmdir()
            return
        except OSError:
            for pid in (group / "cgroup.procs").read_text().split():
                try:
                    (parent / "cgroup.procs").write_text(pid)
                except OSError:  # it ended meanwhile
                    pass


def measured_now() -> dict[str, str]:
    """When and on what code a run measures: saved with its figures, so that a page written later
    from them (`--page-from`) is stamped with the run's date and commit, not the writer's."""
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "commit": commit()}


def write_section(title: str, body: str, script: str | None = None, command: str | None = None,
                  page: Path = PAGE, measured: dict[str, str] | None = None) -> None:
    """Replace the section of `script` (default: the running script) on `page` with `title` and
    `body` (markdown), stamped with the machine, `command` (default: the running command line) and
    `measured` (`measured_now()` of the run, default: now)."""
    script = script or f"benchmarks/{Path(sys.argv[0]).name}"
    # A script owning several sections names each `script:part`; the command runs the script itself.
    command = command or "python " + " ".join([script.split(":")[0], *map(shlex.quote, sys.argv[1:])])
    measured = measured or measured_now()
    section = (f"<!-- {script} -->\n## {title}\n\n`{command}`, {measured['date']}, commit {measured['commit']}, "
               f"on {machine()}.\n\n"
               f"{body.strip()}\n<!-- /{script} -->")
    text = page.read_text() if page.exists() else _HEADER
    pattern = re.compile(rf"<!-- {re.escape(script)} -->.*?<!-- /{re.escape(script)} -->", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section, text)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(text)


def fresh_workspace(work: Path, corpus: Path, source: str) -> tuple[Path, Path, Path]:
    """Under `work`: a copy of `corpus`, a new Dagster instance folder (the project's dagster.yaml)
    and a config serving the copy as `source` from a DuckDB file, as a user's first build has them.
    Returns (config, the corpus copy, DAGSTER_HOME)."""
    import yaml

    copy = work / corpus.name
    shutil.copytree(corpus, copy)
    home = work / "dagster_home"
    home.mkdir()
    shutil.copy(PAGE.parent.parent / "dagster.yaml", home / "dagster.yaml")
    config = work / "pipeline.yaml"
    config.write_text(yaml.safe_dump({"sources": [{"name": source, "path": str(copy)}],
                                      "storage": {"path": str(work / "index.duckdb")}}))
    return config, copy, home
