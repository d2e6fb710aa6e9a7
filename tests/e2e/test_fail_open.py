"""Fail-open: a failing or hanging memory backend never fails a chat request (README)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import openai
import pytest

from proxy.app import create_app
from tests.e2e.conftest import API_KEY, Backends, memory_settings, start_proxy, tenant_of
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.redis_server import RedisServer

MODEL = "gpt-4o-mini"
FACTS = ["The user's dog is called Biscuit.", "The user lives in Lisbon."]


class FlakyStore:
    """The real store, with a search that can raise or hang."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self.mode = "ok"
        self.searches = 0

    async def search(self, tenant: str, query: Any) -> Any:
        await self._fail()
        return await self.store.search(tenant, query)

    async def search_near(self, tenant: str, query: Any, seeds: int, window_s: float) -> Any:
        await self._fail()
        return await self.store.search_near(tenant, query, seeds, window_s)

    async def _fail(self) -> None:
        self.searches += 1
        if self.mode == "raise":
            raise RuntimeError("qdrant is down")
        if self.mode == "hang":
            await asyncio.sleep(30)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


class FailingEmbedder:
    """An embedder that always fails (a remote embedding API being down)."""

    def __init__(self, real: Any) -> None:
        self.name = real.name
        self.dimensions = real.dimensions

    async def embed(self, texts: Any) -> np.ndarray:
        raise ConnectionError("embedding API unreachable")


def ask(
    url: str, stream: bool = False, key: str = API_KEY, headers: dict[str, str] | None = None
) -> httpx.Headers:
    """One chat request through the SDK; returns the response headers (it must succeed)."""
    sdk = openai.OpenAI(base_url=url, api_key=key, max_retries=0)
    raw = sdk.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is my dog called?"}],
        stream=stream,
        extra_headers=headers,
    )
    if stream:
        assert list(raw.parse())  # type: ignore[call-overload]
    else:
        assert raw.parse().choices[0].message.content  # type: ignore[union-attr]
    return raw.headers


def metric(root: str, needle: str) -> float:
    for line in httpx.get(f"{root}/metrics").text.splitlines():
        if line.startswith(needle):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize(("mode", "reason"), [("raise", "search_error"), ("hang", "deadline")])
def test_store_failure_forwards_without_memories(
    fake: FakeServer, backends: Backends, tmp_path: Path, mode: str, reason: str
) -> None:
    flaky = FlakyStore(backends.store)
    server, settings = start_proxy(fake, backends, tmp_path, store=flaky, deadline_ms=300.0)
    backends.write(tenant_of(settings), FACTS)
    flaky.mode = mode
    with server:
        root = server.url.removesuffix("/v1")
        for stream in (False, True):
            started = time.perf_counter()
            headers = ask(server.url, stream)
            assert time.perf_counter() - started < 5  # the hang is cut by the deadline
            assert headers["x-memory-status"] == "degraded"
            assert headers["x-memory-injected"] == "0"
            sent = fake.fake.requests[-1].json()["messages"]
            assert sent == [{"role": "user", "content": "What is my dog called?"}]
        assert metric(root, f'memproxy_memory_degraded_total{{reason="{reason}"}}') == 2
        flaky.mode = "ok"
        assert ask(server.url)["x-memory-status"] == "injected"  # recovers at once


def test_embedder_failure_forwards_without_memories(
    fake: FakeServer, backends: Backends, tmp_path: Path
) -> None:
    settings = memory_settings(fake.url, tmp_path)
    backends.write(tenant_of(settings), FACTS)
    app = create_app(
        settings,
        store=backends.store,
        embedder=FailingEmbedder(backends.embedder),
        cache=backends.cache,
    )
    with ProxyServer(app) as server:
        for stream in (False, True):
            headers = ask(server.url, stream)
            assert headers["x-memory-status"] == "degraded"
        root = server.url.removesuffix("/v1")
        assert metric(root, 'memproxy_memory_degraded_total{reason="embed_error"}') == 2


def test_missing_store_degrades(fake: FakeServer, backends: Backends, tmp_path: Path) -> None:
    settings = memory_settings(fake.url, tmp_path)
    app = create_app(settings, store=None, embedder=backends.embedder, cache=backends.cache)
    # The lifespan would open its own store under tmp_path; make it unopenable instead.
    (tmp_path / "memories").write_text("not a directory")
    with ProxyServer(app) as server:
        assert ask(server.url)["x-memory-status"] == "degraded"
        ready = httpx.get(server.url.removesuffix("/v1") + "/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"]["store"].startswith("unavailable: retrying (")


def test_redis_killed_mid_run(
    fake: FakeServer, backends: Backends, tmp_path: Path, redis_server: RedisServer
) -> None:
    from proxy.settings import replace

    base = memory_settings(fake.url, tmp_path)
    settings = replace(base, cache=replace(base.cache, redis_url=redis_server.url))
    backends.write(tenant_of(settings), FACTS)
    app = create_app(settings, store=backends.store, embedder=backends.embedder)
    with ProxyServer(app) as server:
        assert ask(server.url)["x-memory-status"] == "injected"
        redis_server.kill()
        for i in range(6):
            headers = ask(server.url, stream=i % 2 == 1)
            assert headers["x-memory-status"] == "degraded"
            # The cache is skipped, the store still answers: memories still go in.
            assert headers["x-memory-injected"] != "0"
        root = server.url.removesuffix("/v1")
        assert metric(root, 'memproxy_memory_degraded_total{reason="cache"}') == 6
