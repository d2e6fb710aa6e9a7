"""Background upkeep of the embedded shard: periodic flushes and index builds.

Edge has no background optimizer of its own. After writes, ``ShardMaintenance`` starts a flush
at most every ``FLUSH_INTERVAL_S`` (persisting segments keeps the write-ahead log short, and
replaced payload blocks are reclaimed only by a flush) and an HNSW build once ``optimize_after``
points are outside the graph. Neither may hold up the write that triggered it or the searches,
which keep running meanwhile on the unindexed segments (adr/0011): a flush (~200 ms) runs on its
own thread, a build (seconds to minutes) on a daemon thread of its own.

Unindexed points are counted from the shard when it opens, then per write (adr/0124): a store
grown over many processes, or through the API in smaller batches than the threshold, is still
indexed. Closing waits for a running build at most ``CLOSE_WAIT_S``: a build outlasting that
closes the shard itself when it ends, or dies with the process (a build killed half-way leaves
the shard as it was, measured with SIGKILL).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import qdrant_edge as qe

FLUSH_INTERVAL_S = 5.0
# Unindexed points that start a background build: above the shard's indexing threshold (2,000
# memories of 256 dimensions, ``edge_shard``), so a build always finds a segment to index, and
# small enough that the exact scan of the rest stays cheap next to the graph (10k unindexed:
# search 1.41 ms, indexed 0.84 ms).
OPTIMIZE_AFTER_POINTS = 5_000
CLOSE_WAIT_S = 2.0
LOGGER = logging.getLogger("memproxy.store")

# Background builds still running per shard directory, so this process never opens a shard
# again while a build of the one it closed still works on its files.
_BUILDS: dict[Path, threading.Thread] = {}
_BUILDS_LOCK = threading.Lock()


def unindexed_points(shard: qe.EdgeShard) -> int:
    """Points whose dense vector is not in the graph yet. ``ShardInfo`` counts the indexed
    vectors of both kinds, and every point's sparse vector is indexed on write (its inverted
    index), so the graph holds ``indexed_vectors_count - points_count`` of them."""
    info = shard.info()
    return max(0, 2 * info.points_count - info.indexed_vectors_count)


def building(path: Path) -> bool:
    """Whether a background build left running by ``close`` still works on the shard at
    ``path`` (its files must stay until it ends)."""
    with _BUILDS_LOCK:
        build = _BUILDS.get(path.resolve())
    return build is not None and build.is_alive()


def wait_for_build(path: Path) -> None:
    """Block until a background build left running on the shard at ``path`` has ended."""
    with _BUILDS_LOCK:
        build = _BUILDS.get(path.resolve())
    if build is not None:
        build.join()


class ShardMaintenance:
    """Schedules the shard's flushes and index builds on their own threads."""

    def __init__(
        self,
        shard: qe.EdgeShard,
        optimize_after: int | None,
        *,
        path: Path | None = None,
        unindexed: int = 0,
    ) -> None:
        self.optimize_after = optimize_after
        self._shard = shard
        self._path = None if path is None else path.resolve()  # one key per directory
        self._optimizer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-optimize")
        self._flusher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="edge-flush")
        self._lock = threading.Lock()
        self._building = threading.Lock()  # one build at a time, background or explicit
        self._optimizing = False
        self._flushing = False
        self._unindexed = unindexed
        self._last_flush = time.monotonic()
        self._build: threading.Thread | None = None
        self._after_build: Callable[[], None] | None = None

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
            self._start_build()

    def _start_build(self) -> None:
        # A daemon thread: an executor's threads are joined at interpreter exit, which would
        # make a shutdown wait for the whole build.
        thread = threading.Thread(target=self._optimize_sync, name="edge-optimize", daemon=True)
        self._build = thread
        if self._path is not None:
            with _BUILDS_LOCK:
                _BUILDS[self._path] = thread
        thread.start()

    def _flush_sync(self) -> None:
        try:
            self._shard.flush()
        except Exception:  # a background thread has no caller: log, the WAL still holds the data
            LOGGER.exception("background flush of the memory store failed")
        finally:
            self._flushing = False

    def _optimize_sync(self) -> bool:
        try:
            return self._optimize_now()
        except Exception:  # searches still work on unindexed segments; try again later
            LOGGER.exception("background index build of the memory store failed")
            return False
        finally:
            with self._lock:
                self._optimizing = False
                after, self._after_build = self._after_build, None
            if after is not None:
                after()
            if self._path is not None:
                with _BUILDS_LOCK:
                    if _BUILDS.get(self._path) is threading.current_thread():
                        del _BUILDS[self._path]

    def _optimize_now(self) -> bool:
        with self._building:
            return self._shard.optimize()

    def settle(self) -> None:
        """Wait for a background flush already started (blocking; its thread runs in order)."""
        self._flusher.submit(lambda: None).result()

    async def optimize(self) -> bool:
        """Build the HNSW index for everything written so far (waits until done)."""
        with self._lock:
            self._unindexed = 0
        return await asyncio.get_running_loop().run_in_executor(self._optimizer, self._optimize_now)

    def close(self, wait_s: float = CLOSE_WAIT_S) -> None:
        """Wait for a running flush, and for a running background build at most ``wait_s``;
        stop the threads."""
        self._optimizer.shutdown(wait=True)
        self._flusher.shutdown(wait=True)
        if self._build is not None:
            self._build.join(wait_s)

    def when_idle(self, action: Callable[[], None]) -> bool:
        """Run ``action`` now if no background build runs (True), else when it ends (False)."""
        with self._lock:
            if self._optimizing:
                self._after_build = action
                return False
        action()
        return True
