"""A memory-path cache that caches nothing and counts what it was asked."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from proxy.cache.protocol import NamedEmbedder, RetrievalKey
from proxy.context.records import Candidate


class FakeCache:
    """``proxy.cache.protocol.MemoryCache``: every lookup misses, nothing is kept; counts
    generation bumps and embedding lookups."""

    def __init__(self) -> None:
        self.bumps: list[str] = []
        self.embeds = 0

    async def embed(self, tenant: str, embedder: NamedEmbedder, text: str) -> np.ndarray:
        self.embeds += 1
        result: np.ndarray = (await embedder.embed([text]))[0]
        return result

    async def get_token_counts(
        self, tenant: str, encoding: str, texts: Sequence[str]
    ) -> list[int | None]:
        return [None] * len(texts)

    async def set_token_counts(self, tenant: str, encoding: str, counts: Mapping[str, int]) -> None:
        return None

    async def retrieval_key(
        self,
        tenant: str,
        user: str,
        query: str,
        *,
        top_k: int,
        sources: Sequence[str] | None,
        variant: str = "",
    ) -> RetrievalKey | None:
        return None

    async def get_retrieval(self, key: RetrievalKey | None) -> list[Candidate] | None:
        return None

    async def set_retrieval(
        self, key: RetrievalKey | None, candidates: Sequence[Candidate]
    ) -> None:
        return None

    async def bump_generation(self, tenant: str) -> int:
        self.bumps.append(tenant)
        return len(self.bumps)

    async def ready(self) -> bool:
        return True
