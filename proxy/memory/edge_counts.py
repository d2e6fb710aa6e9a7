"""Retrieval counts of the embedded store, kept beside the shard instead of in its payloads.

Every injected memory gets ``retrieval_count += 1``. Written as shard payload updates, these
counts were the largest cost of the memory path on real text (adr/0103): Qdrant copies every
point whose payload changes out of its indexed segment into the appendable, unindexed one, and
the writes ran on the store's threads while requests searched. So the embedded store keeps a
memory's count here once it has been retrieved: a dict of point key (``edge_ids``: the 64-bit
point id, or the integer of the point's UUID) to count, overriding the
payload's (which stays the count the memory was written with), merged into records as they are
read. The table is saved to one small file next to the shard when it changed, at most every
``SAVE_INTERVAL_S`` and on close; a process killed in between loses the counts of that window,
as the counter's pending increments always could (they only nudge the frequency score).

File: ``MAGIC``, then per point its key as 16 big-endian bytes (a UUID's bytes, or a 64-bit
id zero-padded: one format for both id schemes) and the count as a little-endian u64, written
to a temporary file and renamed over the old one (a reader never sees half a file).
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import replace
from pathlib import Path

from proxy.context.records import MemoryRecord

COUNTS_FILE = "retrieval_counts.bin"
MAGIC = b"memproxy-counts-1\n"
SAVE_INTERVAL_S = 5.0
ENTRY = struct.Struct("<16sQ")
LOGGER = logging.getLogger("memproxy.store")


class RetrievalCounts:
    """Thread-safe point key -> retrieval count, persisted to ``path`` (``None``: memory only)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self._counts: dict[int, int] = {}
        self._lock = threading.Lock()
        self._save_lock = threading.Lock()
        self._dirty = False
        self._saved_at = time.monotonic()

    @classmethod
    def load(cls, path: Path) -> RetrievalCounts:
        """The table saved at ``path``; empty if there is none (a new store, or one from before
        the table existed, whose counts are still in the payloads)."""
        table = cls(path)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return table
        body = data[len(MAGIC) :]
        if not data.startswith(MAGIC) or len(body) % ENTRY.size:
            # Counts only nudge a score: a damaged file costs them, never the store.
            LOGGER.warning("ignoring a damaged retrieval count file at %s", path)
            return table
        table._counts = {int.from_bytes(key): count for key, count in ENTRY.iter_unpack(body)}
        return table

    def __len__(self) -> int:
        return len(self._counts)

    def get(self, pid: int) -> int | None:
        """The count of ``pid`` if it was retrieved since it was written, else ``None``."""
        return self._counts.get(pid)

    def merged(self, pid: int, record: MemoryRecord) -> MemoryRecord:
        """``record`` (read from ``pid``'s payload) with its current retrieval count."""
        count = self._counts.get(pid)
        return record if count is None else replace(record, retrieval_count=count)

    def set_many(self, counts: Mapping[int, int]) -> None:
        """Record new counts (the caller serialises read-modify-write rounds)."""
        if counts:
            with self._lock:
                self._counts.update(counts)
                self._dirty = True

    def drop(self, pids: Iterable[int]) -> None:
        """Forget ``pids``: they were rewritten (their payload carries the count again) or
        deleted."""
        with self._lock:
            for pid in pids:
                if self._counts.pop(pid, None) is not None:
                    self._dirty = True

    def save_if_due(self) -> None:
        """Save when the table changed and ``SAVE_INTERVAL_S`` passed since the last save."""
        if self._dirty and time.monotonic() - self._saved_at >= SAVE_INTERVAL_S:
            self.save()

    def save(self) -> None:
        """Write the table to its file now, if it changed (atomically: temp file, rename)."""
        if self.path is None:
            return
        with self._save_lock:
            with self._lock:
                if not self._dirty:
                    return
                items = list(self._counts.items())
                self._dirty = False
                self._saved_at = time.monotonic()
            body = b"".join(ENTRY.pack(pid.to_bytes(16), count) for pid, count in items)
            temp = self.path.with_suffix(".tmp")
            try:
                with open(temp, "wb") as out:
                    out.write(MAGIC + body)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temp, self.path)
            except OSError:
                with self._lock:
                    self._dirty = True  # try again next time
                raise
