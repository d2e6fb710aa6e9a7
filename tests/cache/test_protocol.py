"""One contract, three backends: LocalCache, RedisCache on fakeredis and on a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import fakeredis
import pytest

from proxy.cache import Cache, LocalCache, RedisCache, cache_outcome
from proxy.cache.redis_cache import connect
from tests.fakes.clock import FakeClock
from tests.redis_server import RedisServer

# Semantics, not speed, are under test here: a generous deadline keeps a busy machine from
# turning a slow answer into a miss.
CONTRACT_TIMEOUT_MS = 2000.0


@dataclass
class Backend:
    cache: Cache
    advance: Callable[[float], Awaitable[None]]  # let ``seconds`` of cache time pass


@pytest.fixture(params=["local", "fakeredis", "redis"])
async def backend(request: pytest.FixtureRequest) -> AsyncIterator[Backend]:
    if request.param == "local":
        clock = FakeClock()

        async def tick(seconds: float) -> None:
            clock.now += seconds

        yield Backend(LocalCache(1000, clock=clock), tick)
        return

    client: Any
    if request.param == "fakeredis":
        client = fakeredis.FakeAsyncRedis()
    else:
        server: RedisServer = request.getfixturevalue("shared_redis_server")
        client = connect(server.url)
        await client.flushall()

    cache = RedisCache(client, timeout_ms=CONTRACT_TIMEOUT_MS)
    yield Backend(cache, asyncio.sleep)
    await cache.close()


async def test_is_a_cache(backend: Backend) -> None:
    assert isinstance(backend.cache, Cache)


async def test_get_returns_what_set_stored(backend: Backend) -> None:
    cache = backend.cache
    assert await cache.get("mp:v1:t:k") is None
    await cache.set("mp:v1:t:k", b"\x00\xffbinary", ttl_s=60)
    assert await cache.get("mp:v1:t:k") == b"\x00\xffbinary"
    await cache.set("mp:v1:t:k", b"new", ttl_s=60)
    assert await cache.get("mp:v1:t:k") == b"new"


async def test_batches_keep_order_and_report_each_miss(backend: Backend) -> None:
    cache = backend.cache
    await cache.set_many({"a": b"1", "c": b"3"}, ttl_s=60)
    assert await cache.get_many(["c", "b", "a", "c"]) == [b"3", None, b"1", b"3"]
    assert await cache.get_many([]) == []
    await cache.set_many({}, ttl_s=60)  # a no-op, not an error


async def test_entries_expire(backend: Backend) -> None:
    cache = backend.cache
    await cache.set("short", b"x", ttl_s=0.05)
    await cache.set_many({"short2": b"x"}, ttl_s=0.05)
    await cache.set("long", b"y", ttl_s=60)
    await backend.advance(0.15)
    assert await cache.get_many(["short", "short2", "long"]) == [None, None, b"y"]


async def test_incr_is_atomic_under_concurrency(backend: Backend) -> None:
    cache = backend.cache
    results = await asyncio.gather(*(cache.incr("n") for _ in range(50)))
    assert sorted(r for r in results if r is not None) == list(range(1, 51))
    assert await cache.incr("n", 1000) == 1050
    assert await cache.get("n") == b"1050"


async def test_counters_do_not_expire(backend: Backend) -> None:
    await backend.cache.incr("gen", 5)
    await backend.advance(0.1)
    assert await backend.cache.get("gen") == b"5"


async def test_incr_of_text_answers_none(backend: Backend) -> None:
    await backend.cache.set("k", b"text", ttl_s=60)
    assert await backend.cache.incr("k") is None


async def test_delete(backend: Backend) -> None:
    cache = backend.cache
    await cache.set_many({"a": b"1", "b": b"2", "c": b"3"}, ttl_s=60)
    await cache.delete("a", "b", "absent")
    await cache.delete()
    assert await cache.get_many(["a", "b", "c"]) == [None, None, b"3"]


async def test_ping(backend: Backend) -> None:
    with cache_outcome() as outcome:
        assert await backend.cache.ping() is True
    assert outcome.served is True
