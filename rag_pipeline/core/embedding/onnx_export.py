"""The model's transformer exported to ONNX once per model revision, checked, and cached.

`exported_model` returns the verdict for a model folder: its ONNX file, or the reason why the
library must run it. The first call for a revision runs the export in a separate process
(`python -m rag_pipeline.core.embedding.onnx_export --folder F --out D`), the only place torch is
imported on this path. That process traces the transformer with `torch.onnx.export`, then encodes
`PROBE_TEXTS` with the ONNX engine and with sentence-transformers, one by one and as one batch;
the export is kept only when every vector agrees within `TOLERANCE`, else the verdict says the
library runs this model (and why).

The cache is `<cache folder>/onnx/<revision>-v<EXPORT_FORMAT>/`: model.onnx (the graph), its
weights beside it in model.weights (ONNX's external data: ONNX Runtime maps the file instead of
copying it out of the graph, a session loads in about 0.1 s instead of 0.25 s) and verdict.json.
An export is written into a temporary folder beside it and renamed into place, under a lock
file, so processes that start at once wait for one export and never read a half-written one.
`python -m rag_pipeline.core.embedding.onnx_export` without arguments exports the bundled model
(`make install` runs it).
"""

from __future__ import annotations

import argparse
import atexit
import fcntl
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rag_pipeline.core.embedding.model_folder import UnsupportedModel, cache_folder, read_json, read_layout

LOGGER = logging.getLogger("rag_pipeline.progress.model")
# Changes to what the export writes (inputs, opset, the wrapper) take a new cache folder.
EXPORT_FORMAT = 2
WEIGHTS_FILE = "model.weights"
OPSET = 17
# Largest difference allowed between a vector of the ONNX engine and the library's, per component.
TOLERANCE = 1e-5
# Texts the export is checked on: empty, accents, CJK, emoji, code, and one past any token limit.
PROBE_TEXTS = (
    "",
    "How do I set a timeout on a client?",
    "Café, naïve façade, déjà vu: Ångström über Straße.",
    "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다.",
    "Deploy 🚀 then celebrate 🎉🔥 with the family 👩‍👩‍👧.",
    "def get(url, *, timeout=5.0) -> Response: return Client(timeout=timeout).get(url)",
    " ".join(f"word{i} and more text about proxies, transports and retries" for i in range(300)),
)
_EXPORT_TIMEOUT_S = 1800.0


class ExportError(RuntimeError):
    """The export process failed (not a verdict on the model: the next process tries again)."""


@dataclass(frozen=True)
class ExportVerdict:
    """Which engine runs a model: "onnx" (with its file) or "library" (with the reason)."""

    engine: str
    model_file: Path | None
    reason: str
    max_abs_diff: float | None = None


def exported_model(folder: Path | str, revision: str) -> ExportVerdict:
    """The verdict for the model in `folder` at `revision`, exporting it first if no process has yet."""
    target = cache_folder() / "onnx" / f"{revision}-v{EXPORT_FORMAT}"
    verdict = read_verdict(target)
    if verdict is not None:
        return verdict
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        lock = open(target.parent / f"{target.name}.lock", "a+")
    except OSError as exc:
        # A read-only cache: export for this process only (again in the next one).
        LOGGER.warning(f"the model cache {target.parent} cannot be written ({exc}): exporting for this process only")
        private = Path(tempfile.mkdtemp(prefix="rag_pipeline_onnx_"))
        atexit.register(shutil.rmtree, private, ignore_errors=True)
        return _export(Path(folder), private / target.name)
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process exporting the same revision finishes first
        verdict = read_verdict(target)
        if verdict is None:
            verdict = _export(Path(folder), target)
            for older in target.parent.glob(f"{revision}-v*"):  # exports of this revision in older formats
                if older.is_dir() and older != target:
                    discard(older)
    return verdict


def read_verdict(target: Path) -> ExportVerdict | None:
    """The cached verdict in `target`, or None when there is none (or its ONNX file is not the one written)."""
    recorded = read_json(target / "verdict.json")
    if recorded.get("engine") == "library":
        return ExportVerdict("library", None, str(recorded.get("reason", "")))
    if recorded.get("engine") != "onnx":
        return None
    model_file = target / "model.onnx"
    try:
        if [model_file.stat().st_size, (target / WEIGHTS_FILE).stat().st_size] != recorded.get("sizes"):
            raise OSError("a file's size differs from the one recorded")
    except OSError as exc:
        LOGGER.warning(f"the cached ONNX model {model_file} is damaged ({exc}): exporting it again")
        discard(target)
        return None
    difference = recorded.get("max_abs_diff")
    said = f"{difference:.1e}" if isinstance(difference, float) else "the tolerance"
    return ExportVerdict("onnx", model_file, f"within {said} of the library", difference)


def discard(target: Path) -> None:
    """Remove a cached export (damaged, or refused by ONNX Runtime), so that the next call makes it again."""
    shutil.rmtree(target, ignore_errors=True)


def _export(folder: Path, target: Path) -> ExportVerdict:
    """Run the export process into a temporary folder beside `target`, then rename it into place."""
    LOGGER.info(f"exporting the embedding model {folder} to ONNX, once for this revision (a separate process "
                f"imports torch for it; 10 to 60 s): {target}")
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        done = subprocess.run([sys.executable, "-m", "rag_pipeline.core.embedding.onnx_export", "--folder", str(folder), "--out", str(work)],
                              capture_output=True, text=True, timeout=_EXPORT_TIMEOUT_S)
        if done.returncode != 0 or read_verdict(work) is None:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise ExportError(f"the ONNX export of {folder} failed (exit {done.returncode}): {' | '.join(tail)}")
        discard(target)
        os.rename(work, target)
    finally:
        discard(work)
    verdict = read_verdict(target)
    if verdict is None:
        raise ExportError(f"the ONNX export of {folder} left no verdict in {target}")
    return verdict


def _write_verdict(out: Path, **fields) -> None:
    (out / "verdict.json").write_text(json.dumps(fields, indent=2))


def export_and_check(folder: Path, out: Path) -> dict:
    """In the export process: write `out/model.onnx` (with its weights) and `out/verdict.json` for the
    model in `folder`."""
    out.mkdir(parents=True, exist_ok=True)
    try:
        layout = read_layout(folder)
    except UnsupportedModel as exc:
        _write_verdict(out, engine="library", reason=str(exc))
        return {"engine": "library", "reason": str(exc)}
    import numpy as np
    import torch
    from sentence_transformers import SentenceTransformer

    from rag_pipeline.core.embedding.onnx_engine import MODEL_INPUTS, OnnxEncoder

    library = SentenceTransformer(str(folder), device="cpu")
    transformer = library[0].auto_model.eval()
    accepted = [name for name in MODEL_INPUTS if name in _parameters(transformer.forward)]
    tokens = library.tokenize(["A first text to trace the export with.", "A second, shorter one."])
    example = tuple(tokens[name] for name in accepted)

    class LastHiddenState(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, *inputs):
            return self.transformer(**dict(zip(accepted, inputs))).last_hidden_state

    model_file = out / "model.onnx"
    axes = {name: {0: "batch", 1: "tokens"} for name in [*accepted, "last_hidden_state"]}
    with torch.no_grad():
        torch.onnx.export(LastHiddenState(), example, str(model_file), input_names=accepted,
                          output_names=["last_hidden_state"], dynamic_axes=axes, opset_version=OPSET, dynamo=False)
    import onnx

    onnx.save_model(onnx.load(str(model_file)), str(model_file), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=WEIGHTS_FILE, size_threshold=1024)
    encoder = OnnxEncoder(model_file, layout)
    expected = library.encode(list(PROBE_TEXTS), convert_to_numpy=True, normalize_embeddings=False)
    one_by_one = np.stack([encoder.encode([text], normalize=False)[0] for text in PROBE_TEXTS])
    batched = encoder.encode(list(PROBE_TEXTS), normalize=False)
    difference = float(max(np.abs(one_by_one - expected).max(), np.abs(batched - expected).max()))
    if not difference <= TOLERANCE:
        model_file.unlink()
        (out / WEIGHTS_FILE).unlink()
        reason = f"its ONNX export differs from the library by {difference:.1e} (over {TOLERANCE:.0e})"
        _write_verdict(out, engine="library", reason=reason)
        return {"engine": "library", "reason": reason}
    sizes = [model_file.stat().st_size, (out / WEIGHTS_FILE).stat().st_size]
    _write_verdict(out, engine="onnx", sizes=sizes, max_abs_diff=difference, opset=OPSET,
                   torch=torch.__version__, inputs=accepted, probe_texts=len(PROBE_TEXTS))
    return {"engine": "onnx", "max_abs_diff": difference}


def _parameters(function) -> set[str]:
    import inspect

    return set(inspect.signature(function).parameters)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Export an embedding model to ONNX (default: the bundled one, "
                                                 "into the cache).")
    parser.add_argument("--folder", help="a sentence-transformers model folder")
    parser.add_argument("--out", help="write model.onnx and verdict.json here (the export process)")
    args = parser.parse_args(argv)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        os.environ.setdefault(name, "1")
    if args.out:
        print(json.dumps(export_and_check(Path(args.folder), Path(args.out))))
        return 0
    from rag_pipeline.config import DEFAULT_MODEL
    from rag_pipeline.core.embedding.model_folder import folder_revision, resolve_model_path

    folder = Path(args.folder or resolve_model_path(DEFAULT_MODEL))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    verdict = exported_model(folder, folder_revision(folder))
    print(f"{folder}: {verdict.engine} ({verdict.reason})" + (f": {verdict.model_file}" if verdict.model_file else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
