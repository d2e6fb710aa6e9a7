"""The periodic purge of expired memories: it purges, counts, survives a failing store, stops."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

from proxy.memory.expiry import ExpiryPurger
from proxy.metrics import Metrics
from tests.fakes.store import FakeStore
from tests.memory.support import record

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def purged_total(metrics: Metrics) -> float:
    return metrics.registry.get_sample_value("memproxy_memories_purged_total") or 0.0


async def test_a_purge_deletes_the_expired_and_counts_them() -> None:
    store = FakeStore(
        [
            record("old", expires_at=NOW - timedelta(seconds=1)),
            record("soon", expires_at=NOW + timedelta(hours=1)),
            record("kept"),
        ]
    )
    metrics = Metrics()
    purger = ExpiryPurger(store, metrics, 60.0, clock=lambda: NOW)
    assert await purger.purge() == 1
    assert {
        r.id for r in (await store.list("t1", user=None, source=None, limit=9, after=None)).records
    } == {"soon", "kept"}
    assert purged_total(metrics) == 1


async def test_a_failing_store_is_logged_not_raised() -> None:
    class Broken(FakeStore):
        async def purge_expired(self, before: datetime) -> int:
            raise RuntimeError("store down")

    purger = ExpiryPurger(Broken(), Metrics(), 60.0, clock=lambda: NOW)
    assert await purger.purge() == 0


async def test_started_it_purges_at_once_and_stops_on_close() -> None:
    store = FakeStore([record("old", expires_at=NOW - timedelta(days=1))])
    purger = ExpiryPurger(store, Metrics(), 3600.0, clock=lambda: NOW)
    purger.start()
    for _ in range(50):
        await asyncio.sleep(0.01)
        if await store.count("t1") == 0:
            break
    assert await store.count("t1") == 0
    await purger.close()
    assert purger._task is None


async def test_an_interval_of_zero_never_starts() -> None:
    store = FakeStore([record("old", expires_at=NOW - timedelta(days=1))])
    purger = ExpiryPurger(store, Metrics(), 0.0, clock=lambda: NOW)
    purger.start()
    await asyncio.sleep(0.02)
    assert await store.count("t1") == 1
    await purger.close()
