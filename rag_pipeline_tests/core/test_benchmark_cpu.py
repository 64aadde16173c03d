"""The CPU of a benchmark's process tree (issue 37, item 5): daemons counted where the kernel's
accounting can be had, the fallback saying what it misses, and the scripts' rounds combined into
medians with every round kept."""

import subprocess
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
# A child that burns CPU and writes down how much (its own process_time), read back by the test.
BURN = ("import sys, time\nt = time.process_time()\nx = 0\nwhile time.process_time() - t < 0.4:\n    x += 1\n"
        "open(sys.argv[1], 'w').write(str(time.process_time() - t))\n")


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as the scripts import each other: from their own folder


def _wait_for(path: Path) -> float:
    deadline = time.monotonic() + 60
    while not (path.exists() and path.read_text()):
        assert time.monotonic() < deadline, "the child never finished"
        time.sleep(0.05)
    return float(path.read_text())


def test_a_daemon_that_outlives_its_parent_is_counted_by_the_kernels_accounting(tmp_path, benchmarks):
    from performance_page import CGROUP_METHOD, tree_cpu

    done = tmp_path / "burnt"
    with tree_cpu("test-daemon") as tree:
        # The shell starts the child in the background and exits at once: nobody waits for the child.
        subprocess.run(["sh", "-c", f'"{sys.executable}" -c "$0" "$1" &', BURN, str(done)], check=True)
        burnt = _wait_for(done)
    if tree.method != CGROUP_METHOD:
        pytest.skip("cgroup v1's cpuacct is not writable here: the fallback cannot see daemons")
    assert tree.cpu_s >= burnt * 0.9
    assert tree.group is not None and not tree.group.exists()  # its cgroup removed once empty


def test_a_process_still_running_when_the_measure_ends_leaves_its_cgroup_for_the_parents(benchmarks):
    from performance_page import CGROUP_METHOD, _own_cpuacct, tree_cpu

    with tree_cpu("test-lingering") as tree:
        lingering = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        if tree.method != CGROUP_METHOD:
            pytest.skip("cgroup v1's cpuacct is not writable here")
        assert not tree.group.exists()
        assert str(lingering.pid) in (_own_cpuacct() / "cgroup.procs").read_text().split()
    finally:
        lingering.kill()
        lingering.wait()


def test_without_cgroups_the_children_waited_for_are_counted_and_the_method_says_what_is_missed(
        tmp_path, benchmarks, monkeypatch):
    import performance_page
    from performance_page import RUSAGE_METHOD, tree_cpu

    monkeypatch.setattr(performance_page, "_own_cpuacct", lambda: None)
    done = tmp_path / "burnt"
    with tree_cpu("test-child") as tree:
        subprocess.run([sys.executable, "-c", BURN, str(done)], check=True)
        middle = tree.so_far()
    assert tree.method == RUSAGE_METHOD and "not counted" in tree.method
    assert middle >= float(done.read_text()) * 0.9 and tree.cpu_s >= middle


def test_a_servers_cpu_counts_the_children_it_has_reaped_and_those_still_running(tmp_path, benchmarks):
    from performance_page import server_cpu_s

    done = tmp_path / "burnt"
    # A "server" that runs a burning child to its end (reaped), then waits with a second one alive.
    server = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN!r}, {str(done)!r}])\n"
        "subprocess.run([sys.executable, '-c', 'import time; time.sleep(60)'])\n")])
    try:
        burnt = _wait_for(done)
        time.sleep(0.5)  # the burning child reaped
        assert server_cpu_s(server.pid) >= burnt * 0.9
    finally:
        for child in Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split():
            subprocess.run(["kill", child])
        server.kill()
        server.wait()


def _state_round(history_s: float, cpu: float, size: float) -> dict:
    restore = {"seconds": history_s / 10, "cpu_s": cpu / 10, "restored": 5, "removed": 1}
    return {"docs": 100, "nights": 3, "churn": 0.01, "states": 4, "documents": 100, "chunks": 104,
            "size_mb": {"history": size, "none": size - 2}, "rows": {"served_spans": 110},
            "restores": {"the night before": restore}, "night_s_median": {"history": history_s, "none": 1.0},
            "night_cpu_s_median": {"history": cpu, "none": 0.5}}


def test_the_states_rounds_give_medians_of_timings_and_sizes(benchmarks):
    from states import combine

    rounds = [_state_round(3.0, 2.0, 10.0), _state_round(1.0, 4.0, 12.0), _state_round(2.0, 3.0, 11.0)]
    result = combine(rounds, "method", [[1.0, 1.0, 1.0]] * 4)
    assert result["night_s_median"] == {"history": 2.0, "none": 1.0} and result["night_cpu_s_median"]["history"] == 3.0
    assert result["size_mb"] == {"history": 11.0, "none": 9.0} and result["same_in_every_round"]
    restore = result["restores"]["the night before"]
    assert restore["seconds"] == pytest.approx(0.2) and restore["cpu_s"] == pytest.approx(0.3)
    assert len(restore["rounds"]) == 3 and result["rounds"] == 3
    rounds[1]["rows"] = {"served_spans": 111}
    assert not combine(rounds, "method", [])["same_in_every_round"]


def test_the_sources_rounds_keep_the_counts_and_give_the_median_times(benchmarks):
    from sources import combine

    rounds = [[{"case": "full", "requests": 10, "seconds": s, "cpu_s": c}] for s, c in ((5.0, 1.0), (3.0, 2.0), (4.0, 9.0))]
    (row,) = combine(rounds)
    assert (row["seconds"], row["cpu_s"], row["requests"], row["same"]) == (4.0, 2.0, 10, True)
    assert row["rounds"] == [(5.0, 1.0), (3.0, 2.0), (4.0, 9.0)]
    rounds[2][0]["requests"] = 11
    assert not combine(rounds)[0]["same"]


def test_the_backfill_paths_give_medians_of_wall_and_cpu_over_the_rounds(benchmarks):
    from backfill import _path_figures

    def path(wall, cpu):
        return {"wall_s": wall, "path_wall_s": wall + 30, "cpu_s": cpu, "load_before_after": [1.0, 2.0],
                "runs": [{"steps_s": {"a": 1, "b": 2}}] * 2, "backfill_status": "COMPLETED_SUCCESS"}

    rounds = [{"duckdb": path(300.0, 500.0)}, {"duckdb": path(100.0, 700.0)}, {"duckdb": path(200.0, 600.0)}]
    figures = _path_figures(rounds, "duckdb")
    assert (figures["wall_median_s"], figures["cpu_median_s"], figures["path_wall_median_s"]) == (200.0, 600.0, 230.0)
    assert figures["cpu_s"] == [500.0, 700.0, 600.0] and figures["steps"] == [4, 4, 4]
