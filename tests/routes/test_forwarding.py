"""What reaches the upstream: headers, auth per mode, paths, methods and query strings."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import load_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_hop_by_hop_and_memory_headers_are_stripped(proxy: ProxyServer, fake: FakeServer) -> None:
    headers = {
        "Connection": "keep-alive",
        "Keep-Alive": "timeout=5",
        "TE": "trailers",
        "Proxy-Authorization": "Basic c2VjcmV0",
        "X-Memory-User": "alice",
        "X-Custom": "kept",
        "OpenAI-Organization": "org-1",
    }
    httpx.post(f"{proxy.url}/chat/completions", json=CHAT, headers=headers)
    received = fake.fake.requests[0].headers
    for name in ("keep-alive", "te", "proxy-authorization", "x-memory-user"):
        assert name not in received
    assert received["x-custom"] == "kept"
    assert received["openai-organization"] == "org-1"


def test_request_id_is_echoed_and_forwarded(proxy: ProxyServer, fake: FakeServer) -> None:
    given = httpx.post(f"{proxy.url}/chat/completions", json=CHAT, headers={"X-Request-Id": "r-42"})
    assert given.headers["x-request-id"] == "r-42"
    assert fake.fake.requests[0].headers["x-request-id"] == "r-42"
    generated = httpx.get(f"{proxy.url}/models")
    assert len(generated.headers["x-request-id"]) == 32
    assert fake.fake.requests[1].headers["x-request-id"] == generated.headers["x-request-id"]


@pytest.mark.parametrize("method", ["GET", "POST", "DELETE", "PATCH"])
def test_other_v1_paths_forwarded_with_query(
    proxy: ProxyServer, fake: FakeServer, method: str
) -> None:
    response = httpx.request(method, f"{proxy.url}/files/abc?purpose=fine-tune&x=a%20b")
    assert response.status_code == 200
    rec = fake.fake.requests[0]
    assert (rec.method, rec.path, rec.query) == (
        method,
        "/v1/files/abc",
        "purpose=fine-tune&x=a%20b",
    )


def test_keys_mode_maps_key_to_tenant_upstream_key(fake: FakeServer, tmp_path: Path) -> None:
    config = tmp_path / "memproxy.yaml"
    config.write_text(
        f"upstream:\n  url: {fake.url}\n"
        "auth:\n  mode: keys\n  tenants:\n    acme:\n"
        "      keys: [env:ACME_KEY]\n      upstream_api_key: env:ACME_UPSTREAM\n"
    )
    env = {"ACME_KEY": "mp-acme", "ACME_UPSTREAM": "sk-upstream-acme"}
    settings = load_settings(config, env=env)
    with ProxyServer(create_app(settings)) as proxy:
        ok = httpx.post(
            f"{proxy.url}/chat/completions", json=CHAT, headers={"Authorization": "Bearer mp-acme"}
        )
        unknown = httpx.post(
            f"{proxy.url}/chat/completions", json=CHAT, headers={"Authorization": "Bearer nope"}
        )
        missing = httpx.get(f"{proxy.url}/models")
    assert ok.status_code == 200
    assert fake.fake.requests[0].headers["authorization"] == "Bearer sk-upstream-acme"
    assert unknown.status_code == 401
    assert unknown.json()["error"]["code"] == "invalid_api_key"
    assert missing.status_code == 401
    assert len(fake.fake.requests) == 1  # rejected requests never reach the upstream


def test_compressed_body_relayed_as_is(proxy: ProxyServer, fake: FakeServer) -> None:
    response = httpx.get(f"{proxy.url}/models", headers={"Accept-Encoding": "identity"})
    assert response.json()["object"] == "list"
    assert fake.fake.requests[0].headers["accept-encoding"] == "identity"


def test_head_keeps_the_announced_length(proxy: ProxyServer, fake: FakeServer) -> None:
    response = httpx.head(f"{proxy.url}/models")
    assert response.status_code == 200
    assert response.content == b""
    direct = httpx.head(f"{fake.url}/models")
    assert response.headers["content-length"] == direct.headers["content-length"]
    assert fake.fake.requests[-1].method == "HEAD"
