"""The real embedding model: the configured sentence-transformers model, loaded on first use.

It runs on ONNX Runtime (`onnx_engine`), from an export made once per model revision and checked
against sentence-transformers (`onnx_export`). A model the ONNX engine cannot run as the library
does (another pooling, extra modules, a default prompt, an export that disagrees) runs in the
library itself, with torch, and a log line says so.

Its `identity` is the embedding cache's key, so a vector is reused only where the same model would
produce it again: the model's name, its revision (a hash of every weight, tokenizer and config file
of its folder) and the settings that change vectors (normalising, the token limit, an int8
precision). The engine is not part of it: every engine used is held within `onnx_export.TOLERANCE`
(1e-5) of the library's vectors, the one reference, so a vector cached by one engine is the vector
the other would give. `embedding.precision: int8` runs an int8 copy of the ONNX export
(`onnx_quantize`), whose vectors differ from the library's (about 0.99 cosine): it has an identity
of its own, so its vectors and float32 ones never mix, and only the ONNX engine can serve it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from rag_pipeline.config import EmbeddingConfig
from rag_pipeline.core.embedding.model_folder import (
    UnsupportedModel,
    folder_revision,
    read_json,
    read_layout,
    resolve_model_path,
)
from rag_pipeline.core.errors import InputError, UnavailableError

if TYPE_CHECKING:  # imported to encode: a run with nothing to embed needs the identity only
    import numpy as np

    from rag_pipeline.core.embedding.onnx_engine import OnnxEncoder

LOGGER = logging.getLogger("rag_pipeline.progress.model")


# Engines loaded in this process, by (model folder or name, token limit, batch size, precision):
# every embedder of one model shares one load (a command that loads it early hands it to its run).
_engines: dict[tuple[str, int | None, int, str], object] = {}
_engines_lock = threading.Lock()


class ModelEmbedder:
    """The configured sentence-transformers model, on ONNX Runtime when it can run it; loaded on first use."""

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.model_path = resolve_model_path(config.model)

    @cached_property
    def identity(self) -> str:
        folder = Path(self.model_path)
        revision = folder_revision(folder) if folder.is_dir() else "hub"
        settings = {"normalize": self.config.normalize, "max_seq_length": self.max_seq_length}
        if self.config.precision != "float32":
            # Named only when not the default, so that indexes embedded before the option keep their vectors.
            settings["precision"] = self.config.precision
        return f"{self.config.model}@{revision}:{json.dumps(settings, sort_keys=True)}"

    @property
    def max_seq_length(self) -> int | None:
        """The token limit: the config's, else the model folder's own."""
        if self.config.max_seq_length:
            return self.config.max_seq_length
        return read_json(Path(self.model_path) / "sentence_bert_config.json").get("max_seq_length")

    @property
    def engine(self):
        """An `OnnxEncoder`, or a `LibraryEncoder` for a model ONNX cannot serve (said in the log);
        one per process and model."""
        with _engines_lock:
            if self._engine_key not in _engines:
                _engines[self._engine_key] = self._onnx_engine() or LibraryEncoder(self.model_path, self.config)
            return _engines[self._engine_key]

    @property
    def _engine_key(self) -> tuple[str, int | None, int, str]:
        return self.model_path, self.config.max_seq_length, self.config.batch_size, self.config.precision

    def load(self) -> None:
        """Load the model now, as one text needs it: for a command that knows it will encode."""
        from rag_pipeline.core.embedding.onnx_engine import OnnxEncoder

        self._with_engine(lambda engine: engine.session(1) if isinstance(engine, OnnxEncoder) else None)

    def _with_engine(self, use):
        """`use(engine)`; an export ONNX Runtime cannot load is made again, and if that cannot be
        loaded either, the library runs the model."""
        from rag_pipeline.core.embedding.onnx_engine import EngineLoadError

        for last in (False, True):
            try:
                return use(self.engine)
            except EngineLoadError as exc:
                from rag_pipeline.core.embedding.onnx_export import discard
                from rag_pipeline.core.embedding.onnx_quantize import QUANTIZED_FILE, discard_quantized

                if exc.model_file.name == QUANTIZED_FILE:
                    discard_quantized(exc.model_file.parent)  # the float32 export beside it is sound
                else:
                    discard(exc.model_file.parent)
                with _engines_lock:
                    if last and self.config.precision == "int8":
                        _engines.pop(self._engine_key, None)
                        raise UnavailableError(f"embedding.precision int8: {exc}, twice; the int8 copy was removed "
                                               "and the next run makes it again (or set embedding.precision: float32)") from exc
                    if last:
                        LOGGER.warning(f"embedding model {self.config.model} runs in sentence-transformers (torch): {exc}")
                        _engines[self._engine_key] = LibraryEncoder(self.model_path, self.config)
                    else:
                        LOGGER.warning(f"{exc}: exporting it again")
                        _engines.pop(self._engine_key, None)
        return use(self.engine)

    def _onnx_engine(self) -> OnnxEncoder | None:
        from rag_pipeline.core.embedding.onnx_engine import OnnxEncoder
        from rag_pipeline.core.embedding.onnx_export import ExportError, exported_model

        try:
            layout = read_layout(self.model_path, self.config.max_seq_length)
            verdict = exported_model(self.model_path, folder_revision(Path(self.model_path)))
        except ExportError as exc:
            if self.config.precision == "int8":
                raise UnavailableError(f"embedding.precision int8 needs the ONNX export of {self.config.model}: {exc}; "
                                       "the next run tries again") from exc
            reason = str(exc)
        except UnsupportedModel as exc:
            reason = str(exc)
        else:
            if verdict.engine == "onnx":
                model_file = verdict.model_file
                if self.config.precision == "int8":
                    from rag_pipeline.core.embedding.onnx_quantize import quantized_model

                    model_file = quantized_model(model_file)
                return OnnxEncoder(model_file, layout, self.config.batch_size)
            reason = verdict.reason
        if self.config.precision == "int8":
            # The library has no int8 run of the model: its float32 vectors under the int8 identity would mix.
            raise InputError(f"embedding.precision int8 runs only on ONNX Runtime, and {self.config.model} runs in "
                             f"sentence-transformers ({reason}): set embedding.precision: float32 in the config")
        LOGGER.warning(f"embedding model {self.config.model} runs in sentence-transformers (torch): {reason}")
        return None

    @property
    def dimension(self) -> int:
        return self._with_engine(lambda engine: engine.dimension)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        return self._with_engine(lambda engine: engine.encode(texts, normalize=self.config.normalize))


class LibraryEncoder:
    """The model in sentence-transformers, with torch: for models the ONNX engine cannot run."""

    def __init__(self, model_path: str, config: EmbeddingConfig) -> None:
        # The libraries' own "Loading weights" bars are noise in a run log; stages report progress.
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        from sentence_transformers import SentenceTransformer

        # sentence-transformers 6.2 fails on a Path; it needs str.
        self.model = SentenceTransformer(str(model_path), device="cpu")
        if config.max_seq_length:
            self.model.max_seq_length = config.max_seq_length
        self.batch_size = config.batch_size

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def encode(self, texts: list[str], normalize: bool) -> np.ndarray:
        import numpy as np
        import torch

        threads = torch.get_num_threads()
        if len(texts) == 1:
            torch.set_num_threads(1)  # one query: a thread team costs more than it saves
        try:
            vectors = self.model.encode(texts, batch_size=self.batch_size, normalize_embeddings=normalize,
                                        convert_to_numpy=True, show_progress_bar=False)
        finally:
            torch.set_num_threads(threads)
        return np.asarray(vectors, dtype=np.float32)
