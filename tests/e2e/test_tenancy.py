"""Keys mode: 401 before any work; each tenant's limits bound its headers."""

from __future__ import annotations

import types
from pathlib import Path

import httpx
import openai
import pytest

from proxy.app import create_app
from proxy.settings import AuthSettings, Secret, TenantMemory, TenantSettings, replace
from tests.e2e.conftest import Backends, memory_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

KEY = "mp-acme-key"


class NeverPipeline:
    """Fails the test if the pipeline is reached."""

    calls = 0

    async def prepare(self, *args: object) -> object:
        NeverPipeline.calls += 1
        raise AssertionError("the pipeline ran for an unauthenticated request")


def keys_settings(fake: FakeServer, tmp_path: Path) -> object:
    acme = TenantSettings(
        keys=(Secret("env:ACME_KEY", KEY),),
        upstream_api_key=Secret("env:UPSTREAM", "sk-upstream-acme"),
        memory=TenantMemory(max_tokens=120, top_k=3, sources=("learnings",)),
    )
    auth = AuthSettings(mode="keys", tenants=types.MappingProxyType({"acme": acme}))
    return replace(memory_settings(fake.url, tmp_path), auth=auth)


@pytest.mark.parametrize("authorization", [None, "Bearer wrong", "Basic abc", "Bearer"])
def test_missing_or_unknown_key_is_401_before_any_work(
    fake: FakeServer, backends: Backends, tmp_path: Path, authorization: str | None
) -> None:
    settings = keys_settings(fake, tmp_path)
    app = create_app(settings, pipeline=NeverPipeline())  # type: ignore[arg-type]
    headers = {"Authorization": authorization} if authorization else {}
    with ProxyServer(app) as server:
        response = httpx.post(
            f"{server.url}/chat/completions",
            headers={**headers, "X-Memory-Mode": "explain"},
            content=b"not even json",
        )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    assert NeverPipeline.calls == 0
    assert not fake.fake.requests


def test_tenant_limits_bound_headers_and_upstream_key_replaced(
    fake: FakeServer, backends: Backends, tmp_path: Path
) -> None:
    settings = keys_settings(fake, tmp_path)
    backends.write("acme", [f"acme fact {i} about boats" for i in range(10)])
    app = create_app(
        settings,  # type: ignore[arg-type]
        store=backends.store,
        embedder=backends.embedder,
        cache=backends.cache,
    )
    with ProxyServer(app) as server:
        sdk = openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0)
        raw = sdk.chat.completions.with_raw_response.create(
            model="gpt-4o",
            messages=[{"role": "user", "content": "tell me about boats"}],
            extra_headers={"X-Memory-Max-Tokens": "5000", "X-Memory-Top-K": "50"},
        )
        assert raw.headers["x-memory-status"] == "injected"
        assert raw.headers["x-memory-budget"] == "120"
        assert int(raw.headers["x-memory-tokens"]) <= 120
        assert int(raw.headers["x-memory-injected"]) <= 3
        assert fake.fake.requests[-1].headers["authorization"] == "Bearer sk-upstream-acme"
        explain = httpx.post(
            f"{server.url}/chat/completions",
            headers={"Authorization": f"Bearer {KEY}", "X-Memory-Mode": "explain"},
            json={"model": "gpt-4o", "messages": [{"role": "user", "content": "boats"}]},
        ).json()
        assert explain["candidates"] == 3
