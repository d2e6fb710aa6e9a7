"""The cache contract: bytes in, bytes out, and failures that never reach the caller.

Both implementations (``LocalCache`` in-process, ``RedisCache`` over the network) honour the same
promise: no method raises because the backend is down or slow. A read that cannot be served is a
miss (``None``), a write that cannot be done is silently dropped, and ``incr`` answers ``None``.
Callers therefore never wrap cache calls in ``try``: memory is an enhancement, the cache doubly so.
A call that is not served is noted in the caller's ``cache_outcome`` scope (``outcome.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Protocol, runtime_checkable

# Every key memproxy writes starts with this; bump the version when a value's encoding changes so
# old entries are ignored rather than misread after a rolling deploy.
KEY_PREFIX = "mp:v1:"

# Reasons passed to an ErrorHook.
REASON_TIMEOUT = "timeout"
REASON_ERROR = "error"
REASON_CIRCUIT_OPEN = "circuit_open"

ErrorHook = Callable[[str, str], None]
"""Called as ``hook(operation, reason)`` for each cache call that could not be served.

``operation`` is the method name (``get``, ``set_many``, ...); ``reason`` is one of
``timeout``, ``error`` or ``circuit_open``. The hook must be cheap and must not raise.
"""


@runtime_checkable
class Cache(Protocol):
    """A byte cache with TTLs, batch calls and atomic counters; it never raises on failure."""

    async def get(self, key: str) -> bytes | None:
        """Return the value of ``key``, or ``None`` if absent, expired or unreachable."""
        ...

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Return the values of ``keys`` in order (one round trip), ``None`` for each miss."""
        ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` under ``key`` for ``ttl_s`` seconds (> 0)."""
        ...

    async def set_many(self, items: Mapping[str, bytes], ttl_s: float) -> None:
        """Store every item for ``ttl_s`` seconds in one round trip."""
        ...

    async def incr(self, key: str, amount: int = 1) -> int | None:
        """Atomically add ``amount`` to the integer at ``key`` (absent counts as 0), no expiry.

        Returns the new value, or ``None`` when the cache could not do it.
        """
        ...

    async def delete(self, *keys: str) -> None:
        """Remove ``keys``; absent keys are ignored."""
        ...

    async def ping(self) -> bool:
        """Return whether the backend answers now (for readiness checks)."""
        ...

    async def close(self) -> None:
        """Release connections; the cache must not be used afterwards."""
        ...
