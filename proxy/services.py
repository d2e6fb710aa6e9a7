"""``Services``: what the request handlers reach, typed, at ``app.state.services``.

Built once per app by the composition root (``proxy/composition.py``) inside the lifespan, which
also owns and closes every client in it. Handlers never build backends; they ask for the typed
service they need (``pipeline``, ``memory_service()``, ``upstream``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from proxy.background import Background, Job
from proxy.errors import BackendError, StoreError
from proxy.memory.service import MemoryService
from proxy.metrics import Metrics
from proxy.pipeline.contract import MemoryPipeline
from proxy.settings import Settings
from proxy.tenancy import TenantResolver
from proxy.upstream import UpstreamClient


class Probe(Protocol):
    """Something ``/readyz`` asks whether it can serve now."""

    async def ready(self) -> bool:
        """``True`` when ready; ``False`` or an exception when not."""
        ...


class Opened:
    """The probe of a backend that holds no connection to check: it is ready once opened."""

    async def ready(self) -> bool:
        """Always ``True``."""
        return True


@dataclass
class Services:
    """Everything a request handler needs.

    ``memories`` is ``None`` when memory is off or its store could not be opened at start
    (the proxy then serves without memory). ``anthropic`` is the client of Anthropic's API
    (``upstream.anthropic``). ``probes`` are the readiness checks by name; a
    ``None`` probe is a backend that is configured but could not be opened.
    """

    settings: Settings
    upstream: UpstreamClient
    anthropic: UpstreamClient
    metrics: Metrics
    tenants: TenantResolver
    pipeline: MemoryPipeline
    memories: MemoryService | None = None
    probes: Mapping[str, Probe | None] = field(default_factory=dict)
    background: Background = field(default_factory=Background)

    def spawn(self, job: Job) -> None:
        """Run ``job`` after the response (completion hooks), kept until it ends."""
        self.background.spawn(job)

    async def drain(self, limit_s: float) -> None:
        """Wait for background work on shutdown, at most ``limit_s`` seconds."""
        await self.background.drain(limit_s)

    def memory_service(self) -> MemoryService:
        """The memories API's service; 503 when memory is off or the store is down."""
        if not self.settings.memory.enabled:
            raise BackendError("Memory is disabled on this proxy (memory.enabled is false).")
        if self.memories is None:
            raise StoreError("The memory store is unavailable right now; retry later.")
        return self.memories
