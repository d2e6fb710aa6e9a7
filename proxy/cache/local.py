"""``LocalCache``: a bounded in-process LRU with TTLs, used when no Redis URL is configured.

It lives in one process, so with several workers each has its own copy: generation bumps made in
one worker are not seen by another (see ADR 0031 for what the pipeline does about that).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence

from proxy.defaults import CACHE_LOCAL_MAX_BYTES as DEFAULT_MAX_BYTES
from proxy.defaults import CACHE_LOCAL_MAX_ENTRIES as DEFAULT_MAX_ENTRIES

# Counters carry no TTL; they expire never (only LRU eviction removes them).
NO_EXPIRY = float("inf")


class LocalCache:
    """An LRU bounded by entry count and by bytes, with per-entry TTL and an injectable clock.

    Expired entries are dropped lazily, when read or when they reach the LRU end. All methods
    are ``async`` to satisfy ``Cache`` but never await, so each is atomic on the event loop.
    """

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_entries < 1 or max_bytes < 1:
            raise ValueError("LocalCache needs max_entries >= 1 and max_bytes >= 1")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._clock = clock
        self._entries: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._bytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def size_bytes(self) -> int:
        """Bytes held by keys and values (an estimate of the real footprint)."""
        return self._bytes

    def _lookup(self, key: str, now: float) -> bytes | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        expires_at, value = entry
        if expires_at <= now:
            self._remove(key)
            return None
        self._entries.move_to_end(key)
        return value

    def _remove(self, key: str) -> None:
        entry = self._entries.pop(key, None)
        if entry is not None:
            self._bytes -= len(key) + len(entry[1])

    def _store(self, key: str, value: bytes, expires_at: float) -> None:
        self._remove(key)
        size = len(key) + len(value)
        if size > self.max_bytes:
            return  # would evict everything else and still not fit
        self._entries[key] = (expires_at, value)
        self._bytes += size
        while len(self._entries) > self.max_entries or self._bytes > self.max_bytes:
            oldest = next(iter(self._entries))
            self._remove(oldest)

    async def get(self, key: str) -> bytes | None:
        """Return the live value of ``key`` and mark it recently used."""
        return self._lookup(key, self._clock())

    async def get_many(self, keys: Sequence[str]) -> list[bytes | None]:
        """Return the live values of ``keys`` in order."""
        now = self._clock()
        return [self._lookup(key, now) for key in keys]

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` for ``ttl_s`` seconds, evicting least recently used entries."""
        if ttl_s > 0:
            self._store(key, value, self._clock() + ttl_s)

    async def set_many(self, items: Mapping[str, bytes], ttl_s: float) -> None:
        """Store every item for ``ttl_s`` seconds."""
        if ttl_s <= 0:
            return
        expires_at = self._clock() + ttl_s
        for key, value in items.items():
            self._store(key, value, expires_at)

    async def incr(self, key: str, amount: int = 1) -> int | None:
        """Add ``amount`` to the counter at ``key``; ``None`` if the value is not an integer."""
        current = self._lookup(key, self._clock())
        try:
            value = (int(current) if current is not None else 0) + amount
        except ValueError:
            return None
        self._store(key, str(value).encode(), NO_EXPIRY)
        return value

    async def delete(self, *keys: str) -> None:
        """Remove ``keys``."""
        for key in keys:
            self._remove(key)

    async def ping(self) -> bool:
        """Always ``True``: the process is its own backend."""
        return True

    async def close(self) -> None:
        """Drop every entry."""
        self._entries.clear()
        self._bytes = 0
