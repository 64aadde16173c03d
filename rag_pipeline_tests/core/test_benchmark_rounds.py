"""The benchmarks' rounds (issue 37, item 5): each incremental case of scale.py run in rounds on
other documents each time, the search latency as the median of whole runs, the command-line cases
with the CPU of their process trees, and a fresh search whose every code reads its own config."""

import statistics
from pathlib import Path

import pytest
import yaml

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def benchmarks(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # as the scripts import each other: from their own folder


def _corpus(root: Path, count: int) -> Path:
    for index in range(count):
        sub = root / f"part-{index // 10:04d}"
        sub.mkdir(parents=True, exist_ok=True)
        (sub / f"doc-{index:06d}.txt").write_text(f"title {index}\n\nbody {index}\n")
    return root


def test_each_edit_round_changes_another_document(tmp_path, benchmarks):
    from scale import _edit_one

    corpus = _corpus(tmp_path / "corpus", 5)
    before = {p: p.read_text() for p in corpus.glob("part-*/doc-*")}
    edited = [_edit_one(corpus, round_) for round_ in range(3)]
    assert len(set(edited)) == 3
    changed = {p for p in corpus.glob("part-*/doc-*") if p.read_text() != before[p]}
    assert changed == set(edited)


def test_each_deletion_round_deletes_others_and_the_share_of_what_is_left(tmp_path, benchmarks):
    from scale import _delete_share

    corpus = _corpus(tmp_path / "corpus", 400)
    counts, gone = [], []
    for round_ in range(3):
        present = set(corpus.glob("part-*/doc-*"))
        counts.append(_delete_share(corpus, 0.01, round_))
        gone.append(present - set(corpus.glob("part-*/doc-*")))
    assert [len(g) for g in gone] == counts and all(counts)
    assert not (gone[0] & gone[1]) and not (gone[1] & gone[2])
    assert len(list(corpus.glob("part-*/doc-*"))) == 400 - sum(counts)


def test_cases_keep_every_round_and_the_median_rounds_stages(benchmarks):
    from scale import _cases

    seconds = iter([3.0, 1.0, 2.0])
    changed = []

    def run():
        value = next(seconds)
        return {"seconds": value, "process_s": value + 1, "cpu_s": value * 2, "rss_mb": 100 + value,
                "stages_s": {"indexed": value}}

    median, case = _cases("edit", 3, run, changed.append)
    assert changed == [0, 1, 2]
    assert case["seconds"] == [3.0, 1.0, 2.0] and case["cpu_s"] == [6.0, 2.0, 4.0] and case["rounds"] == 3
    assert median["stages_s"] == {"indexed": 2.0} and case["rss_mb"] == 103.0
    assert len(case["load_before"]) == len(case["load_after"]) == 3


def test_the_page_shows_each_round_and_the_rows_measured_before_rounds_as_one(benchmarks):
    from scale_page import _incremental, _rounds_flag

    case = {"rounds": 3, "seconds": [4.0, 2.0, 3.0], "process_s": [6.0, 5.0, 7.0], "cpu_s": [9.0, 8.0, 10.0],
            "load_before": [1.0, 1.0, 1.0], "load_after": [2.0, 2.0, 2.0]}
    row = {"embedder": "hashing", "backend": "duckdb", "docs": 100, "revision": "abc1234", "rounds": 3,
           "incremental": {"no_change": case, "edit": case, "delete_1pct": case}}
    old = {"embedder": "hashing", "backend": "duckdb", "docs": 10, "revision": "old0000"}
    lines = _incremental([old, row])
    body = [line for line in lines if line.startswith("| hashing")]
    assert len(body) == 3 and all("abc1234" in line for line in body)
    median_run = statistics.median(case["seconds"])
    assert f"| 3 | {median_run:.2f} | {statistics.median(case['process_s']):.2f} |" in body[1]
    assert "4.00, 6.00, 9.00; 2.00, 5.00, 8.00" in body[0]
    assert _rounds_flag(row) == " --rounds 3" and _rounds_flag(old) == ""
    assert _incremental([old]) == []


def _run_output(dense: float, numpy_ms: float, cpu: float) -> dict:
    methods = [
        {"method": "numpy", "search": "dense", "queries": 50, "cpu_per_query_ms": cpu},
        {"method": "sparse", "search": "bm25", "queries": 50, "cpu_per_query_ms": cpu / 4},
        {"method": "memory", "search": "dense", "queries": 50, "cpu_per_query_ms": cpu * 2, "hits_p50_ms": 0.1,
         "version_check_p50_ms": 0.05},
        {"method": "memory", "search": "bm25", "queries": 0},
    ]
    size = {"chunks": 1000, "dense_p50_ms": dense, "numpy_dense_p50_ms": numpy_ms, "bm25_p50_ms": None,
            "sparse_bm25_p50_ms": 0.2, "copy_load_s": 0.4, "copy_map_s": None,
            "search_memory": {"memory": {"mem_ratio": 2.0}}, "methods": methods}
    return {"command": "python benchmarks/search_scale.py --sizes 1000", "sizes": [size],
            "config": {"queries": 50, "k": 10}, "environment": {"blas_threads": 2, "loadavg": [1.0, 1.0, 1.0]}}


def test_the_latency_table_gives_the_median_of_the_rounds(benchmarks):
    from search_latency import figures, latency_lines, medians

    runs = [_run_output(5.0, 4.0, 1.0), _run_output(9.0, 3.0, 3.0), _run_output(7.0, 5.0, 2.0)]
    combined = medians([figures(run) for run in runs])[1000]
    assert combined["dense"] == 7.0 and combined["numpy"] == 4.0 and combined["dense_cpu"] == 4.0
    assert combined["bm25"] is None and combined["bm25_cpu"] is None  # no round measured it
    result = {"command": "python benchmarks/search_scale.py --latency-page", "rounds": runs,
              "processes": [{"wall_s": 10.0, "cpu_s": 12.0, "load_before": [1.0], "load_after": [1.5]}] * 3}
    text = "\n".join(latency_lines(result, before=runs[0]))
    assert "| 1,000 | 3 | 7.00 | 4.00 | 1.40x |" in text  # each round's ratio: 1.25, 3.00, 1.40
    assert "| before: 1,000 | 1 | 5.00 | 4.00 | 1.25x |" in text
    assert "5.00 / 4.00 / – / 0.20; 9.00 / 3.00 / – / 0.20; 7.00 / 5.00 / – / 0.20" in text
    assert "10.0 s, 12.0 CPU s" in text


def test_a_round_runs_the_command_without_the_rounds_own_options(benchmarks):
    from search_latency import round_arguments

    argv = ["--sizes", "10000", "--rounds", "3", "--latency-page", "--out", "/tmp/a.json", "--json", "--rounds=2",
            "--methods", "numpy,memory"]
    assert round_arguments(argv, Path("/tmp/r.json")) == ["--sizes", "10000", "--methods", "numpy,memory",
                                                          "--out", "/tmp/r.json"]


def test_the_command_line_cases_report_the_cpu_beside_the_wall(benchmarks):
    from ingest import CLI_CASES, _rows, cli_table

    cases = {name: [(10.0 + i, 12.0 + i), (8.0 + i, 11.0 + i), (9.0 + i, 20.0 + i)] for i, name in enumerate(CLI_CASES)}
    rows = _rows(cases)
    edit = rows["one page edited"]
    assert edit["median_s"] == 11.0 and edit["cpu_median_s"] == 14.0 and edit["cpu_runs_s"] == [14.0, 13.0, 22.0]
    table = cli_table({"after": rows}, None)
    assert "| one page edited | 11.00 | 14.00 |" in table and "(12.0, 14.0)" in table


def test_each_code_of_a_fresh_search_reads_its_own_checkouts_config(tmp_path, benchmarks):
    from search_fresh import _own_config

    checkout = tmp_path / "before"
    (checkout / "data" / "corpus").mkdir(parents=True)
    (checkout / "data" / "pipeline.yaml").write_text(yaml.safe_dump({"sources": [{"name": "docs", "path": "corpus"}],
                                                                     "old_setting": 1}))
    config = yaml.safe_load(_own_config(checkout, tmp_path / "work").read_text())
    assert config["old_setting"] == 1
    assert config["sources"][0]["path"] == str((checkout / "data" / "corpus").resolve())
    assert config["storage"]["path"] == str(tmp_path / "work" / "index.duckdb")



def test_the_page_names_every_row_measured_in_one_round_and_why(benchmarks):
    from scale_page import _single_round

    once = {"embedder": "minilm", "backend": "duckdb", "docs": 100_000, "revision": "old0000", "full_s": 6300.0,
            "raw_encode_s": 5400.0}
    rounds = {"embedder": "hashing", "backend": "duckdb", "docs": 1000, "revision": "new1111", "full_s": 6.0, "rounds": 3}
    (text,) = _single_round([once, rounds])
    assert "minilm duckdb 100,000 (measured on old0000, its full build 105 min, of which the raw encode 90 min)" in text
    assert "new1111" not in text and "not a median" in text
    assert _single_round([rounds]) == []
