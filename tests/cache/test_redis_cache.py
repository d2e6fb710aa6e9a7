"""RedisCache fails open: errors, hangs, a killed or frozen redis-server, and recovery."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.cache import CircuitBreaker, RedisCache, RequestCache, cache_outcome, create_cache
from proxy.cache.redis_cache import connect
from proxy.errors import ConfigError
from tests.redis_server import RedisServer, free_port

# Far above a per-call deadline, far below a stall: checks "no stall", it is not a speed target.
NO_STALL_S = 1.0


class Events:
    """Collects (operation, reason) error-hook calls."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, op: str, reason: str) -> None:
        self.seen.append((op, reason))

    def reasons(self) -> list[str]:
        return [reason for _, reason in self.seen]


class BrokenClient:
    """Every command fails the way a refused connection does; counts the calls that reach it."""

    def __init__(self) -> None:
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        async def fail(*args: object, **kwargs: object) -> None:
            self.calls += 1
            raise RedisConnectionError("Connection refused")

        return fail

    def pipeline(self, transaction: bool = False) -> Any:
        client = self

        class Pipe:
            def set(self, *args: object, **kwargs: object) -> None:
                pass

            async def execute(self) -> None:
                client.calls += 1
                raise RedisConnectionError("Connection refused")

        return Pipe()


class HangingClient:
    """Every command waits forever, like a Redis that stopped answering."""

    async def get(self, key: str) -> bytes:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def ping(self) -> bool:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


CALLS = [
    ("get", lambda c: c.get("k"), None),
    ("get_many", lambda c: c.get_many(["a", "b"]), [None, None]),
    ("set", lambda c: c.set("k", b"v", 60), None),
    ("set_many", lambda c: c.set_many({"k": b"v"}, 60), None),
    ("incr", lambda c: c.incr("n"), None),
    ("delete", lambda c: c.delete("k"), None),
]


@pytest.mark.parametrize(("op", "call", "expected"), CALLS)
async def test_each_call_turns_an_error_into_a_miss(op: str, call: Any, expected: object) -> None:
    events = Events()
    cache = RedisCache(BrokenClient(), on_error=events)
    assert await call(cache) == expected
    assert events.seen == [(op, "error")]


async def test_breaker_opens_and_then_costs_no_io() -> None:
    client, events = BrokenClient(), Events()
    cache = RedisCache(
        client, breaker=CircuitBreaker(failure_threshold=3, min_failure_span_s=0), on_error=events
    )
    with cache_outcome() as outcome:
        for _ in range(100):
            assert await cache.get("k") is None
    assert client.calls == 3
    assert cache.breaker.state == "open"
    assert outcome.served is False
    assert outcome.unserved == 100  # failed and skipped calls alike
    assert events.reasons() == ["error"] * 3 + ["circuit_open"] * 97


async def test_hung_backend_times_out() -> None:
    events = Events()
    cache = RedisCache(HangingClient(), timeout_ms=20, on_error=events)
    started = time.perf_counter()
    assert await cache.get("k") is None
    assert time.perf_counter() - started < NO_STALL_S
    assert events.seen == [("get", "timeout")]
    assert await cache.ping() is False


def half_open_breaker() -> CircuitBreaker:
    """A breaker past its cooldown: the next call is its one probe."""
    clock = [0.0]
    breaker = CircuitBreaker(
        failure_threshold=1, cooldown_s=1, min_failure_span_s=0, clock=lambda: clock[0]
    )
    breaker.record_failure()
    clock[0] = 1.0
    return breaker


async def test_caller_cancellation_propagates_and_frees_the_probe() -> None:
    breaker = half_open_breaker()
    cache = RedisCache(HangingClient(), timeout_ms=60_000, breaker=breaker)
    task = asyncio.create_task(cache.get("k"))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert breaker.allow()  # the next call may probe


async def test_a_write_cancelled_before_its_first_wait_ends_frees_the_probe() -> None:
    """A write yields once before its deadline (``_call``'s ``behind``): cancelled there, it
    gives the half-open breaker's probe back, or no call would ever probe again."""
    breaker = half_open_breaker()
    cache = RedisCache(HangingClient(), timeout_ms=60_000, breaker=breaker)
    write = cache.set("k", b"v", 60)
    assert write.send(None) is None  # stopped at that first yield, the probe claimed
    with pytest.raises(asyncio.CancelledError):
        write.throw(asyncio.CancelledError())
    assert breaker.allow()  # the next call may probe


async def test_a_raising_error_hook_does_not_break_the_cache() -> None:
    def hook(op: str, reason: str) -> None:
        raise RuntimeError("metrics down")

    cache = RedisCache(BrokenClient(), on_error=hook)
    assert await cache.get("k") is None


async def test_factory_picks_the_backend_from_the_url() -> None:
    local = create_cache(None, 10)
    assert type(local).__name__ == "LocalCache"
    assert type(create_cache("", 10)).__name__ == "LocalCache"
    remote = create_cache("redis://127.0.0.1:1/0", 10, timeout_ms=5, breaker_failures=2)
    assert isinstance(remote, RedisCache)
    assert remote.breaker.failure_threshold == 2
    await remote.close()


@pytest.mark.parametrize("url", ["http://cache:6379", "redis://:secret@host:port/0"])
def test_a_malformed_url_is_a_config_error_without_the_secret(url: str) -> None:
    with pytest.raises(ConfigError, match="MEMPROXY_REDIS_URL") as caught:
        create_cache(url, 10)
    assert "secret" not in str(caught.value)


async def test_nothing_listening_is_a_miss_not_an_error() -> None:
    events = Events()
    # A generous deadline so that a busy machine cannot turn "refused" into "timed out".
    url = f"redis://127.0.0.1:{free_port()}/0"
    cache = create_cache(url, 10, timeout_ms=1000, on_error=events)
    assert await cache.get("k") is None
    assert await cache.incr("n") is None
    assert await cache.ping() is False
    assert events.reasons() == ["error", "error"]
    await cache.close()


@pytest.mark.redis
async def test_redis_killed_mid_run_then_back(redis_server: RedisServer) -> None:
    events = Events()
    breaker = CircuitBreaker(failure_threshold=3, cooldown_s=0.3, min_failure_span_s=0)
    cache = RedisCache(connect(redis_server.url), timeout_ms=200, breaker=breaker, on_error=events)
    await cache.set("k", b"v", 60)
    assert await cache.get("k") == b"v"

    redis_server.kill()
    started = time.perf_counter()
    for _ in range(50):
        assert await cache.get("k") is None
        await cache.set("k", b"v", 60)
    assert time.perf_counter() - started < NO_STALL_S
    assert breaker.state == "open"
    assert events.reasons()[:3] == ["error"] * 3
    assert set(events.reasons()[3:]) == {"circuit_open"}

    redis_server.start()  # same port, empty (no persistence)
    deadline = time.monotonic() + 10
    while await cache.get("k") is None:
        await cache.set("k", b"back", 60)
        assert time.monotonic() < deadline, "the cache never recovered"
        await asyncio.sleep(0.05)
    with cache_outcome() as outcome:
        assert await cache.get("k") == b"back"
    assert str(breaker.state) == "closed"
    assert outcome.served is True
    await cache.close()


@pytest.mark.redis
async def test_frozen_redis_costs_one_timeout_per_call_until_the_breaker_opens(
    redis_server: RedisServer,
) -> None:
    events = Events()
    breaker = CircuitBreaker(failure_threshold=2, cooldown_s=0.3, min_failure_span_s=0)
    cache = RedisCache(connect(redis_server.url), timeout_ms=50, breaker=breaker, on_error=events)
    await cache.set("k", b"v", 60)

    redis_server.pause()
    try:
        for _ in range(2):
            started = time.perf_counter()
            assert await cache.get("k") is None
            assert time.perf_counter() - started < NO_STALL_S
        started = time.perf_counter()
        for _ in range(100):
            assert await cache.get("k") is None
        open_cost = time.perf_counter() - started
        assert breaker.state == "open"
        assert events.reasons() == ["timeout"] * 2 + ["circuit_open"] * 100
    finally:
        redis_server.resume()
    assert open_cost < NO_STALL_S

    deadline = time.monotonic() + 10
    while await cache.get("k") != b"v":
        assert time.monotonic() < deadline, "the cache never recovered"
        await asyncio.sleep(0.05)
    assert str(breaker.state) == "closed"
    await cache.close()


@pytest.mark.redis
async def test_a_timed_out_reply_is_never_read_as_the_next_calls_answer(
    redis_server: RedisServer,
) -> None:
    # The classic bug of cancelled Redis calls: the late reply to GET a stays in the socket and
    # the next command on that connection reads it. Every key here has a distinct value.
    cache = RedisCache(connect(redis_server.url, max_connections=1), timeout_ms=50)
    values = {f"key{i}": f"value{i}".encode() for i in range(20)}
    await cache.set_many(values, 60)
    redis_server.pause()
    try:
        assert await cache.get("key0") is None
        assert await cache.get_many(["key1", "key2"]) == [None, None]
        await cache.set_many({"key4": b"late write", "key5": b"late write"}, 60)
        assert await cache.incr("counter") is None
    finally:
        redis_server.resume()
    names = list(values)
    deadline = time.monotonic() + 10
    while await cache.get("key3") is None:
        assert time.monotonic() < deadline, "the cache never recovered"
        await asyncio.sleep(0.05)
    # The late pipelined SETs may or may not have run once Redis woke up; either way each key
    # holds its own value or the late one, never another key's.
    for name in ("key4", "key5"):
        now = await cache.get(name)
        assert now in (values[name], b"late write")
        values[name] = now
    for _ in range(3):
        assert await cache.get_many(names) == list(values.values())
        for name in names:
            assert await cache.get(name) == values[name]
        assert await cache.incr("fresh") is not None
    await cache.close()


class StubEmbedder:
    name = "stub"
    dimensions = 4

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.ones((len(texts), 4), dtype=np.float32)


@pytest.mark.redis
async def test_request_path_goes_on_without_redis(redis_server: RedisServer) -> None:
    rc = RequestCache(RedisCache(connect(redis_server.url), timeout_ms=200))
    with cache_outcome() as before:
        assert await rc.count_tokens("acme", "o200k_base", ["warm"]) == [1]
    assert before.served is True
    redis_server.kill()
    with cache_outcome() as after:
        assert await rc.retrieval_key("acme", "alice", "q", top_k=5, sources=None) is None
        assert (await rc.embed("acme", StubEmbedder(), "q")).tolist() == [1.0] * 4
        assert await rc.count_tokens("acme", "o200k_base", ["hello world"]) == [2]
        assert await rc.bump_generation("acme") is None
    assert after.served is False
    await rc.close()
