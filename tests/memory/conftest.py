"""Fixtures shared by the memory store tests: one contract, the stores and the shared fake.

``replica`` is one worker's ``ReplicaStore`` (several workers on the embedded store): alone on
its data dir it must behave as every other store; ``test_replica.py`` runs two side by side.

The fake (``tests/fakes/store.py``) runs the contract too, so the store the other tests use
cannot drift from the real ones. It searches dense only and keeps nothing across a restart: the
tests of hybrid search and restarts (``open_store``) run on the real stores alone.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.memory.edge import EdgeStore
from proxy.memory.qdrant import QdrantStore
from proxy.memory.record_cache import DEFAULT_MAX_ENTRIES
from proxy.memory.replica import ReplicaStore
from proxy.memory.store import MemoryStore
from tests.fakes.store import FakeStore
from tests.memory.support import DIM, StoreFactory


async def open_kind(kind: str, path: Path, dimensions: int, hybrid: bool) -> MemoryStore:
    """Open a store of ``kind`` (edge, qdrant, fake) on ``path``."""
    if kind == "fake":
        return FakeStore(dimensions=dimensions)
    if kind == "edge":
        return await EdgeStore.open(path / "edge", dimensions=dimensions, hybrid=hybrid)
    if kind == "edge-uuid":  # a store created before adr/0139 names its points by UUIDs
        return await EdgeStore.open(
            path / "edge", dimensions=dimensions, hybrid=hybrid, point_ids="uuid"
        )
    if kind == "replica":
        return await ReplicaStore.open(
            path / "replica",
            dimensions=dimensions,
            hybrid=hybrid,
            record_cache_entries=DEFAULT_MAX_ENTRIES,
        )
    return await QdrantStore.open(path=str(path / "qdrant"), dimensions=dimensions, hybrid=hybrid)


@pytest.fixture(params=["edge", "edge-uuid", "replica", "qdrant"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Yield a factory opening the parametrized store on one persistent location.

    Calling it again (after closing the previous store) reopens the same data, which is how the
    persistence and vector-size tests restart a store.
    """
    opened: list[MemoryStore] = []

    async def factory(dimensions: int = DIM, hybrid: bool = False) -> MemoryStore:
        store = await open_kind(request.param, tmp_path, dimensions, hybrid)
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()  # idempotent: tests may have closed it already


@pytest.fixture(
    params=[
        ("edge", False),
        ("edge", True),
        ("edge-uuid", True),
        ("replica", False),
        ("replica", True),
        ("qdrant", False),
        ("qdrant", True),
        ("fake", False),
    ],
    ids=[
        "edge-dense",
        "edge-hybrid",
        "edge-uuid-hybrid",
        "replica-dense",
        "replica-hybrid",
        "qdrant-dense",
        "qdrant-hybrid",
        "fake",
    ],
)
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[MemoryStore]:
    """An open, empty store of each kind, searching dense-only and hybrid."""
    kind, hybrid = request.param
    opened = await open_kind(kind, tmp_path, DIM, hybrid)
    yield opened
    await opened.close()
