"""The embedded store's side of its dialog turns' index (``edge_turns``): the rebuild after a
failed write, and superseded turns leaving it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from proxy.errors import StoreError
from proxy.memory import edge
from proxy.memory.edge import EdgeStore
from tests.memory.support import record, vectors_for
from tests.memory.test_edge import (
    DIM,
    FailingUpserts,
    dialog_store,
    near_both_ways,
    turn_entries,
)

AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


async def failed_write(store: EdgeStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """An upsert of a dialog turn that the engine refuses (the index was noted already)."""
    shard = store._shard
    monkeypatch.setattr(store, "_shard", FailingUpserts(shard))
    moved = [replace(record("t4", source="conversation"), created_at=AT + timedelta(hours=1))]
    with pytest.raises(StoreError):
        await store.add(moved, vectors_for(moved, DIM))
    monkeypatch.setattr(store, "_shard", shard)


async def a_note(store: EdgeStore, memory_id: str = "n1") -> None:
    notes = [record(memory_id, source="notes")]
    await store.add(notes, vectors_for(notes, DIM))


async def test_a_failed_upsert_is_followed_by_a_working_index_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index gave up at the failed write; the next write that succeeds builds it again
    (once: the failures before it start none), and the lookup is the index's again."""
    store, query = await dialog_store(tmp_path)
    try:
        await store.warmed()
        opened = store._warming
        await failed_write(store, monkeypatch)
        await failed_write(store, monkeypatch)
        assert not store._turns.complete
        assert store._warming is opened  # a failing engine is not read again
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert (found, built) == (engine, [False])  # meanwhile the engine's lookup
        await a_note(store)
        assert store._warming is not opened
        await store.warmed()
        assert store._turns.complete
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t4", "t6"]
        assert (found, built) == (engine, [])
        await a_note(store, "n2")
        assert store._warming.done()  # nothing more was due
    finally:
        await store.close()


async def test_an_index_given_up_past_its_bound_is_not_rebuilt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store grown past the index's bound (the record cache's size) would give a rebuild
    up again: a failed write there starts none."""
    store = await EdgeStore.open(tmp_path, dimensions=DIM, record_cache_entries=12)
    try:
        await store.warmed()
        opened = store._warming
        turns = [
            replace(record(f"t{i}", source="conversation"), created_at=AT + timedelta(minutes=i))
            for i in range(13)
        ]
        await store.add(turns, vectors_for(turns, DIM))
        assert not store._turns.complete
        await failed_write(store, monkeypatch)
        await a_note(store)
        assert store._warming is opened
    finally:
        await store.close()


async def test_closing_waits_for_a_rebuild_and_stops_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rebuild runs as the warm-up does: ``close`` waits for it, and it reads no page more."""
    store, _ = await dialog_store(tmp_path)
    await store.warmed()
    opened = store._warming
    started, go = threading.Event(), threading.Event()
    warm = store._warm_sync

    reads: list[str] = []

    def held() -> int:
        started.set()
        go.wait(5)
        # From here on the shard is read only by this rebuild (the writes are done).
        monkeypatch.setattr(store._reads, "info", lambda: reads.append("info"))
        monkeypatch.setattr(store._reads, "scroll", lambda request: reads.append("scroll"))
        return warm()

    monkeypatch.setattr(store, "_warm_sync", held)
    await failed_write(store, monkeypatch)
    await a_note(store)
    rebuild = store._warming
    assert rebuild is not None
    assert rebuild is not opened
    await asyncio.to_thread(started.wait, 5)
    closing = asyncio.create_task(store.close())
    await asyncio.sleep(0)  # close marks the store closed, then waits for the rebuild
    assert store._closed
    assert not closing.done()
    go.set()
    await closing
    assert rebuild.result() == 0  # closed: nothing read, not even the shard's size
    assert reads == []
    assert not store._turns.complete


async def test_a_rebuild_submitted_as_the_store_closes_is_waited_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``close`` marking the store closed between a rebuild's submit and its being noted as
    ``_warming`` still waits for it: the shard is not closed under the rebuild's read."""
    store, _ = await dialog_store(tmp_path)
    await store.warmed()
    loop = asyncio.get_running_loop()
    order: list[str] = []
    shard_closing = threading.Event()
    warm, close_sync = store._warm_sync, store._close_sync
    submit, scroll = store._executor.submit, store._reads.scroll
    closing: list[concurrent.futures.Future[None]] = []

    def warm_then_note() -> int:
        try:
            return warm()
        finally:
            order.append("rebuild ended")

    def close_then_note() -> None:
        order.append("shard closing")
        shard_closing.set()
        close_sync()

    def slow_scroll(request: Any) -> Any:  # a page read that a close may overtake
        shard_closing.wait(0.5)
        return scroll(request)

    def submit_then_close(func: Any, *args: Any) -> Any:
        future = submit(func, *args)
        if func is warm_then_note and not closing:  # the rebuild, before it is noted
            closing.append(asyncio.run_coroutine_threadsafe(store.close(), loop))
            for _ in range(30):  # close runs as far as it can meanwhile
                if store._closed:
                    break
                threading.Event().wait(0.01)
        return future

    monkeypatch.setattr(store, "_warm_sync", warm_then_note)
    monkeypatch.setattr(store, "_close_sync", close_then_note)
    await failed_write(store, monkeypatch)
    monkeypatch.setattr(store._reads, "scroll", slow_scroll)
    monkeypatch.setattr(store._executor, "submit", submit_then_close)
    await a_note(store)
    assert closing
    await asyncio.wrap_future(closing[0])
    assert order == ["rebuild ended", "shard closing"]


async def test_a_write_failing_during_a_rebuild_starts_another_after_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One rebuild at a time: a write failing while one reads gives it up, and the first
    write that succeeds after it ended starts the next."""
    store, query = await dialog_store(tmp_path)
    await store.warmed()
    started, go = threading.Event(), threading.Event()
    prepare = edge.prepare_profiles

    def held(records: Any) -> int:  # after the index loaded the page, before the build ends
        started.set()
        go.wait(5)
        return prepare(records)

    monkeypatch.setattr(edge, "prepare_profiles", held)
    try:
        await failed_write(store, monkeypatch)
        await a_note(store)
        first = store._warming
        await asyncio.to_thread(started.wait, 5)
        await failed_write(store, monkeypatch)
        await a_note(store, "n2")
        assert store._warming is first
        go.set()
        await store.warmed()
        assert not store._turns.complete
        await a_note(store, "n3")
        assert store._warming is not first
        await store.warmed()
        assert store._turns.complete
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert (found, built) == (engine, [])
    finally:
        go.set()
        await store.close()


async def test_superseded_turns_leave_the_index(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Marked superseded, a turn is dropped (a search never returns it again, unless the id
    is written anew); a build skips it; the lookup is the engine's answer throughout."""
    store, query = await dialog_store(tmp_path)
    t4, t6 = store._ids.key("t1", "t4"), store._ids.key("t1", "t6")
    try:
        await store.warmed()
        assert await store.supersede("t1", "t4", "t9") is not None
        assert t4 not in dict(turn_entries(store))
        found, engine, built = await near_both_ways(store, query, monkeypatch)
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t6"]
        assert (found, built) == (engine, [])
        again = [replace(record("t4", source="conversation"), created_at=AT + timedelta(minutes=4))]
        await store.add(again, vectors_for(again, DIM))  # written anew: live again
        assert t4 in dict(turn_entries(store))
        assert await store.supersede("t1", "t6", "t9") is not None
    finally:
        await store.close()
    reopened = await EdgeStore.open(tmp_path, dimensions=DIM)
    try:
        await reopened.warmed()
        assert reopened._turns.complete
        assert t4 in dict(turn_entries(reopened))
        assert t6 not in dict(turn_entries(reopened))
        found, engine, built = await near_both_ways(reopened, query, monkeypatch)
        assert found.turns is not None
        assert [turn.record.id for turn in found.turns] == ["t4"]
        assert (found, built) == (engine, [])
    finally:
        await reopened.close()
