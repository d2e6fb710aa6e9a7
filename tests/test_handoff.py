"""``run_on``: a call on a pool's thread, its outcome handed straight back to the event loop."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from proxy.handoff import run_on


async def test_runs_on_the_pool_and_returns_its_result() -> None:
    with ThreadPoolExecutor(1) as pool:
        assert await run_on(pool, threading.get_ident) != threading.get_ident()
        assert await run_on(pool, sum, [1, 2, 3]) == 6


async def test_raises_what_the_call_raised() -> None:
    def fail() -> None:
        raise KeyError("gone")

    with ThreadPoolExecutor(1) as pool, pytest.raises(KeyError, match="gone"):
        await run_on(pool, fail)


async def test_a_call_cancelled_before_it_starts_never_runs() -> None:
    blocker, ran = threading.Event(), threading.Event()
    with ThreadPoolExecutor(1) as pool:
        pool.submit(blocker.wait, 5)  # the only thread is busy
        waiting = asyncio.create_task(run_on(pool, ran.set))
        await asyncio.sleep(0.01)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        blocker.set()
    assert not ran.is_set()


async def test_a_call_cancelled_while_running_finishes_and_its_result_is_dropped() -> None:
    started, release, finished = threading.Event(), threading.Event(), threading.Event()

    def work() -> int:
        started.set()
        release.wait(5)
        finished.set()
        return 1

    with ThreadPoolExecutor(1) as pool:
        waiting = asyncio.create_task(run_on(pool, work))
        await asyncio.to_thread(started.wait, 5)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        release.set()
    assert finished.is_set()
    await asyncio.sleep(0)  # the dropped result's hand-back runs and finds nobody: no error
