"""Secrets that must not show, and headers that must not pass (issue 11, item 9).

- Credentials in the upstream URL (``user:pass@``, ``?api-key=``) never appear in the
  unauthenticated ``/readyz`` nor in the start-up log.
- Headers named in a ``Connection`` header are hop-by-hop (RFC 9110 7.6.1): dropped in both
  directions, like the fixed hop-by-hop list.
- In keys mode the operator's key goes upstream: a client's ``OpenAI-Organization`` /
  ``OpenAI-Project`` (and its memproxy key in another auth header) do not go with it.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import Settings, load_settings, replace
from tests.conftest import proxy_settings
from tests.fakes.scripted import Server, serving
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.support import CHAT, running

SECRET = "s3cret-0123456789"


def test_credentials_in_the_upstream_url_never_show(
    fake: FakeServer, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"http://user:{SECRET}@{fake.host}:{fake.port}/v1?api-key={SECRET}"
    caplog.set_level(logging.INFO, logger="memproxy")
    with ProxyServer(create_app(proxy_settings(url))) as proxy:
        ready = httpx.get(f"http://{proxy.host}:{proxy.port}/readyz")
        answered = httpx.get(f"{proxy.url}/models?x=1")
    assert ready.status_code == 200
    assert SECRET not in ready.text
    assert ready.json()["upstream_url"] == f"http://***@{fake.host}:{fake.port}/v1?api-key=***"
    started = [r.getMessage() for r in caplog.records if "memproxy ready" in r.getMessage()]
    assert started
    assert all(SECRET not in line for line in started)
    assert all(SECRET not in r.getMessage() for r in caplog.records)
    # The query of the configured URL is the upstream's to read; the user information is not.
    assert answered.status_code == 200
    (rec,) = fake.fake.requests
    assert rec.query == f"api-key={SECRET}&x=1"
    assert "authorization" not in rec.headers


def test_request_headers_named_in_connection_are_dropped(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    request = (
        b"GET /v1/models HTTP/1.1\r\nHost: m\r\nConnection: keep-alive, X-Foo\r\n"
        b"Connection: x-bar\r\nX-Foo: hop\r\nX-Bar: hop\r\nX-Kept: end-to-end\r\n\r\n"
    )
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as sock:
        sock.sendall(request)
        assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    (rec,) = fake.fake.requests
    assert rec.headers["x-kept"] == "end-to-end"
    assert "x-foo" not in rec.headers
    assert "x-bar" not in rec.headers


async def test_response_headers_named_in_connection_are_dropped() -> None:
    async def upstream(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, s: Server
    ) -> None:
        while await s.read_request(reader) is not None:
            writer.write(
                b"HTTP/1.1 200 OK\r\nConnection: X-Internal-Route\r\n"
                b"X-Internal-Route: 10.0.0.7\r\nX-Request-Cost: 3\r\n"
                b"Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
            )
            await writer.drain()

    async with serving(upstream) as server:
        app = create_app(proxy_settings(server.origin + "/v1"))
        async with running(app) as client:
            response = await client.get("/v1/models")
    assert response.status_code == 200
    assert response.headers["x-request-cost"] == "3"
    assert "x-internal-route" not in response.headers


def keys_settings(url: str, tmp_path: Path) -> Settings:
    config = tmp_path / "memproxy.yaml"
    config.write_text(
        f"upstream:\n  url: {url}\n"
        "auth:\n  mode: keys\n  tenants:\n    acme:\n"
        "      keys: [env:ACME_KEY]\n      upstream_api_key: env:ACME_UPSTREAM\n"
    )
    settings = load_settings(config, env={"ACME_KEY": "mp-acme", "ACME_UPSTREAM": "sk-operator"})
    return replace(settings, memory=replace(settings.memory, enabled=False))


CLIENT_HEADERS = {
    "OpenAI-Organization": "org-chosen-by-client",
    "OpenAI-Project": "proj-chosen-by-client",
    "X-Api-Key": "mp-acme",
    "OpenAI-Beta": "assistants=v2",
}


def test_keys_mode_sends_no_client_org_project_or_memproxy_key(
    fake: FakeServer, tmp_path: Path
) -> None:
    settings = keys_settings(fake.url, tmp_path)
    with ProxyServer(create_app(settings)) as proxy:
        headers = {"Authorization": "Bearer mp-acme", **CLIENT_HEADERS}
        response = httpx.post(f"{proxy.url}/chat/completions", json=CHAT, headers=headers)
        files = httpx.get(f"{proxy.url}/files", headers=headers)
    assert (response.status_code, files.status_code) == (200, 200)
    for rec in fake.fake.requests:
        assert rec.headers["authorization"] == "Bearer sk-operator"
        assert rec.headers["openai-beta"] == "assistants=v2"
        for name in ("openai-organization", "openai-project", "x-api-key"):
            assert name not in rec.headers
    assert "mp-acme" not in str([rec.headers for rec in fake.fake.requests])


def test_passthrough_mode_keeps_the_clients_org_and_project(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    headers = {"Authorization": "Bearer sk-client", **CLIENT_HEADERS}
    assert httpx.post(f"{proxy.url}/chat/completions", json=CHAT, headers=headers).is_success
    (rec,) = fake.fake.requests
    assert rec.headers["openai-organization"] == "org-chosen-by-client"
    assert rec.headers["openai-project"] == "proj-chosen-by-client"
