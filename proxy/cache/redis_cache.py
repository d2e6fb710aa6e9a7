"""``RedisCache``: the ``Cache`` contract on ``redis.asyncio``, failing open.

Every call runs under its own deadline (a few milliseconds) and behind a circuit breaker. A
timeout or error becomes a miss or a dropped write, is reported to the optional error hook, and
counts towards opening the breaker; while it is open the call costs no I/O at all. A call that
is not served is also noted in the caller's ``cache_outcome`` scope (``outcome.py``), which is
how a request learns that *its* cache calls failed.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ResponseError

from proxy.cache.breaker import CircuitBreaker
from proxy.cache.outcome import record_unserved
from proxy.cache.protocol import REASON_CIRCUIT_OPEN, REASON_ERROR, REASON_TIMEOUT, ErrorHook
from proxy.defaults import CACHE_CONNECT_TIMEOUT_MS as DEFAULT_CONNECT_TIMEOUT_MS
from proxy.defaults import CACHE_MAX_CONNECTIONS as DEFAULT_MAX_CONNECTIONS
from proxy.defaults import CACHE_TIMEOUT_MS

DEFAULT_TIMEOUT_MS = CACHE_TIMEOUT_MS

T = TypeVar("T")

log = logging.getLogger("memproxy.cache")


def connect(
    redis_url: str,
    *,
    connect_timeout_ms: float = DEFAULT_CONNECT_TIMEOUT_MS,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
) -> aioredis.Redis:
    """Return a client with its own pool; no I/O happens until the first command."""
    return aioredis.Redis.from_url(
        redis_url,
        socket_connect_timeout=connect_timeout_ms / 1000,
        socket_timeout=1.0,
        max_connections=max_connections,
        # redis-py retries failed commands by default; a retry only stretches a stall here.
        retry=Retry(NoBackoff(), 0),
        decode_responses=False,
    )


class RedisCache:
    """The ``Cache`` contract on a ``redis.asyncio`` client, with deadlines and a breaker."""

    def __init__(
        self,
        client: Any,
        *,
        timeout_ms: float = DEFAULT_TIMEOUT_MS,
        breaker: CircuitBreaker | None = None,
        on_error: ErrorHook | None = None,
    ) -> None:
        # ``client`` is a redis.asyncio.Redis or anything with its API (fakeredis in tests).
        self.client = client
        self.timeout_s = timeout_ms / 1000
        self.breaker = breaker or CircuitBreaker()
        self._on_error = on_error

    async def _call(
        self, op: str, fn: Callable[[], Awaitable[T]], fallback: T, *, behind: bool = False
    ) -> T:
        if not self.breaker.allow():
            record_unserved()
            self._report(op, REASON_CIRCUIT_OPEN)
            return fallback
        try:
            if behind:
                # A write is started in the request's task and finished in a task of its own
                # (``proxy.eager``): the deadline binds to the task it is entered in, so it is
                # entered after a first wait, or it would cancel the request, not the write.
                await asyncio.sleep(0)
            async with asyncio.timeout(self.timeout_s):
                result = await fn()
        except TimeoutError:
            record_unserved()
            self.breaker.record_failure(f"{op} timed out after {self.timeout_s * 1000:g} ms")
            self._report(op, REASON_TIMEOUT)
            return fallback
        except asyncio.CancelledError:
            self.breaker.release_probe()
            raise
        except ResponseError:
            # Redis answered (e.g. INCR of a non-integer): it is up, the command was wrong.
            self.breaker.record_success()
            self._report(op, REASON_ERROR)
            return fallback
        except Exception as exc:  # any client failure is a miss: memory never fails a request
            record_unserved()
            self.breaker.record_failure(f"{op}: {type(exc).__name__}: {exc}")
            self._report(op, REASON_ERROR)
            return fallback
        self.breaker.record_success()
        return result

    def _report(self, op: str, reason: str) -> None:
        if self._on_error is None:
            return
        try:
            self._on_error(op, reason)
        except Exception:  # a broken metrics hook must not break the cache
            log.exception("cache error hook failed")

    async def get(self, key: str) -> bytes | None:
        """Return the value of ``key`` or ``None`` (absent, or Redis unavailable)."""
        value = await self._call("get", lambda: self.client.get(key), None)
        return bytes(value) if value is not None else None

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Return the values of ``keys`` with one ``MGET``; all misses if Redis is unavailable."""
        if not keys:
            return []
        values: list[Any] = await self._call("get_many", lambda: self.client.mget(keys), [])
        if not values:
            return [None] * len(keys)
        return [bytes(v) if v is not None else None for v in values]

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        """``SET key value PX ttl``; dropped if Redis is unavailable."""
        ttl_ms = max(1, round(ttl_s * 1000))
        if ttl_s > 0:
            await self._call(
                "set", lambda: self.client.set(key, value, px=ttl_ms), None, behind=True
            )

    async def set_many(self, items: Mapping[str, bytes], ttl_s: float) -> None:
        """One pipelined round trip of ``SET ... PX``; dropped if Redis is unavailable."""
        if not items or ttl_s <= 0:
            return
        ttl_ms = max(1, round(ttl_s * 1000))

        async def run() -> None:
            pipe = self.client.pipeline(transaction=False)
            for key, value in items.items():
                pipe.set(key, value, px=ttl_ms)
            await pipe.execute()

        await self._call("set_many", run, None, behind=True)

    async def incr(self, key: str, amount: int = 1) -> int | None:
        """Atomic ``INCRBY``; ``None`` if Redis is unavailable or the value is not an integer."""
        value = await self._call("incr", lambda: self.client.incrby(key, amount), None)
        return int(value) if value is not None else None

    async def delete(self, *keys: str) -> None:
        """``DEL keys``; dropped if Redis is unavailable."""
        if keys:
            await self._call("delete", lambda: self.client.delete(*keys), None)

    async def ping(self) -> bool:
        """``PING`` under the deadline, also while the breaker is open (a success closes it)."""
        try:
            async with asyncio.timeout(self.timeout_s):
                await self.client.ping()
        except asyncio.CancelledError:
            raise
        except Exception:
            record_unserved()
            return False
        self.breaker.record_success()
        return True

    async def close(self) -> None:
        """Close the client and its connection pool."""
        try:
            await self.client.aclose()
        except Exception:
            log.debug("closing the redis client failed", exc_info=True)
