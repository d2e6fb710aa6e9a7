"""Generations: creation from the clock, bumps, eviction, unavailable or corrupt counters."""

from __future__ import annotations

import asyncio

import fakeredis
import pytest

from proxy.cache import LocalCache, RedisCache, keys
from proxy.cache.generations import Generations

NOW_S = 1_700_000_000.0
SEED = 1_700_000_000_000_000


@pytest.fixture(params=["local", "fakeredis"])
def generations(request: pytest.FixtureRequest) -> Generations:
    cache = (
        LocalCache(100)
        if request.param == "local"
        else RedisCache(fakeredis.FakeAsyncRedis(), timeout_ms=2000)
    )
    return Generations(cache, wall_clock=lambda: NOW_S)


async def test_a_new_tenant_starts_at_the_clock(generations: Generations) -> None:
    assert await generations.current("acme") == SEED
    assert await generations.current("acme") == SEED
    assert await generations.bump("acme") == SEED + 1
    assert await generations.current("acme") == SEED + 1


async def test_first_bump_also_starts_at_the_clock(generations: Generations) -> None:
    assert await generations.bump("acme") == SEED + 1
    assert await generations.bump("acme") == SEED + 2


async def test_concurrent_first_reads_agree_once_settled(generations: Generations) -> None:
    first = await asyncio.gather(*(generations.current("acme") for _ in range(10)))
    assert all(value is not None and value >= SEED for value in first)
    settled = await generations.current("acme")
    assert settled == max(v for v in first if v is not None)


async def test_tenants_are_independent(generations: Generations) -> None:
    await generations.bump("acme")
    await generations.bump("acme")
    assert await generations.current("globex") == SEED


async def test_a_corrupt_counter_means_no_generation(generations: Generations) -> None:
    await generations.cache.set(keys.generation_key("acme"), b"garbage", ttl_s=60)
    assert await generations.current("acme") is None
    assert await generations.bump("acme") is None


async def test_unavailable_cache_means_no_generation() -> None:
    dead = RedisCache(fakeredis.FakeAsyncRedis(connected=False), timeout_ms=100)
    generations = Generations(dead)
    assert await generations.current("acme") is None
    assert await generations.bump("acme") is None
