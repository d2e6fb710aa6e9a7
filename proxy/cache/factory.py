"""``create_cache``: the one place that picks Redis or the in-process LRU, from plain values."""

from __future__ import annotations

import time
from collections.abc import Callable

from proxy.cache.breaker import CircuitBreaker
from proxy.cache.local import LocalCache
from proxy.cache.protocol import Cache, ErrorHook
from proxy.cache.redis_cache import DEFAULT_TIMEOUT_MS, RedisCache, connect
from proxy.defaults import (
    CACHE_BREAKER_COOLDOWN_S,
    CACHE_BREAKER_FAILURES,
    CACHE_BREAKER_MIN_FAILURE_SPAN_S,
    CACHE_CONNECT_TIMEOUT_MS,
    CACHE_LOCAL_MAX_BYTES,
    CACHE_MAX_CONNECTIONS,
)
from proxy.errors import ConfigError


def create_cache(
    redis_url: str | None,
    local_max_entries: int,
    *,
    local_max_bytes: int = CACHE_LOCAL_MAX_BYTES,
    timeout_ms: float = DEFAULT_TIMEOUT_MS,
    connect_timeout_ms: float = CACHE_CONNECT_TIMEOUT_MS,
    max_connections: int = CACHE_MAX_CONNECTIONS,
    breaker_failures: int = CACHE_BREAKER_FAILURES,
    breaker_cooldown_s: float = CACHE_BREAKER_COOLDOWN_S,
    breaker_min_failure_span_s: float = CACHE_BREAKER_MIN_FAILURE_SPAN_S,
    on_error: ErrorHook | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> Cache:
    """Return a ``RedisCache`` for ``redis_url``, or a ``LocalCache`` when it is empty/``None``.

    No I/O happens here: Redis is contacted on first use, so the app starts (and serves, without
    a shared cache) even when Redis is down. The caller (the app lifespan) must ``close()`` it.
    A malformed URL raises ``ConfigError`` at start.
    """
    if not redis_url:
        return LocalCache(local_max_entries, max_bytes=local_max_bytes, clock=clock)
    try:
        client = connect(
            redis_url, connect_timeout_ms=connect_timeout_ms, max_connections=max_connections
        )
    except ValueError as exc:
        # Never echo the URL: it may carry a password.
        raise ConfigError(
            f"cache.redis_url (MEMPROXY_REDIS_URL) is not a Redis URL: {exc}"
        ) from exc
    breaker = CircuitBreaker(
        failure_threshold=breaker_failures,
        cooldown_s=breaker_cooldown_s,
        min_failure_span_s=breaker_min_failure_span_s,
        clock=clock,
    )
    return RedisCache(client, timeout_ms=timeout_ms, breaker=breaker, on_error=on_error)
