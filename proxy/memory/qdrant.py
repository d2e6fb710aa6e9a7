"""``QdrantStore``: memories in a Qdrant server or cluster through ``AsyncQdrantClient``.

Same collection layout and behaviour as ``EdgeStore`` (one collection for every tenant, a
``tenant`` keyword index with ``is_tenant=True``, uuid5 point ids, a cosine dense vector and an
IDF sparse vector). Writes use ``wait=True``: ``add`` returns once the server has applied the
batch. Read-modify-write updates are serialised per process by a lock; across processes the
last writer of a retrieval count wins (counts are a ranking hint, not an invariant).
"""

from __future__ import annotations

import asyncio
import builtins
import functools
from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Coroutine, Sequence
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

import httpx
import numpy as np
from qdrant_client import AsyncQdrantClient, models
from qdrant_client.common.client_exceptions import QdrantException
from qdrant_client.http.exceptions import ApiException

from proxy.context.records import Candidate, MemoryRecord
from proxy.defaults import COLLECTION as DEFAULT_COLLECTION
from proxy.defaults import HYBRID
from proxy.errors import ConfigError, StoreError
from proxy.memory import lexical
from proxy.memory.filters import (
    Condition,
    Liveness,
    list_conditions,
    liveness,
    repeat_conditions,
    scope_conditions,
    turn_conditions,
    windows,
)
from proxy.memory.fusion import HYBRID_OVERSAMPLE, RRF_K
from proxy.memory.near import search_then_turns
from proxy.memory.points import (
    COUNT_FIELDS,
    CREATED_TS_KEY,
    DENSE_VECTOR,
    EXPIRES_TS_KEY,
    INDEXED_KEYS,
    RETRIEVAL_COUNT_KEY,
    SPARSE_VECTOR,
    SUPERSEDED_KEY,
    TENANT_KEY,
    dense_of,
    group_new_counts,
    owned,
    owned_or_fail,
    point_id,
    repeats_among,
    to_payload,
)
from proxy.memory.store import (
    NEAR_TURNS,
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
from proxy.memory.vectors import clip_similarity, similarities

# What qdrant-client raises when the server fails: non-2xx answers and transport failures
# (``ApiException``), rate limits (``QdrantException``), and sockets it did not wrap.
CLIENT_ERRORS = (ApiException, QdrantException, httpx.HTTPError, OSError)
P = ParamSpec("P")
R = TypeVar("R")
REPEATS_PAGE = 1_024  # memories a repeat lookup reads a page at a time


def store_errors(method: Callable[P, Awaitable[R]]) -> Callable[P, Coroutine[Any, Any, R]]:
    """Translate the client's failures into ``StoreError`` (503 in the memories API, a degraded
    chat request); anything else raised is a bug and stays itself."""

    @functools.wraps(method)
    async def call(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return await method(*args, **kwargs)
        except CLIENT_ERRORS as exc:
            raise StoreError(f"the Qdrant server failed: {type(exc).__name__}: {exc}") from exc

    return call


def to_filter(conditions: list[Condition], live: Liveness | None = None) -> models.Filter:
    """Return the Qdrant filter requiring every condition (one value: equality, else any of),
    and, with ``live``, liveness."""
    must: list[Any] = [
        models.FieldCondition(key=key, match=models.MatchValue(value=values[0]))
        if len(values) == 1
        else models.FieldCondition(key=key, match=models.MatchAny(any=list(values)))
        for key, values in conditions
    ]
    if live is None:
        return models.Filter(must=must)
    must.append(models.IsEmptyCondition(is_empty=models.PayloadField(key=live.superseded_key)))
    expired = models.FieldCondition(key=live.expires_key, range=models.Range(lte=live.at))
    return models.Filter(must=must, must_not=[expired])


def expired_filter(before: float) -> models.Filter:
    """Return the filter of memories expired at or before ``before`` (epoch seconds)."""
    return models.Filter(
        must=[models.FieldCondition(key=EXPIRES_TS_KEY, range=models.Range(lte=before))]
    )


def tenant_filter(tenant: str) -> models.Filter:
    """Return the filter of one tenant's memories."""
    return to_filter([(TENANT_KEY, (tenant,))])


def scope_filter(tenant: str, query: SearchQuery) -> models.Filter:
    """Return the filter of a search (``store.scope_conditions``)."""
    return to_filter(scope_conditions(tenant, query), liveness(query))


def repeat_filter(tenant: str, keys: Collection[RepeatKey], live_at: float) -> models.Filter:
    """Return the filter of a repeat lookup (``filters.repeat_conditions``), live only."""
    return to_filter(repeat_conditions(tenant, keys), Liveness(live_at))


def turns_filter(tenant: str, query: TurnsQuery) -> models.Filter:
    """Return the filter of a neighbour lookup (``filters.turn_conditions``, live only)."""
    scope = to_filter(turn_conditions(tenant, query.user), Liveness(query.live_at.timestamp()))
    near: list[Any] = [
        models.FieldCondition(key=CREATED_TS_KEY, range=models.Range(gte=low, lte=high))
        for low, high in windows(query)
    ]
    return models.Filter(must=[scope, models.Filter(should=near)])


def list_filter(tenant: str, user: str | None, source: str | None) -> models.Filter:
    """Return the filter of ``list`` (``store.list_conditions``)."""
    return to_filter(list_conditions(tenant, user, source))


def stored_size(info: models.CollectionInfo) -> int | None:
    """Return the dense vector size of an existing collection, if it has our layout."""
    vectors = info.config.params.vectors
    if isinstance(vectors, dict) and DENSE_VECTOR in vectors:
        return int(vectors[DENSE_VECTOR].size)
    return None


class QdrantStore:
    """A ``MemoryStore`` on a Qdrant collection. Build it with ``await QdrantStore.open``."""

    def __init__(
        self, client: AsyncQdrantClient, collection: str, *, dimensions: int, hybrid: bool
    ) -> None:
        self.dimensions = dimensions
        self.hybrid = hybrid
        self._client = client
        self._collection = collection
        self._rmw_lock = asyncio.Lock()
        self._closed = False

    @classmethod
    async def open(
        cls,
        *,
        dimensions: int,
        url: str | None = None,
        api_key: str | None = None,
        location: str | None = None,
        path: str | None = None,
        collection: str = DEFAULT_COLLECTION,
        hybrid: bool = HYBRID,
    ) -> QdrantStore:
        """Connect (``url``; or qdrant-client local mode via ``location``/``path``), ensure the
        collection and its payload indexes; a different vector size is a ``ConfigError``."""
        if dimensions <= 0:
            raise ConfigError(f"embedding dimensions must be positive, got {dimensions}")
        client = AsyncQdrantClient(url=url, api_key=api_key, location=location, path=path)
        store = cls(client, collection, dimensions=dimensions, hybrid=hybrid)
        try:
            await store._ensure_collection()
        except BaseException:
            await client.close()
            raise
        return store

    async def _ensure_collection(self) -> None:
        if await self._client.collection_exists(self._collection):
            size = stored_size(await self._client.get_collection(self._collection))
            if size != self.dimensions:
                raise ConfigError(
                    f"Qdrant collection {self._collection!r} holds vectors of size {size}, the "
                    f"embedder makes {self.dimensions}; use the embedder it was built with or "
                    "another collection",
                    param="store.collection",
                )
            await self._index_liveness()  # collections made before the lifecycle keys existed
            return
        await self._client.create_collection(
            self._collection,
            vectors_config={
                DENSE_VECTOR: models.VectorParams(
                    size=self.dimensions, distance=models.Distance.COSINE
                )
            },
            sparse_vectors_config={
                SPARSE_VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)
            },
        )
        await self._client.create_payload_index(
            self._collection,
            TENANT_KEY,
            field_schema=models.KeywordIndexParams(
                type=models.KeywordIndexType.KEYWORD, is_tenant=True
            ),
        )
        for key in INDEXED_KEYS[1:]:
            await self._client.create_payload_index(
                self._collection, key, field_schema=models.PayloadSchemaType.KEYWORD
            )
        await self._index_liveness()

    async def _index_liveness(self) -> None:
        """Index the lifecycle keys every search filters on (adr/0113): unindexed, the filter
        reads each candidate's payload (10x slower search on the embedded store). Creating an
        existing index again is a no-op."""
        await self._client.create_payload_index(
            self._collection, SUPERSEDED_KEY, field_schema=models.PayloadSchemaType.KEYWORD
        )
        await self._client.create_payload_index(
            self._collection, EXPIRES_TS_KEY, field_schema=models.PayloadSchemaType.FLOAT
        )
        # The neighbour lookup's range filter (``turns_near``, adr/0122).
        await self._client.create_payload_index(
            self._collection, CREATED_TS_KEY, field_schema=models.PayloadSchemaType.FLOAT
        )

    @store_errors
    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Upsert records by (tenant, id); returns once the server applied the batch."""
        check_vectors(records, vectors, self.dimensions)
        if not records:
            return
        rows = np.asarray(vectors, dtype=np.float32).tolist()
        points = []
        for record, row in zip(records, rows, strict=True):
            full = with_tokens(record)
            indices, values = lexical.encode_document(full.content)
            vector: dict[str, Any] = {
                DENSE_VECTOR: row,
                SPARSE_VECTOR: models.SparseVector(indices=indices, values=values),
            }
            points.append(
                models.PointStruct(
                    id=point_id(full.tenant, full.id), vector=vector, payload=to_payload(full)
                )
            )
        await self._client.upsert(self._collection, points=points, wait=True)

    async def _retrieve(self, tenant: str, ids: Sequence[str]) -> builtins.list[MemoryRecord]:
        found = await self._client.retrieve(
            self._collection, ids=[point_id(tenant, i) for i in ids], with_payload=True
        )
        return [r for r in (owned(p.payload, tenant) for p in found) if r is not None]

    @store_errors
    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """Return the memory or ``None`` (also when it belongs to another tenant)."""
        require_tenant(tenant)
        found = await self._retrieve(tenant, [memory_id])
        return found[0] if found else None

    @store_errors
    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        """Return a page of memories in point-id order, starting after the memory ``after``."""
        require_tenant(tenant)
        if limit <= 0:
            return Page(records=[], has_more=False, last_id=None)
        found, _ = await self._client.scroll(
            self._collection,
            scroll_filter=list_filter(tenant, user, source),
            limit=limit + 2,
            offset=point_id(tenant, after) if after is not None else None,
            with_payload=True,
        )
        records = [r for r in (owned(p.payload, tenant) for p in found) if r is not None]
        if after is not None and records and records[0].id == after:
            records = records[1:]
        page = records[:limit]
        return Page(
            records=page, has_more=len(records) > limit, last_id=page[-1].id if page else None
        )

    @store_errors
    async def delete(self, tenant: str, memory_id: str) -> bool:
        """Delete one memory; ``False`` if the tenant has no memory with that id."""
        require_tenant(tenant)
        async with self._rmw_lock:
            if not await self._retrieve(tenant, [memory_id]):
                return False
            await self._client.delete(
                self._collection,
                points_selector=models.PointIdsList(points=[point_id(tenant, memory_id)]),
                wait=True,
            )
        return True

    @store_errors
    async def delete_user(self, tenant: str, user: str) -> int:
        """Delete every memory of ``user`` in the tenant; return how many there were."""
        require_tenant(tenant)
        scope = list_filter(tenant, user, None)
        async with self._rmw_lock:
            counted = await self._client.count(self._collection, count_filter=scope, exact=True)
            if counted.count:
                await self._client.delete(
                    self._collection, points_selector=models.FilterSelector(filter=scope), wait=True
                )
        return counted.count

    @store_errors
    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        """Return the best ``top_k`` memories of the user and the tenant's shared memories."""
        require_tenant(tenant)
        vector = check_query(query, self.dimensions)
        if query.top_k <= 0:
            return []
        scope = scope_filter(tenant, query)
        indices, values = lexical.encode_query(query.text) if self.hybrid else ([], [])
        if not indices:
            dense = await self._client.query_points(
                self._collection,
                query=vector.tolist(),
                using=DENSE_VECTOR,
                query_filter=scope,
                limit=query.top_k,
                with_payload=True,
            )
            return [
                Candidate(owned_or_fail(p.payload, tenant), clip_similarity(p.score))
                for p in dense.points
            ]
        branch = query.top_k * HYBRID_OVERSAMPLE
        sparse = models.SparseVector(indices=indices, values=values)
        fusing = self._client.query_points(
            self._collection,
            prefetch=[
                models.Prefetch(
                    query=vector.tolist(), using=DENSE_VECTOR, filter=scope, limit=branch
                ),
                models.Prefetch(query=sparse, using=SPARSE_VECTOR, filter=scope, limit=branch),
            ],
            query=models.RrfQuery(rrf=models.Rrf(k=RRF_K)),
            query_filter=scope,
            limit=query.top_k,
            with_payload=True,
            with_vectors=[DENSE_VECTOR],
        )
        if not query.lexical:
            points = list((await fusing).points)
        else:
            # The server fuses the branches itself: the lexical branch's hits the cut left out
            # take a query of their own, sent alongside (adr/0136).
            fused, lexical_branch = await asyncio.gather(
                fusing,
                self._client.query_points(
                    self._collection,
                    query=sparse,
                    using=SPARSE_VECTOR,
                    query_filter=scope,
                    limit=branch,
                    with_payload=True,
                    with_vectors=[DENSE_VECTOR],
                ),
            )
            points = list(fused.points)
            kept = {p.id for p in points}
            points.extend(p for p in lexical_branch.points if p.id not in kept)
        sims = similarities(vector, [dense_of(p.vector) for p in points])
        return [
            Candidate(owned_or_fail(p.payload, tenant), sim)
            for p, sim in zip(points, sims, strict=True)
        ]

    async def search_near(
        self, tenant: str, query: SearchQuery, seeds: int, window_s: float
    ) -> Found:
        """``search``, then ``turns_near`` for the seeds among its hits: two round trips (a
        server's queries cannot be seeded by each other's results in one)."""
        return await search_then_turns(self, tenant, query, seeds, window_s)

    @store_errors
    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """Add one to a memory's retrieval count per occurrence of its id in ``ids``."""
        require_tenant(tenant)
        if not ids:
            return
        deltas = Counter(point_id(tenant, i) for i in ids)
        async with self._rmw_lock:
            found = await self._client.retrieve(
                self._collection, ids=list(deltas), with_payload=list(COUNT_FIELDS)
            )
            groups = group_new_counts(tenant, deltas, ((str(p.id), p.payload) for p in found))
            for count, pids in groups.items():
                await self._client.set_payload(
                    self._collection, payload={RETRIEVAL_COUNT_KEY: count}, points=pids, wait=True
                )

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        """Set a memory's usefulness; return the updated memory, or ``None`` if there is none."""
        return await self.update_usefulness(tenant, memory_id, lambda _: usefulness)

    @store_errors
    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        """Set usefulness to ``update(current)`` under this process's read-modify-write lock.

        Several memproxy processes on one collection can still interleave two votes: Qdrant
        has no compare-and-set on payloads.
        """
        require_tenant(tenant)
        async with self._rmw_lock:
            found = await self._retrieve(tenant, [memory_id])
            if not found:
                return None
            value = update(found[0].usefulness)
            await self._client.set_payload(
                self._collection,
                payload={"usefulness": value},
                points=[point_id(tenant, memory_id)],
                wait=True,
            )
            found = await self._retrieve(tenant, [memory_id])
        return found[0] if found else None

    @store_errors
    async def supersede(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        """Mark the memory superseded by ``by`` if it is not yet, under this process's
        read-modify-write lock (a payload update: the vector stays). As with votes, several
        memproxy processes on one collection could both succeed: Qdrant has no compare-and-set.
        """
        require_tenant(tenant)
        async with self._rmw_lock:
            found = await self._retrieve(tenant, [memory_id])
            if not found or found[0].superseded_by is not None:
                return None
            await self._client.set_payload(
                self._collection,
                payload={SUPERSEDED_KEY: by},
                points=[point_id(tenant, memory_id)],
                wait=True,
            )
            found = await self._retrieve(tenant, [memory_id])
        return found[0] if found else None

    @store_errors
    async def count(self, tenant: str) -> int:
        """Return how many memories the tenant has."""
        require_tenant(tenant)
        counted = await self._client.count(
            self._collection, count_filter=tenant_filter(tenant), exact=True
        )
        return counted.count

    @store_errors
    async def repeats(
        self, tenant: str, keys: Collection[RepeatKey], live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        """The live memories whose (user, words key) is one of ``keys``, a page at a time."""
        require_tenant(tenant)
        if not keys:
            return []
        scope = repeat_filter(tenant, keys, live_at.timestamp())
        payloads: builtins.list[dict[str, Any] | None] = []
        offset: Any = None
        while True:
            found, offset = await self._client.scroll(
                self._collection,
                scroll_filter=scope,
                limit=REPEATS_PAGE,
                offset=offset,
                with_payload=True,
                with_vectors=False,
            )
            payloads += [p.payload for p in found]
            if offset is None:
                return repeats_among(payloads, tenant, keys)

    @store_errors
    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        """The dialog turns ``query`` asks for, with their cosines."""
        require_tenant(tenant)
        vector = check_vector(query.vector, self.dimensions)
        if not query.times:
            return []
        # One dense query over the window's turns: its scores are the cosines (as the edge store).
        found = await self._client.query_points(
            self._collection,
            query=vector.tolist(),
            using=DENSE_VECTOR,
            query_filter=turns_filter(tenant, query),
            limit=NEAR_TURNS * len(query.times),
            with_payload=True,
            with_vectors=False,
        )
        near = []
        for point in found.points:
            record = owned(point.payload, tenant)
            if record is not None:
                near.append(Candidate(record, clip_similarity(point.score)))
        return near

    @store_errors
    async def purge_expired(self, before: datetime) -> int:
        """Delete every memory expired at or before ``before``; return how many."""
        expired = expired_filter(before.timestamp())
        async with self._rmw_lock:
            counted = await self._client.count(self._collection, count_filter=expired, exact=True)
            if counted.count:
                await self._client.delete(
                    self._collection,
                    points_selector=models.FilterSelector(filter=expired),
                    wait=True,
                )
        return counted.count

    @store_errors
    async def ready(self) -> bool:
        """Whether the server answers and still has the collection (one cheap call)."""
        if self._closed:
            return False
        return await self._client.collection_exists(self._collection)

    async def close(self) -> None:
        """Close the client (once)."""
        if not self._closed:
            self._closed = True
            await self._client.close()
