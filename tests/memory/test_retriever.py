"""The retriever beyond the store contract: a failing neighbour-turn lookup, lexical extras."""

from __future__ import annotations

import builtins
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from proxy.cache.local import LocalCache
from proxy.cache.request_cache import RequestCache
from proxy.context.records import Candidate
from proxy.errors import StoreError
from proxy.memory.retriever import Retrieval, Retriever
from proxy.memory.store import SearchQuery, TurnsQuery
from tests.fakes.store import FakeStore
from tests.memory.support import HashEmbedder, record, vectors_for

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
NOW = datetime(2026, 3, 1, tzinfo=UTC)


class NoNeighbours(FakeStore):
    """The fake store whose ``turns_near`` fails (``failing`` while set)."""

    failing = True

    async def turns_near(self, tenant: str, query: TurnsQuery) -> builtins.list[Candidate]:
        if self.failing:
            raise StoreError("turns lookup timed out")
        return await super().turns_near(tenant, query)


async def test_a_failing_neighbour_lookup_leaves_the_hits_and_is_not_cached(
    caplog: pytest.LogCaptureFixture,
) -> None:
    turns = [
        replace(
            record(f"t{i}", source="conversation", content=f"turn {i} about topic {i * 7}"),
            created_at=AT + timedelta(minutes=i),
        )
        for i in range(5)
    ]
    embedder = HashEmbedder()
    store = NoNeighbours(dimensions=embedder.dimensions)
    await store.add(turns, vectors_for(turns, embedder.dimensions))
    retriever = Retriever(store, embedder, RequestCache(LocalCache(1_000)), clock=lambda: NOW)
    want = Retrieval(turns[2].content, "u1", top_k=1, neighbours=1)
    hits = await retriever.retrieve("t1", want)
    assert [hit.record.id for hit in hits] == ["t2"]  # the hit, without its neighbours
    assert "neighbour turns failed" in caplog.text
    store.failing = False  # the next request gets them: the result without was not kept
    assert [hit.record.id for hit in await retriever.retrieve("t1", want)] == ["t2", "t1", "t3"]


class LexicalExtras(FakeStore):
    """The fake store answering ``lexical`` as a hybrid store does: hits beyond ``top_k``."""

    async def search(self, tenant: str, query: SearchQuery) -> builtins.list[Candidate]:
        hits = await super().search(tenant, replace(query, top_k=2 * query.top_k))
        return hits if query.lexical else hits[: query.top_k]


async def test_lexical_candidates_reach_the_search_uncut_and_are_cached_apart() -> None:
    """adr/0136: the chat pipeline's ``lexical`` asks the store for the lexical branch's other
    hits, keeps all it returns, and caches them under their own key; the API's pool never."""
    memories = [record(f"m{i}", content=f"note {i} about biscuits") for i in range(6)]
    embedder = HashEmbedder()
    store = LexicalExtras(dimensions=embedder.dimensions)
    await store.add(memories, vectors_for(memories, embedder.dimensions))
    retriever = Retriever(store, embedder, RequestCache(LocalCache(1_000)), clock=lambda: NOW)
    text = "biscuits"
    hits = await retriever.retrieve("t1", Retrieval(text, "u1", top_k=2, lexical=True))
    assert (len(hits), store.queries[-1].lexical) == (4, True)
    plain = await retriever.retrieve("t1", Retrieval(text, "u1", top_k=2))
    # Not the cached result with the extras: a search of its own, cut to top_k.
    assert (len(plain), len(store.queries), store.queries[-1].lexical) == (2, 2, False)
    api = await retriever.retrieve("t1", Retrieval(text, "u1", top_k=2, pool=10, lexical=True))
    assert (len(api), store.queries[-1].lexical) == (2, False)
    again = await retriever.retrieve("t1", Retrieval(text, "u1", top_k=2, lexical=True))
    assert ([h.record.id for h in again], len(store.queries)) == ([h.record.id for h in hits], 3)
