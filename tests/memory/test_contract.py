"""The one contract every ``MemoryStore`` passes (run against EdgeStore and QdrantStore)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from proxy.cache.local import LocalCache
from proxy.cache.request_cache import RequestCache
from proxy.context.records import MemoryRecord
from proxy.errors import ConfigError, RequestError, StoreError
from proxy.memory import edge, qdrant
from proxy.memory.duplicates import words_key
from proxy.memory.inputs import MemoryInput
from proxy.memory.near import ranked, search_then_turns
from proxy.memory.retriever import Retrieval, Retriever
from proxy.memory.service import MemoryService
from proxy.memory.store import MemoryStore, SearchQuery, TurnsQuery
from proxy.tokenizer import count_all
from tests.memory.support import (
    DIM,
    HashEmbedder,
    StoreFactory,
    record,
    vector_for,
    vectors_for,
)

# qdrant-client's local mode ignores payload indexes and says so; the server path uses them.
pytestmark = pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")


async def put(store: MemoryStore, *records: MemoryRecord) -> None:
    await store.add(list(records), vectors_for(list(records)))


def query_for(
    text: str, *, user: str = "u1", sources: tuple[str, ...] | None = None, top_k: int = 10
) -> SearchQuery:
    return SearchQuery(vector=vector_for(text), text=text, user=user, sources=sources, top_k=top_k)


async def list_all(store: MemoryStore, tenant: str, **kw: str | None) -> list[MemoryRecord]:
    page = await store.list(
        tenant, user=kw.get("user"), source=kw.get("source"), limit=1000, after=None
    )
    return page.records


async def test_add_then_get_round_trips_every_field(store: MemoryStore) -> None:
    original = record(
        "m1",
        confidence=0.9,
        usefulness=0.7,
        retrieval_count=3,
        metadata={"dia_id": "D1:3", "tags": ["a", "b"], "n": 2},
        context="the turn before",
    )
    await put(store, original)
    got = await store.get("t1", "m1")
    assert got is not None
    assert replace(got, tokens={}) == replace(original, tokens={})
    assert got.created_at == datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert got.created_at.tzinfo is not None


async def test_token_counts_are_filled_at_write_time(store: MemoryStore) -> None:
    await put(store, record("m1", content="Caroline moved to Boston in May 2023."))
    got = await store.get("t1", "m1")
    assert got is not None
    assert dict(got.tokens) == count_all("Caroline moved to Boston in May 2023.")
    assert set(got.tokens) == {"o200k_base", "cl100k_base", "claude"}


async def test_token_counts_given_by_the_caller_are_kept(store: MemoryStore) -> None:
    given = record("m1", tokens={"o200k_base": 99, "cl100k_base": 98})
    await put(store, given)
    got = await store.get("t1", "m1")
    assert got is not None
    # Those given are kept, the missing one (Claude's) is counted.
    assert dict(got.tokens) == {**count_all(given.content), "o200k_base": 99, "cl100k_base": 98}


async def test_add_upserts_by_tenant_and_id(store: MemoryStore) -> None:
    await put(store, record("m1", content="old"))
    await put(store, record("m1", content="new"))
    got = await store.get("t1", "m1")
    assert got is not None
    assert got.content == "new"
    assert await store.count("t1") == 1


async def test_get_unknown_is_none(store: MemoryStore) -> None:
    assert await store.get("t1", "nope") is None


async def test_add_rejects_vectors_of_the_wrong_shape(store: MemoryStore) -> None:
    records = [record("m1"), record("m2")]
    with pytest.raises(StoreError):
        await store.add(records, np.zeros((1, DIM), dtype=np.float32))
    with pytest.raises(StoreError):
        await store.add(records, np.zeros((2, DIM + 1), dtype=np.float32))
    assert await store.count("t1") == 0


async def test_add_of_nothing_is_a_no_op(store: MemoryStore) -> None:
    await store.add([], np.zeros((0, DIM), dtype=np.float32))
    assert await store.count("t1") == 0


async def test_turns_near_finds_the_users_live_dialog_turns_within_the_window(
    store: MemoryStore,
) -> None:
    """Only the user's own live dialog turns created within the window of a time asked about,
    each with its cosine to the vector given (adr/0122)."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)

    def turn(memory_id: str, seconds: float, **extra: str | datetime) -> MemoryRecord:
        return replace(
            record(memory_id, source="conversation", **extra),  # type: ignore[arg-type]
            created_at=at + timedelta(seconds=seconds),
        )

    await put(
        store,
        turn("before", -60),
        turn("edge", 120),  # exactly at the window's end: in
        turn("far", 121),
        turn("other-user", 30, user="u2"),
        turn("shared", 30, user=""),  # shared memories are no one's dialog
        turn("other-tenant", 30, tenant="t2"),
        replace(record("learning"), created_at=at),
        turn("old", 10, superseded_by="before"),
        turn("expired", 10, expires_at=LIVE_AT),
        turn("later", 3600),
    )
    vector = vector_for("a question")

    def ask(*times: datetime, user: str = "u1") -> TurnsQuery:
        return TurnsQuery(user, vector, times, 120.0, LIVE_AT)

    near = await store.turns_near("t1", ask(at))
    assert {c.record.id for c in near} == {"before", "edge"}
    for candidate in near:
        expected = float(np.dot(vector, vector_for(candidate.record.content)))
        assert candidate.similarity == pytest.approx(max(0.0, expected), abs=1e-5)
    both = await store.turns_near("t1", ask(at, at + timedelta(hours=1)))
    assert {c.record.id for c in both} == {"before", "edge", "later"}
    assert await store.turns_near("t1", ask()) == []
    assert await store.turns_near("t1", ask(at, user="u3")) == []


@pytest.mark.parametrize(
    "call",
    [
        lambda s: s.get("", "m1"),
        lambda s: s.list("", user=None, source=None, limit=10, after=None),
        lambda s: s.delete("", "m1"),
        lambda s: s.delete_user("", "u1"),
        lambda s: s.search("", query_for("x")),
        lambda s: s.increment_retrievals("", ["m1"]),
        lambda s: s.set_usefulness("", "m1", 0.5),
        lambda s: s.count(""),
        lambda s: s.turns_near("", TurnsQuery("u1", np.zeros(DIM), (LIVE_AT,), 1.0, LIVE_AT)),
        lambda s: s.add([record("m1", tenant="")], np.zeros((1, DIM), dtype=np.float32)),
    ],
)
async def test_every_call_requires_a_tenant(store: MemoryStore, call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(RequestError):
        await call(store)


async def test_search_returns_top_k_with_similarity_in_unit_range(store: MemoryStore) -> None:
    records = [record(f"m{i}", content=f"fact number {i}") for i in range(30)]
    await put(store, *records)
    hits = await store.search("t1", query_for("fact number 7", top_k=5))
    assert len(hits) == 5
    assert hits[0].record.id == "m7"
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-4)
    sims = [h.similarity for h in hits]
    assert all(0.0 <= s <= 1.0 for s in sims)
    if not getattr(store, "hybrid", False):  # hybrid hits come in fused (RRF) order instead
        assert sims == sorted(sims, reverse=True)


# Memories sharing words (the lexical branch ranks them by BM25, the dense one by hashed vector)
# and repeating contents (equal similarities: the order must still be one).
RANKED_CONTENTS = [f"we talked about the weather on day {i % 17}" for i in range(40)]
RANKED_QUERIES = ["weather on day 7", "we talked about the weather on day 3", "day", "unrelated"]
POOL = 24


@pytest.mark.parametrize("cached", [False, True], ids=["uncached", "cached"])
async def test_retrieval_is_ranked_and_a_smaller_top_k_is_a_prefix(
    store: MemoryStore, cached: bool
) -> None:
    # The read path's order (README, "Search"): similarity descending, ties by id, and for one
    # pool, top_k=k is the first k of any larger top_k.
    await put(store, *[record(f"m{i:02d}", content=c) for i, c in enumerate(RANKED_CONTENTS)])
    cache = RequestCache(LocalCache(1_000)) if cached else None
    retriever = Retriever(store, HashEmbedder(), cache)
    for text in RANKED_QUERIES:
        full = await retriever.retrieve("t1", Retrieval(text, "u1", top_k=POOL, pool=POOL))
        assert len(full) == POOL
        keys = [(-hit.similarity, hit.record.id) for hit in full]
        assert keys == sorted(keys)
        for k in range(1, POOL):
            want = Retrieval(text, "u1", top_k=k, pool=POOL)
            assert await retriever.retrieve("t1", want) == full[:k]


@pytest.mark.parametrize("cached", [False, True])
async def test_retrieval_adds_the_turns_beside_the_first_dialog_hits(
    store: MemoryStore, cached: bool
) -> None:
    """With ``neighbours`` the turns just before and after the first dialog hits follow the
    ``top_k`` (adr/0122); without, or for a larger pool or no dialog source, nothing is added."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    turns = [
        replace(
            record(f"t{i}", source="conversation", content=f"turn {i} about topic {i * 7}"),
            created_at=at + timedelta(minutes=i),
        )
        for i in range(5)
    ]
    await put(store, *turns)
    cache = RequestCache(LocalCache(1_000)) if cached else None
    retriever = Retriever(store, HashEmbedder(), cache, clock=lambda: LIVE_AT)
    text = turns[2].content  # its own text: t2 is the best hit by far

    async def ids(**kw: object) -> list[str]:
        want = Retrieval(text, "u1", top_k=1, **kw)  # type: ignore[arg-type]
        return [hit.record.id for hit in await retriever.retrieve("t1", want)]

    assert await ids() == ["t2"]
    assert await ids(neighbours=1) == ["t2", "t1", "t3"]  # cached apart from the one without
    assert await ids(neighbours=1, pool=5) == ["t2"]  # the memories API's pool: none
    assert await ids(neighbours=1, sources=("learnings",)) == []


# Turns sharing words but of different lengths: no two score alike in either branch, so the
# engine's order among equal scores (which its internal state may change) never decides a hit.
NEAR_CONTENTS = [f"we talked about the weather {'again ' * i}on day {i}" for i in range(30)]
NEAR_QUERIES = ["weather on day 7", "again and again", "we talked about day 3", "unrelated"]


def dialog() -> list[MemoryRecord]:
    """Dialog turns of ``u1`` a minute apart, a learning and another user's turn."""
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    turns = [
        replace(
            record(f"t{i:02d}", source="conversation", content=content),
            created_at=at + timedelta(minutes=i),
        )
        for i, content in enumerate(NEAR_CONTENTS)
    ]
    return [*turns, record("learned", content="we talked about tea"), record("x", user="u2")]


@pytest.mark.parametrize("seeds", [0, 1, 3])
async def test_search_near_is_the_search_then_the_turns_beside_it(
    store: MemoryStore, seeds: int
) -> None:
    """One call gives what the two calls it stands for give (``near.search_then_turns``): the
    ranked hits, then the turns beside the first ``seeds`` dialog hits, same order (adr/0122)."""
    await put(store, *dialog())
    for text in NEAR_QUERIES:
        query = replace(query_for(text, top_k=4), live_at=LIVE_AT)
        found = await store.search_near("t1", query, seeds, 90.0)
        assert found == await search_then_turns(store, "t1", query, seeds, 90.0)
        assert found.hits == ranked(await store.search("t1", query))
        assert found.turns is not None
        assert bool(found.turns) == bool(seeds)
        assert not {c.record.id for c in found.turns} & {c.record.id for c in found.hits}


async def test_search_with_zero_top_k_is_empty(store: MemoryStore) -> None:
    await put(store, record("m1"))
    assert await store.search("t1", query_for("x", top_k=0)) == []


async def test_search_rejects_a_query_vector_of_the_wrong_size(store: MemoryStore) -> None:
    bad = SearchQuery(vector=np.ones(DIM + 3), text="x", user="u1", sources=None, top_k=3)
    with pytest.raises(StoreError):
        await store.search("t1", bad)


async def test_search_sees_the_user_and_shared_memories_only(store: MemoryStore) -> None:
    await put(
        store,
        record("own", user="u1"),
        record("shared", user=""),
        record("other", user="u2"),
    )
    hits = await store.search("t1", query_for("x", user="u1"))
    assert {h.record.id for h in hits} == {"own", "shared"}
    hits = await store.search("t1", query_for("x", user=""))
    assert {h.record.id for h in hits} == {"shared"}
    hits = await store.search("t1", query_for("x", user="u2"))
    assert {h.record.id for h in hits} == {"other", "shared"}


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        (None, {"l", "p", "c", "s"}),
        (("learnings",), {"l"}),
        (("playbook", "summaries"), {"p", "s"}),
        ((), set()),
    ],
)
async def test_search_filters_by_source(
    store: MemoryStore, sources: tuple[str, ...] | None, expected: set[str]
) -> None:
    await put(
        store,
        record("l", source="learnings"),
        record("p", source="playbook"),
        record("c", source="conversation"),
        record("s", source="summaries"),
    )
    hits = await store.search("t1", query_for("x", sources=sources))
    assert {h.record.id for h in hits} == expected


async def test_list_pages_through_everything_once_in_a_stable_order(store: MemoryStore) -> None:
    await put(store, *[record(f"m{i:02d}") for i in range(25)])
    seen: list[str] = []
    after: str | None = None
    sizes = []
    while True:
        page = await store.list("t1", user=None, source=None, limit=10, after=after)
        sizes.append(len(page.records))
        seen += [r.id for r in page.records]
        if not page.has_more:
            break
        after = page.last_id
    assert sizes == [10, 10, 5]
    assert sorted(seen) == [f"m{i:02d}" for i in range(25)]
    again = await list_all(store, "t1")
    assert [r.id for r in again] == seen


async def test_list_continues_after_a_deleted_cursor(store: MemoryStore) -> None:
    await put(store, *[record(f"m{i}") for i in range(6)])
    order = [r.id for r in await list_all(store, "t1")]
    first = await store.list("t1", user=None, source=None, limit=3, after=None)
    assert first.last_id == order[2]
    assert await store.delete("t1", order[2])
    rest = await store.list("t1", user=None, source=None, limit=10, after=first.last_id)
    assert [r.id for r in rest.records] == order[3:]
    assert rest.has_more is False


async def test_list_of_an_empty_tenant(store: MemoryStore) -> None:
    page = await store.list("t1", user=None, source=None, limit=10, after=None)
    assert page.records == []
    assert page.has_more is False
    assert page.last_id is None


async def test_list_filters_by_user_and_source(store: MemoryStore) -> None:
    await put(
        store,
        record("a", user="u1", source="learnings"),
        record("b", user="u1", source="playbook"),
        record("c", user="u2", source="learnings"),
        record("d", user="", source="learnings"),
    )
    assert {r.id for r in await list_all(store, "t1", user="u1")} == {"a", "b"}
    assert {r.id for r in await list_all(store, "t1", user="")} == {"d"}
    assert {r.id for r in await list_all(store, "t1", source="learnings")} == {"a", "c", "d"}
    got = await list_all(store, "t1", user="u1", source="playbook")
    assert {r.id for r in got} == {"b"}


async def test_delete_removes_once(store: MemoryStore) -> None:
    await put(store, record("m1"), record("m2"))
    assert await store.delete("t1", "m1") is True
    assert await store.delete("t1", "m1") is False
    assert await store.get("t1", "m1") is None
    assert await store.count("t1") == 1


async def test_delete_user_forgets_only_that_user(store: MemoryStore) -> None:
    await put(
        store,
        record("a", user="u1"),
        record("b", user="u1"),
        record("c", user="u2"),
        record("d", user=""),
    )
    assert await store.delete_user("t1", "u1") == 2
    assert await store.delete_user("t1", "u1") == 0
    assert {r.id for r in await list_all(store, "t1")} == {"c", "d"}


async def test_increment_retrievals(store: MemoryStore) -> None:
    await put(store, record("m1"), record("m2"))
    await store.increment_retrievals("t1", ["m1", "m2", "unknown"])
    await store.increment_retrievals("t1", ["m1"])
    m1, m2 = await store.get("t1", "m1"), await store.get("t1", "m2")
    assert m1 is not None
    assert m2 is not None
    assert (m1.retrieval_count, m2.retrieval_count) == (2, 1)
    assert m1.content == record("m1").content  # the rest of the payload is untouched


async def test_increment_counts_every_occurrence(store: MemoryStore) -> None:
    await put(store, record("m1"), record("m2"), record("m3"))
    # m1 and m3 end at the same new count: the store writes them together.
    await store.increment_retrievals("t1", ["m1", "m2", "m1", "m3", "m3", "m2", "m2"])
    counts = {r.id: r.retrieval_count for r in await list_all(store, "t1")}
    assert counts == {"m1": 2, "m2": 3, "m3": 2}
    await store.increment_retrievals("t2", ["m1", "m1"])  # another tenant's ids: nothing
    assert {r.id: r.retrieval_count for r in await list_all(store, "t1")} == counts


async def test_concurrent_increments_are_not_lost(store: MemoryStore) -> None:
    await put(store, record("m1"))
    await asyncio.gather(*(store.increment_retrievals("t1", ["m1"]) for _ in range(10)))
    got = await store.get("t1", "m1")
    assert got is not None
    assert got.retrieval_count == 10


async def test_set_usefulness(store: MemoryStore) -> None:
    await put(store, record("m1"))
    updated = await store.set_usefulness("t1", "m1", 0.95)
    assert updated is not None
    assert updated.usefulness == pytest.approx(0.95)
    got = await store.get("t1", "m1")
    assert got is not None
    assert got.usefulness == pytest.approx(0.95)
    assert await store.set_usefulness("t1", "unknown", 0.5) is None


async def test_concurrent_usefulness_updates_all_count(store: MemoryStore) -> None:
    await put(store, record("m1"))
    await asyncio.gather(
        *(store.update_usefulness("t1", "m1", lambda u: u + 0.01) for _ in range(10))
    )
    got = await store.get("t1", "m1")
    assert got is not None
    assert got.usefulness == pytest.approx(0.6)  # 0.5 and ten steps, none lost
    assert await store.update_usefulness("t1", "unknown", lambda u: u) is None
    assert await store.update_usefulness("t2", "m1", lambda u: 1.0) is None  # another tenant's


async def test_count_is_per_tenant(store: MemoryStore) -> None:
    await put(store, record("a"), record("b"), record("a", tenant="t2"))
    assert await store.count("t1") == 2
    assert await store.count("t2") == 1
    assert await store.count("t3") == 0


async def test_tenants_never_see_each_other(store: MemoryStore) -> None:
    """Tenant B's memories are invisible to A through every method, also by guessing ids."""
    await put(
        store,
        record("same", tenant="A", content="A's own memory"),
        record("same", tenant="B", content="B's secret with the same id"),
        record("b-only", tenant="B", content="B's secret recipe"),
        record("b-shared", tenant="B", user="", content="B's shared note"),
    )
    same = await store.get("A", "same")
    assert same is not None
    assert same.content == "A's own memory"
    assert await store.get("A", "b-only") is None
    assert {r.id for r in await list_all(store, "A")} == {"same"}
    page = await store.list("A", user=None, source=None, limit=10, after="b-only")
    assert all(r.tenant == "A" for r in page.records)
    # Even B's exact vector and text find only A's memories.
    for text in ("B's secret recipe", "B's shared note"):
        hits = await store.search("A", query_for(text, user="u1", top_k=50))
        assert {h.record.id for h in hits} == {"same"}
        assert all(h.record.tenant == "A" for h in hits)
    assert await store.delete("A", "b-only") is False
    assert await store.set_usefulness("A", "b-only", 0.0) is None
    await store.increment_retrievals("A", ["b-only", "same"])
    assert await store.delete_user("A", "") == 0
    assert await store.count("A") == 1
    # B is untouched by everything A did.
    b_only = await store.get("B", "b-only")
    assert b_only is not None
    assert (b_only.retrieval_count, b_only.usefulness) == (0, 0.5)
    b_same = await store.get("B", "same")
    assert b_same is not None
    assert (b_same.content, b_same.retrieval_count) == ("B's secret with the same id", 0)
    assert await store.count("B") == 3
    assert await store.delete_user("A", "u1") == 1
    assert await store.count("B") == 3


async def test_hybrid_search_finds_rare_words_the_vector_misses(open_store: StoreFactory) -> None:
    store = await open_store(hybrid=True)
    filler = [record(f"f{i}", content=f"we talked about the weather on day {i}") for i in range(40)]
    target = record("t", content="Melanie adopted a greyhound named Oscar")
    await put(store, *filler, target)
    # The query vector is unrelated to the target's, so only the lexical branch can find it.
    query = SearchQuery(
        vector=vector_for("something else entirely"),
        text="What is the name of Melanie's greyhound?",
        user="u1",
        sources=None,
        top_k=5,
    )
    hits = await store.search("t1", query)
    assert "t" in [h.record.id for h in hits]
    # Every fused hit, the lexical-only one included, carries its true (clipped) cosine.
    for hit in hits:
        cosine = float(np.dot(query.vector, vector_for(hit.record.content)))
        assert hit.similarity == pytest.approx(max(0.0, cosine), abs=1e-4)
    exact = await store.search("t1", query_for(target.content, top_k=3))
    assert exact[0].record.id == "t"
    assert exact[0].similarity == pytest.approx(1.0, abs=1e-4)


async def test_lexical_extras_are_the_lexical_branch_beyond_the_fused_cut(
    open_store: StoreFactory,
) -> None:
    """adr/0136: with ``lexical`` a hybrid search also returns its BM25 branch's hits that the
    fused ``top_k`` leaves out, each with its true cosine; without it, the fused cut alone."""
    store = await open_store(hybrid=True)
    filler = [record(f"f{i}", content=f"we talked about the weather on day {i}") for i in range(9)]
    targets = [record(f"t{i}", content=f"greyhound number {i} named Oscar") for i in range(2)]
    await put(store, *filler, *targets)
    query = SearchQuery(
        vector=vector_for(filler[0].content),
        text="greyhound",
        user="u1",
        sources=None,
        top_k=2,
    )
    fused = await store.search("t1", query)
    extended = await store.search("t1", replace(query, lexical=True))
    # Both branches rank their own first at 1/60: the cut keeps one of each, and only the
    # lexical branch's second (the other greyhound) is added.
    assert sorted(h.record.id[0] for h in fused) == ["f", "t"]
    assert [h.record.id for h in extended[:2]] == [h.record.id for h in fused]
    assert sorted(h.record.id for h in extended[2:]) == sorted(
        {"t0", "t1"} - {h.record.id for h in fused}
    )
    for hit in extended:
        cosine = float(np.dot(query.vector, vector_for(hit.record.content)))
        assert hit.similarity == pytest.approx(max(0.0, cosine), abs=1e-4)


async def test_hybrid_lexical_branch_stays_in_the_tenant(open_store: StoreFactory) -> None:
    store = await open_store(hybrid=True)
    await put(
        store,
        record("a", tenant="A", content="weather today"),
        record("b", tenant="B", content="zanzibar password hunter2"),
    )
    hits = await store.search("A", query_for("zanzibar password hunter2", top_k=10))
    assert [h.record.id for h in hits] == ["a"]


async def test_ready_while_open_not_after_close(open_store: StoreFactory) -> None:
    store = await open_store()
    assert await store.ready() is True
    await store.close()
    assert await store.ready() is False


async def test_data_survives_a_restart(open_store: StoreFactory) -> None:
    store = await open_store()
    await put(store, *[record(f"m{i}") for i in range(5)])
    await store.set_usefulness("t1", "m1", 0.9)
    await store.close()
    reopened = await open_store()
    assert await reopened.count("t1") == 5
    got = await reopened.get("t1", "m1")
    assert got is not None
    assert got.usefulness == pytest.approx(0.9)
    hits = await reopened.search("t1", query_for(record("m3").content, top_k=1))
    assert hits[0].record.id == "m3"


async def test_retrieval_counts_survive_a_restart(open_store: StoreFactory) -> None:
    store = await open_store()
    await put(store, record("m1"), record("m2"))
    await store.increment_retrievals("t1", ["m1", "m1", "m2"])
    await store.close()
    reopened = await open_store()
    counts = {r.id: r.retrieval_count for r in await list_all(reopened, "t1")}
    assert counts == {"m1": 2, "m2": 1}


async def test_a_rewrite_carries_its_own_retrieval_count(store: MemoryStore) -> None:
    await put(store, record("m1"), record("m2"))
    await store.increment_retrievals("t1", ["m1", "m1", "m2"])
    await put(store, record("m1", retrieval_count=7))  # an import restoring its own count
    assert await store.delete("t1", "m2")
    await put(store, record("m2"))
    await store.increment_retrievals("t1", ["m1"])
    counts = {r.id: r.retrieval_count for r in await list_all(store, "t1")}
    assert counts == {"m1": 8, "m2": 0}


async def test_search_returns_current_retrieval_counts(store: MemoryStore) -> None:
    await put(store, record("m1"))
    query = query_for(record("m1").content, top_k=1)
    await store.increment_retrievals("t1", ["m1"])
    assert (await store.search("t1", query))[0].record.retrieval_count == 1  # read, then kept
    await store.increment_retrievals("t1", ["m1", "m1"])
    assert (await store.search("t1", query))[0].record.retrieval_count == 3


async def test_reopening_with_another_vector_size_is_a_config_error(
    open_store: StoreFactory,
) -> None:
    store = await open_store(dimensions=DIM)
    await put(store, record("m1"))
    await store.close()
    with pytest.raises(ConfigError, match=r"size|dimensions"):
        await open_store(dimensions=DIM * 2)
    reopened = await open_store(dimensions=DIM)
    assert await reopened.count("t1") == 1


async def search_ids(
    store: MemoryStore, text: str = "memory", top_k: int = 10
) -> dict[str, MemoryRecord]:
    return {h.record.id: h.record for h in await store.search("t1", query_for(text, top_k=top_k))}


async def test_searches_see_every_kind_of_write(store: MemoryStore) -> None:
    # Search first, so a store that keeps decoded records has them; every write must show.
    await put(store, record("m1"), record("m2"), record("m3"), record("x", user="u2"))
    assert set(await search_ids(store)) == {"m1", "m2", "m3"}
    await put(store, record("m1", content="memory m1, rewritten"))
    await store.increment_retrievals("t1", ["m2", "m2"])
    await store.set_usefulness("t1", "m3", 0.9)
    seen = await search_ids(store)
    assert seen["m1"].content == "memory m1, rewritten"
    assert seen["m2"].retrieval_count == 2
    assert seen["m3"].usefulness == pytest.approx(0.9)
    await store.delete("t1", "m2")
    assert set(await search_ids(store)) == {"m1", "m3"}
    await put(store, record("m4"))
    await store.delete_user("t1", "u1")
    assert set(await search_ids(store)) == set()


async def test_concurrent_searches_and_writes_end_consistent(store: MemoryStore) -> None:
    await put(store, *(record(f"m{i}") for i in range(20)))

    async def bump() -> None:
        for _ in range(5):
            await store.increment_retrievals("t1", [f"m{i}" for i in range(20)])

    searches = [search_ids(store, top_k=20) for _ in range(20)]
    await asyncio.gather(bump(), *searches)
    final = await search_ids(store, top_k=20)
    assert {r.retrieval_count for r in final.values()} == {5}


# -- lifecycle: expiry and supersession (adr/0113) ---------------------------------------------

LIVE_AT = datetime(2026, 3, 1, tzinfo=UTC)


async def test_lifecycle_fields_round_trip(store: MemoryStore) -> None:
    original = record(
        "m1",
        expires_at=datetime(2026, 5, 1, 12, 30, tzinfo=UTC),
        superseded_by="m2",
        supersedes="m0",
    )
    await put(store, original)
    got = await store.get("t1", "m1")
    assert got is not None
    assert (got.expires_at, got.superseded_by, got.supersedes) == (
        original.expires_at,
        "m2",
        "m0",
    )
    await put(store, record("m3"))
    fresh = await store.get("t1", "m3")
    assert fresh is not None
    assert (fresh.expires_at, fresh.superseded_by, fresh.supersedes) == (None, None, None)


async def test_a_live_search_skips_expired_and_superseded_memories(store: MemoryStore) -> None:
    text = "the user lives in porto"
    await put(
        store,
        record("expired", content=text, expires_at=LIVE_AT),  # expiring exactly then: gone
        record("later", content=text, expires_at=LIVE_AT + timedelta(seconds=1)),
        record("old", content=text, superseded_by="new"),
        record("new", content=text, supersedes="old"),
        record("forever", content=text),
    )
    query = replace(query_for(text), live_at=LIVE_AT)
    assert {hit.record.id for hit in await store.search("t1", query)} == {
        "later",
        "new",
        "forever",
    }
    # Without a time, a search sees everything (the liveness filter is the caller's choice),
    # and list always does: superseded and expired memories stay visible until purged.
    assert len(await store.search("t1", query_for(text))) == 5
    assert len(await list_all(store, "t1")) == 5


async def test_a_memory_that_dies_after_the_tenant_was_searched_is_skipped(
    store: MemoryStore,
) -> None:
    """The first live search may find a tenant without expiring or superseded memories; a
    later write of one must still take effect (the embedded store skips the condition until
    then)."""
    text = "the user works at the harbour"
    await put(store, record("kept", content=text), record("other", tenant="t2", content=text))
    query = replace(query_for(text), live_at=LIVE_AT)
    assert [hit.record.id for hit in await store.search("t1", query)] == ["kept"]
    await put(
        store,
        record("gone", content=text, expires_at=LIVE_AT - timedelta(days=1)),
        record("kept", content=text, superseded_by="new"),
        record("new", content=text + " now", supersedes="kept"),
    )
    assert [hit.record.id for hit in await store.search("t1", query)] == ["new"]
    assert [hit.record.id for hit in await store.search("t2", query)] == ["other"]


async def test_dead_memories_stay_skipped_after_a_restart(open_store: StoreFactory) -> None:
    store = await open_store(hybrid=True)
    text = "the user drives a red van"
    await put(
        store,
        record("expired", content=text, expires_at=LIVE_AT),
        record("old", content=text, superseded_by="forever"),
        record("forever", content=text),
    )
    await store.close()
    reopened = await open_store(hybrid=True)
    query = replace(query_for(text), live_at=LIVE_AT)
    assert [hit.record.id for hit in await reopened.search("t1", query)] == ["forever"]


async def test_purge_deletes_what_expired_in_every_tenant_and_nothing_else(
    store: MemoryStore,
) -> None:
    await put(
        store,
        record("a", expires_at=LIVE_AT - timedelta(days=1)),
        record("b", expires_at=LIVE_AT),
        record("c", expires_at=LIVE_AT + timedelta(days=1)),
        record("d"),
        record("e", tenant="t2", expires_at=LIVE_AT - timedelta(hours=1)),
    )
    assert await store.purge_expired(LIVE_AT) == 3
    assert {r.id for r in await list_all(store, "t1")} == {"c", "d"}
    assert await list_all(store, "t2") == []
    assert await store.purge_expired(LIVE_AT) == 0


async def test_a_cached_result_drops_a_memory_that_expired_since(store: MemoryStore) -> None:
    now = [LIVE_AT]
    text = "the user is in lisbon this week"
    await put(store, record("week", content=text, expires_at=LIVE_AT + timedelta(days=7)))
    cache = RequestCache(LocalCache(1_000))
    retriever = Retriever(store, HashEmbedder(), cache, clock=lambda: now[0])
    want = Retrieval(text, "u1", top_k=5)
    assert [h.record.id for h in await retriever.retrieve("t1", want)] == ["week"]
    now[0] = LIVE_AT + timedelta(days=8)
    assert await retriever.retrieve("t1", want) == []


async def test_repeats_finds_the_users_live_memories_with_the_same_words(
    store: MemoryStore,
) -> None:
    text = "I live in Porto."
    await put(
        store,
        record("same", content=text),
        record("cased", content="i live in PORTO"),
        record("other-user", user="u2", content=text),
        record("other-tenant", tenant="t2", content=text),
        record("other-words", content="I live in Lisbon."),
        record("old", content=text, superseded_by="same"),
        record("expired", content=text, expires_at=LIVE_AT),
    )
    found = await store.repeats("t1", [("u1", words_key(text))], LIVE_AT)
    assert {r.id for r in found} == {"same", "cased"}
    assert await store.repeats("t1", [("u3", words_key(text))], LIVE_AT) == []
    assert await store.repeats("t1", [], LIVE_AT) == []


async def test_supersede_marks_a_live_memory_once_and_keeps_its_vector(
    store: MemoryStore,
) -> None:
    text = "the user lives in porto"
    await put(store, record("old", content=text), record("other", tenant="t2", content=text))
    marked = await store.supersede("t1", "old", "new")
    assert marked is not None
    assert (marked.id, marked.superseded_by) == ("old", "new")
    assert (await store.supersede("t1", "old", "newer")) is None  # the first replacement stands
    got = await store.get("t1", "old")
    assert got is not None
    assert got.superseded_by == "new"
    assert (await store.supersede("t1", "missing", "new")) is None
    assert (await store.supersede("t1", "other", "new")) is None  # another tenant's memory
    other = await store.get("t2", "other")
    assert other is not None
    assert other.superseded_by is None
    # Its vector was kept: a search that sees superseded memories still finds it as before.
    (hit,) = await store.search("t1", query_for(text))
    assert hit.record.id == "old"
    assert hit.similarity == pytest.approx(1.0, abs=1e-5)
    live = replace(query_for(text), live_at=LIVE_AT)
    assert await store.search("t1", live) == []


async def test_concurrent_supersedes_have_one_winner(store: MemoryStore) -> None:
    await put(store, record("old"))
    results = await asyncio.gather(*(store.supersede("t1", "old", f"n{i}") for i in range(6)))
    winners = [r for r in results if r is not None]
    assert len(winners) == 1
    got = await store.get("t1", "old")
    assert got is not None
    assert got.superseded_by == winners[0].superseded_by


async def test_repeats_of_a_batch_keep_only_the_asked_user_and_words_pairs(
    store: MemoryStore,
) -> None:
    porto, lisbon = "I live in Porto.", "I live in Lisbon."
    await put(
        store,
        record("u1-porto", content=porto),
        record("u1-lisbon", content=lisbon),
        record("u2-porto", user="u2", content=porto),
        record("u2-lisbon", user="u2", content=lisbon),
    )
    # One lookup for a batch asking two pairs: the crossed pairs match its filter, not its keys.
    keys = [("u1", words_key(porto)), ("u2", words_key(lisbon))]
    found = await store.repeats("t1", keys, LIVE_AT)
    assert sorted(r.id for r in found) == ["u1-porto", "u2-lisbon"]


async def test_repeats_read_every_page(store: MemoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    for module in (edge, qdrant):
        monkeypatch.setattr(module, "REPEATS_PAGE", 2)
    texts = [f"memory number {i}" for i in range(5)]
    await put(store, *(record(f"m{i}", content=text) for i, text in enumerate(texts)))
    found = await store.repeats("t1", [("u1", words_key(t)) for t in texts], LIVE_AT)
    assert sorted(r.id for r in found) == [f"m{i}" for i in range(5)]


async def test_a_dialog_turn_is_found_by_the_turn_before_it(store: MemoryStore) -> None:
    """The write path embeds a dialog turn with the turn before it (adr/0142): a dense query
    for that joined text finds the turn, whose record keeps its own text."""
    service = MemoryService(store, HashEmbedder())
    before, said = "My kids love dinosaurs", "They were stoked for the exhibit!"
    turns = [MemoryInput(content=c, user="u1", source="conversation") for c in (before, said)]
    await service.write("t1", turns)
    hits = await service.retriever.retrieve("t1", Retrieval(f"{before}\n{said}", "u1", top_k=2))
    assert hits[0].record.content == said
    assert hits[0].similarity == pytest.approx(1.0, abs=1e-5)
    assert hits[0].record.context == before
    listed = {r.content: r for r in await list_all(store, "t1")}
    assert listed[said].context == before
    assert listed[before].context == ""


# The review's repro (adr/0144): a turn and the one after it, whose context is its copy.
SECRET = "My bank PIN is 4921 and my passport number is X1234567"
NOTED = "Okay, noted."


async def write_dialog(
    service: MemoryService, expires_at: datetime | None = None
) -> tuple[MemoryRecord, MemoryRecord]:
    said, noted = await service.write(
        "t1",
        [
            MemoryInput(content=SECRET, user="u1", source="conversation", expires_at=expires_at),
            MemoryInput(content=NOTED, user="u1", source="conversation"),
        ],
    )
    return said, noted


async def assert_forgotten(service: MemoryService, store: MemoryStore) -> None:
    """No copy of the secret is left: the next turn has no context, and its vector is its own
    text's (the joined text no longer finds it; its own text does, at cosine 1)."""
    (noted,) = [r for r in await list_all(store, "t1") if r.content == NOTED]
    assert (noted.context, noted.context_key) == ("", "")
    joined = await service.retriever.retrieve("t1", Retrieval(f"{SECRET}\n{NOTED}", "u1", 5))
    assert all(hit.similarity < 0.99 for hit in joined)
    own = await service.retriever.retrieve("t1", Retrieval(NOTED, "u1", 1))
    assert own[0].record.id == noted.id
    assert own[0].similarity == pytest.approx(1.0, abs=1e-5)


async def test_deleting_a_turn_forgets_its_copy_in_the_next_turns_context(
    store: MemoryStore,
) -> None:
    service = MemoryService(store, HashEmbedder())
    said, noted = await write_dialog(service)
    assert noted.context == SECRET  # the copy the delete must take with it
    await service.delete("t1", said.id)
    await assert_forgotten(service, store)


async def test_replacing_a_turns_text_forgets_its_copy_in_the_next_turns_context(
    store: MemoryStore,
) -> None:
    service = MemoryService(store, HashEmbedder())
    said, _ = await write_dialog(service)
    edited = MemoryInput(id=said.id, content="Nothing to see.", user="u1", source="conversation")
    await service.write("t1", [edited])
    await assert_forgotten(service, store)


async def test_an_upsert_keeping_a_turns_words_keeps_the_copy(store: MemoryStore) -> None:
    service = MemoryService(store, HashEmbedder())
    said, noted = await write_dialog(service)
    same = MemoryInput(id=said.id, content=SECRET + "!", user="u1", source="conversation")
    await service.write("t1", [same])
    kept = await store.get("t1", noted.id)
    assert kept is not None
    assert kept.context == SECRET


async def test_a_turn_expiring_first_is_no_context_so_its_purge_leaves_no_copy(
    store: MemoryStore,
) -> None:
    service = MemoryService(store, HashEmbedder())
    soon = datetime(2030, 1, 1, tzinfo=UTC)
    await write_dialog(service, expires_at=soon)
    assert await store.purge_expired(soon + timedelta(seconds=1)) == 1
    await assert_forgotten(service, store)


async def test_a_replacement_that_expires_sooner_forgets_the_copy(store: MemoryStore) -> None:
    service = MemoryService(store, HashEmbedder())
    said, _ = await write_dialog(service)
    soon = datetime(2030, 1, 1, tzinfo=UTC)
    sooner = MemoryInput(
        id=said.id, content=SECRET, user="u1", source="conversation", expires_at=soon
    )
    await service.write("t1", [sooner])
    assert await store.purge_expired(soon + timedelta(seconds=1)) == 1
    await assert_forgotten(service, store)
