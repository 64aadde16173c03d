"""Copies of the bundled model changed the way a team's own model may differ from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from rag_pipeline.config import DEFAULT_MODEL
from rag_pipeline.core.embedding.model_folder import resolve_model_path

BUNDLED = Path(resolve_model_path(DEFAULT_MODEL))


def weighted_mean_model(folder: Path) -> Path:
    """The bundled model in `folder` (its weights linked, not copied) pooled by weighted mean, a
    pooling mode the ONNX engine does not implement: only the library can run it."""
    shutil.copytree(BUNDLED, folder, ignore=shutil.ignore_patterns("*.safetensors"))
    (folder / "model.safetensors").symlink_to(BUNDLED / "model.safetensors")
    pooling = folder / "1_Pooling" / "config.json"
    pooling.write_text(json.dumps({**json.loads(pooling.read_text()), "pooling_mode_mean_tokens": False,
                                   "pooling_mode_weightedmean_tokens": True}))
    return folder
