"""Memory records: the one shape a memory has in the engine, the stores and the API.

The engine is pure, so the record type lives here and the stores import it, not the other way.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from proxy.context.tokens import Count
from proxy.defaults import DEFAULT_CONFIDENCE as DEFAULT_CONFIDENCE  # re-exported, as the next
from proxy.defaults import DEFAULT_SOURCE as DEFAULT_SOURCE
from proxy.defaults import DEFAULT_USEFULNESS as DEFAULT_USEFULNESS
from proxy.defaults import SOURCES as SOURCES  # re-exported: the engine's source names


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One stored memory, scoped to (tenant, user).

    ``created_at`` is timezone-aware UTC. ``tokens`` maps an encoding name to the content's token
    count, computed once at write time. ``user`` is ``""`` for the tenant's shared memories.

    Lifecycle (adr/0113): a memory past ``expires_at`` is never retrieved and is purged; one
    with ``superseded_by`` was replaced by that memory (which names it in ``supersedes``): it
    stays, visible in the API and exports, but is never retrieved again.
    """

    id: str
    tenant: str
    user: str
    source: str
    content: str
    created_at: datetime
    confidence: float = DEFAULT_CONFIDENCE
    usefulness: float = DEFAULT_USEFULNESS
    retrieval_count: int = 0
    tokens: Mapping[str, int] = field(default_factory=dict)
    metadata: Mapping[str, Any] = field(default_factory=dict)
    expires_at: datetime | None = None
    superseded_by: str | None = None
    supersedes: str | None = None
    # A dialog turn's context (adr/0142): the turn before it in its session, embedded with it
    # and read by the assembler's overlap; ``""`` for anything else and for points written
    # before it existed. ``content`` stays what the API returns and the block shows.
    context: str = ""
    # The words key of the whole text ``context`` was cut from (adr/0144): the key that text's
    # own memory is stored under, so forgetting it finds this copy. ``""`` without context.
    context_key: str = ""

    def live(self, at: datetime) -> bool:
        """Whether retrieval may return it at ``at``: not expired, not superseded."""
        return self.superseded_by is None and (self.expires_at is None or self.expires_at > at)

    def token_count(self, encoding: str, count: Count) -> int:
        """The stored count for ``encoding``; counted with ``count`` only if none was stored."""
        stored = self.tokens.get(encoding)
        return stored if stored is not None else count(self.content)


def index_text(content: str, context: str) -> str:
    """The text a memory is embedded with: its context (if any), then itself, one a line."""
    return f"{context}\n{content}" if context else content


@dataclass(frozen=True, slots=True)
class Candidate:
    """A search hit: a record and its cosine similarity to the query (0..1)."""

    record: MemoryRecord
    similarity: float
