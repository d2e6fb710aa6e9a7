"""Remembered turn blocks: keys per conversation prefix, round trips, misses, a real Redis."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import fakeredis
import pytest

from proxy.cache import LocalCache, RedisCache
from proxy.cache.blocks import CachedTurnBlocks, Recalled, Remembered, decode, encode, prefix_keys
from proxy.cache.protocol import Cache
from proxy.cache.redis_cache import connect
from tests.redis_server import RedisServer

BLOCK = Remembered("<memories>\nx\n</memories>", 0, 12, ("m1", "m2"))
SCOPE = ("alice", "learnings", "o200k_base")
TURNS: list[dict[str, Any]] = [
    {"role": "system", "content": "Be terse."},
    {"role": "user", "content": "a"},
    {"role": "assistant", "content": "ok"},
    {"role": "user", "content": "b"},
]


@pytest.fixture(params=["local", "fakeredis"])
async def blocks(request: pytest.FixtureRequest) -> AsyncIterator[CachedTurnBlocks]:
    cache: Cache = (
        LocalCache(100)
        if request.param == "local"
        else RedisCache(fakeredis.FakeAsyncRedis(), timeout_ms=2000)
    )
    yield CachedTurnBlocks(cache, ttl_s=60)
    await cache.close()


async def test_a_block_comes_back_under_its_key_only(blocks: CachedTurnBlocks) -> None:
    first, second = prefix_keys("acme", SCOPE, TURNS, [1, 3])
    assert first
    assert second
    assert first != second
    stamp = (await blocks.recall("acme", [])).stamp
    assert stamp is not None
    shown = replace(BLOCK, stamp=stamp)
    await blocks.remember(first, shown)
    assert (await blocks.recall("acme", [first, second])).found == [shown, None]


async def test_a_delete_lets_no_block_shown_before_it_come_back(blocks: CachedTurnBlocks) -> None:
    [key] = prefix_keys("acme", SCOPE, TURNS, [1])
    [elsewhere] = prefix_keys("other", SCOPE, TURNS, [1])
    assert key is not None
    assert elsewhere is not None
    for tenant, at in (("acme", key), ("other", elsewhere)):
        stamp = (await blocks.recall(tenant, [])).stamp
        assert stamp is not None
        await blocks.remember(at, replace(BLOCK, stamp=stamp))
    await blocks.forget("acme")
    after = await blocks.recall("acme", [key])
    assert after.found == [None]  # shown before the delete: gone
    assert (await blocks.recall("other", [elsewhere])).found != [None]  # another tenant's stays
    assert after.stamp is not None
    await blocks.remember(key, replace(BLOCK, stamp=after.stamp))  # shown after it: kept
    assert (await blocks.recall("acme", [key])).found == [replace(BLOCK, stamp=after.stamp)]


async def test_a_stamp_that_vanished_restarts_past_every_earlier_one(
    blocks: CachedTurnBlocks,
) -> None:
    [key] = prefix_keys("acme", SCOPE, TURNS, [1])
    assert key is not None
    await blocks.remember(key, BLOCK)  # shown under a stamp of 0: no stamp can be that
    first = await blocks.recall("acme", [key])
    assert first.found == [None]
    assert first.stamp is not None
    assert first.stamp > 1_700_000_000 * 1_000_000  # the wall clock, in microseconds


def test_keys_name_the_conversation_up_to_the_message_and_its_scope() -> None:
    [key] = prefix_keys("acme", SCOPE, TURNS, [1])
    assert key is not None
    assert key.startswith("mp:v1:acme:blk:")
    # What follows the message does not change its key; what precedes it or the scope does.
    assert prefix_keys("acme", SCOPE, TURNS[:2], [1]) == [key]
    changed = [{**TURNS[0], "content": "Be kind."}, *TURNS[1:]]
    assert prefix_keys("acme", SCOPE, changed, [1]) != [key]
    assert prefix_keys("acme", ("bob", *SCOPE[1:]), TURNS, [1]) != [key]
    assert prefix_keys("acme", (*SCOPE[:2], "cl100k_base"), TURNS, [1]) != [key]
    assert prefix_keys("other", SCOPE, TURNS, [1]) != [key]


def test_moving_a_cache_breakpoint_keeps_the_key() -> None:
    marked = [
        {"role": "system", "content": [{"type": "text", "text": "s", "cache_control": {}}]},
        {"role": "user", "content": "a", "cache_control": {"type": "ephemeral"}},
    ]
    plain = [
        {"role": "system", "content": [{"type": "text", "text": "s"}]},
        {"role": "user", "content": "a"},
    ]
    assert prefix_keys("acme", SCOPE, marked, [1]) == prefix_keys("acme", SCOPE, plain, [1])


def test_no_key_from_a_message_json_cannot_encode_on() -> None:
    turns = [{"role": "user", "content": "a"}, {"role": "user", "content": 2**70}, TURNS[3]]
    first, *rest = prefix_keys("acme", SCOPE, turns, [0, 1, 2])
    assert first is not None
    assert rest == [None, None]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"not json",
        b"[]",
        b'["", 0, 1, [], 0]',
        b'["b", -1, 1, [], 0]',
        b'["b", 0, 1, [3], 0]',
        b'["b", 0, 1, [], -1]',
        b'["b", 0, 1, []]',
    ],
)
def test_what_is_not_a_block_is_a_miss(data: bytes) -> None:
    assert decode(data) is None


def test_encoding_round_trips() -> None:
    assert decode(encode(BLOCK)) == BLOCK


async def test_zero_ttl_keeps_nothing() -> None:
    blocks = CachedTurnBlocks(LocalCache(10), ttl_s=0)
    [key] = prefix_keys("acme", SCOPE, TURNS, [1])
    assert key is not None
    await blocks.remember(key, BLOCK)
    assert await blocks.recall("acme", [key]) == Recalled([None], None)


async def test_a_cache_that_is_down_is_a_miss_never_an_error() -> None:
    client = connect("redis://127.0.0.1:1/0")  # nothing listens there
    blocks = CachedTurnBlocks(RedisCache(client, timeout_ms=200), ttl_s=60)
    await blocks.remember("k", BLOCK)
    assert await blocks.recall("acme", ["k"]) == Recalled([None], None)


async def test_blocks_outlive_a_worker_on_a_real_redis(shared_redis_server: RedisServer) -> None:
    [key] = prefix_keys("acme", SCOPE, TURNS, [1])
    assert key is not None
    one = CachedTurnBlocks(RedisCache(connect(shared_redis_server.url), timeout_ms=2000), 60)
    stamp = (await one.recall("acme", [])).stamp
    assert stamp is not None
    shown = replace(BLOCK, stamp=stamp)
    await one.remember(key, shown)
    await one.cache.close()
    other = CachedTurnBlocks(RedisCache(connect(shared_redis_server.url), timeout_ms=2000), 60)
    try:
        assert (await other.recall("acme", [key])).found == [shown]
    finally:
        await other.cache.close()
