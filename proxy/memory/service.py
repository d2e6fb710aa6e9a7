"""``MemoryService``: THE write path of memories, and the read/search/delete/feedback helpers.

Every writer goes through ``MemoryService.write`` (the memories API, ``memproxy memories
import`` and the pipeline's capture), so a memory gets the same treatment wherever it comes
from: validated input (``proxy.memory.inputs``), an id (the client's, else generated), token
counts for every stored encoding counted once, one batched embedding call, ``store.add`` (an
upsert by (tenant, id)), then ``cache.bump_generation(tenant)`` so no cached search result can
hide the write. Validation happens before any of it: a bad batch writes nothing.

Usage (capture, from the pipeline)::

    service = MemoryService.from_services(services)  # or MemoryService(store, embedder, cache)
    records = await service.write(tenant.id, [MemoryInput(content=text, user=user,
                                                          source="conversation",
                                                          metadata={"session": sid})])
    # or, from untrusted JSON-like dicts (validated, 400 on bad input):
    records = await service.add(tenant.id, [{"content": text, "user": user}])

Errors: ``RequestError`` (400) for bad input, ``NotFound`` (404) for an unknown id (also one
that belongs to another tenant: the store is keyed by (tenant, id)), ``StoreError`` /
``EmbedderError`` (503) when a backend fails.
"""

from __future__ import annotations

import asyncio
import builtins
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import numpy as np

from proxy.context.records import SOURCES, Candidate, MemoryRecord
from proxy.context.tokens import O200K
from proxy.errors import BackendError, EmbedderError, NotFound, RequestError, StoreError
from proxy.memory.inputs import (
    MAX_BATCH_MEMORIES,
    MemoryInput,
    parse_fraction,
    parse_memories,
)
from proxy.memory.store import MemoryStore, Page, SearchQuery, with_tokens
from proxy.tokenizer import count_tokens

# The one token count the API shows: o200k_base, the encoding of OpenAI's current models
# (gpt-4o, gpt-4.1, o-series). Both stored encodings stay in the record (adr/0070).
API_TOKEN_ENCODING = O200K
ID_PREFIX = "mem_"
# Above this much text, token counting moves to a worker thread: both encodings together cost
# ~0.65 us per character (measured, adr/0071), so the loop stalls at most ~5 ms inline.
INLINE_COUNT_MAX_CHARS = 8_000
# A thumbs up/down moves usefulness this fraction of the way to 1/0: one vote nudges, a
# consistent signal converges (adr/0072).
FEEDBACK_STEP = 0.2
DEFAULT_TOP_K = 10
MAX_TOP_K = 200
DEFAULT_PAGE = 20
MAX_PAGE = 100


def utc_now() -> datetime:
    """The current time, aware UTC (the default clock)."""
    return datetime.now(UTC)


def new_id() -> str:
    """A fresh memory id: ``mem_`` and 32 hex digits of a random uuid."""
    return ID_PREFIX + uuid.uuid4().hex


def build_records(
    tenant: str, inputs: Sequence[MemoryInput], now: datetime
) -> builtins.list[MemoryRecord]:
    """Turn validated inputs into records with ids, times and token counts (pure but CPU-bound)."""
    return [
        with_tokens(
            MemoryRecord(
                id=item.id if item.id is not None else new_id(),
                tenant=tenant,
                user=item.user,
                source=item.source,
                content=item.content,
                created_at=item.created_at or now,
                confidence=item.confidence,
                usefulness=item.usefulness,
                retrieval_count=item.retrieval_count,
                tokens={},
                metadata=dict(item.metadata),
            )
        )
        for item in inputs
    ]


def count_api_tokens(text: str) -> int:
    """Tokens of ``text`` in ``API_TOKEN_ENCODING`` (for a record stored without its count)."""
    return count_tokens(text, API_TOKEN_ENCODING)


def memory_object(record: MemoryRecord) -> dict[str, Any]:
    """The API shape of a memory (``tokens`` counted in ``API_TOKEN_ENCODING``)."""
    return {
        "object": "memory",
        "id": record.id,
        "user": record.user,
        "source": record.source,
        "content": record.content,
        "tokens": record.token_count(API_TOKEN_ENCODING, count_api_tokens),
        "confidence": record.confidence,
        "usefulness": record.usefulness,
        "retrieval_count": record.retrieval_count,
        "created_at": record.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
        "metadata": dict(record.metadata),
    }


def search_hit_object(candidate: Candidate) -> dict[str, Any]:
    """A memory object with the hit's ``similarity`` (0..1)."""
    return {**memory_object(candidate.record), "similarity": round(candidate.similarity, 6)}


def feedback_update(*, useful: bool | None, usefulness: float | None) -> Callable[[float], float]:
    """The change a feedback call asks for, checked now: an explicit value wins; a vote moves
    ``FEEDBACK_STEP`` towards 1 or 0; neither is a 400. The store applies it to the current value.
    """
    if usefulness is not None:
        value = usefulness
        return lambda _current: value
    if useful is None:
        raise RequestError("Send either 'useful' (boolean) or 'usefulness' (0..1).")
    target = 1.0 if useful else 0.0
    return lambda current: round(current + FEEDBACK_STEP * (target - current), 6)


def feedback_usefulness(current: float, *, useful: bool | None, usefulness: float | None) -> float:
    """New usefulness after one feedback call on a memory whose usefulness is ``current``."""
    return feedback_update(useful=useful, usefulness=usefulness)(current)


class MemoryService:
    """Writes, reads, searches and deletes one tenant's memories at a time.

    Holds no state of its own: build one per request or keep one; ``store``, ``embedder`` and
    ``cache`` belong to whoever created them. ``cache`` may be ``None`` (no generation to bump).
    """

    def __init__(
        self,
        store: MemoryStore,
        embedder: Any,
        cache: Any | None = None,
        *,
        max_content_chars: int = 8000,
        max_batch: int = MAX_BATCH_MEMORIES,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.cache = cache
        self.max_content_chars = max_content_chars
        self.max_batch = max_batch
        self._clock = clock

    @classmethod
    def from_services(cls, services: Any) -> MemoryService:
        """The service over the app's backends; 503 when memory is off or the store is down."""
        if not services.settings.memory.enabled:
            raise BackendError("Memory is disabled on this proxy (memory.enabled is false).")
        if services.store is None or services.embedder is None:
            raise StoreError("The memory store is unavailable right now; retry later.")
        return cls(
            services.store,
            services.embedder,
            services.cache,
            max_content_chars=services.settings.memory.max_content_chars,
        )

    # -- writing ---------------------------------------------------------------------------

    async def add(
        self, tenant: str, items: Sequence[Mapping[str, Any]]
    ) -> builtins.list[MemoryRecord]:
        """Validate raw memory objects (all before any write), then ``write`` them."""
        inputs = parse_memories(
            builtins.list(items), max_content_chars=self.max_content_chars, max_batch=self.max_batch
        )
        return await self.write(tenant, inputs)

    async def write(
        self, tenant: str, inputs: Sequence[MemoryInput]
    ) -> builtins.list[MemoryRecord]:
        """Write validated memories as one batch; return the stored records (upsert by id)."""
        if not tenant:
            raise RequestError("a tenant is required to write memories", param="tenant")
        if not inputs:
            return []
        now = self._clock()
        if sum(len(item.content) for item in inputs) > INLINE_COUNT_MAX_CHARS:
            records = await asyncio.to_thread(build_records, tenant, inputs, now)
        else:
            records = build_records(tenant, inputs, now)
        vectors = await self._embed([r.content for r in records])
        await self.store.add(records, vectors)
        await self._invalidate(tenant)
        return records

    async def _embed(self, texts: Sequence[str]) -> np.ndarray:
        try:
            vectors = await self.embedder.embed(texts)
        except BackendError:
            raise
        except Exception as exc:
            raise EmbedderError(f"embedding failed: {type(exc).__name__}: {exc}") from exc
        return np.asarray(vectors, dtype=np.float32)

    async def _invalidate(self, tenant: str) -> None:
        if self.cache is not None:
            await self.cache.bump_generation(tenant)

    # -- reading ---------------------------------------------------------------------------

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord:
        """The tenant's memory ``memory_id``; ``NotFound`` (404) otherwise."""
        record = await self.store.get(tenant, memory_id)
        if record is None:
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        return record

    async def list(
        self,
        tenant: str,
        *,
        user: str | None = None,
        source: str | None = None,
        limit: int = DEFAULT_PAGE,
        after: str | None = None,
    ) -> Page:
        """One page of the tenant's memories (stable order); pass ``last_id`` as ``after``."""
        if source is not None and source not in SOURCES:
            raise RequestError(f"'source' must be one of {', '.join(SOURCES)}.", param="source")
        if not 1 <= limit <= MAX_PAGE:
            raise RequestError(f"'limit' must be between 1 and {MAX_PAGE}.", param="limit")
        return await self.store.list(tenant, user=user, source=source, limit=limit, after=after)

    async def search(
        self,
        tenant: str,
        query: str,
        *,
        user: str = "",
        top_k: int = DEFAULT_TOP_K,
        sources: Sequence[str] | None = None,
    ) -> builtins.list[Candidate]:
        """The ``top_k`` memories of ``user`` plus tenant-shared ones most similar to ``query``."""
        if not 1 <= top_k <= MAX_TOP_K:
            raise RequestError(f"'top_k' must be between 1 and {MAX_TOP_K}.", param="top_k")
        if self.cache is not None:
            vector = await self.cache.embed(tenant, self.embedder, query)
        else:
            vector = (await self._embed([query]))[0]
        search = SearchQuery(
            vector=np.asarray(vector, dtype=np.float32),
            text=query,
            user=user,
            sources=tuple(sources) if sources is not None else None,
            top_k=top_k,
        )
        return await self.store.search(tenant, search)

    # -- deleting and feedback -------------------------------------------------------------

    async def delete(self, tenant: str, memory_id: str) -> None:
        """Delete one memory; ``NotFound`` if the tenant has none with that id (a repeat)."""
        if not await self.store.delete(tenant, memory_id):
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        await self._invalidate(tenant)

    async def delete_user(self, tenant: str, user: str) -> int:
        """Forget every memory of ``user``; return how many there were (0 is not an error)."""
        deleted = await self.store.delete_user(tenant, user)
        if deleted:
            await self._invalidate(tenant)
        return deleted

    async def feedback(
        self,
        tenant: str,
        memory_id: str,
        *,
        useful: bool | None = None,
        usefulness: float | None = None,
    ) -> MemoryRecord:
        """Apply a vote or set usefulness; return the updated memory (``NotFound`` if none).

        The store applies the vote to the current value atomically, so simultaneous votes on
        one memory all count (they used to race as read-then-set).
        """
        if usefulness is not None:
            usefulness = parse_fraction(usefulness, "usefulness")
        update = feedback_update(useful=useful, usefulness=usefulness)
        updated = await self.store.update_usefulness(tenant, memory_id, update)
        if updated is None:
            raise NotFound(f"No memory with id '{memory_id}'.", param="id")
        await self._invalidate(tenant)
        return updated
