"""Retrieval counts are batched, never lost for repeated ids, and never raise."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Coroutine, Sequence
from typing import Any

import pytest

from proxy.metrics import Metrics
from proxy.pipeline import counters
from proxy.pipeline.counters import MAX_PENDING, RetrievalCounter


class CountingStore:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, list[str]]] = []
        self.counts: Counter[tuple[str, str]] = Counter()
        self.fail = fail

    async def increment_retrievals(self, tenant: str, ids: Sequence[str]) -> None:
        if self.fail:
            raise ConnectionError("down")
        self.calls.append((tenant, list(ids)))
        self.counts.update((tenant, i) for i in ids)  # one per occurrence, like the store


class Spawner:
    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def __call__(self, coro: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(coro))

    async def wait(self) -> None:
        await asyncio.gather(*self.tasks)


async def test_one_batch_per_tenant_and_repeats_kept() -> None:
    store, spawn = CountingStore(), Spawner()
    counter = RetrievalCounter(store, spawn, delay_s=0.01)
    counter.add("t1", ["a", "b"])
    counter.add("t1", ["a"])
    counter.add("t2", ["a"])
    await spawn.wait()
    assert len(spawn.tasks) == 1  # one scheduled flush for all three requests
    assert store.counts == {("t1", "a"): 2, ("t1", "b"): 1, ("t2", "a"): 1}
    assert len(store.calls) == 2  # one call per tenant, repeats carried in the call


async def test_failures_are_counted_not_raised() -> None:
    metrics = Metrics()
    spawn = Spawner()
    counter = RetrievalCounter(CountingStore(fail=True), spawn, metrics, delay_s=0.0)
    counter.add("t", ["a"])
    await spawn.wait()
    value = metrics.registry.get_sample_value(
        "memproxy_memory_background_total", {"kind": "retrievals", "result": "error"}
    )
    assert value == 1


async def test_flush_sends_pending_at_once() -> None:
    store = CountingStore()
    counter = RetrievalCounter(store, lambda coro: coro.close(), delay_s=60)
    counter.add("t", ["x"])
    await counter.flush()
    assert store.calls == [("t", ["x"])]
    await counter.flush()
    assert store.calls == [("t", ["x"])]


async def test_large_batches_go_in_small_calls_without_losing_counts() -> None:
    store, spawn = CountingStore(), Spawner()
    counter = RetrievalCounter(store, spawn, delay_s=0.01)
    ids = [f"m{i}" for i in range(150)]
    counter.add("t", ids)
    counter.add("t", ids[:10])
    await spawn.wait()
    assert len(store.calls) == 3  # 150 distinct ids in calls of at most 64
    assert all(len(set(call)) <= 64 for _, call in store.calls)
    assert store.counts == {("t", i): (2 if n < 10 else 1) for n, i in enumerate(ids)}


async def test_repeats_of_one_id_do_not_force_an_early_flush() -> None:
    store, spawn = CountingStore(), Spawner()
    counter = RetrievalCounter(store, spawn, delay_s=60)
    for _ in range(MAX_PENDING + 10):
        counter.add("t", ["hot"])
    assert store.calls == []  # one distinct id pending: wait for the window
    counter.add("t", [f"m{i}" for i in range(MAX_PENDING)])  # now past the distinct bound
    later, *early = spawn.tasks  # the window's timer, then the early flush
    await asyncio.gather(*early)
    later.cancel()
    assert store.counts[("t", "hot")] == MAX_PENDING + 10
    assert len(store.counts) == MAX_PENDING + 1


async def test_ids_are_summed_in_batches_not_per_add(monkeypatch: pytest.MonkeyPatch) -> None:
    sums: list[int] = []

    class SpyCounter(Counter[str]):
        def update(self, *args: Any, **kwargs: Any) -> None:
            if args and args[0] is not None:  # not the constructor's empty update
                sums.append(1)
            super().update(*args, **kwargs)

    monkeypatch.setattr(counters, "Counter", SpyCounter)
    monkeypatch.setattr(counters, "MAX_PENDING", 30)
    store = CountingStore()
    counter = RetrievalCounter(store, lambda coro: coro.close(), delay_s=60)
    for n in range(11):
        counter.add("t", [f"m{n}", "a", "b", "c", "d"])
    # Summed only when the distinct pairs could have reached 30: at 30 loose ids (6 adds), then
    # at 10 summed pairs and 20 loose ids (4 adds more).
    assert len(sums) == 2  # not once an add
    await counter.flush()  # the 11th add's ids, still loose, are summed by the flush
    assert store.counts == {("t", f"m{n}"): 1 for n in range(11)} | {("t", i): 11 for i in "abcd"}


async def test_loose_ids_reaching_the_distinct_bound_flush_early(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(counters, "MAX_PENDING", 10)  # reached by loose ids: no sum before
    store, spawn = CountingStore(), Spawner()
    counter = RetrievalCounter(store, spawn, delay_s=60)
    counter.add("t", [f"m{i}" for i in range(6)])
    counter.add("u", ["m0", "m1", "m2", "m0"])  # 9 distinct pairs, 10 ids
    assert len(spawn.tasks) == 1  # the window's timer only
    counter.add("u", ["m3"])  # the 10th distinct pair
    later, *early = spawn.tasks
    assert len(early) == 1
    await asyncio.gather(*early)
    later.cancel()
    assert sum(store.counts.values()) == 11
    assert store.counts[("u", "m0")] == 2
