"""docs/performance.md's sections: a script owning two (`script:part`) keeps both apart, each
stamped with the command that runs the script itself."""

from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def write_section(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as the scripts import it: from their own folder
    from performance_page import write_section

    monkeypatch.setattr("sys.argv", ["benchmarks/encode.py", "--compare-precision", "--texts", "128"])
    return write_section


def test_two_sections_of_one_script_are_kept_apart_and_name_the_scripts_command(tmp_path, write_section):
    page = tmp_path / "performance.md"
    write_section("The engine", "engine figures v1", page=page)
    write_section("Precision", "precision figures v1", script="benchmarks/encode.py:precision", page=page)
    write_section("Precision", "precision figures v2", script="benchmarks/encode.py:precision", page=page)
    text = page.read_text()
    assert "engine figures v1" in text and "precision figures v2" in text and "precision figures v1" not in text
    assert text.count("<!-- benchmarks/encode.py:precision -->") == 1 and text.count("<!-- benchmarks/encode.py -->") == 1
    assert text.count("`python benchmarks/encode.py --compare-precision --texts 128`") == 2
    assert "python benchmarks/encode.py:precision" not in text


def test_a_section_names_the_commit_it_measured(tmp_path, write_section):
    import subprocess

    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=BENCHMARKS.parent, capture_output=True,
                          text=True, check=True).stdout.strip()
    page = tmp_path / "performance.md"
    write_section("The engine", "figures", page=page)
    assert f"commit {head}" in page.read_text()


def test_timed_counts_the_cpu_of_the_whole_process_tree(monkeypatch):
    """A grandchild's work is in the command's CPU seconds (the kernel adds a reaped child's own
    reaped children to it), so a build that hands its work to subprocesses is not undercounted."""
    import sys

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    from performance_page import timed

    work = f"{sys.executable} -c 'sum(range(30_000_000))'"
    busy = timed(["sh", "-c", f"{work}; {work}"])
    idle = timed(["sh", "-c", "true"])
    assert busy.done.returncode == 0 and busy.cpu_s > idle.cpu_s


def test_the_commit_is_marked_changed_by_code_not_by_the_scripts_outputs(tmp_path, monkeypatch):
    """A benchmark writes its results and its curve before its section: those are not changes to
    the code measured; a changed script is."""
    import subprocess

    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import performance_page

    def git(*args):
        subprocess.run(["git", *args], cwd=tmp_path, check=True, capture_output=True)

    for folder in ("docs", "benchmarks/results", "benchmarks"):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
    for name in ("docs/performance.md", "docs/curve.png", "benchmarks/results/scale.jsonl", "benchmarks/scale.py"):
        (tmp_path / name).write_text("v1\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "v1")
    monkeypatch.setattr(performance_page, "PAGE", tmp_path / "docs" / "performance.md")
    for name in ("docs/performance.md", "docs/curve.png", "benchmarks/results/scale.jsonl"):
        (tmp_path / name).write_text("v2\n")
    assert not performance_page.commit().endswith("+changes")
    (tmp_path / "benchmarks" / "scale.py").write_text("v2\n")
    assert performance_page.commit().endswith("+changes")
