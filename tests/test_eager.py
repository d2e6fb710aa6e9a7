"""``start``: a coroutine run up to its first wait; the rest awaited as if never split."""

from __future__ import annotations

import asyncio

import pytest

from proxy.eager import Done, Rest, finish, start


async def no_wait(value: int) -> int:
    return value


async def one_wait(value: int) -> int:
    await asyncio.sleep(0)
    return value


async def test_work_that_never_waits_is_done_at_once() -> None:
    started = start(no_wait(7))
    assert isinstance(started, Done)
    assert started.value == 7


async def test_work_that_waits_finishes_when_its_rest_is_awaited() -> None:
    steps: list[str] = []

    async def work() -> int:
        steps.append("before")
        await asyncio.sleep(0)
        steps.append("after")
        return 3

    started = start(work())
    assert steps == ["before"]  # the first part ran in the caller
    assert isinstance(started, Rest)
    assert await started == 3
    assert steps == ["before", "after"]


async def test_an_error_before_the_first_wait_raises_from_start() -> None:
    async def fail() -> None:
        raise KeyError("early")

    with pytest.raises(KeyError, match="early"):
        start(fail())


async def test_an_error_after_the_first_wait_raises_from_the_rest() -> None:
    async def fail() -> None:
        await asyncio.sleep(0)
        raise KeyError("late")

    started = start(fail())
    assert isinstance(started, Rest)
    with pytest.raises(KeyError, match="late"):
        await started


async def test_cancelling_the_waiting_rest_reaches_the_coroutine() -> None:
    cleaned = asyncio.Event()
    waiting = asyncio.Event()

    async def work() -> None:
        try:
            waiting.set()
            await asyncio.sleep(10)
        finally:
            cleaned.set()

    started = start(work())
    assert isinstance(started, Rest)
    task = asyncio.ensure_future(finish(started))
    await waiting.wait()
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned.is_set()


async def test_a_rest_dropped_unrun_runs_its_finally() -> None:
    cleaned: list[bool] = []

    async def work() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned.append(True)

    started = start(work())
    assert isinstance(started, Rest)
    started.close()
    assert cleaned == [True]


async def test_the_rest_runs_as_a_task_through_finish() -> None:
    started = start(one_wait(5))
    assert isinstance(started, Rest)
    assert await asyncio.ensure_future(finish(started)) == 5
