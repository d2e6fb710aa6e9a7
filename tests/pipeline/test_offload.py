"""``Offloader``: blocking work on a bounded number of threads, waits that can be abandoned."""

from __future__ import annotations

import asyncio
import threading

import pytest

from proxy.pipeline.offload import Offloader


async def test_runs_off_the_event_loop_thread() -> None:
    offloader = Offloader()
    loop_thread = threading.get_ident()
    assert await offloader.run(threading.get_ident) != loop_thread
    assert await offloader.run(sum, [1, 2, 3]) == 6


async def test_never_more_threads_than_workers() -> None:
    offloader = Offloader(workers=2)
    running = 0
    most = 0
    lock = threading.Lock()
    release = threading.Event()

    def work() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(5)
        with lock:
            running -= 1

    tasks = [asyncio.create_task(offloader.run(work)) for _ in range(6)]
    await asyncio.sleep(0.1)
    assert offloader.busy
    release.set()
    await asyncio.gather(*tasks)
    assert most == 2
    assert not offloader.busy


async def test_an_abandoned_wait_keeps_the_slot_until_the_thread_ends() -> None:
    """A caller past its deadline stops waiting; its thread still holds the worker (bounded
    CPU), and the result still reaches ``on_done``."""
    offloader = Offloader(workers=1)
    release = threading.Event()
    kept: list[int] = []

    def slow() -> int:
        release.wait(5)
        return 42

    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await offloader.run(slow, on_done=kept.append)
    assert offloader.busy  # the thread is still grinding
    with pytest.raises(TimeoutError):  # a second caller cannot get a worker in its time
        async with asyncio.timeout(0.05):
            await offloader.run(int)
    release.set()
    for _ in range(100):
        if kept:
            break
        await asyncio.sleep(0.01)
    assert kept == [42]
    assert not offloader.busy
    assert await offloader.run(int) == 0


async def test_errors_reach_the_caller_and_free_the_worker() -> None:
    offloader = Offloader(workers=1)

    def broken() -> None:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await offloader.run(broken)
    assert not offloader.busy


def test_needs_a_worker() -> None:
    with pytest.raises(ValueError, match="workers"):
        Offloader(workers=0)
