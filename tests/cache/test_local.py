"""LocalCache: LRU bounds, TTL expiry on an injected clock, counters."""

from __future__ import annotations

import pytest

from proxy.cache.local import LocalCache
from tests.fakes.clock import FakeClock


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1000.0)


async def test_entry_expires_exactly_at_its_ttl(clock: FakeClock) -> None:
    cache = LocalCache(10, clock=clock)
    await cache.set("k", b"v", ttl_s=30)
    clock.now += 29.999
    assert await cache.get("k") == b"v"
    clock.now += 0.001
    assert await cache.get("k") is None
    assert len(cache) == 0


async def test_expired_entries_miss_in_batches(clock: FakeClock) -> None:
    cache = LocalCache(10, clock=clock)
    await cache.set_many({"a": b"1", "b": b"2"}, ttl_s=5)
    await cache.set("c", b"3", ttl_s=50)
    clock.now += 10
    assert await cache.get_many(["a", "b", "c", "d"]) == [None, None, b"3", None]


async def test_least_recently_used_entry_is_evicted_first(clock: FakeClock) -> None:
    cache = LocalCache(3, clock=clock)
    for key in ("a", "b", "c"):
        await cache.set(key, b"x", ttl_s=60)
    assert await cache.get("a") == b"x"  # a is now the most recently used
    await cache.set("d", b"x", ttl_s=60)
    assert await cache.get_many(["a", "b", "c", "d"]) == [b"x", None, b"x", b"x"]
    assert len(cache) == 3


async def test_byte_bound_evicts_until_it_fits(clock: FakeClock) -> None:
    cache = LocalCache(100, max_bytes=30, clock=clock)
    await cache.set("a", b"x" * 9, ttl_s=60)  # 10 bytes with the key
    await cache.set("b", b"x" * 9, ttl_s=60)
    await cache.set("c", b"x" * 19, ttl_s=60)  # 20 bytes: a must go
    assert await cache.get_many(["a", "b", "c"]) == [None, b"x" * 9, b"x" * 19]
    assert cache.size_bytes == 30


async def test_value_larger_than_the_bound_is_not_stored(clock: FakeClock) -> None:
    cache = LocalCache(100, max_bytes=10, clock=clock)
    await cache.set("a", b"12345", ttl_s=60)
    await cache.set("big", b"x" * 64, ttl_s=60)
    assert await cache.get("big") is None
    assert await cache.get("a") == b"12345"


async def test_overwrite_replaces_value_and_byte_count(clock: FakeClock) -> None:
    cache = LocalCache(10, clock=clock)
    await cache.set("k", b"long value", ttl_s=60)
    await cache.set("k", b"v", ttl_s=60)
    assert await cache.get("k") == b"v"
    assert cache.size_bytes == 2


@pytest.mark.parametrize("ttl", [0, -1])
async def test_non_positive_ttl_stores_nothing(clock: FakeClock, ttl: float) -> None:
    cache = LocalCache(10, clock=clock)
    await cache.set("k", b"v", ttl_s=ttl)
    await cache.set_many({"m": b"v"}, ttl_s=ttl)
    assert len(cache) == 0


async def test_counters_never_expire_and_survive_time(clock: FakeClock) -> None:
    cache = LocalCache(10, clock=clock)
    assert await cache.incr("n") == 1
    assert await cache.incr("n", 41) == 42
    clock.now += 10**9
    assert await cache.get("n") == b"42"


async def test_incr_of_a_non_integer_fails_open(clock: FakeClock) -> None:
    cache = LocalCache(10, clock=clock)
    await cache.set("k", b"text", ttl_s=60)
    assert await cache.incr("k") is None
    assert await cache.get("k") == b"text"


async def test_close_drops_everything(clock: FakeClock) -> None:
    cache = LocalCache(10, clock=clock)
    await cache.set("k", b"v", ttl_s=60)
    await cache.close()
    assert len(cache) == 0
    assert cache.size_bytes == 0


@pytest.mark.parametrize(("entries", "max_bytes"), [(0, 10), (10, 0)])
def test_bounds_must_be_positive(entries: int, max_bytes: int) -> None:
    with pytest.raises(ValueError, match="max_entries"):
        LocalCache(entries, max_bytes=max_bytes)
