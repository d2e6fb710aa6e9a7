"""memproxy with memory on, in front of the fake upstream, over a real socket.

The backends (embedded store under a tmp dir, the shipped static embedder, an in-process cache)
are opened here and injected, so tests can write memories (through ``MemoryService``, the one
write path) while the proxy runs. The store and the local cache are not bound to an event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.app import create_app
from proxy.cache.local import LocalCache
from proxy.cache.request_cache import RequestCache
from proxy.memory.edge import EdgeStore
from proxy.memory.embedders import StaticEmbedder
from proxy.memory.inputs import MemoryInput
from proxy.memory.service import MemoryService
from proxy.settings import AnthropicSettings, Settings, UpstreamSettings, load_settings, replace
from proxy.tenancy import TenantResolver
from tests.conftest import anthropic_root
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.redis_server import redis_server

__all__ = ["redis_server"]  # a fixture for the Redis tests

API_KEY = "sk-e2e-tenant"
# Generous deadlines: a shared machine must not make tests flaky. Retrieval counts flush fast,
# so tests that read them back do not wait the production window.
LOOSE_DEADLINES = {"deadline_ms": 2_000.0, "count_flush_s": 0.2}


def memory_settings(upstream_url: str, data_dir: Path, **memory: Any) -> Settings:
    """Defaults with memory on, the store under ``data_dir``, generous deadlines."""
    base = load_settings(env={})
    stages = replace(base.memory.stage_timeouts, embed_ms=1_000.0, search_ms=1_000.0)
    return replace(
        base,
        upstream=UpstreamSettings(
            url=upstream_url, anthropic=AnthropicSettings(url=anthropic_root(upstream_url))
        ),
        store=replace(base.store, data_dir=str(data_dir)),
        memory=replace(
            base.memory, enabled=True, stage_timeouts=stages, **{**LOOSE_DEADLINES, **memory}
        ),
    )


def tenant_of(settings: Settings, key: str = API_KEY) -> str:
    """The tenant id memproxy derives for ``key``."""
    return TenantResolver(settings).for_key(key).id


@dataclass
class Backends:
    """Store, embedder and cache shared by the test and the running proxy."""

    store: Any
    embedder: StaticEmbedder
    cache: Any

    def write(self, tenant: str, contents: Sequence[str], user: str = "") -> list[str]:
        """Write memories through the service; return their ids."""
        service = MemoryService(self.store, self.embedder, self.cache)
        inputs = [MemoryInput(content=c, user=user) for c in contents]
        records = asyncio.run(service.write(tenant, inputs))
        return [r.id for r in records]

    def list(self, tenant: str) -> list[Any]:
        """Every memory of the tenant."""
        page = asyncio.run(self.store.list(tenant, user=None, source=None, limit=100, after=None))
        return list(page.records)


@pytest.fixture
def backends(tmp_path: Path) -> Iterator[Backends]:
    """Fresh backends under ``tmp_path``."""
    embedder = StaticEmbedder()
    store = asyncio.run(EdgeStore.open(tmp_path / "store", dimensions=embedder.dimensions))
    cache = RequestCache(LocalCache(10_000))
    yield Backends(store, embedder, cache)
    asyncio.run(store.close())


@dataclass
class MemoryProxy:
    """A running memproxy with memory on and its backends."""

    server: ProxyServer
    settings: Settings
    backends: Backends
    fake: FakeServer

    @property
    def url(self) -> str:
        """Base URL ending in ``/v1``."""
        return self.server.url

    @property
    def tenant(self) -> str:
        """The tenant of ``API_KEY``."""
        return tenant_of(self.settings)


def start_proxy(
    fake: FakeServer, backends: Backends, tmp_path: Path, store: Any = None, **memory: Any
) -> tuple[ProxyServer, Settings]:
    """Build and start memproxy (the caller enters/exits the returned server)."""
    settings = memory_settings(fake.url, tmp_path, **memory)
    app = create_app(
        settings,
        store=store if store is not None else backends.store,
        embedder=backends.embedder,
        cache=backends.cache,
    )
    return ProxyServer(app), settings


@pytest.fixture
def memproxy(fake: FakeServer, backends: Backends, tmp_path: Path) -> Iterator[MemoryProxy]:
    """memproxy with memory on (default limits) in front of the fake."""
    server, settings = start_proxy(fake, backends, tmp_path)
    with server:
        yield MemoryProxy(server, settings, backends, fake)
