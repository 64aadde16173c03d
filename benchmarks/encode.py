"""The embedding engine, side by side with the library: bulk encode on the same texts, and one
query's encode in a fresh process.

    python benchmarks/encode.py [--rounds 5] [--texts 512] [--fresh-rounds 5] [--no-page]
    python benchmarks/encode.py --compare-precision [--rounds 3] [--texts 512] [--no-page]

Bulk: the first `--texts` SciFact passages (title and abstract, chunk-sized real text) encoded
by the pipeline's embedder on ONNX Runtime (as a batch runs: every CPU; and on one thread) and by
sentence-transformers' `model.encode` (torch, its own thread count), batch size 32, in this one
process, the three alternating in order over `--rounds` rounds; medians of texts/s and of the
encode's CPU seconds (every thread of the process), and the largest difference of any vector
component from the library's.

Fresh process: `python -c` that builds the embedder and encodes one question, timed from outside
(the whole process: wall, and CPU seconds of its process tree) and inside (imports, load, encode), against the same with the library;
alternating over `--fresh-rounds`; whether the process imported torch. Results go to
docs/performance.md (`performance_page.write_section`) unless `--no-page`.

`--compare-precision` instead: the same texts encoded by the pipeline's embedder with
`embedding.precision` float32 and int8 (every CPU, batch size 32), alternating over `--rounds`
rounds; medians of texts/s and of the encode's CPU seconds, their ratios, and the cosine of each
int8 vector to its float32 one. It writes a section of its own.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import textwrap
import time

for _name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DO_NOT_TRACK"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

from rag_pipeline.api import EmbeddingConfig  # noqa: E402
from rag_pipeline.config import PROJECT_ROOT  # noqa: E402
from rag_pipeline.core.embedding.model import ModelEmbedder  # noqa: E402
from rag_pipeline.core.embedding.onnx_engine import bulk_threads  # noqa: E402

SCIFACT = PROJECT_ROOT.parent / "shared" / "datasets" / "beir-scifact" / "corpus.jsonl"
QUESTION = "how do I set a timeout on a client"

ONNX_QUERY = """
import json, sys, time
started = time.perf_counter()
from rag_pipeline.api import EmbeddingConfig
from rag_pipeline.api import make_embedder
embedder = make_embedder(EmbeddingConfig())
embedder.encode([sys.argv[1]])
print(json.dumps({"inside_s": time.perf_counter() - started, "torch": "torch" in sys.modules}))
"""
LIBRARY_QUERY = """
import json, sys, time
started = time.perf_counter()
from sentence_transformers import SentenceTransformer
from rag_pipeline.config import DEFAULT_MODEL
from rag_pipeline.core.embedding.model_folder import resolve_model_path
model = SentenceTransformer(resolve_model_path(DEFAULT_MODEL), device="cpu")
model.encode([sys.argv[1]], normalize_embeddings=True)
print(json.dumps({"inside_s": time.perf_counter() - started, "torch": "torch" in sys.modules}))
"""


def passages(count: int) -> list[str]:
    texts = []
    with open(SCIFACT, encoding="utf-8") as corpus:
        for line in corpus:
            record = json.loads(line)
            texts.append(f"{record.get('title', '')} {record.get('text', '')}".strip())
            if len(texts) == count:
                break
    return texts


def bulk(texts: list[str], rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, float]]:
    """Texts/s of each engine per round, alternating, and the CPU seconds of each round (every thread of
    this process); the largest difference from the library's vectors."""
    from sentence_transformers import SentenceTransformer

    embedder = ModelEmbedder(EmbeddingConfig())
    engine = embedder.engine
    library = SentenceTransformer(embedder.model_path, device="cpu")
    threads = bulk_threads()
    session_one = engine.session(1)

    def onnx_one_thread(batch):
        # The engine's own batching and pooling, on its one-thread session.
        saved = engine.session
        engine.session = lambda _threads: session_one
        try:
            return engine.encode(batch, normalize=True)
        finally:
            engine.session = saved

    runs = {
        f"ONNX Runtime, {threads} thread(s)": lambda batch: engine.encode(batch, normalize=True),
        "ONNX Runtime, 1 thread": onnx_one_thread,
        "sentence-transformers (torch)": lambda batch: library.encode(batch, batch_size=32, normalize_embeddings=True,
                                                                      convert_to_numpy=True, show_progress_bar=False),
    }
    for run in runs.values():  # untimed: sessions made, torch's first call
        run(texts[:8])
    rates: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    vectors: dict[str, np.ndarray] = {}
    names = list(runs)
    for round_ in range(rounds):
        order = names[round_ % len(names):] + names[:round_ % len(names)]
        for name in order:
            started, cpu_started = time.perf_counter(), time.process_time()
            vectors[name] = runs[name](texts)
            rates[name].append(len(texts) / (time.perf_counter() - started))
            cpu[name].append(time.process_time() - cpu_started)
    reference = vectors["sentence-transformers (torch)"]
    differences = {name: float(np.abs(v - reference).max()) for name, v in vectors.items()}
    return rates, cpu, differences


def fresh(rounds: int) -> dict[str, dict]:
    """A query's encode in a fresh process: outside (whole process: wall, and CPU of its tree) and inside
    seconds per round."""
    from performance_page import timed

    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    cases = {"ONNX Runtime (the pipeline's embedder)": ONNX_QUERY, "sentence-transformers (torch)": LIBRARY_QUERY}
    results = {name: {"outside_s": [], "cpu_s": [], "inside_s": [], "torch": set()} for name in cases}
    for round_ in range(rounds + 1):  # the first round is untimed: the file cache fills
        for name, code in (list(cases.items()) if round_ % 2 else list(cases.items())[::-1]):
            run = timed([sys.executable, "-c", textwrap.dedent(code), QUESTION], env=env, capture_output=True,
                        text=True, timeout=600)
            done, outside = run.done, run.wall_s
            if done.returncode != 0:
                raise RuntimeError(f"{name}: {done.stderr[-2000:]}")
            report = json.loads(done.stdout.strip().splitlines()[-1])
            if round_:
                results[name]["outside_s"].append(outside)
                results[name]["cpu_s"].append(run.cpu_s)
                results[name]["inside_s"].append(report["inside_s"])
                results[name]["torch"].add(report["torch"])
    return results


def render(count: int, rounds: int, rates, cpu, differences, fresh_results) -> str:
    lines = [f"Bulk encode of {count} SciFact passages (title and abstract), batch size 32, one process, "
             f"{rounds} alternating rounds, medians; texts/s on the wall clock, and CPU seconds of the encode (every "
             "thread of the process):", "",
             "| engine | texts/s (median) | CPU s (median) | rounds: texts/s, CPU s | largest difference from the "
             "library's vectors |", "|---|---|---|---|---|"]
    for name, values in rates.items():
        rounds_text = "; ".join(f"{v:.1f}, {c:.1f}" for v, c in zip(values, cpu[name]))
        lines.append(f"| {name} | {statistics.median(values):.1f} | {statistics.median(cpu[name]):.1f} | {rounds_text} | "
                     f"{differences[name]:.1e} |")
    lines += ["", "One question encoded in a fresh process (`python -c`: imports, model load, one encode), "
              f"{len(next(iter(fresh_results.values()))['outside_s'])} alternating rounds after an untimed one, medians:", "",
              "| engine | whole process s | CPU s of its process tree | inside the process s | imported torch |",
              "|---|---|---|---|---|"]
    for name, result in fresh_results.items():
        lines.append(f"| {name} | {statistics.median(result['outside_s']):.2f} | {statistics.median(result['cpu_s']):.2f} | "
                     f"{statistics.median(result['inside_s']):.2f} | {'yes' if True in result['torch'] else 'no'} |")
    return "\n".join(lines)


def compare_precision(texts: list[str], rounds: int) -> tuple[dict[str, list[float]], dict[str, list[float]], np.ndarray]:
    """Texts/s of the embedder at each precision per round, alternating, and the CPU seconds of each
    round (every thread of this process: ONNX Runtime's too); the cosine of each int8 vector to its
    float32 one."""
    embedders = {precision: ModelEmbedder(EmbeddingConfig(precision=precision)) for precision in ("float32", "int8")}
    for embedder in embedders.values():  # untimed: export, quantization, sessions made
        embedder.encode(texts[:8])
    rates: dict[str, list[float]] = {name: [] for name in embedders}
    cpu: dict[str, list[float]] = {name: [] for name in embedders}
    vectors: dict[str, np.ndarray] = {}
    names = list(embedders)
    for round_ in range(rounds):
        for name in (names if round_ % 2 == 0 else names[::-1]):
            started, cpu_started = time.perf_counter(), time.process_time()
            vectors[name] = embedders[name].encode(texts)
            rates[name].append(len(texts) / (time.perf_counter() - started))
            cpu[name].append(time.process_time() - cpu_started)
    return rates, cpu, (vectors["float32"] * vectors["int8"]).sum(axis=1)  # both unit length


def render_precision(count: int, rounds: int, rates: dict[str, list[float]], cpu: dict[str, list[float]],
                     cosines: np.ndarray) -> str:
    lines = [f"Bulk encode of {count} SciFact passages (title and abstract) by the pipeline's embedder on ONNX Runtime "
             f"({bulk_threads()} thread(s), batch size 32), `embedding.precision` float32 and int8 alternating over "
             f"{rounds} rounds in one process, medians; texts/s on the wall clock, and CPU seconds of the encode "
             "(every thread of the process):", "",
             "| precision | texts/s (median) | x float32 | CPU s (median) | float32 / it (CPU) | rounds: texts/s, CPU s |",
             "|---|---|---|---|---|---|"]
    base, base_cpu = statistics.median(rates["float32"]), statistics.median(cpu["float32"])
    for name, values in rates.items():
        rounds_text = "; ".join(f"{v:.1f}, {c:.1f}" for v, c in zip(values, cpu[name]))
        lines.append(f"| {name} | {statistics.median(values):.1f} | {statistics.median(values) / base:.2f} | "
                     f"{statistics.median(cpu[name]):.1f} | {base_cpu / statistics.median(cpu[name]):.2f} | {rounds_text} |")
    lines += ["", f"Cosine of each int8 vector to its float32 one over the {count} passages: lowest {cosines.min():.4f}, "
              f"median {float(np.median(cosines)):.4f}, mean {cosines.mean():.4f}. Quality on a retrieval task: the "
              "SciFact section written by `benchmarks/beir.py --precision int8`."]
    return "\n".join(lines)


def main() -> int:
    from performance_page import machine_load

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--texts", type=int, default=512)
    parser.add_argument("--fresh-rounds", type=int, default=5)
    parser.add_argument("--no-page", action="store_true", help="print only; leave docs/performance.md as it is")
    parser.add_argument("--compare-precision", action="store_true",
                        help="only float32 against int8 (embedding.precision), in a section of its own")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    texts = passages(args.texts)
    if args.compare_precision:
        rates, cpu, cosines = compare_precision(texts, args.rounds)
        body = render_precision(len(texts), args.rounds, rates, cpu, cosines) + "\n\n" + machine_load(load_at_start)
        print(body)
        if not args.no_page:
            from performance_page import write_section

            write_section("Encode precision: float32 against int8", body, script="benchmarks/encode.py:precision")
        return 0
    rates, cpu, differences = bulk(texts, args.rounds)
    fresh_results = fresh(args.fresh_rounds)
    body = render(len(texts), args.rounds, rates, cpu, differences, fresh_results)
    body += "\n\n" + machine_load(load_at_start)
    print(body)
    if not args.no_page:
        from performance_page import write_section

        write_section("The embedding engine: ONNX Runtime against the library", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
