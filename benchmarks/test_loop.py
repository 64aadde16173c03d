"""How long the test loop takes: `make test-fast` (the loop while you work) and `make test` (what CI
runs), each timed as a person runs it, with the pytest summary and the slowest tests.

    python benchmarks/test_loop.py --page          # both, written to docs/performance.md
    python benchmarks/test_loop.py --only test-fast
    python benchmarks/test_loop.py --clean-clone --only test --page   # as CI runs it: a fresh clone, installed first

A clean clone matters: its virtual environment has no cached bytecode yet, so what the first
processes compile is part of the figure, as it is in CI.

Run it on a quiet machine: every other process on the cores is time the tests lose.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from performance_page import write_section

REPO = Path(__file__).resolve().parent.parent
TARGETS = ("test-fast", "test")
INSTALL = "install"
# Each target's worker count, as the Makefile sets it (TEST_WORKERS, FAST_WORKERS).
WORKER_VARIABLE = {"test": "TEST_WORKERS", "test-fast": "FAST_WORKERS"}
# pytest's last line: "12 failed, 700 passed, 3 skipped in 812.34s (0:13:32)".
_SUMMARY = re.compile(r"^=*\s*(?P<counts>(?:\d+ \w+(?:, )?)+) in (?P<seconds>[\d.]+)s", re.MULTILINE)
_FAILED = re.compile(r"^(?:FAILED|ERROR) (?P<test>\S+)", re.MULTILINE)
_DURATION = re.compile(r"^(?P<seconds>[\d.]+)s (?P<when>call|setup|teardown)\s+(?P<test>\S+)", re.MULTILINE)


@dataclass(frozen=True)
class LoopRun:
    target: str
    workers: int
    wall_s: float
    pytest_s: float | None
    counts: str
    exit_code: int
    slowest: list[tuple[float, str, str]]
    load: tuple[float, float]  # the 1-minute load average before and after: a loaded machine is slower
    cpu_s: float  # CPU seconds of the process tree (every process the run started and reaped)
    busy: float  # the share of all cores' time that was busy during the run (this run, on a quiet machine)
    failed: list[str]  # the tests that failed or errored, as pytest's summary names them


def run_target(target: str, workers: int | None, checkout: Path = REPO) -> LoopRun:
    """Run `make <target>` in `checkout` (on `workers`, or as many as the Makefile says) and read
    its pytest summary and durations."""
    load_before = os.getloadavg()[0]
    cpu_before, cores_before = _tree_cpu_s(), _core_times()
    started = time.monotonic()
    override = [f"{WORKER_VARIABLE[target]}={workers}"] if workers and target in WORKER_VARIABLE else []
    done = subprocess.run(["make", target, *override], cwd=checkout, capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu_s = _tree_cpu_s() - cpu_before
    busy, total = (after - before for before, after in zip(cores_before, _core_times(), strict=True))
    output = done.stdout + done.stderr
    # The whole output is kept for a failure's details (a clean clone's folder is gone afterwards).
    log = Path(tempfile.gettempdir()) / f"test-loop-{target}.log"
    log.write_text(output)
    print(f"  output: {log}", flush=True)
    summary = None
    for summary in _SUMMARY.finditer(output):
        pass  # the last summary line is the session's
    slowest = sorted(((float(m["seconds"]), m["when"], m["test"]) for m in _DURATION.finditer(output)), reverse=True)
    return LoopRun(target, (workers or makefile_workers(target)) if target in WORKER_VARIABLE else 0, wall, float(summary["seconds"]) if summary else None,
                   summary["counts"] if summary else "-" if target == INSTALL else "no pytest summary (see the make output)",
        done.returncode,
                   slowest[:5], (load_before, os.getloadavg()[0]), cpu_s, busy / total if total else 0.0,
        sorted(set(_FAILED.findall(output))))


def _tree_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _core_times() -> tuple[float, float]:
    """(busy, total) seconds of all cores since boot, from /proc/stat (idle and iowait count as idle)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def clean_clone(into: Path) -> Path:
    """A clone of the checkout's HEAD in `into`, with the datasets folder beside it as CI has it."""
    clone = into / REPO.name
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    (into / "shared").symlink_to(REPO.parent / "shared")
    return clone


def makefile_workers(target: str) -> int:
    """The worker count the Makefile gives `target` (`TEST_WORKERS ?= 3`)."""
    found = re.search(rf"^{WORKER_VARIABLE[target]} \?= (\d+)$", (REPO / "Makefile").read_text(), re.MULTILINE)
    if found is None:
        raise SystemExit(f"Makefile: no `{WORKER_VARIABLE[target]} ?= N` line")
    return int(found[1])


def render(runs: list[LoopRun]) -> str:
    lines = ["Each target run once on its pytest-xdist workers (a module per work unit, the longest modules",
             "first); wall time includes the lint that `make` runs first.", "",
             "CPU is the CPU seconds of the processes the run started and waited for; busy is the share of the",
             "cores' time that was busy meanwhile (two cores give at most 2 CPU seconds a second).", "",
             "| command | workers | wall | pytest | CPU | busy | tests | exit | load before / after |",
             "|---|---:|---:|---:|---:|---:|---|---:|---|"]
    for run in runs:
        pytest_time = f"{run.pytest_s / 60:.1f} min" if run.pytest_s is not None else "-"
        lines.append(f"| `make {run.target}` | {run.workers or '-'} | {run.wall_s / 60:.1f} min | {pytest_time} "
                     f"| {run.cpu_s:,.0f} s | {run.busy:.0%} | {run.counts} "
                     f"| {run.exit_code} | {run.load[0]:.1f} / {run.load[1]:.1f} |")
    for run in runs:
        if run.failed:
            lines += ["", f"Failed in `make {run.target}`:", ""] + [f"- `{test}`" for test in run.failed]
    for run in runs:
        if run.slowest:
            lines += ["", f"Slowest in `make {run.target}`:", ""]
            lines += [f"- {seconds:.0f} s {when} `{test}`" for seconds, when, test in run.slowest]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=TARGETS, help="time one target only")
    parser.add_argument("--workers", type=int, help="workers for each target (default: the Makefile's)")
    parser.add_argument("--clean-clone", action="store_true",
                        help="run in a fresh clone of HEAD, `make install` timed first (as CI runs it)")
    parser.add_argument("--page", action="store_true", help="write the section of docs/performance.md")
    args = parser.parse_args(argv)
    targets = [args.only] if args.only else list(TARGETS)
    with tempfile.TemporaryDirectory(prefix="test-loop-") as scratch:
        checkout = clean_clone(Path(scratch)) if args.clean_clone else REPO
        runs = []
        for target in [INSTALL, *targets] if args.clean_clone else targets:
            print(f"make {target} ...", flush=True)
            runs.append(run_target(target, args.workers, checkout))
            print(f"  {runs[-1].wall_s / 60:.1f} min, {runs[-1].counts}, exit {runs[-1].exit_code}", flush=True)
    body = render(runs)
    if args.clean_clone:
        body = (f"In a clean clone of the commit: `make install` first, then the tests, "
                f"{sum(r.wall_s for r in runs) / 60:.1f} min in all, as `.ci/run` does.\n\n{body}")
    print(body)
    if args.page:
        if args.clean_clone:
            write_section("The test loop, as CI runs it", body, script="benchmarks/test_loop.py:clean-clone")
        else:
            write_section("The test loop", body)
    return 0 if all(run.exit_code == 0 for run in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
