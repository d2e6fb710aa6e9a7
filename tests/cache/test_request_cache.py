"""RequestCache: embeddings, token counts, search results, generations, tenant separation."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime
from typing import Any

import fakeredis
import numpy as np
import pytest

from proxy.cache import CacheTTLs, LocalCache, RedisCache, RequestCache, codec, keys
from proxy.cache.redis_cache import connect
from proxy.context.records import Candidate, MemoryRecord
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.tasks import tasks_created
from tests.redis_server import RedisServer

DIM = 8


def hit(tenant: str, memory_id: str, similarity: float = 0.8) -> Candidate:
    record = MemoryRecord(
        id=memory_id,
        tenant=tenant,
        user="alice",
        source="learnings",
        content=f"memory {memory_id}",
        created_at=datetime(2025, 3, 1, 12, 0, 0, 250_000, tzinfo=UTC),
        tokens={"o200k_base": 3},
        metadata={"tags": ["a"], "n": 1},
    )
    return Candidate(record=record, similarity=similarity)


@pytest.fixture(params=["local", "fakeredis"])
async def rc(request: pytest.FixtureRequest) -> AsyncIterator[RequestCache]:
    cache = (
        LocalCache(1000)
        if request.param == "local"
        else RedisCache(fakeredis.FakeAsyncRedis(), timeout_ms=2000)
    )
    request_cache = RequestCache(cache)
    yield request_cache
    await request_cache.close()


async def test_embedding_is_computed_once_per_text(rc: RequestCache) -> None:
    embedder = FakeEmbedder(DIM)
    first = await rc.embed("acme", embedder, "what is my cat's name?")
    second = await rc.embed("acme", embedder, "what is my cat's name?")
    assert embedder.calls == [["what is my cat's name?"]]
    assert second.dtype == np.float32
    assert second.tobytes() == first.tobytes()


async def test_embeddings_are_per_tenant_and_per_model(rc: RequestCache) -> None:
    vector = np.arange(DIM, dtype=np.float32)
    await rc.set_embedding("acme", "m1", DIM, "q", vector)
    assert await rc.get_embedding("globex", "m1", DIM, "q") is None
    assert await rc.get_embedding("acme", "m2", DIM, "q") is None
    assert await rc.get_embedding("acme", "m1", DIM * 2, "q") is None
    found = await rc.get_embedding("acme", "m1", DIM, "q")
    assert found is not None
    assert found.tolist() == vector.tolist()


async def test_long_conversation_only_counts_new_messages(rc: RequestCache) -> None:
    counted: list[str] = []

    def count(text: str, encoding: str) -> int:
        counted.append(text)
        return len(text.split())

    turns = [f"message number {i} with some words" for i in range(20)]
    assert await rc.count_tokens("acme", "o200k_base", turns, count) == [6] * 20
    counted.clear()
    longer = [*turns, "a new question", "a new question"]
    assert await rc.count_tokens("acme", "o200k_base", longer, count) == [6] * 20 + [3, 3]
    assert counted == ["a new question"]  # the history came from the cache, repeats once


async def test_token_counts_are_per_encoding_and_tenant(rc: RequestCache) -> None:
    await rc.set_token_counts("acme", "o200k_base", {"hello world": 2})
    assert await rc.get_token_counts("acme", "o200k_base", ["hello world", "x"]) == [2, None]
    assert await rc.get_token_counts("acme", "cl100k_base", ["hello world"]) == [None]
    assert await rc.get_token_counts("globex", "o200k_base", ["hello world"]) == [None]


async def test_default_counter_is_tiktoken(rc: RequestCache) -> None:
    assert await rc.count_tokens("acme", "o200k_base", ["hello world", ""]) == [2, 0]


async def test_search_result_is_served_until_a_write_bumps_the_generation(
    rc: RequestCache,
) -> None:
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert await rc.get_retrieval(key) is None
    hits = [hit("acme", "m1", 0.91), hit("acme", "m2", 0.42)]
    await rc.set_retrieval(key, hits)

    again = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert again == key
    assert await rc.get_retrieval(again) == hits

    await rc.bump_generation("acme")
    after_write = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert after_write != key
    assert await rc.get_retrieval(after_write) is None


async def test_a_write_to_one_tenant_keeps_the_other_tenants_results(rc: RequestCache) -> None:
    acme = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    globex = await rc.retrieval_key("globex", "alice", "cats", top_k=5, sources=None)
    assert acme is not None
    assert globex is not None
    assert acme.key != globex.key
    await rc.set_retrieval(acme, [hit("acme", "m1")])
    await rc.set_retrieval(globex, [hit("globex", "g1")])
    await rc.bump_generation("acme")
    assert await rc.get_retrieval(globex) == [hit("globex", "g1")]
    stale = await rc.get_retrieval(
        await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    )
    assert stale is None


async def test_users_and_options_do_not_share_results(rc: RequestCache) -> None:
    base = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    await rc.set_retrieval(base, [hit("acme", "m1")])
    for other in (
        await rc.retrieval_key("acme", "bob", "cats", top_k=5, sources=None),
        await rc.retrieval_key("acme", "alice", "cats", top_k=6, sources=None),
        await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=["playbook"]),
        await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None, variant="m2"),
    ):
        assert await rc.get_retrieval(other) is None


async def test_result_under_another_tenants_key_is_never_served(rc: RequestCache) -> None:
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert key is not None
    # A bug elsewhere handing globex's record to acme's search: not cached at all.
    await rc.set_retrieval(key, [hit("acme", "m1"), hit("globex", "g1")])
    assert await rc.get_retrieval(key) is None
    # The same poison written straight into the shared cache: rejected when read.
    await rc.cache.set(key.key, codec.encode_candidates([hit("globex", "g1")]), ttl_s=60)
    assert await rc.get_retrieval(key) is None


async def test_repeated_search_is_served_from_the_near_cache_without_a_round_trip() -> None:
    local = LocalCache(100)
    rc = RequestCache(local)
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert key is not None
    await rc.set_retrieval(key, [hit("acme", "m1")])
    await local.delete(key.key)  # the shared copy is gone; the decoded one is still here
    served = await rc.get_retrieval(key)
    assert served == [hit("acme", "m1")]
    assert served is not None
    served.clear()  # callers get their own list
    assert await rc.get_retrieval(key) == [hit("acme", "m1")]


async def test_unshared_search_results_stay_decoded_and_are_never_encoded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Only this process reads an in-process cache: the near cache is the search-result cache.
    local = LocalCache(100)
    rc = RequestCache(local, shared_retrievals=False)
    encoded: list[object] = []
    monkeypatch.setattr(codec, "encode_candidates", lambda hits: encoded.append(hits) or b"[]")
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert key is not None
    await rc.set_retrieval(key, [hit("acme", "m1")])
    assert encoded == []
    assert await local.get(key.key) is None
    assert await rc.get_retrieval(key) == [hit("acme", "m1")]
    # Another tenant's record is still refused.
    await rc.set_retrieval(key, [hit("globex", "g1")])
    assert await rc.get_retrieval(key) == [hit("acme", "m1")]


async def test_without_a_near_cache_unshared_results_still_go_to_the_byte_cache() -> None:
    local = LocalCache(100)
    rc = RequestCache(local, near_entries=0, shared_retrievals=False)
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert key is not None
    await rc.set_retrieval(key, [hit("acme", "m1")])
    assert await local.get(key.key) is not None
    assert await rc.get_retrieval(key) == [hit("acme", "m1")]


async def test_a_write_through_another_worker_invalidates_the_near_cache() -> None:
    # Two workers (two RequestCaches) over one shared cache: worker 2's write bumps the shared
    # generation, so worker 1's next search misses even though it holds the old result.
    shared = RedisCache(fakeredis.FakeAsyncRedis(), timeout_ms=2000)
    worker1, worker2 = RequestCache(shared), RequestCache(shared)
    key = await worker1.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    await worker1.set_retrieval(key, [hit("acme", "m1")])
    assert await worker1.get_retrieval(key) == [hit("acme", "m1")]
    await worker2.bump_generation("acme")
    fresh = await worker1.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert await worker1.get_retrieval(fresh) is None


async def test_near_cache_entries_expire_with_the_retrieval_ttl() -> None:
    now = [0.0]
    local = LocalCache(100, clock=lambda: now[0])
    rc = RequestCache(local, CacheTTLs(retrieval_s=30), clock=lambda: now[0])
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    await rc.set_retrieval(key, [hit("acme", "m1")])
    now[0] = 30.0
    assert await rc.get_retrieval(key) is None


async def test_evicted_generation_restarts_past_every_earlier_number(rc: RequestCache) -> None:
    for _ in range(3):
        await rc.bump_generation("acme")
    key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    await rc.set_retrieval(key, [hit("acme", "old")])
    before = await rc.generation("acme")
    await rc.cache.delete(keys.generation_key("acme"))  # what LRU eviction does
    after = await rc.generation("acme")
    assert before is not None
    assert after is not None
    assert after > before
    fresh = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=None)
    assert await rc.get_retrieval(fresh) is None


async def test_bump_of_an_absent_counter_also_starts_from_the_clock() -> None:
    rc = RequestCache(LocalCache(100), wall_clock=lambda: 1_700_000_000.0)
    assert await rc.bump_generation("new-tenant") == 1 + 1_700_000_000_000_000
    assert await rc.bump_generation("new-tenant") == 2 + 1_700_000_000_000_000


async def test_empty_result_is_cached_too(rc: RequestCache) -> None:
    key = await rc.retrieval_key("acme", "alice", "nothing", top_k=5, sources=None)
    await rc.set_retrieval(key, [])
    assert await rc.get_retrieval(key) == []


async def test_corrupt_entries_are_misses(rc: RequestCache) -> None:
    await rc.cache.set(keys.embedding_key("acme", "m", DIM, "q"), b"short", ttl_s=60)
    assert await rc.get_embedding("acme", "m", DIM, "q") is None
    await rc.cache.set(keys.token_count_key("acme", "enc", keys.digest("t")), b"x", ttl_s=60)
    assert await rc.get_token_counts("acme", "enc", ["t"]) == [None]
    await rc.cache.set(keys.generation_key("acme"), b"not a number", ttl_s=60)
    assert await rc.retrieval_key("acme", "u", "q", top_k=1, sources=None) is None


async def test_zero_ttls_disable_each_kind() -> None:
    local = LocalCache(100)
    rc = RequestCache(local, CacheTTLs(embedding_s=0, token_count_s=0, retrieval_s=0))
    await rc.set_embedding("t", "m", DIM, "q", np.zeros(DIM, dtype=np.float32))
    await rc.set_token_counts("t", "enc", {"x": 1})
    assert await rc.get_embedding("t", "m", DIM, "q") is None
    assert await rc.get_token_counts("t", "enc", ["x"]) == [None]
    assert await rc.retrieval_key("t", "u", "q", top_k=1, sources=None) is None
    assert await rc.get_retrieval(None) is None
    await rc.set_retrieval(None, [hit("t", "m")])  # a no-op
    assert len(local) == 0


class HeldWrites(LocalCache):
    """The in-process cache, its writes waiting until ``release`` is set (a remote cache)."""

    def __init__(self) -> None:
        super().__init__(100)
        self.release = asyncio.Event()

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self.release.wait()
        await super().set(key, value, ttl_s)


async def test_write_behind_returns_before_the_write_and_flush_waits() -> None:
    held = HeldWrites()
    rc = RequestCache(held, write_behind=True)
    vector = np.ones(DIM, dtype=np.float32)
    await rc.set_embedding("acme", "m", DIM, "cats", vector)  # returns while the write waits
    assert await rc.get_embedding("acme", "m", DIM, "cats") is None
    held.release.set()
    await rc.flush()
    found = await rc.get_embedding("acme", "m", DIM, "cats")
    assert found is not None
    assert found.tolist() == vector.tolist()


async def test_a_write_that_never_waits_lands_at_once_without_a_task() -> None:
    """Write-behind costs a task only for writes that wait: the in-process cache's are done by
    the time the call returns."""
    rc = RequestCache(LocalCache(100), write_behind=True)
    with tasks_created() as created:
        await rc.set_embedding("acme", "m", DIM, "cats", np.ones(DIM, dtype=np.float32))
        await rc.set_token_counts("acme", "enc", {"x": 1})
    assert created == []
    assert await rc.get_embedding("acme", "m", DIM, "cats") is not None
    assert await rc.get_token_counts("acme", "enc", ["x"]) == [1]


async def test_generations_and_results_on_a_real_redis(shared_redis_server: RedisServer) -> None:
    client = connect(shared_redis_server.url)
    await client.flushall()
    rc = RequestCache(RedisCache(client, timeout_ms=2000))
    try:
        key = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=("learnings",))
        assert key is not None
        await rc.set_retrieval(key, [hit("acme", "m1")])
        assert await rc.get_retrieval(key) == [hit("acme", "m1")]
        ttl_ms = await client.pttl(key.key)
        assert 0 < ttl_ms <= 300_000
        assert await client.pttl(keys.generation_key("acme")) == -1  # counters never expire
        await rc.bump_generation("acme")
        fresh = await rc.retrieval_key("acme", "alice", "cats", top_k=5, sources=("learnings",))
        assert await rc.get_retrieval(fresh) is None
        stored = [k if isinstance(k, str) else k.decode() for k in await client.keys("*")]
        assert stored
        assert all(k.startswith("mp:v1:acme:") for k in stored)
    finally:
        await rc.close()


async def test_lookup_hook_sees_hits_and_misses_and_cannot_break_lookups() -> None:
    seen: list[tuple[str, int, int]] = []
    rc = RequestCache(LocalCache(100), on_lookup=lambda *event: seen.append(event))
    await rc.get_embedding("t", "m", DIM, "q")
    await rc.set_embedding("t", "m", DIM, "q", np.zeros(DIM, dtype=np.float32))
    await rc.get_embedding("t", "m", DIM, "q")
    await rc.count_tokens("t", "o200k_base", ["a", "b"])
    await rc.count_tokens("t", "o200k_base", ["a", "b", "c"])
    key = await rc.retrieval_key("t", "u", "q", top_k=1, sources=None)
    await rc.get_retrieval(key)
    assert seen == [
        ("embedding", 0, 1),
        ("embedding", 1, 0),
        ("tokens", 0, 2),
        ("tokens", 2, 1),
        ("retrieval", 0, 1),
    ]

    def broken(kind: str, hits: int, misses: int) -> None:
        raise RuntimeError("metrics down")

    rc = RequestCache(LocalCache(100), on_lookup=broken)
    await rc.set_token_counts("t", "enc", {"x": 3})
    assert await rc.get_token_counts("t", "enc", ["x"]) == [3]


async def test_ready_reports_the_backend(rc: RequestCache) -> None:
    assert await rc.ready() is True


class SpyCache(LocalCache):
    """A LocalCache that records the keys each get_many asked for."""

    def __init__(self) -> None:
        super().__init__(1000)
        self.asked: list[list[str]] = []

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        self.asked.append(list(keys))
        return await super().get_many(keys)


async def test_known_token_counts_cost_no_round_trip() -> None:
    spy = SpyCache()
    rc = RequestCache(spy)
    history = [f"turn {i}" for i in range(10)]
    await rc.count_tokens("acme", "o200k_base", history)
    spy.asked.clear()
    counts = await rc.count_tokens("acme", "o200k_base", [*history, "a new question"])
    assert len(counts) == 11
    assert [len(batch) for batch in spy.asked] == [1]  # only the new message went to the cache


async def test_token_counts_from_another_process_fill_the_near_cache() -> None:
    spy = SpyCache()
    writer, reader = RequestCache(spy), RequestCache(spy)
    await writer.set_token_counts("acme", "enc", {"hello": 7})
    assert await reader.get_token_counts("acme", "enc", ["hello"]) == [7]
    assert await reader.get_token_counts("acme", "enc", ["hello"]) == [7]
    assert len(spy.asked) == 1


class StuckClient:
    """A Redis client whose writes never answer (a stalled server)."""

    async def set(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.Event().wait()


async def test_a_stalled_shared_write_times_out_in_the_background_not_the_request() -> None:
    """A write-behind to Redis is started in the request's task; its deadline must cancel the
    write, never the request that started it (memory never fails a request)."""
    # A deadline of 0 expires at the loop's next step, whatever the machine's speed.
    rc = RequestCache(RedisCache(StuckClient(), timeout_ms=0), write_behind=True)

    async def request() -> str:
        await rc.set_embedding("acme", "m", DIM, "cats", np.ones(DIM, dtype=np.float32))
        for _ in range(5):  # the steps in which an expired deadline fires
            await asyncio.sleep(0)
        return "answered"

    assert await asyncio.ensure_future(request()) == "answered"
    await rc.flush()  # the write was dropped by its own deadline, not left hanging
    assert not rc._pending
