"""Background upkeep of the embedded shard: periodic flushes and index builds.

Edge has no background optimizer of its own. After writes, ``ShardMaintenance`` starts a flush
at most every ``FLUSH_INTERVAL_S`` (persisting segments keeps the write-ahead log short, and
replaced payload blocks are reclaimed only by a flush) and an HNSW build after every
``optimize_after`` new points. Each runs on its own single thread: a flush takes ~200 ms and an
index build minutes, and neither may hold up the write that triggered it or the searches, which
keep running meanwhile on the unindexed segments (adr/0011).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import qdrant_edge as qe

FLUSH_INTERVAL_S = 5.0
OPTIMIZE_AFTER_POINTS = 20_000
LOGGER = logging.getLogger("memproxy.store")


class ShardMaintenance:
    """Schedules the shard's flushes and index builds on their own threads."""

    def __init__(self, shard: qe.EdgeShard, optimize_after: int | None) -> None:
        self.optimize_after = optimize_after
        self._shard = shard
        self._optimizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-optimize")
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-flush")
        self._lock = threading.Lock()
        self._optimizing = False
        self._flushing = False
        self._unindexed = 0
        self._last_flush = time.monotonic()

    def after_write(self, points: int) -> None:
        """Note ``points`` new points; start a flush or an index build when one is due."""
        with self._lock:
            self._unindexed += points
            now = time.monotonic()
            flush = now - self._last_flush >= FLUSH_INTERVAL_S and not self._flushing
            if flush:
                self._last_flush = now
                self._flushing = True
            threshold = self.optimize_after
            build = threshold is not None and self._unindexed >= threshold and not self._optimizing
            if build:
                self._unindexed = 0
                self._optimizing = True
        if flush:
            self._flusher.submit(self._flush_sync)
        if build:
            self._optimizer.submit(self._optimize_sync)

    def _flush_sync(self) -> None:
        try:
            self._shard.flush()
        except Exception:  # a background thread has no caller: log, the WAL still holds the data
            LOGGER.exception("background flush of the memory store failed")
        finally:
            self._flushing = False

    def _optimize_sync(self) -> bool:
        try:
            return self._shard.optimize()
        except Exception:  # searches still work on unindexed segments; try again later
            LOGGER.exception("background index build of the memory store failed")
            return False
        finally:
            self._optimizing = False

    async def optimize(self) -> bool:
        """Build the HNSW index for everything written so far (waits until done)."""
        with self._lock:
            self._unindexed = 0
        return await asyncio.get_running_loop().run_in_executor(
            self._optimizer, self._shard.optimize
        )

    def close(self) -> None:
        """Wait for a running flush or index build and stop the threads."""
        self._optimizer.shutdown(wait=True)
        self._flusher.shutdown(wait=True)
