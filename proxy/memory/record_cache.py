"""``RecordCache``: decoded memory records by point key, so a search skips payloads it has seen.

Reading 50 payloads from the shard and decoding them cost 0.4 ms of a 10k-memory search; a
cache hit costs a dict lookup (adr/0082). Only a store that sees every write may keep one: the
embedded store (one process, enforced at start). Each write replaces or drops its entries and
bumps a generation; a reader that fetched records from the shard keeps them only if no write
happened since it looked (``lookup`` returns the generation), so a slow reader never puts back
a record a concurrent write replaced.

A retrieval count is not a write here: the flush updates the cached copies of counted records
without a new generation (a bump made every search that read the shard meanwhile throw its
records away, every 5 s for ~70 calls). What the generation guards against, a reader putting
back a copy older than the cache's, cannot happen for counts: ``store`` takes each record's
count from ``count_of`` (the count table, updated before ``update_counts``) under the lock, so
a copy stored before the update is updated by it and one stored after it reads the new count.

Keys are the integers of the points' UUIDs (``edge_query.key_of``): hashing an int is a fraction
of a ``uuid.UUID``'s Python ``__hash__``. Bounded: least recently used entries go first, recency
counted while the cache is full (with room, nothing is evicted: reads leave the order alone).
``max_entries`` 0 disables the cache. Safe to share between the store's threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields
from operator import attrgetter

from proxy.context.records import MemoryRecord
from proxy.defaults import RECORD_CACHE_ENTRIES
from proxy.errors import ConfigError

DEFAULT_MAX_ENTRIES = RECORD_CACHE_ENTRIES  # ~1 KB each decoded: ~20 MB
_FIELDS = tuple(f.name for f in fields(MemoryRecord))
_VALUES = attrgetter(*_FIELDS)
_COUNT_AT = _FIELDS.index("retrieval_count")


def with_count(record: MemoryRecord, count: int) -> MemoryRecord:
    """``replace(record, retrieval_count=count)`` in half its time (~2 us against ~4: it
    needs no keyword arguments or field checks): a flush replaces ~1,000 cached records."""
    values = list(_VALUES(record))
    values[_COUNT_AT] = count
    return MemoryRecord(*values)


class RecordCache:
    """A thread-safe LRU of ``MemoryRecord`` by point key with write generations."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        count_of: Callable[[int], int | None] | None = None,
    ) -> None:
        if max_entries < 0:
            raise ConfigError(
                f"store.record_cache_entries must be >= 0, got {max_entries}",
                param="store.record_cache_entries",
            )
        self.max_entries = max_entries
        self._entries: OrderedDict[int, MemoryRecord] = OrderedDict()
        self._lock = threading.Lock()
        self._generation = 0
        self._count_of = count_of

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def generation(self) -> int:
        """The write generation now, for a ``store`` of records read from here on."""
        return self._generation

    def lookup(self, keys: Iterable[int]) -> tuple[dict[int, MemoryRecord], int]:
        """Return the cached records among ``keys`` and the generation to pass to ``store``."""
        with self._lock:
            entries = self._entries
            get = entries.get
            found = {key: record for key in keys if (record := get(key)) is not None}
            if len(entries) >= self.max_entries:
                # Recency matters only where the next store evicts: a cache with room (every
                # store that fits it, once warmed) skips ~80 moves a search (docs/benchmarks.md).
                move = entries.move_to_end
                for key in found:
                    move(key)
            return found, self._generation

    def store(self, records: Mapping[int, MemoryRecord], generation: int) -> bool:
        """Keep ``records`` unless a write happened since ``generation``; True if kept."""
        if not self.max_entries or not records:
            return False
        with self._lock:
            if generation != self._generation:
                return False
            entries = self._entries
            count_of = self._count_of
            for key, record in records.items():
                count = count_of(key) if count_of is not None else None
                if count is not None and count != record.retrieval_count:
                    record = with_count(record, count)  # counted since it was read
                entries[key] = record
                entries.move_to_end(key)
            while len(entries) > self.max_entries:
                entries.popitem(last=False)
            return True

    def invalidate(self, keys: Iterable[int]) -> None:
        """Drop ``keys`` (they were written or deleted); readers in flight keep nothing."""
        with self._lock:
            self._generation += 1
            for key in keys:
                self._entries.pop(key, None)

    def update_counts(self, counts: Mapping[int, int]) -> None:
        """Apply new retrieval counts the store just recorded (in ``count_of``'s table first)
        to the cached copies; readers in flight keep theirs (see the module docstring)."""
        with self._lock:
            if self._count_of is None:
                self._generation += 1  # nothing fixes a reader's copy at ``store``: drop it
            entries = self._entries
            for key, count in counts.items():
                record = entries.get(key)
                if record is not None:
                    entries[key] = with_count(record, count)

    def clear(self) -> None:
        """Drop everything (a write whose points are not known one by one)."""
        with self._lock:
            self._generation += 1
            self._entries.clear()
