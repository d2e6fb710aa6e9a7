"""The services container: every client the app owns, created and closed by the lifespan."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from proxy.hooks import MemoryPipeline, NoopPipeline
from proxy.metrics import Metrics
from proxy.settings import Settings
from proxy.tenancy import TenantResolver
from proxy.upstream import UpstreamClient

LOGGER = logging.getLogger("memproxy.services")


@dataclass
class Services:
    """Everything a request handler needs, at ``app.state.services``.

    ``store``, ``embedder`` and ``cache`` are ``None`` until their backends exist
    (``proxy.memory.store.MemoryStore``, ``proxy.memory.embedders.Embedder``,
    ``proxy.cache``); ``/readyz`` checks the slots that are filled.
    """

    settings: Settings
    upstream: UpstreamClient
    metrics: Metrics
    tenants: TenantResolver
    pipeline: MemoryPipeline = field(default_factory=NoopPipeline)
    store: Any | None = None
    embedder: Any | None = None
    cache: Any | None = None
    background: set[asyncio.Task[None]] = field(default_factory=set)

    def spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run work after a response (completion hooks), keeping a reference until it ends."""
        task = asyncio.get_running_loop().create_task(coro)
        self.background.add(task)
        task.add_done_callback(self.background.discard)

    async def drain(self, limit_s: float) -> None:
        """Wait for background work on shutdown, at most ``limit_s`` seconds."""
        if not self.background:
            return
        _, pending = await asyncio.wait(set(self.background), timeout=limit_s)
        for task in pending:
            task.cancel()
        if pending:
            LOGGER.warning("cancelled %d unfinished background tasks", len(pending))
