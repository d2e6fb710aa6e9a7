"""The memory store contract and what every implementation shares.

A store keeps ``MemoryRecord``s with one dense vector each (and, for hybrid retrieval, a sparse
lexical vector derived from the content). Every call names the tenant: there is no method that
reaches memories without one. Client-visible ids are arbitrary strings; the backend point id is
``uuid5(tenant, id)``, so two tenants can use the same id and guessing another tenant's id lands
on a point that does not exist.
"""

from __future__ import annotations

import builtins
import functools
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from proxy.context.records import Candidate, MemoryRecord
from proxy.context.tokens import STORED_ENCODINGS
from proxy.errors import ConfigError, RequestError, StoreError
from proxy.tokenizer import count_all

if TYPE_CHECKING:
    from proxy.settings import StoreSettings

# Fixed forever: changing it would orphan every stored point.
POINT_NAMESPACE = uuid.UUID("5f0c3a52-7c1e-4d38-9a8e-2f6d1b4c9e77")
DENSE_VECTOR = "dense"
SPARSE_VECTOR = "text"
# Payload keys that carry a payload index (tenant is the multitenancy "is_tenant" index).
TENANT_KEY = "tenant"
USER_KEY = "user"
SOURCE_KEY = "source"
INDEXED_KEYS: tuple[str, ...] = (TENANT_KEY, USER_KEY, SOURCE_KEY)
SHARED_USER = ""
# RRF's usual constant; ranks, not raw scores, are fused, so BM25 and cosine scales never mix.
RRF_K = 60
# Each branch of a hybrid query fetches this many times top_k before fusion (1 measured best
# on LoCoMo dev: wider branches let weak lexical matches push out dense hits; adr/0012).
HYBRID_OVERSAMPLE = 1


@dataclass(frozen=True)
class SearchQuery:
    """A search within one tenant: the query's vector and text, whose memories, which sources.

    ``user`` selects that user's memories plus the tenant-shared ones (user ``""``); ``sources``
    of ``None`` means every source.
    """

    vector: np.ndarray
    text: str
    user: str
    sources: tuple[str, ...] | None
    top_k: int


@dataclass(frozen=True)
class Page:
    """One page of ``list``: pass ``last_id`` as ``after`` to get the next page."""

    records: builtins.list[MemoryRecord]
    has_more: bool
    last_id: str | None


class MemoryStore(Protocol):
    """Where memories live. Every method is scoped to one tenant."""

    async def add(self, records: Sequence[MemoryRecord], vectors: np.ndarray) -> None:
        """Upsert records by (tenant, id); ``vectors[i]`` is the embedding of ``records[i]``."""
        ...

    async def get(self, tenant: str, memory_id: str) -> MemoryRecord | None:
        """Return the memory or ``None`` (also when it belongs to another tenant)."""
        ...

    async def list(
        self, tenant: str, *, user: str | None, source: str | None, limit: int, after: str | None
    ) -> Page:
        """Return up to ``limit`` memories in a stable order, starting after id ``after``."""
        ...

    async def delete(self, tenant: str, memory_id: str) -> bool:
        """Delete one memory; ``False`` if there was none."""
        ...

    async def delete_user(self, tenant: str, user: str) -> int:
        """Delete every memory of ``user``; return how many there were."""
        ...

    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        """Return the best ``top_k`` memories of the user and the tenant-shared ones."""
        ...

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """Add one to a memory's retrieval count per occurrence of its id (unknown ids ignored)."""
        ...

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        """Set a memory's usefulness (0..1); return the updated memory or ``None``."""
        ...

    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        """Set usefulness to ``update(current)`` with no other update in between (in this
        process), so concurrent votes all count; return the updated memory or ``None``."""
        ...

    async def count(self, tenant: str) -> int:
        """Return how many memories the tenant has."""
        ...

    async def close(self) -> None:
        """Flush and release the backend."""
        ...


async def open_store(settings: StoreSettings, *, dimensions: int) -> MemoryStore:
    """Open the configured store (the app lifespan owns and closes it).

    ``dimensions`` is the embedder's vector size; a store built with another size raises
    ``ConfigError`` here, at start, instead of failing on the first search.
    """
    if settings.kind == "qdrant":
        from proxy.memory.qdrant import QdrantStore

        if not settings.qdrant_url:
            raise ConfigError(
                "store.kind is qdrant but store.qdrant_url (MEMPROXY_QDRANT_URL) is not set",
                param="store.qdrant_url",
            )
        api_key = settings.qdrant_api_key.value if settings.qdrant_api_key else None
        return await QdrantStore.open(
            url=settings.qdrant_url,
            api_key=api_key,
            collection=settings.collection,
            dimensions=dimensions,
            hybrid=settings.hybrid,
        )
    from proxy.memory.edge import EdgeStore

    return await EdgeStore.open(
        settings.data_dir,
        dimensions=dimensions,
        hybrid=settings.hybrid,
        record_cache_entries=settings.record_cache_entries,
    )


RETRIEVAL_COUNT_KEY = "retrieval_count"
POINT_ID_CACHE_SIZE = 32_768  # ~200 B an entry
# What an increment reads back of each point: just enough to check the owner and add.
COUNT_FIELDS: tuple[str, ...] = (TENANT_KEY, RETRIEVAL_COUNT_KEY)


def group_new_counts(
    tenant: str, deltas: Mapping[Any, int], found: Iterable[tuple[Any, Mapping[str, Any] | None]]
) -> dict[int, builtins.list[Any]]:
    """Group the tenant's found points by their new retrieval count.

    ``deltas`` maps point ids to increments, ``found`` yields (point id, payload), ids of one
    type (the backend's: UUIDs for the embedded store, strings for qdrant-client). Points that
    share a new count are written with one ``set_payload``: counts are small integers, so a
    batch of hundreds of increments becomes a handful of writes instead of one per point.
    """
    groups: dict[int, builtins.list[Any]] = {}
    for pid, payload in found:
        if payload is None or payload.get(TENANT_KEY) != tenant:
            continue
        new = int(payload.get(RETRIEVAL_COUNT_KEY) or 0) + deltas.get(pid, 0)
        groups.setdefault(new, []).append(pid)
    return groups


@functools.lru_cache(maxsize=POINT_ID_CACHE_SIZE)
def point_uuid(tenant: str, memory_id: str) -> uuid.UUID:
    """Return the backend point id of (tenant, memory id): a uuid5, so tenants never collide.

    Memoised (a pure function): every injected memory's id is mapped again for its retrieval
    count, and uuid5 cost ~2.7 us a call, ~0.1 ms of each chat request.
    """
    # Length-prefixing the tenant keeps ("a", "b:c") and ("a:b", "c") apart.
    return uuid.uuid5(POINT_NAMESPACE, f"{len(tenant)}:{tenant}:{memory_id}")


def point_id(tenant: str, memory_id: str) -> str:
    """Return ``point_uuid`` as the string the backends take."""
    return str(point_uuid(tenant, memory_id))


def require_tenant(tenant: str) -> str:
    """Return ``tenant`` or raise: no store call may run without a tenant."""
    if not isinstance(tenant, str) or not tenant:
        raise RequestError("a tenant is required for every memory store call", param="tenant")
    return tenant


def check_usefulness(usefulness: float) -> float:
    """Return ``usefulness`` as a float in [0, 1] or raise."""
    value = float(usefulness)
    if not 0.0 <= value <= 1.0 or math.isnan(value):
        raise RequestError("usefulness must be between 0 and 1", param="usefulness")
    return value


def check_vectors(records: Sequence[MemoryRecord], vectors: np.ndarray, dimensions: int) -> None:
    """Raise ``StoreError`` unless ``vectors`` is one row of ``dimensions`` per record."""
    if vectors.ndim != 2 or vectors.shape != (len(records), dimensions):
        raise StoreError(
            f"expected vectors of shape ({len(records)}, {dimensions}), got {vectors.shape}"
        )
    for record in records:
        require_tenant(record.tenant)


def check_query(query: SearchQuery, dimensions: int) -> np.ndarray:
    """Return the query vector as a flat float32 array of ``dimensions`` or raise."""
    vector = np.asarray(query.vector, dtype=np.float32).reshape(-1)
    if vector.shape[0] != dimensions:
        raise StoreError(f"query vector has {vector.shape[0]} dimensions, the store {dimensions}")
    return vector


def with_tokens(record: MemoryRecord) -> MemoryRecord:
    """Return ``record`` with its token counts in every stored encoding (counted once, here)."""
    if all(name in record.tokens for name in STORED_ENCODINGS):
        return record
    counts = count_all(record.content)
    counts.update(record.tokens)
    return replace(record, tokens=counts)


def to_payload(record: MemoryRecord) -> dict[str, Any]:
    """Return the backend payload of ``record`` (token counts must already be filled)."""
    created = record.created_at
    if created.tzinfo is None:
        raise StoreError(f"memory {record.id!r}: created_at must be timezone-aware")
    return {
        "id": record.id,
        TENANT_KEY: record.tenant,
        USER_KEY: record.user,
        SOURCE_KEY: record.source,
        "content": record.content,
        "created_at": created.astimezone(UTC).isoformat(),
        "confidence": float(record.confidence),
        "usefulness": float(record.usefulness),
        "retrieval_count": int(record.retrieval_count),
        "tokens": dict(record.tokens),
        "metadata": dict(record.metadata),
    }


def from_payload(payload: Mapping[str, Any]) -> MemoryRecord:
    """Return the ``MemoryRecord`` a payload written by ``to_payload`` describes."""
    return MemoryRecord(
        id=str(payload["id"]),
        tenant=str(payload[TENANT_KEY]),
        user=str(payload[USER_KEY]),
        source=str(payload[SOURCE_KEY]),
        content=str(payload["content"]),
        created_at=datetime.fromisoformat(str(payload["created_at"])),
        confidence=float(payload["confidence"]),
        usefulness=float(payload["usefulness"]),
        retrieval_count=int(payload["retrieval_count"]),
        tokens={str(k): int(v) for k, v in dict(payload.get("tokens") or {}).items()},
        metadata=dict(payload.get("metadata") or {}),
    )


def owned(payload: Mapping[str, Any] | None, tenant: str) -> MemoryRecord | None:
    """Return the record if ``payload`` exists and belongs to ``tenant`` (defence in depth)."""
    if not payload or payload.get(TENANT_KEY) != tenant:
        return None
    return from_payload(payload)


def similarity(query: np.ndarray, stored: Sequence[float] | np.ndarray) -> float:
    """Return the cosine of two vectors clipped to [0, 1] (stored vectors are normalised)."""
    vec = np.asarray(stored, dtype=np.float32)
    norm = float(np.linalg.norm(query)) * float(np.linalg.norm(vec))
    return clip_similarity(float(np.dot(query, vec)) / norm if norm else 0.0)


def similarities(query: np.ndarray, rows: Sequence[Sequence[float]]) -> builtins.list[float]:
    """Return the clipped cosines of ``query`` to each row, in one matrix product."""
    if not rows:
        return []
    matrix = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1) * float(np.linalg.norm(query))
    cosines = (matrix @ query) / np.where(norms > 0, norms, 1.0)
    return [clip_similarity(float(c)) for c in cosines]


def clip_similarity(score: float) -> float:
    """Clip a cosine to [0, 1]: opposite directions are simply unrelated for memory ranking."""
    return min(1.0, max(0.0, score))


def owned_or_fail(payload: Mapping[str, Any] | None, tenant: str) -> MemoryRecord:
    """Return the record of a search hit; a hit outside the tenant is a bug, never data."""
    record = owned(payload, tenant)
    if record is None:
        raise StoreError("search returned a point outside the tenant filter")
    return record


def dense_of(vector: Any) -> Any:
    """Return the dense part of a returned point's named vectors."""
    if isinstance(vector, dict) and DENSE_VECTOR in vector:
        return vector[DENSE_VECTOR]
    raise StoreError("the backend returned a point without its dense vector")
