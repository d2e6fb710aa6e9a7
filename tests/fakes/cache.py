"""A request cache that caches nothing and counts what it was asked."""

from __future__ import annotations

import numpy as np

from proxy.cache.request_cache import NamedEmbedder


class FakeCache:
    """The parts of ``proxy.cache.RequestCache`` the write path uses: counts generation bumps
    and embedding lookups (always a miss)."""

    def __init__(self) -> None:
        self.bumps: list[str] = []
        self.embeds = 0

    async def bump_generation(self, tenant: str) -> int:
        self.bumps.append(tenant)
        return len(self.bumps)

    async def embed(self, tenant: str, embedder: NamedEmbedder, text: str) -> np.ndarray:
        self.embeds += 1
        result: np.ndarray = (await embedder.embed([text]))[0]
        return result
