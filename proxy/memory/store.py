"""The memory store contract: the ``MemoryStore`` protocol, its value types, and the checks
every implementation makes of its arguments.

A store keeps ``MemoryRecord``s with one dense vector each (and, for hybrid retrieval, a sparse
lexical vector derived from the content). Every call names the tenant: there is no method that
reaches memories without one. How a record is laid out in a Qdrant point is ``points.py``; the
implementations are ``edge.py`` (embedded) and ``qdrant.py`` (a server); which one runs is the
composition root's choice (``proxy/composition.py``). One contract suite runs them all
(``tests/memory/test_contract.py``).
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Protocol

import numpy as np

from proxy.context.records import Candidate, MemoryRecord
from proxy.errors import RequestError, StoreError
from proxy.tokenizer import count_all, kept_encodings

# The user of tenant-shared memories: every user's search sees them.
SHARED_USER = ""
# (user, words key): what write hygiene looks a repeat up by (``duplicates.words_key``).
RepeatKey = tuple[str, str]

# Dialog turns a neighbour lookup returns at most per time asked about: the turns of a 2-minute
# window on either side of a turn (LoCoMo's are a minute apart: 5). In a denser dialog the most
# similar are returned, and the retriever takes the nearest in time of those.
NEAR_TURNS = 8


@dataclass(frozen=True)
class SearchQuery:
    """A search within one tenant: the query's vector and text, whose memories, which sources.

    ``user`` selects that user's memories plus the tenant-shared ones (user ``""``); ``sources``
    of ``None`` means every source. With ``live_at``, only memories live then are searched (not
    expired at that time, not superseded: ``MemoryRecord.live``); retrieval always sets it.
    With ``lexical``, a hybrid search also returns the hits of its lexical (BM25) branch that
    the fused ``top_k`` leaves out, so it may return up to twice ``top_k`` (adr/0136).
    ``alone`` is a hint, not a filter: no other request was in its memory stage when the search
    was asked for. The embedded store may then run it on the event loop's thread (adr/0172);
    the other stores ignore it.
    """

    vector: np.ndarray
    text: str
    user: str
    sources: tuple[str, ...] | None
    top_k: int
    live_at: datetime | None = None
    lexical: bool = False
    alone: bool = False


@dataclass(frozen=True)
class TurnsQuery:
    """A neighbour lookup (adr/0122): ``user``'s dialog turns (source ``conversation``) live at
    ``live_at`` and created within ``window_s`` seconds of any of ``times``, scored by their
    cosine to ``vector``."""

    user: str
    vector: np.ndarray
    times: tuple[datetime, ...]
    window_s: float
    live_at: datetime


@dataclass(frozen=True)
class Found:
    """What ``search_near`` found: the search's hits, ranked (``ranked``), and the dialog turns
    beside the best of them, in the order ``adjacent_turns`` gives; ``turns`` is ``None`` when
    the neighbour lookup failed (the hits stand without them, adr/0122)."""

    hits: builtins.list[Candidate]
    turns: builtins.list[Candidate] | None


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
        """Return the best ``top_k`` memories of the user and the tenant-shared ones (and with
        ``query.lexical`` the lexical branch's other hits)."""
        ...

    async def search_near(
        self, tenant: str, query: SearchQuery, seeds: int, window_s: float
    ) -> Found:
        """``search`` ranked, and the dialog turns within ``window_s`` seconds just before and
        after its first ``seeds`` dialog hits of ``query.user`` (adr/0122): what
        ``near.search_then_turns`` makes of ``search`` and ``turns_near``. A store may answer
        in one call (the embedded store: one thread hop for both)."""
        ...

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        """Add one to a memory's retrieval count per occurrence of its id (unknown ids ignored)."""
        ...

    async def set_usefulness(
        self, tenant: str, memory_id: str, usefulness: float
    ) -> MemoryRecord | None:
        """Set a memory's usefulness (0..1, validated by the caller: ``proxy.memory.inputs``);
        return the updated memory or ``None``."""
        ...

    async def update_usefulness(
        self, tenant: str, memory_id: str, update: Callable[[float], float]
    ) -> MemoryRecord | None:
        """Set usefulness to ``update(current)`` with no other update in between (in this
        process), so concurrent votes all count; return the updated memory or ``None``."""
        ...

    async def supersede(self, tenant: str, memory_id: str, by: str) -> MemoryRecord | None:
        """Mark the memory superseded by ``by`` if it exists and is not superseded yet, as one
        conditional write (of two at once, exactly one succeeds; its vector is kept); return
        the updated memory, else ``None``."""
        ...

    async def count(self, tenant: str) -> int:
        """Return how many memories the tenant has."""
        ...

    async def repeats(
        self, tenant: str, keys: Collection[RepeatKey], live_at: datetime
    ) -> builtins.list[MemoryRecord]:
        """The memories live at ``live_at`` whose (user, words key) is one of ``keys``, in a
        stable order (about one per key at most: write hygiene keeps them unique). One call
        serves a whole write batch: one lookup per memory cost more than storing it."""
        ...

    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        """The dialog turns ``query`` asks for, each with its cosine to ``query.vector``, in no
        particular order (the most similar ``NEAR_TURNS`` per time at most; adr/0122)."""
        ...

    async def purge_expired(self, before: datetime) -> int:
        """Delete every memory, of any tenant, that expired at or before ``before``; return how
        many. Maintenance (``proxy.memory.expiry``): it reads nothing back, so it needs no
        tenant."""
        ...

    async def ready(self) -> bool:
        """Whether the store can serve now (``/readyz``); an unreachable one may raise."""
        ...

    async def close(self) -> None:
        """Flush and release the backend."""
        ...


def require_tenant(tenant: str) -> str:
    """Return ``tenant`` or raise: no store call may run without a tenant."""
    if not isinstance(tenant, str) or not tenant:
        raise RequestError("a tenant is required for every memory store call", param="tenant")
    return tenant


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
    return check_vector(query.vector, dimensions)


def check_vector(given: np.ndarray, dimensions: int) -> np.ndarray:
    """Return ``given`` as a flat float32 array of ``dimensions`` or raise."""
    vector = np.asarray(given, dtype=np.float32).reshape(-1)
    if vector.shape[0] != dimensions:
        raise StoreError(f"query vector has {vector.shape[0]} dimensions, the store {dimensions}")
    return vector


def with_tokens(record: MemoryRecord) -> MemoryRecord:
    """Return ``record`` with its token counts in every stored encoding (counted once, here)."""
    if all(name in record.tokens for name in kept_encodings()):
        return record
    counts = count_all(record.content)
    counts.update(record.tokens)
    return replace(record, tokens=counts)
