"""What the pipeline needs of an embedding model (texts in, vectors out, an identity for caches), and
the one place that builds the configured one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from rag_pipeline.config import EmbeddingConfig

if TYPE_CHECKING:
    import numpy as np


class Embedder(Protocol):
    """An embedding model as the pipeline uses it; `identity` keys every cached vector."""

    @property
    def identity(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """float32 matrix, one row per text (L2-normalised when the config says so)."""
        ...


def make_embedder(config: EmbeddingConfig) -> Embedder:
    """The embedder the config names; the real model's modules are imported only when it is the one."""
    if config.kind == "hashing":
        from rag_pipeline.core.embedding.hashing import HashingEmbedder

        return HashingEmbedder(config)
    from rag_pipeline.core.embedding.model import ModelEmbedder

    return ModelEmbedder(config)
