"""Retrieval counts of injected memories, incremented in batches after the responses.

Every injected memory gets ``retrieval_count += 1``, but one store round trip per request would
cost a write per chat request. A request's ids are only appended (``add`` runs in the request's
task after its response, where summing 50 ids into the table cost ~20 us of cold CPU at
concurrency 1; bench/counter_add.py); they are summed per tenant and id in one pass when the
flush comes or the ``MAX_PENDING`` bound could be reached, and flushed together
after ``delay_s`` (``memory.count_flush_s``, default ``FLUSH_DELAY_S``; or at ``MAX_PENDING``
distinct ids, or on shutdown): the store adds one per occurrence of an id and writes points that
share a new count together, so a hot memory injected by many requests in the window costs one
write. The write work per injected memory was as large as the search's: at 10k memories and
~230 requests/s, 0.5 s windows wrote ~50 points a request, 5 s windows at most ~9 (adr/0082).
Counts still pending when the process dies are lost; they only nudge the frequency score. The
retrieval cache generation is not bumped: a count changes the frequency score slightly, which a
result cached for seconds may ignore (adr/0050).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence

from proxy.background import Spawner
from proxy.defaults import COUNT_FLUSH_S as FLUSH_DELAY_S
from proxy.memory.store import MemoryStore
from proxy.metrics import Metrics

MAX_PENDING = 20_000  # distinct (tenant, id) pairs held before an early flush
# Distinct ids per store call. A store write briefly blocks searches of the same shard, so one
# large write per flush showed up as 10-30 ms search stalls; small calls let searches in between.
IDS_PER_CALL = 64
LOGGER = logging.getLogger("memproxy.pipeline")


class RetrievalCounter:
    """Batches ``increment_retrievals`` calls; failures are logged and counted, never raised."""

    def __init__(
        self,
        store: MemoryStore,
        spawn: Spawner,
        metrics: Metrics | None = None,
        delay_s: float = FLUSH_DELAY_S,
    ) -> None:
        self._store = store
        self._spawn = spawn
        self._metrics = metrics
        self._delay_s = delay_s
        self._pending: dict[str, Counter[str]] = {}
        self._size = 0  # distinct (tenant, id) pairs in ``_pending``
        self._loose: dict[str, list[str]] = {}  # ids added, not summed yet
        self._loose_ids = 0
        self._scheduled = False

    def add(self, tenant: str, ids: Sequence[str]) -> None:
        """Count one retrieval of each id; a flush runs shortly after."""
        if not ids:
            return
        loose = self._loose.get(tenant)
        if loose is None:
            loose = self._loose[tenant] = []
        loose.extend(ids)
        self._loose_ids += len(ids)
        # The distinct pairs can reach MAX_PENDING only once the summed pairs and the loose ids
        # together do: summed then, the early flush comes at the same add as if every add were.
        if self._size + self._loose_ids >= MAX_PENDING:
            self._fold()
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

    def _fold(self) -> None:
        """Sum the loose ids into the pending counts."""
        for tenant, ids in self._loose.items():
            counts = self._pending.setdefault(tenant, Counter())
            before = len(counts)
            counts.update(ids)
            self._size += len(counts) - before
        self._loose, self._loose_ids = {}, 0

    async def flush(self) -> None:
        """Send every pending increment now."""
        self._fold()
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
                self._report(ok=False)
            else:
                self._report(ok=True)

    def _report(self, *, ok: bool) -> None:
        if self._metrics is not None:
            self._metrics.count_memory_work("retrievals", ok)
