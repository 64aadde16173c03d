"""A small deterministic embedder for fast tests: feature hashing of words and word bigrams."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from rag_pipeline.config import EmbeddingConfig

if TYPE_CHECKING:
    import numpy as np

_WORD = re.compile(r"\w+")


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

    @property
    def dimension(self) -> int:
        return self.config.dimension

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import numpy as np

        from rag_pipeline.core.vectors import normalise_rows

        matrix = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            words = _WORD.findall(text.lower())
            for feature in words + [f"{a} {b}" for a, b in zip(words, words[1:])]:
                digest = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                index = int.from_bytes(digest[:4], "little") % self.dimension
                sign = 1.0 if digest[4] & 1 else -1.0
                matrix[row, index] += sign
        return normalise_rows(matrix) if self.config.normalize else matrix
