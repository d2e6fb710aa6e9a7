"""``starter``: work after sending runs at once as far as it goes without waiting."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from typing import Any

import pytest

from proxy.cache import RedisCache
from proxy.cache.blocks import CachedTurnBlocks, Remembered
from proxy.relay import starter

BLOCK = Remembered("<memories>\nx\n</memories>", 0, 12, ("m1",))


class Spawned:
    """A spawner keeping the tasks it started."""

    def __init__(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []

    def __call__(self, job: Coroutine[Any, Any, None]) -> None:
        self.tasks.append(asyncio.get_running_loop().create_task(job))


async def test_work_that_never_waits_is_done_when_the_request_goes_out() -> None:
    done: list[str] = []

    async def work() -> None:
        done.append("written")

    spawned = Spawned()
    starter(spawned, work)()
    assert done == ["written"]
    assert spawned.tasks == []  # no task for it


async def test_work_that_waits_goes_on_in_the_background() -> None:
    release = asyncio.Event()
    done: list[str] = []

    async def work() -> None:
        done.append("started")
        await release.wait()
        done.append("finished")

    spawned = Spawned()
    starter(spawned, work)()
    assert done == ["started"]
    assert len(spawned.tasks) == 1
    release.set()
    await asyncio.gather(*spawned.tasks)
    assert done == ["started", "finished"]


@pytest.mark.parametrize("waits", [False, True])
async def test_a_failure_is_logged_never_raised(
    waits: bool, caplog: pytest.LogCaptureFixture
) -> None:
    async def work() -> None:
        if waits:
            await asyncio.sleep(0)
        raise KeyError("cache down")

    spawned = Spawned()
    with caplog.at_level(logging.ERROR, logger="memproxy.relay"):
        starter(spawned, work)()
        await asyncio.gather(*spawned.tasks)
    assert [r.exc_info is not None for r in caplog.records if r.name == "memproxy.relay"] == [True]


class StuckClient:
    """A Redis client whose writes never answer (a stalled server)."""

    async def set(self, *args: Any, **kwargs: Any) -> None:
        await asyncio.Event().wait()


async def test_a_stalled_redis_block_write_times_out_in_its_task_not_the_request() -> None:
    """The turn's block goes to Redis after sending: started in the request's task, its
    deadline must end the write, never cancel the request (memory never fails a request)."""
    blocks = CachedTurnBlocks(RedisCache(StuckClient(), timeout_ms=0), ttl_s=60)  # 0: at once
    spawned = Spawned()

    async def request() -> str:
        starter(spawned, lambda: blocks.remember("k", BLOCK))()
        for _ in range(5):  # the steps in which an expired deadline fires
            await asyncio.sleep(0)
        return "answered"

    assert await asyncio.ensure_future(request()) == "answered"
    await asyncio.gather(*spawned.tasks)  # the write was dropped by its own deadline
