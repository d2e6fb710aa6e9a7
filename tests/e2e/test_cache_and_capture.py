"""The retrieval cache serves repeats until a write; capture and retrieval counts."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import openai

from proxy.app import create_app
from proxy.cache.factory import create_cache
from proxy.cache.local import LocalCache
from proxy.cache.request_cache import RequestCache
from proxy.memory.inputs import MemoryInput
from proxy.memory.service import MemoryService
from proxy.metrics import Metrics
from proxy.settings import replace
from tests.e2e.conftest import API_KEY, Backends, MemoryProxy, memory_settings, tenant_of
from tests.e2e.test_fail_open import FlakyStore, ask
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.redis_server import RedisServer

MODEL = "gpt-4o-mini"
# These tests repeat one request to see what retrieval does. With position turn a repeat reuses
# the turn's block (adr/0111) and retrieves nothing, so they ask with position system, which
# retrieves every time.
RETRIEVE = {"X-Memory-Position": "system"}


def wait_for(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "background work did not finish"
        time.sleep(0.05)


def sent_text(fake: FakeServer) -> str:
    return str(fake.fake.requests[-1].json()["messages"])


def test_repeat_served_from_cache_until_a_write(
    fake: FakeServer, backends: Backends, tmp_path: Path
) -> None:
    spy = FlakyStore(backends.store)
    settings = memory_settings(fake.url, tmp_path)
    tenant = tenant_of(settings)
    backends.write(tenant, ["The user's dog is called Biscuit."])
    metrics = Metrics()
    cache = RequestCache(LocalCache(1_000), on_lookup=metrics.count_cache_lookup)
    backends.cache = cache  # the test's writes bump this cache's generations
    app = create_app(settings, store=spy, embedder=backends.embedder, cache=cache, metrics=metrics)
    with ProxyServer(app) as server:
        first = ask(server.url, headers=RETRIEVE)
        assert "search;dur=" in first["server-timing"]
        repeat = ask(server.url, stream=True, headers=RETRIEVE)
        assert spy.searches == 1  # served from the cache
        assert "search;dur=" not in repeat["server-timing"]
        assert repeat["x-memory-status"] == "injected"
        backends.write(tenant, ["The user's dog Biscuit is afraid of thunder."])
        after = ask(server.url, headers=RETRIEVE)
        assert spy.searches == 2  # the write bumped the generation
        assert after["x-memory-injected"] == "2"
        assert "thunder" in sent_text(fake)
        metrics = httpx.get(server.url.removesuffix("/v1") + "/metrics").text
        assert 'memproxy_cache_lookups_total{kind="retrieval",result="hit"} 1.0' in metrics
        assert 'memproxy_memory_stage_seconds_count{stage="search"} 2.0' in metrics
        assert 'memproxy_memory_requests_total{status="injected"} 3.0' in metrics


def test_redis_cache_shared_by_replicas(
    fake: FakeServer, backends: Backends, tmp_path: Path, redis_server: RedisServer
) -> None:
    spy = FlakyStore(backends.store)
    base = memory_settings(fake.url, tmp_path)
    settings = replace(base, cache=replace(base.cache, redis_url=redis_server.url))
    tenant = tenant_of(settings)
    backends.write(tenant, ["The user's dog is called Biscuit."])
    app = create_app(settings, store=spy, embedder=backends.embedder)
    with ProxyServer(app) as server:
        ask(server.url, headers=RETRIEVE)
        assert ask(server.url, headers=RETRIEVE)["x-memory-status"] == "injected"
        assert spy.searches == 1

        async def write_through_another_replica() -> None:
            other = RequestCache(create_cache(redis_server.url, 100))
            service = MemoryService(backends.store, backends.embedder, other)
            # It must answer the question too: the adaptive budget leaves out what does not.
            fact = MemoryInput(content="The user's dog Biscuit hates thunder storms.")
            await service.write(tenant, [fact])
            await other.close()

        asyncio.run(write_through_another_replica())
        assert ask(server.url, headers=RETRIEVE)["x-memory-injected"] == "2"
        assert spy.searches == 2
        assert "thunder" in sent_text(fake)


def test_capture_turn_from_a_stream(memproxy: MemoryProxy) -> None:
    sdk = openai.OpenAI(base_url=memproxy.url, api_key=API_KEY, max_retries=0)
    memproxy.backends.write(memproxy.tenant, ["The user's dog is called Biscuit."])
    stream = sdk.chat.completions.create(
        model=MODEL,
        messages=[
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "My cat is called Miso. What is my dog called?"},
        ],
        stream=True,
        extra_headers={"X-Memory-Capture": "turn", "X-Memory-Session": "s-42"},
    )
    answer = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert "<memories>" in sent_text(memproxy.fake)

    def captured() -> list[Any]:
        return [r for r in memproxy.backends.list(memproxy.tenant) if r.source == "conversation"]

    wait_for(lambda: len(captured()) == 2)
    by_role = {r.metadata["role"]: r for r in captured()}
    assert by_role["user"].content == "My cat is called Miso. What is my dog called?"
    assert by_role["assistant"].content == answer.strip()
    assert {r.metadata["session"] for r in captured()} == {"s-42"}
    assert all("<memories>" not in r.content for r in captured())


def test_retrieval_counts_of_injected_memories(memproxy: MemoryProxy) -> None:
    (biscuit,) = memproxy.backends.write(memproxy.tenant, ["The user's dog is called Biscuit."])
    for _ in range(3):
        assert ask(memproxy.url, headers=RETRIEVE)["x-memory-status"] == "injected"

    def count() -> int:
        records = memproxy.backends.list(memproxy.tenant)
        return next(r.retrieval_count for r in records if r.id == biscuit)

    wait_for(lambda: count() == 3)
