"""Sessions from the saved optimized graph: saved by the first session, used by the next, made again
when damaged or refused, and never shared by two model files (float32 and int8). A small real ONNX
graph (a matrix product, a layer norm, a GELU: what ONNX Runtime fuses) stands for the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from rag_pipeline.core.embedding.onnx_optimized import GRAPH_FILE, RECORD_FILE, create_session, optimized_folder
from rag_pipeline.core.files import fingerprint


def _model(folder: Path, name: str = "model.onnx", seed: int = 0) -> Path:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = numpy_helper.from_array(rng.standard_normal((32, 32)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(32).astype(np.float32), "b")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Add", ["h", "b"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], [weights, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    folder.mkdir(parents=True, exist_ok=True)
    weights_file = "model.weights" if name == "model.onnx" else f"{name}.data"  # as the export and int8 copy name theirs
    onnx.save_model(model, str(folder / name), save_as_external_data=True, location=weights_file, size_threshold=1024)
    return folder / name


@pytest.fixture
def opened(monkeypatch):
    """The file each InferenceSession is created from."""
    paths: list[str] = []
    real = ort.InferenceSession

    def spy(path, *args, **kwargs):
        paths.append(str(path))
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    return paths


def _run(model_file: Path) -> np.ndarray:
    options = ort.SessionOptions()
    session = create_session(model_file, options, ["CPUExecutionProvider"])
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(2, 32)
    return session.run(None, {"x": x})[0]


def test_the_first_session_saves_the_optimized_graph_and_the_next_uses_it(tmp_path, opened):
    model_file = _model(tmp_path / "export")
    first = _run(model_file)
    place = optimized_folder(model_file)
    assert opened == [str(model_file)] and (place / GRAPH_FILE).is_file() and (place / RECORD_FILE).is_file()
    second = _run(model_file)
    assert opened[-1] == str(place / GRAPH_FILE)
    assert np.array_equal(first, second)
    assert not [p for p in model_file.parent.iterdir() if p.name.startswith(".optimizing-")]


def test_float32_and_int8_files_never_share_an_optimized_graph(tmp_path):
    float_file = _model(tmp_path / "export", "model.onnx", seed=1)
    int8_file = _model(tmp_path / "export", "model-int8.onnx", seed=2)
    assert optimized_folder(float_file) != optimized_folder(int8_file)
    floats, ints = _run(float_file), _run(int8_file)
    assert not np.array_equal(floats, ints)
    assert np.array_equal(_run(float_file), floats) and np.array_equal(_run(int8_file), ints)
    # Exporting the model again (new files) is a new key: the old graph is never used for it.
    before = optimized_folder(float_file)
    _model(tmp_path / "export", "model.onnx", seed=3)
    assert optimized_folder(float_file) != before


def _scribble(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-64:] = bytes(64)
    path.write_bytes(bytes(data))


def test_a_damaged_optimized_graph_is_made_again(tmp_path, opened):
    model_file = _model(tmp_path / "export")
    expected = _run(model_file)
    place = optimized_folder(model_file)
    _scribble(place / GRAPH_FILE)
    assert np.array_equal(_run(model_file), expected)
    assert opened[-1] == str(model_file)  # not the damaged file: the model itself, optimized again
    assert np.array_equal(_run(model_file), expected) and opened[-1] == str(place / GRAPH_FILE)


def test_a_graph_onnx_runtime_refuses_is_made_again(tmp_path, opened, caplog):
    """Damage its record does not show (the record written to match it): ONNX Runtime refuses the
    file, and the session is made from the model and its graph saved again."""
    model_file = _model(tmp_path / "export")
    expected = _run(model_file)
    place = optimized_folder(model_file)
    (place / GRAPH_FILE).write_bytes(b"not an onnx graph")
    record = json.loads((place / RECORD_FILE).read_text())
    record["files"][GRAPH_FILE] = fingerprint(place / GRAPH_FILE)
    (place / RECORD_FILE).write_text(json.dumps(record))
    with caplog.at_level("WARNING", logger="rag_pipeline.progress.model"):
        assert np.array_equal(_run(model_file), expected)
    assert opened[-2:] == [str(place / GRAPH_FILE), str(model_file)] and "cannot be loaded" in caplog.text
    assert np.array_equal(_run(model_file), expected) and opened[-1] == str(place / GRAPH_FILE)


@pytest.mark.slow
def test_the_real_model_gives_the_same_vectors_from_its_saved_graph(tmp_path, opened):
    """The bundled model: a session from the saved optimized graph encodes exactly as the one that saved it."""
    import shutil

    from rag_pipeline.config import DEFAULT_MODEL
    from rag_pipeline.core.embedding.model_folder import folder_revision, read_layout, resolve_model_path
    from rag_pipeline.core.embedding.onnx_engine import OnnxEncoder
    from rag_pipeline.core.embedding.onnx_export import WEIGHTS_FILE, exported_model

    folder = Path(resolve_model_path(DEFAULT_MODEL))
    verdict = exported_model(folder, folder_revision(folder))
    assert verdict.engine == "onnx"
    export = tmp_path / "export"
    export.mkdir()
    for name in (verdict.model_file.name, WEIGHTS_FILE):
        shutil.copy(verdict.model_file.parent / name, export / name)
    layout = read_layout(folder)
    texts = ["How do I set a timeout on a client?", "Café déjà vu", "proxies " * 300]
    saving = OnnxEncoder(export / "model.onnx", layout)
    first = np.stack([saving.encode([t], normalize=True)[0] for t in texts])
    place = optimized_folder(export / "model.onnx")
    assert opened == [str(export / "model.onnx")] and (place / GRAPH_FILE).is_file()
    mapped = OnnxEncoder(export / "model.onnx", layout)
    second = np.stack([mapped.encode([t], normalize=True)[0] for t in texts])
    assert opened[-1] == str(place / GRAPH_FILE)
    assert np.array_equal(first, second)
    assert np.array_equal(mapped.encode(texts, normalize=True), saving.encode(texts, normalize=True))
