"""What retrieval needs of an embedding model: texts in, vectors out, and an identity for caches."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

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
