"""The embedded store under a read-heavy load: retrieval-count updates must not grow it forever.

Found by ``bench/soak.py``: with memory on, every chat bumps ``retrieval_count`` of the memories
it injected (a payload update). Qdrant Edge reclaims the replaced payload blocks only when the
shard is flushed, and the store flushed only after ``add`` calls, so a steady chat load with no
new memories grew the payload storage (on disk and, memory-mapped, in the resident memory)
without bound: ~56 MB a minute at ~140 chats/s in the soak. Increments now take part in the
periodic background flush like any other write.
"""

from __future__ import annotations

import subprocess
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

import proxy.memory.edge_maintenance as edge_maintenance
from proxy.context.records import MemoryRecord
from proxy.memory.edge import EdgeStore

DIM = 32
MEMORIES = 640
ROUNDS = 2_000
IDS_PER_ROUND = 20
# Without reclaiming, ROUNDS x IDS_PER_ROUND = 40,000 updates leave ~10 MB of payload pages;
# reclaimed, the segments stay at ~3 MB (measured).
SEGMENTS_LIMIT_MB = 6


def disk_mb(path: Path) -> int:
    out = subprocess.run(["du", "-sm", str(path)], capture_output=True, text=True, check=True)
    return int(out.stdout.split()[0])


async def test_retrieval_count_updates_do_not_grow_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(edge_maintenance, "FLUSH_QUIET_S", 0.05)  # production's pause, sped up
    store = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        now = datetime.now(UTC)
        records = [
            MemoryRecord(
                id=f"m{i}",
                tenant="t",
                user=f"u{i % 32}",
                source="learnings",
                content=f"user {i % 32} drinks tea number {i} " + "and more words " * 20,
                created_at=now,
                tokens={},
                metadata={"topic": "tea", "n": i},
            )
            for i in range(MEMORIES)
        ]
        vectors = np.random.default_rng(0).standard_normal((MEMORIES, DIM)).astype(np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        await store.add(records, vectors)
        for r in range(ROUNDS):
            ids = [f"m{(r * IDS_PER_ROUND + j) % MEMORIES}" for j in range(IDS_PER_ROUND)]
            await store.increment_retrievals("t", ids)
        record = await store.get("t", "m0")
        assert record is not None
        assert record.retrieval_count == len(range(0, ROUNDS * IDS_PER_ROUND, MEMORIES))
        await store.flush()
        segments = disk_mb(tmp_path)
    finally:
        await store.close()
    assert segments <= SEGMENTS_LIMIT_MB, f"store grew to {segments} MB"
