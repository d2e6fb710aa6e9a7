"""Per-tenant generation counters: every write bumps one, every search-result key contains it.

A counter can vanish (LRU eviction, Redis ``allkeys-*`` eviction, a flush). Restarting it at 0
could meet a number an earlier counter used, whose results may still be cached; so a missing
counter restarts at the wall clock in microseconds, above anything an earlier one could have
reached (that would take more than one write per microsecond). See ADR 0031.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from proxy.cache import codec, keys, read_ahead
from proxy.cache.protocol import Cache

MICROS = 1_000_000


class GenerationSource(Protocol):
    """Where tenants' generations live: the cache itself (``Generations``) or, with several
    workers and no Redis, a file they share (``shared_generations.SharedGenerations``)."""

    async def current(self, tenant: str) -> int | None:
        """Return the tenant's generation; ``None`` when it is unavailable."""
        ...

    async def bump(self, tenant: str) -> int | None:
        """Advance the tenant's generation; returns the new value."""
        ...


class Generations:
    """Reads and bumps tenants' generations in a ``Cache``; ``None`` when it is unavailable."""

    def __init__(self, cache: Cache, wall_clock: Callable[[], float] = time.time) -> None:
        self.cache = cache
        self._wall_clock = wall_clock

    async def current(self, tenant: str) -> int | None:
        """Return the tenant's generation, creating it if absent (read ahead: ``read_ahead``)."""
        key = keys.generation_key(tenant)
        data = read_ahead.take(key)
        if data is None:
            data = await self.cache.get(key)
        if data is None:
            return await self.cache.incr(key, self._seed())
        try:
            return codec.decode_count(data)
        except codec.CacheDecodeError:
            return None

    async def bump(self, tenant: str) -> int | None:
        """Advance the tenant's generation; returns the new value."""
        key = keys.generation_key(tenant)
        value = await self.cache.incr(key)
        if value == 1:  # the counter was absent: move it past anything an evicted one reached
            value = await self.cache.incr(key, self._seed())
        return value

    def _seed(self) -> int:
        return int(self._wall_clock() * MICROS)
