"""Fixtures shared by the memory store tests: one contract, two stores."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from proxy.memory.edge import EdgeStore
from proxy.memory.qdrant import QdrantStore
from proxy.memory.store import MemoryStore
from tests.memory.support import DIM, StoreFactory


@pytest.fixture(params=["edge", "qdrant"])
async def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StoreFactory]:
    """Yield a factory opening the parametrized store on one persistent location.

    Calling it again (after closing the previous store) reopens the same data, which is how the
    persistence and vector-size tests restart a store.
    """
    opened: list[MemoryStore] = []

    async def factory(dimensions: int = DIM, hybrid: bool = False) -> MemoryStore:
        store: MemoryStore
        if request.param == "edge":
            store = await EdgeStore.open(tmp_path / "edge", dimensions=dimensions, hybrid=hybrid)
        else:
            store = await QdrantStore.open(
                path=str(tmp_path / "qdrant"), dimensions=dimensions, hybrid=hybrid
            )
        opened.append(store)
        return store

    yield factory
    for store in opened:
        await store.close()  # idempotent: tests may have closed it already


@pytest.fixture(params=[False, True], ids=["dense", "hybrid"])
async def store(request: pytest.FixtureRequest, open_store: StoreFactory) -> MemoryStore:
    """An open, empty store of each kind, searching dense-only and hybrid."""
    return await open_store(hybrid=request.param)
