"""When the embedded store's search runs on the event loop's thread (``edge_inline``)."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from proxy.memory.edge_inline import StoreState, free, inline

IDLE = StoreState(closed=False, warming=False, calls=0, points=10_000, searches_left=5)


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
