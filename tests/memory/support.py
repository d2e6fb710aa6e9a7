"""Helpers of the memory store tests: hashed vectors (no embedder) and record builders."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from proxy.context.records import MemoryRecord
from proxy.memory.edge_shard import CONFIG_FILE
from proxy.memory.store import MemoryStore

DIM = 32
StoreFactory = Callable[..., Awaitable[MemoryStore]]


def vector_for(text: str, dim: int = DIM) -> np.ndarray:
    """Return a deterministic unit vector hashed from ``text`` (no embedder needed)."""
    seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
    row = np.random.default_rng(seed).standard_normal(dim).astype(np.float32)
    return row / np.linalg.norm(row)


def vectors_for(records: list[MemoryRecord], dim: int = DIM) -> np.ndarray:
    """Stack the hashed vectors of the records' contents."""
    return np.stack([vector_for(r.content, dim) for r in records])


class HashEmbedder:
    """An ``Embedder`` of ``vector_for``: a query equal to a memory's content has cosine 1."""

    name = "hash"
    dimensions = DIM

    async def start(self) -> None:
        """Nothing to get ready."""

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([vector_for(text) for text in texts])


def record(
    memory_id: str,
    *,
    tenant: str = "t1",
    user: str = "u1",
    source: str = "learnings",
    content: str | None = None,
    **extra: Any,
) -> MemoryRecord:
    """Build a record with sensible defaults."""
    return MemoryRecord(
        id=memory_id,
        tenant=tenant,
        user=user,
        source=source,
        content=content if content is not None else f"memory {memory_id} of {tenant}/{user}",
        created_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        **extra,
    )


def stored_pool_size(shard_dir: Path) -> int | None:
    """The search pool size the shard was last opened with (loading writes it to its config
    file; ``None``: never given, as in shards written before adr/0131)."""
    return json.loads((shard_dir / CONFIG_FILE).read_text()).get("max_search_threads")
