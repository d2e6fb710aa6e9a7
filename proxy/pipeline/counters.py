"""Retrieval counts of injected memories, incremented in batches after the responses.

Every injected memory gets ``retrieval_count += 1``, but one store round trip per request would
cost a write per chat request. Increments are collected per tenant and flushed together after
``FLUSH_DELAY_S`` (or at ``MAX_PENDING`` ids, or on shutdown), one store call per tenant: the
store adds one per occurrence of an id and writes points that share a new count together, so a
batch costs a handful of writes, not one per injected memory. The retrieval cache generation is
not bumped: a count changes the frequency score slightly, which a result cached for seconds may
ignore (adr/0050).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

FLUSH_DELAY_S = 0.5
MAX_PENDING = 5_000
# Distinct ids per store call. A store write briefly blocks searches of the same shard, so one
# large write per flush showed up as 10-30 ms search stalls; small calls let searches in between.
IDS_PER_CALL = 64
LOGGER = logging.getLogger("memproxy.pipeline")

Spawner = Callable[[Coroutine[Any, Any, None]], None]


class RetrievalCounter:
    """Batches ``increment_retrievals`` calls; failures are logged and counted, never raised."""

    def __init__(
        self, store: Any, spawn: Spawner, metrics: Any = None, delay_s: float = FLUSH_DELAY_S
    ) -> None:
        self._store = store
        self._spawn = spawn
        self._metrics = metrics
        self._delay_s = delay_s
        self._pending: dict[str, Counter[str]] = {}
        self._size = 0
        self._scheduled = False

    def add(self, tenant: str, ids: Sequence[str]) -> None:
        """Count one retrieval of each id; a flush runs shortly after."""
        if not ids or self._store is None:
            return
        self._pending.setdefault(tenant, Counter()).update(ids)
        self._size += len(ids)
        if self._size >= MAX_PENDING:
            self._spawn(self.flush())
        elif not self._scheduled:
            self._scheduled = True
            self._spawn(self._flush_later())

    async def _flush_later(self) -> None:
        try:
            await asyncio.sleep(self._delay_s)
        finally:
            self._scheduled = False
        await self.flush()

    async def flush(self) -> None:
        """Send every pending increment now."""
        pending, self._pending, self._size = self._pending, {}, 0
        for tenant, counts in pending.items():
            items = list(counts.items())
            try:
                for start in range(0, len(items), IDS_PER_CALL):
                    chunk = items[start : start + IDS_PER_CALL]
                    await self._store.increment_retrievals(
                        tenant, [i for i, n in chunk for _ in range(n)]
                    )
            except Exception as exc:  # the store is down: counts are best effort
                LOGGER.warning("retrieval counts of tenant %s lost: %s", tenant, exc)
                self._report("error")
            else:
                self._report("ok")

    def _report(self, result: str) -> None:
        if self._metrics is not None:
            self._metrics.child(self._metrics.memory_writes, "retrievals", result).inc()
