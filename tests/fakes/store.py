"""An in-memory ``MemoryStore`` that passes the store contract (``tests/memory/test_contract.py``).

It keeps what the real stores keep (the payload the codec writes, and the dense vector) and
checks what they check, with the same helpers, so a test using it cannot rely on behaviour no
real store has. Dense search only: the hybrid and restart parts of the contract are for real
stores. It also records every ``add`` and search, and can be told to fail or hang on search.
"""

from __future__ import annotations

import asyncio
import builtins
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from typing import Any, Literal

import numpy as np

from proxy.context.records import Candidate, MemoryRecord
from proxy.errors import StoreError
from proxy.memory.filters import DIALOG_SOURCE
from proxy.memory.near import search_then_turns
from proxy.memory.points import (
    SOURCE_KEY,
    SUPERSEDED_KEY,
    USER_KEY,
    WORDS_KEY,
    from_payload,
    to_payload,
)
from proxy.memory.store import (
    NEAR_TURNS,
    SHARED_USER,
    Found,
    Page,
    RepeatKey,
    SearchQuery,
    TurnsQuery,
    check_query,
    check_vector,
    check_vectors,
    require_tenant,
    with_tokens,
)
from proxy.memory.vectors import similarity
from tests.fakes.embedder import DIMENSIONS, unit_vector

SearchMode = Literal["ok", "raise", "hang"]
HANG_S = 10.0


class FakeStore:
    """Memories in a dict by (tenant, id).

    ``memories`` are stored at once with ``FakeEmbedder``'s vector, so every query finds them.
    ``search="raise"`` makes search raise a client error, ``"hang"`` makes it sleep ``HANG_S``.
    """

    hybrid = False

    def __init__(
        self,
        memories: Sequence[MemoryRecord] = (),
        *,
        dimensions: int = DIMENSIONS,
        search: SearchMode = "ok",
    ) -> None:
        self.dimensions = dimensions
        self.search_mode = search
        self.closed = False
        self.adds: list[tuple[list[MemoryRecord], np.ndarray]] = []
        self.queries: list[SearchQuery] = []
        self.repeat_lookups = 0  # write hygiene's lookups (one per batch)
        self._points: dict[tuple[str, str], tuple[dict[str, Any], np.ndarray]] = {}
        for record in memories:
            self._put(record, unit_vector(dimensions))

    @property
    def searches(self) -> int:
        """How many searches were asked for."""
        return len(self.queries)

    def _put(self, record: MemoryRecord, vector: np.ndarray) -> None:
        if record.created_at.tzinfo is None:
            raise StoreError(f"memory {record.id!r}: created_at must be timezone-aware")
        payload = to_payload(with_tokens(record))
        self._points[(record.tenant, record.id)] = (payload, np.asarray(vector, np.float32))

    def _records(self, tenant: str) -> builtins.list[MemoryRecord]:
        require_tenant(tenant)
        found = [from_payload(p) for (t, _), (p, _) in self._points.items() if t == tenant]
        return sorted(found, key=lambda r: r.id)

    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        self.adds.append((list(records), vectors))
        check_vectors(records, vectors, self.dimensions)
        for record, vector in zip(records, vectors, strict=True):
            self._put(record, vector)

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        point = self._points.get((require_tenant(tenant), memory_id))
        return from_payload(point[0]) if point else None

    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        records = [
            r
            for r in self._records(tenant)
            if (user is None or r.user == user)
            and (source is None or r.source == source)
            and (after is None or r.id > after)
        ]
        page = records[:limit]
        return Page(page, len(records) > limit, page[-1].id if page else None)

    async def delete(self, tenant: str, memory_id: str) -> bool:
        return self._points.pop((require_tenant(tenant), memory_id), None) is not None

    async def delete_user(self, tenant: str, user: str) -> int:
        gone = [r.id for r in self._records(tenant) if r.user == user]
        for memory_id in gone:
            del self._points[(tenant, memory_id)]
        return len(gone)

    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        self.queries.append(query)
        if self.search_mode == "raise":
            raise RuntimeError("store search failed")
        if self.search_mode == "hang":
            await asyncio.sleep(HANG_S)
        require_tenant(tenant)
        vector = check_query(query, self.dimensions)
        live_at = query.live_at
        hits = [
            Candidate(record, similarity(vector, stored))
            for (t, _), (payload, stored) in self._points.items()
            if t == tenant
            and payload[USER_KEY] in (query.user, SHARED_USER)
            and (query.sources is None or payload[SOURCE_KEY] in query.sources)
            and ((record := from_payload(payload)) and (live_at is None or record.live(live_at)))
        ]
        hits.sort(key=lambda hit: (-hit.similarity, hit.record.id))
        return hits[: query.top_k]

    async def search_near(
        self, tenant: str, query: SearchQuery, seeds: int, window_s: float
    ) -> Found:
        return await search_then_turns(self, tenant, query, seeds, window_s)

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        require_tenant(tenant)
        for memory_id in ids:
            point = self._points.get((tenant, memory_id))
            if point is not None:
                point[0]["retrieval_count"] += 1

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        point = self._points.get((require_tenant(tenant), memory_id))
        if point is None:
            return None
        point[0]["usefulness"] = usefulness
        return from_payload(point[0])

    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        point = self._points.get((require_tenant(tenant), memory_id))
        if point is None:
            return None
        # No await between the read and the write: concurrent updates never interleave.
        return await self.set_usefulness(tenant, memory_id, update(point[0]["usefulness"]))

    async def supersede(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        point = self._points.get((require_tenant(tenant), memory_id))
        if point is None or point[0].get(SUPERSEDED_KEY) is not None:
            return None
        point[0][SUPERSEDED_KEY] = by  # no await since the check: never two winners
        return from_payload(point[0])

    async def count(self, tenant: str) -> int:
        return len(self._records(tenant))

    async def repeats(
        self, tenant: str, keys: Collection[RepeatKey], live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        require_tenant(tenant)
        self.repeat_lookups += 1
        wanted = set(keys)
        return [
            record
            for (t, _), (payload, _) in self._points.items()
            if t == tenant
            and (payload[USER_KEY], payload[WORDS_KEY]) in wanted
            and (record := from_payload(payload)).live(live_at)
        ]

    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        require_tenant(tenant)
        vector = check_vector(query.vector, self.dimensions)
        near = [
            Candidate(record, similarity(vector, stored))
            for (t, _), (payload, stored) in self._points.items()
            if t == tenant
            and payload[USER_KEY] == query.user
            and payload[SOURCE_KEY] == DIALOG_SOURCE
            and (record := from_payload(payload)).live(query.live_at)
            and any(
                abs((record.created_at - at).total_seconds()) <= query.window_s
                for at in query.times
            )
        ]
        return near[: NEAR_TURNS * len(query.times)]

    async def purge_expired(self, before: datetime) -> int:
        gone = [
            key
            for key, (payload, _) in self._points.items()
            if (expires := from_payload(payload).expires_at) is not None and expires <= before
        ]
        for key in gone:
            del self._points[key]
        return len(gone)

    async def ready(self) -> bool:
        return not self.closed

    async def close(self) -> None:
        self.closed = True


class FailingOpener:
    """Opens a ``FakeStore`` after failing ``failures`` times (a backend down at start that
    comes back); ``calls`` counts the attempts. ``error`` is what each failure raises."""

    def __init__(
        self, failures: int, store: FakeStore | None = None, error: Exception | None = None
    ) -> None:
        self.failures = failures
        self.store = store or FakeStore()
        self.error = error or ConnectionRefusedError("qdrant is not up yet")
        self.calls = 0

    async def __call__(self, *args: object, **kwargs: object) -> FakeStore:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return self.store
