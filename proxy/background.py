"""Work that outlives its request: completion hooks, retrieval counts, cache writes.

A request hands such work to a ``Spawner`` (``Background.spawn``) and returns; the app keeps a
reference to each task until it ends, and waits for the rest on shutdown (``drain``) while the
backends are still open.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine

LOGGER = logging.getLogger("memproxy.background")

Job = Coroutine[object, object, None]
Spawner = Callable[[Job], None]


class Background:
    """Tasks that outlive their request, each kept referenced until it ends."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def spawn(self, job: Job) -> None:
        """Run ``job`` on the loop now, after the caller returns."""
        task = asyncio.get_running_loop().create_task(job)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def drain(self, limit_s: float) -> None:
        """Wait for background work on shutdown, at most ``limit_s`` seconds."""
        if not self.tasks:
            return
        _, pending = await asyncio.wait(set(self.tasks), timeout=limit_s)
        for task in pending:
            task.cancel()
        if pending:
            LOGGER.warning("cancelled %d unfinished background tasks", len(pending))
