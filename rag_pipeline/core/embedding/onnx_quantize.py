"""The int8 copy of an exported model (`embedding.precision: int8`), made once and cached beside it.

`quantized_model(float_file)` returns `model-int8.onnx` in the folder of the float32 export
(`onnx_export`), making it the first time: ONNX Runtime's dynamic quantization
(`quantize_dynamic`) of that graph, weights stored as int8 with one scale per output channel
(one scale per tensor lost too much: 0.90 cosine to the float32 vectors on SciFact passages,
against 0.99 per channel), activations quantized at run time. The copy is written to a
temporary file in the same folder and renamed into place, then its size is recorded in
`model-int8.json`, all under the export's lock file: processes that start at once quantize once
and never read a half-written file; a file whose size differs from the record is made again.
Quantizing imports `onnx` and ONNX Runtime's quantization tools, never torch (about 4 s).
"""

from __future__ import annotations

import atexit
import fcntl
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path

from rag_pipeline.core.embedding.model_folder import read_json

LOGGER = logging.getLogger("rag_pipeline.progress.model")
QUANTIZED_FILE = "model-int8.onnx"
RECORD_FILE = "model-int8.json"
# Changes to how the copy is made (options of quantize_dynamic) take a new copy.
QUANTIZE_FORMAT = 1


def quantized_model(float_file: Path) -> Path:
    """The int8 copy of the float32 export `float_file`, quantizing it first if no process has yet."""
    folder = float_file.parent
    target = folder / QUANTIZED_FILE
    if _recorded(target):
        return target
    try:
        lock = open(folder.parent / f"{folder.name}.lock", "a+")
    except OSError as exc:
        # A read-only cache: quantize for this process only (again in the next one).
        LOGGER.warning(f"the model cache {folder.parent} cannot be written ({exc}): quantizing for this process only")
        private = Path(tempfile.mkdtemp(prefix="rag_pipeline_int8_"))
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        return _quantize(float_file, private / QUANTIZED_FILE)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process quantizing the same export finishes first
        if not _recorded(target):
            _quantize(float_file, target)
    return target


def discard_quantized(folder: Path) -> None:
    """Remove the int8 copy in `folder` (damaged, or refused by ONNX Runtime): the next use makes it again;
    the float32 export beside it stays."""
    for name in (RECORD_FILE, QUANTIZED_FILE):
        (folder / name).unlink(missing_ok=True)


def _recorded(target: Path) -> bool:
    """Whether `target` is the copy recorded beside it (same format, same size); a damaged one is removed."""
    record = read_json(target.parent / RECORD_FILE)
    if record.get("format") != QUANTIZE_FORMAT:
        return False
    try:
        size = target.stat().st_size
    except OSError:
        size = None
    if size != record.get("size"):
        LOGGER.warning(f"the cached int8 model {target} is damaged (its size is not the one recorded): quantizing it again")
        discard_quantized(target.parent)
        return False
    return True


def _quantize(float_file: Path, target: Path) -> Path:
    """Quantize `float_file` into a temporary file beside `target`, rename it into place, record its size."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    LOGGER.info(f"quantizing the embedding model {float_file} to int8, once for this export: {target}")
    handle, temporary = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".onnx", dir=target.parent)
    os.close(handle)
    root = logging.getLogger()
    root.addFilter(_quantizer_chatter)
    try:
        quantize_dynamic(str(float_file), temporary, weight_type=QuantType.QInt8, per_channel=True)
        os.replace(temporary, target)
    finally:
        root.removeFilter(_quantizer_chatter)
        Path(temporary).unlink(missing_ok=True)
    record = target.parent / f".{RECORD_FILE}.{os.getpid()}.tmp"
    record.write_text(json.dumps({"format": QUANTIZE_FORMAT, "size": target.stat().st_size, "weights": "QInt8",
                                  "per_channel": True, "source": float_file.name}))
    os.replace(record, target.parent / RECORD_FILE)
    return target



def _quantizer_chatter(record: logging.LogRecord) -> bool:
    """Drop what quantize_dynamic logs on the root logger (a line per tensor it leaves alone, advice to
    pre-process a graph whose external weights its shape inference cannot read): our own log line says
    what is being done. Only records made on the root logger pass through its filters."""
    return False
