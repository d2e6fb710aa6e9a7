"""When the embedded store's search runs on the event loop's thread (``edge_inline``), and
``EdgeStore.search_near`` following it."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from proxy.errors import StoreError
from proxy.memory import edge
from proxy.memory.edge import EdgeStore
from proxy.memory.edge_inline import StoreState, free, inline
from proxy.memory.store import SearchQuery
from tests.memory.test_edge import PanicException, dialog_store

IDLE = StoreState(alone=True, closed=False, warming=False, calls=0, points=10_000, searches_left=5)


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        (IDLE, True),
        (replace(IDLE, points=20_000), True),  # the bound itself is cheap enough
        (replace(IDLE, points=20_001), False),  # a larger store: its search on a thread
        (replace(IDLE, points=None), False),  # the size not read yet: the hop reads it
        (replace(IDLE, searches_left=0), False),  # the size is due again: the hop reads it
        (replace(IDLE, closed=True), False),
        (replace(IDLE, warming=True), False),  # the warm-up takes the cache's locks
        (replace(IDLE, calls=1), False),  # a write or the count flush on a store thread
        (replace(IDLE, points=0), True),
        (replace(IDLE, alone=False), False),  # another request in its memory stage: a hop
    ],
)
def test_a_search_runs_inline_only_on_an_idle_small_store(
    state: StoreState, expected: bool
) -> None:
    assert inline(state, 20_000) is expected


@pytest.mark.parametrize("kind", [threading.Lock, threading.RLock, threading.Condition])
def test_free_tries_each_lock_and_holds_none_after(kind: type[threading.Lock]) -> None:
    first, second = kind(), kind()
    assert free([first, second])
    # Let go at once: another thread takes both without waiting.
    taken: list[bool] = []
    thread = threading.Thread(
        target=lambda: taken.extend([first.acquire(blocking=False), second.acquire(blocking=False)])
    )
    thread.start()
    thread.join()
    assert taken == [True, True]


def test_a_held_lock_is_not_free() -> None:
    free_lock, held = threading.Lock(), threading.Lock()
    held.acquire()
    try:
        assert not free([free_lock, held])
        assert free_lock.acquire(blocking=False)  # the one tried first was let go again
    finally:
        held.release()


async def alone_store(tmp_path: Path) -> tuple[EdgeStore, SearchQuery]:
    """``dialog_store``, warmed, and its query asked by a request alone in its memory stage."""
    store, query = await dialog_store(tmp_path)
    await store.warmed()
    return store, replace(query, alone=True)


def record_threads(store: EdgeStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads ``store``'s ``search_near`` calls run their search on."""
    threads: list[str] = []
    search = store._search_near_sync

    def noted(*args: Any) -> edge.Found:
        threads.append(threading.current_thread().name)
        return search(*args)

    monkeypatch.setattr(store, "_search_near_sync", noted)
    return threads


async def test_a_small_idle_stores_search_runs_on_the_loop_with_the_same_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first search hops and reads the shard's size; later ones run on the loop's thread
    (adr/0172) and find what a hopped search finds; a store over the bound always hops."""
    store, query = await alone_store(tmp_path)
    threads = record_threads(store, monkeypatch)
    loop_thread = threading.current_thread().name
    try:
        hopped = await store.search_near("t1", query, 1, 90.0)
        inline = await store.search_near("t1", query, 1, 90.0)
        assert threads[0].startswith("edge-store")
        assert threads[1] == loop_thread
        assert inline == hopped
        assert [turn.record.id for turn in inline.turns or []] == ["t4", "t6"]
        store.inline_max_points = 9  # the store holds ten
        store._inline_left = 0  # the size is read again
        assert await store.search_near("t1", query, 1, 90.0) == hopped
        assert await store.search_near("t1", query, 1, 90.0) == hopped
        assert [name.startswith("edge-store") for name in threads[2:]] == [True, True]
    finally:
        await store.close()


async def test_a_100k_store_the_record_cache_holds_searches_on_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bound covers every store the default record cache holds whole (adr/0185): a shard
    read at 100k points searches on the loop's thread, as a 10k one does."""
    store, query = await alone_store(tmp_path)
    threads = record_threads(store, monkeypatch)
    try:
        await store.search_near("t1", query, 1, 90.0)  # hops, reads the size
        store._points = 100_000  # as a hopped search reads a 100k-memory store's
        await store.search_near("t1", query, 1, 90.0)
        assert threads[0].startswith("edge-store")
        assert threads[1] == threading.current_thread().name
    finally:
        await store.close()


@pytest.mark.parametrize("lock", ["handles", "records", "turns", "counts"])
async def test_a_lock_another_thread_holds_sends_the_search_to_a_store_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, lock: str
) -> None:
    """The loop never waits on a lock the search takes: held elsewhere, the search hops, and
    its store thread waits instead. The holder lets go once the call reaches a store thread
    (or, if the search wrongly ran on the loop, after a while, so the test fails, not hangs)."""
    store, query = await alone_store(tmp_path)
    expected = await store.search_near("t1", query, 1, 90.0)  # hops, reads the size
    threads = record_threads(store, monkeypatch)
    held = {
        "handles": store._maintenance._handles,
        "records": store._records._lock,
        "turns": store._turns._lock,
        "counts": store._counts._lock,
    }[lock]
    taken, hopped = threading.Event(), threading.Event()
    tracked = store._tracked

    def noting(*args: Any) -> Any:
        hopped.set()
        return tracked(*args)

    def hold() -> None:
        with held:
            taken.set()
            hopped.wait(10)

    monkeypatch.setattr(store, "_tracked", noting)
    holder = threading.Thread(target=hold)
    holder.start()
    try:
        taken.wait()
        assert await store.search_near("t1", query, 1, 90.0) == expected
        assert [name.startswith("edge-store") for name in threads] == [True]
    finally:
        hopped.set()
        holder.join()
        await store.close()


async def test_a_search_meeting_another_at_its_loop_turn_hops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another search waiting for its turn says the loop is busy: the search goes to the
    store's threads, where under load searches queue and one past its deadline degrades, as
    before adr/0172. Alone again, it runs on the loop."""
    store, query = await alone_store(tmp_path)
    expected = await store.search_near("t1", query, 1, 90.0)  # hops, reads the size
    threads = record_threads(store, monkeypatch)
    try:
        store._waiting += 1  # another search at its turn
        assert await store.search_near("t1", query, 1, 90.0) == expected
        store._waiting -= 1
        assert await store.search_near("t1", query, 1, 90.0) == expected
        assert threads[0].startswith("edge-store")
        assert threads[1] == threading.current_thread().name
        found = await asyncio.gather(*(store.search_near("t1", query, 1, 90.0) for _ in "ab"))
        assert found == [expected, expected]
    finally:
        await store.close()


async def test_a_search_beside_another_requests_memory_stage_always_hops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not ``alone``, a search on a small idle store still goes to a store thread: inline
    searches under load cost throughput (adr/0172). The same query alone runs on the loop."""
    store, query = await alone_store(tmp_path)
    expected = await store.search_near("t1", query, 1, 90.0)  # hops, reads the size
    threads = record_threads(store, monkeypatch)
    beside = replace(query, alone=False)
    try:
        assert await store.search_near("t1", beside, 1, 90.0) == expected
        assert await store.search_near("t1", beside, 1, 90.0) == expected
        assert await store.search_near("t1", query, 1, 90.0) == expected
        assert [name.startswith("edge-store") for name in threads] == [True, True, False]
    finally:
        await store.close()


async def test_a_store_over_the_bound_reads_its_size_again_and_runs_inline_once_small(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store read over the bound counts its hops too: once deletes bring it back under the
    bound, a later hop reads the size again and the searches after it run on the loop (else
    only a restart would, the size being read only when inline searches used it up)."""
    monkeypatch.setattr(edge, "INLINE_SIZE_EVERY", 2)
    store, query = await alone_store(tmp_path)
    store.inline_max_points = 9  # the store holds ten
    threads = record_threads(store, monkeypatch)
    try:
        await store.search_near("t1", query, 1, 90.0)  # hops, reads ten
        assert await store.delete("t1", "t0")  # nine now
        for _ in range(4):
            await store.search_near("t1", query, 1, 90.0)
        assert threads[-1] == threading.current_thread().name
    finally:
        await store.close()


@pytest.mark.parametrize(
    "error",
    [
        Exception("Service runtime error: timed out"),  # the engine's own error type
        # A Rust panic: a BaseException, which would pass every `except Exception` after it.
        PanicException("called `Option::unwrap()` on a `None` value"),
    ],
    ids=["engine-error", "panic"],
)
async def test_an_engine_failure_of_an_inline_search_is_a_store_error_as_on_a_thread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    """The retriever degrades a ``StoreError``; the engine's failure raised on the loop's
    thread is mapped as a hopped search's is, never reaching the chat request raw."""
    store, query = await alone_store(tmp_path)
    await store.search_near("t1", query, 1, 90.0)  # hops, reads the size
    threads = record_threads(store, monkeypatch)

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise error

    monkeypatch.setattr(store, "_search_once", failing)
    try:
        with pytest.raises(StoreError) as inline:
            await store.search_near("t1", query, 1, 90.0)
        assert threads == [threading.current_thread().name]
        with pytest.raises(StoreError) as hopped:
            await store.search_near("t1", replace(query, alone=False), 1, 90.0)
        assert threads[1] != threading.current_thread().name
        assert inline.value.__cause__ is error
        assert hopped.value.__cause__ is error
    finally:
        await store.close()


async def test_the_inline_bound_is_no_larger_than_the_record_cache(tmp_path: Path) -> None:
    """A store larger than its record cache reads payloads from the shard in a search: it never
    searches on the loop, whatever the bound (adr/0172)."""
    small = await EdgeStore.open(tmp_path / "small", dimensions=8, record_cache_entries=5)
    large = await EdgeStore.open(tmp_path / "large", dimensions=8)
    try:
        assert small.inline_max_points == 5
        assert large.inline_max_points == edge.INLINE_SEARCH_MAX_POINTS
    finally:
        await small.close()
        await large.close()
