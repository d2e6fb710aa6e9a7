"""An embedder without a model: every text gets the same unit vector."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

DIMENSIONS = 4


def unit_vector(dimensions: int = DIMENSIONS) -> np.ndarray:
    """The vector ``FakeEmbedder`` returns for every text (and ``FakeStore`` seeds with)."""
    return np.full(dimensions, 1 / np.sqrt(dimensions), dtype=np.float32)


class FakeEmbedder:
    """``proxy.memory.embedders.Embedder``: records each call; ``fail`` makes every call raise.

    One direction for every text makes every stored memory equally similar to every query, so
    tests decide what is found by what they store, not by vector geometry.
    """

    name = "fake"

    def __init__(self, dimensions: int = DIMENSIONS, *, fail: bool = False) -> None:
        self.dimensions = dimensions
        self.fail = fail
        self.calls: list[list[str]] = []

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        self.calls.append(list(texts))
        if self.fail:
            # Not an EmbedderError: callers must translate a client's own failures.
            raise RuntimeError("embedding model crashed")
        return np.tile(unit_vector(self.dimensions), (len(texts), 1))
