"""The cache contracts: ``Cache`` (bytes, two backends) and ``MemoryCache`` (typed, over it).

``Cache``: both implementations (``LocalCache`` in-process, ``RedisCache`` over the network)
honour the same promise: no method raises because the backend is down or slow. A read that
cannot be served is a miss (``None``), a write that cannot be done is silently dropped, and
``incr`` answers ``None``. Callers therefore never wrap cache calls in ``try``: memory is an
enhancement, the cache doubly so. A call that is not served is noted in the caller's
``cache_outcome`` scope (``outcome.py``).

``MemoryCache``: what the memory path asks of a cache (``RequestCache`` implements it): query
embeddings, token counts of messages, search results under the tenant's generation, and the bump
that makes a tenant's cached results unreachable after a write.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from proxy.context.records import Candidate

# Every key memproxy writes starts with this; bump the version when a value's encoding changes so
# old entries are ignored rather than misread after a rolling deploy.
KEY_PREFIX = "mp:v1:"

# Reasons passed to an ErrorHook.
REASON_TIMEOUT = "timeout"
REASON_ERROR = "error"
REASON_CIRCUIT_OPEN = "circuit_open"

ErrorHook = Callable[[str, str], None]
"""Called as ``hook(operation, reason)`` for each cache call that could not be served.

``operation`` is the method name (``get``, ``set_many``, ...); ``reason`` is one of
``timeout``, ``error`` or ``circuit_open``. The hook must be cheap and must not raise.
"""


@runtime_checkable
class Cache(Protocol):
    """A byte cache with TTLs, batch calls and atomic counters; it never raises on failure."""

    async def get(self, key: str) -> bytes | None:
        """Return the value of ``key``, or ``None`` if absent, expired or unreachable."""
        ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Return the values of ``keys`` in order (one round trip), ``None`` for each miss."""
        ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds (> 0)."""
        ...

    async def set_many(self, items: Mapping[str, bytes], ttl_s: float) -> None:
        """Store every item for ``ttl_s`` seconds in one round trip."""
        ...

    async def incr(self, key: str, amount: int = 1) -> int | None:
        """Atomically add ``amount`` to the integer at ``key`` (absent counts as 0), no expiry.

        Returns the new value, or ``None`` when the cache could not do it.
        """
        ...

    async def delete(self, *keys: str) -> None:
        """Remove ``keys``; absent keys are ignored."""
        ...

    async def ping(self) -> bool:
        """Return whether the backend answers now (for readiness checks)."""
        ...

    async def close(self) -> None:
        """Release connections; the cache must not be used afterwards."""
        ...


@dataclass(frozen=True, slots=True)
class RetrievalKey:
    """Where one search result is cached: the tenant and the full key (generation included)."""

    tenant: str
    key: str


class NamedEmbedder(Protocol):
    """What ``MemoryCache.embed`` needs of an embedder (``proxy.memory.embedders.Embedder``)."""

    @property
    def name(self) -> str: ...

    @property
    def dimensions(self) -> int: ...

    async def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class MemoryCache(Protocol):
    """The memory path's cache; like ``Cache`` it never raises because the backend failed."""

    async def embed(self, tenant: str, embedder: NamedEmbedder, text: str) -> np.ndarray:
        """The vector of ``text``: cached, else from ``embedder`` (whose errors propagate)."""
        ...

    async def get_token_counts(
        self, tenant: str, encoding: str, texts: Sequence[str]
    ) -> list[int | None]:
        """The cached count of each text in ``encoding``; ``None`` where not cached."""
        ...

    async def set_token_counts(self, tenant: str, encoding: str, counts: Mapping[str, int]) -> None:
        """Cache ``{text: count}`` in ``encoding``."""
        ...

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
        """The key of this search at the tenant's current generation; ``None``: do not cache."""
        ...

    async def get_retrieval(self, key: RetrievalKey | None) -> list[Candidate] | None:
        """The search result cached at ``key``, or ``None``."""
        ...

    async def set_retrieval(
        self, key: RetrievalKey | None, candidates: Sequence[Candidate]
    ) -> None:
        """Cache a search result under ``key`` (taken before searching)."""
        ...

    async def bump_generation(self, tenant: str) -> int | None:
        """Make every cached search result of ``tenant`` unreachable (after each write)."""
        ...

    async def ready(self) -> bool:
        """Whether the backing cache answers now (``/readyz``)."""
        ...
