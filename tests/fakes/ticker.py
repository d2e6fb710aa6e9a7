"""Counting the event loop's turns while code under test runs: a loop that never turns was
held (a blocking call, a parse in one go)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


class Ticks:
    """How many times the ticker ran since the block started."""

    count = 0


@asynccontextmanager
async def loop_ticks() -> AsyncIterator[Ticks]:
    """A coroutine that counts each turn of the running loop for the block's duration."""
    ticks = Ticks()

    async def ticker() -> None:
        while True:
            ticks.count += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)  # let it start, then count from zero
    ticks.count = 0
    try:
        yield ticks
    finally:
        task.cancel()
