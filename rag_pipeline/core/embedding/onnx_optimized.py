"""ONNX Runtime sessions made from a saved optimized graph: a new process skips the graph optimizations.

Creating a session optimizes the exported graph (fusing attention, layer norms, GELU; folding
constants) each time: most of what a fresh process pays before its first query. The first session
of a model file saves its optimized graph (`SessionOptions.optimized_model_filepath`, its weights
beside it as external data, so that later loads map them) in the export's cache folder:
`<export folder>/optimized-<model file stem>-<key>/`. Later sessions load that graph with the
optimizations off: the same graph, so the same vectors.

The key names what the optimized graph depends on: the model file (its name, so float32 and int8
never share one, with its and its weights' sizes and times), ONNX Runtime's version and the
machine (CPU type and instruction sets: the fully optimized graph may hold kernels chosen for them).
The folder is written as a temporary folder renamed into place (processes racing each write their
own; the first rename wins), with `record.json` holding each file's size and a hash of its ends.
A folder that does not match its record, or that ONNX Runtime refuses, is removed and made again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import shutil
import tempfile
from pathlib import Path

from rag_pipeline.core.files import fingerprint

LOGGER = logging.getLogger("rag_pipeline.progress.model")
GRAPH_FILE = "model.onnx"
WEIGHTS_FILE = "model.weights"
RECORD_FILE = "record.json"


def create_session(model_file: Path, options, providers: list[str]):
    """An InferenceSession of `model_file` with `options`: from its saved optimized graph when there is
    a sound one, else optimized here and saved for the next process."""
    import onnxruntime as ort

    model_file = Path(model_file)
    place = optimized_folder(model_file)
    if _sound(place):
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        try:
            return ort.InferenceSession(str(place / GRAPH_FILE), options, providers=providers)
        except Exception as exc:  # noqa: BLE001 - ONNX Runtime's load errors share no type
            LOGGER.warning(f"the saved optimized graph {place} cannot be loaded ({str(exc).strip()[:200]}): "
                           "optimizing the model again")
            shutil.rmtree(place, ignore_errors=True)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    try:
        work = Path(tempfile.mkdtemp(prefix=".optimizing-", dir=model_file.parent))
    except OSError:
        return ort.InferenceSession(str(model_file), options, providers=providers)  # a read-only cache
    try:
        options.optimized_model_filepath = str(work / GRAPH_FILE)
        options.add_session_config_entry("session.optimized_model_external_initializers_file_name", WEIGHTS_FILE)
        options.add_session_config_entry("session.optimized_model_external_initializers_min_size_in_bytes", "1024")
        session = ort.InferenceSession(str(model_file), options, providers=providers)
        _save(work, place)
        return session
    finally:
        shutil.rmtree(work, ignore_errors=True)


def optimized_folder(model_file: Path) -> Path:
    """Where the optimized graph of `model_file` is kept, under its key."""
    import onnxruntime as ort

    facts = [model_file.name, ort.__version__, platform.machine(), _cpu_flags()]
    for path in (model_file, model_file.parent / WEIGHTS_FILE):
        try:
            stat = path.stat()
            facts.append([path.name, stat.st_size, stat.st_mtime_ns])
        except OSError:
            facts.append([path.name, None])
    key = hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:24]
    return model_file.parent / f"optimized-{model_file.stem}-{key}"


def _cpu_flags() -> str:
    """The CPU's model and instruction sets (Linux), hashed: kernels are chosen for them."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    wanted = [line for line in lines if line.startswith(("flags", "model name", "Features"))][:3]
    return hashlib.sha256("\n".join(wanted).encode()).hexdigest()[:16]


def _sound(place: Path) -> bool:
    """Whether `place` holds the optimized graph as written (a damaged one is removed)."""
    try:
        record = json.loads((place / RECORD_FILE).read_text())
    except FileNotFoundError:
        if place.exists():
            shutil.rmtree(place, ignore_errors=True)
        return False
    except (OSError, ValueError):
        record = None
    try:
        if record is not None and all(fingerprint(place / name) == value for name, value in record["files"].items()):
            return True
    except (OSError, KeyError, TypeError, AttributeError):
        pass
    LOGGER.warning(f"the saved optimized graph {place} is damaged: optimizing the model again")
    shutil.rmtree(place, ignore_errors=True)
    return False


def _save(work: Path, place: Path) -> None:
    """Record the files ONNX Runtime wrote in `work`, rename it to `place`, drop older graphs of the model."""
    if not (work / GRAPH_FILE).is_file():
        return
    files = {p.name: fingerprint(p) for p in work.iterdir() if p.is_file()}
    (work / RECORD_FILE).write_text(json.dumps({"files": files}))
    try:
        os.rename(work, place)
    except OSError:
        return  # another process saved it first (or the cache cannot be written): its copy serves
    stem = place.name.rsplit("-", 1)[0]
    for older in place.parent.glob(f"{stem}-*"):
        if older != place and older.is_dir() and older.name.rsplit("-", 1)[0] == stem:
            shutil.rmtree(older, ignore_errors=True)


