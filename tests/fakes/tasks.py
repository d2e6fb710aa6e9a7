"""Counting the asyncio tasks code under test creates (proxy/eager.py: work that never waits
must create none)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def tasks_created() -> Iterator[list[object]]:
    """The coroutines wrapped in a task on the running loop while the block runs."""
    loop = asyncio.get_running_loop()
    created: list[object] = []

    def counting(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        created.append(coro)
        return asyncio.Task(coro, loop=loop, **kwargs)

    loop.set_task_factory(counting)
    try:
        yield created
    finally:
        loop.set_task_factory(None)
