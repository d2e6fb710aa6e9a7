"""The purge of expired memories: a lifespan-owned task that deletes them every so often.

Expired memories are already out of every retrieval the moment they expire (the store's
liveness filter, ``MemoryRecord.live``); the purge is what actually frees them, so an expired
memory leaves the store within one ``memory.purge_interval_s`` (adr/0113). A failing purge is
logged and tried again next time: it never stops the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from datetime import UTC, datetime

from proxy.memory.store import MemoryStore
from proxy.metrics import Metrics

LOGGER = logging.getLogger("memproxy.memory")


class ExpiryPurger:
    """Purges expired memories every ``interval_s`` seconds (0: never) while started."""

    def __init__(
        self,
        store: MemoryStore,
        metrics: Metrics,
        interval_s: float,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.metrics = metrics
        self.interval_s = interval_s
        self.clock = clock
        self._task: asyncio.Task[None] | None = None

    async def purge(self) -> int:
        """Purge once now; return how many memories went (0 after a logged failure)."""
        try:
            purged = await self.store.purge_expired(self.clock())
        except Exception as exc:  # retried at the next interval
            LOGGER.warning("purging expired memories failed: %s", type(exc).__name__)
            return 0
        self.metrics.count_purged(purged)
        return purged

    def start(self) -> None:
        """Start purging in the background (a purge runs at once, then every interval)."""
        if self.interval_s > 0 and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def _loop(self) -> None:
        while True:
            await self.purge()
            await asyncio.sleep(self.interval_s)

    async def close(self) -> None:
        """Stop purging."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
