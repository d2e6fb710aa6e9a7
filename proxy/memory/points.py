"""A memory as a Qdrant point, for both stores: its point id, its payload, its named vectors.

Client-visible ids are arbitrary strings; the point id is ``uuid5(tenant, id)`` (an embedded
store created after adr/0139: a 64-bit hash of the same, ``edge_ids``), so two tenants can use
the same id and guessing another tenant's id lands on a point that does not exist. The
payload carries the whole record, the tenant included, and every read checks that tenant again
(``owned``): a point outside the caller's tenant is never turned into a record.
"""

from __future__ import annotations

import builtins
import functools
import sys
import uuid
from collections.abc import Collection, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from proxy.context.records import MemoryRecord
from proxy.errors import StoreError
from proxy.memory.duplicates import words_key

intern = sys.intern

# Fixed forever: changing it would orphan every stored point.
POINT_NAMESPACE = uuid.UUID("5f0c3a52-7c1e-4d38-9a8e-2f6d1b4c9e77")
DENSE_VECTOR = "dense"
SPARSE_VECTOR = "text"
# Payload keys that carry a payload index (tenant is the multitenancy "is_tenant" index).
TENANT_KEY = "tenant"
USER_KEY = "user"
SOURCE_KEY = "source"
# The key of a memory's words (``duplicates.words_key``): write hygiene looks repeats up by it.
WORDS_KEY = "words"
INDEXED_KEYS: tuple[str, ...] = (TENANT_KEY, USER_KEY, SOURCE_KEY, WORDS_KEY)
RETRIEVAL_COUNT_KEY = "retrieval_count"
# Lifecycle keys (adr/0113). ``expires_at`` is also kept as epoch seconds, the number a range
# filter compares; ``superseded_by`` is absent on a live memory, so points written before these
# keys existed are live without a migration.
EXPIRES_KEY = "expires_at"
EXPIRES_TS_KEY = "expires_ts"
SUPERSEDED_KEY = "superseded_by"
SUPERSEDES_KEY = "supersedes"
# ``created_at`` as epoch seconds, for the range filter of ``turns_near`` (adr/0122); points
# written before it existed lack it and are simply never found as neighbours.
CREATED_TS_KEY = "created_ts"
# A dialog turn's context (adr/0142): written only when non-empty, so points written before it
# existed read as a turn without context (no re-index needed).
CONTEXT_KEY = "context"
# What the context was cut from (adr/0144): forgetting that memory finds this one by it.
CONTEXT_SOURCE_KEY = "context_key"
POINT_ID_CACHE_SIZE = 32_768  # ~200 B an entry
# What an increment reads back of each point: just enough to check the owner and add.
COUNT_FIELDS: tuple[str, ...] = (TENANT_KEY, RETRIEVAL_COUNT_KEY)


@functools.lru_cache(maxsize=POINT_ID_CACHE_SIZE)
def point_uuid(tenant: str, memory_id: str) -> uuid.UUID:
    """Return the backend point id of (tenant, memory id): a uuid5, so tenants never collide.

    Memoised (a pure function): every injected memory's id is mapped again for its retrieval
    count, and uuid5 cost ~2.7 us a call, ~0.1 ms of each chat request.
    """
    # Length-prefixing the tenant keeps ("a", "b:c") and ("a:b", "c") apart.
    return uuid.uuid5(POINT_NAMESPACE, f"{len(tenant)}:{tenant}:{memory_id}")


def point_key(tenant: str, memory_id: str) -> int:
    """Return ``point_uuid`` as the integer the embedded store keys its tables by."""
    return point_uuid(tenant, memory_id).int


def point_id(tenant: str, memory_id: str) -> str:
    """Return ``point_uuid`` as the string the backends take."""
    return str(point_uuid(tenant, memory_id))


def to_payload(record: MemoryRecord) -> dict[str, Any]:
    """Return the backend payload of ``record`` (token counts must already be filled)."""
    created = record.created_at
    if created.tzinfo is None:
        raise StoreError(f"memory {record.id!r}: created_at must be timezone-aware")
    payload: dict[str, Any] = {
        "id": record.id,
        TENANT_KEY: record.tenant,
        USER_KEY: record.user,
        SOURCE_KEY: record.source,
        "content": record.content,
        "created_at": created.astimezone(UTC).isoformat(),
        CREATED_TS_KEY: created.timestamp(),
        "confidence": float(record.confidence),
        "usefulness": float(record.usefulness),
        RETRIEVAL_COUNT_KEY: int(record.retrieval_count),
        "tokens": dict(record.tokens),
        "metadata": dict(record.metadata),
        WORDS_KEY: words_key(record.content),
    }
    expires = record.expires_at
    if expires is not None:
        if expires.tzinfo is None:
            raise StoreError(f"memory {record.id!r}: expires_at must be timezone-aware")
        payload[EXPIRES_KEY] = expires.astimezone(UTC).isoformat()
        payload[EXPIRES_TS_KEY] = expires.timestamp()
    if record.superseded_by is not None:
        payload[SUPERSEDED_KEY] = record.superseded_by
    if record.supersedes is not None:
        payload[SUPERSEDES_KEY] = record.supersedes
    # A record unpickled from a write log written before the field existed lacks its slot
    # (adr/0142): it was written without context.
    context: str = getattr(record, "context", "")
    if context:
        payload[CONTEXT_KEY] = context
        payload[CONTEXT_SOURCE_KEY] = getattr(record, "context_key", "")
    return payload


def from_payload(payload: Mapping[str, Any]) -> MemoryRecord:
    """Return the ``MemoryRecord`` a payload written by ``to_payload`` describes.

    Its tenant, user, source and token-count encodings are interned: a few values shared by
    thousands of records, one object each instead of one a record. A request compares or hashes
    them for each of its ~70 candidates (the search's checks, the seeds, scoring, the block's
    groups), which then reads one string in cache, not ~70 scattered over the heap; a source
    is then the very object of the code's own literals (``"conversation"``), equal at once.
    """
    return MemoryRecord(
        id=str(payload["id"]),
        tenant=intern(str(payload[TENANT_KEY])),
        user=intern(str(payload[USER_KEY])),
        source=intern(str(payload[SOURCE_KEY])),
        content=str(payload["content"]),
        created_at=datetime.fromisoformat(str(payload["created_at"])),
        confidence=float(payload["confidence"]),
        usefulness=float(payload["usefulness"]),
        retrieval_count=int(payload[RETRIEVAL_COUNT_KEY]),
        tokens={intern(str(k)): int(v) for k, v in dict(payload.get("tokens") or {}).items()},
        metadata=dict(payload.get("metadata") or {}),
        expires_at=_time_or_none(payload.get(EXPIRES_KEY)),
        superseded_by=_text_or_none(payload.get(SUPERSEDED_KEY)),
        supersedes=_text_or_none(payload.get(SUPERSEDES_KEY)),
        context=str(payload.get(CONTEXT_KEY) or ""),
        context_key=str(payload.get(CONTEXT_SOURCE_KEY) or ""),
    )


def _time_or_none(value: Any) -> datetime | None:
    return datetime.fromisoformat(str(value)) if value else None


def _text_or_none(value: Any) -> str | None:
    return str(value) if value else None


def owned(payload: Mapping[str, Any] | None, tenant: str) -> MemoryRecord | None:
    """Return the record if ``payload`` exists and belongs to ``tenant`` (defence in depth)."""
    if not payload or payload.get(TENANT_KEY) != tenant:
        return None
    return from_payload(payload)


def repeats_among(
    payloads: Iterable[Mapping[str, Any] | None], tenant: str, keys: Collection[tuple[str, str]]
) -> builtins.list[MemoryRecord]:
    """The tenant's records among ``payloads`` whose (user, words key) is one of ``keys``: a
    batched repeat lookup filters on any user and any key, this keeps the exact pairs."""
    wanted = set(keys)
    return [
        record
        for payload in payloads
        if payload is not None
        and (payload.get(USER_KEY), payload.get(WORDS_KEY)) in wanted
        and (record := owned(payload, tenant)) is not None
    ]


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


def group_new_counts(
    tenant: str, deltas: Mapping[Any, int], found: Iterable[tuple[Any, Mapping[str, Any] | None]]
) -> dict[int, builtins.list[Any]]:
    """Group the tenant's found points by their new retrieval count.

    ``deltas`` maps point ids to increments, ``found`` yields (point id, payload), ids of one
    type (the backend's: strings for qdrant-client). Points that
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
