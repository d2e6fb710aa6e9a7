"""The upstream connection under hostile or unusual conditions (issue 11, item 11).

Through the whole app, in-process (``httpx.ASGITransport``) so that bytes a real HTTP server
would refuse on its own (CR/LF in a header value) still reach memproxy, against scripted
upstreams over real sockets:

- a client header value with CR/LF is a 400 in OpenAI's shape and nothing is sent upstream (no
  header injection);
- a hostile upstream's 25 MB response head is a 502, read only up to a bound;
- ``HTTPS_PROXY`` is honoured (a CONNECT tunnel to an https upstream), and ``upstream.tls``
  gives the CA to trust and the client certificate an upstream requires.
"""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import trustme

from proxy.app import create_app
from proxy.settings import load_settings
from tests.conftest import proxy_settings
from tests.fakes.scripted import EndlessHead, forward_proxy, keep_alive_json, serving
from tests.reliability.support import CHAT, assert_openai_error, running

HEAD_BYTES = 25 * 1024 * 1024


async def test_a_client_header_with_crlf_is_a_400_and_never_sent() -> None:
    async with serving(keep_alive_json) as server:
        app = create_app(proxy_settings(server.origin + "/v1"))
        async with running(app) as client:
            for path in ("/v1/models", "/v1/chat/completions"):
                response = await client.post(
                    path, json=CHAT, headers={"X-Note": "a\r\nX-Injected: 1"}
                )
                assert_openai_error(response, 400, "invalid_header")
    assert server.connections == 0


async def test_an_endless_response_head_is_a_502() -> None:
    hostile = EndlessHead(HEAD_BYTES, line=4000)

    async with serving(hostile) as server:
        app = create_app(proxy_settings(server.origin + "/v1"))
        async with running(app) as client:
            response = await client.get("/v1/models")
            assert_openai_error(response, 502)
            await asyncio.wait_for(server.closed.wait(), 5)
    assert hostile.written < HEAD_BYTES // 2


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


def upstream_tls(ca: trustme.CA) -> ssl.SSLContext:
    """An https upstream that requires a client certificate issued by ``ca``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("localhost").configure_cert(context)
    context.verify_mode = ssl.CERT_REQUIRED
    ca.configure_trust(context)
    return context


async def test_https_proxy_and_client_certificate_from_the_settings(
    ca: trustme.CA, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ca.cert_pem.write_to_path(tmp_path / "ca.pem")
    identity = ca.issue_cert("memproxy")
    identity.cert_chain_pems[0].write_to_path(tmp_path / "cert.pem")
    identity.private_key_pem.write_to_path(tmp_path / "key.pem")
    async with serving(keep_alive_json, upstream_tls(ca)) as server, forward_proxy() as proxy:
        config = tmp_path / "memproxy.yaml"
        config.write_text(
            f"upstream:\n  url: {server.origin}/v1\n  tls:\n"
            f"    ca_file: {tmp_path / 'ca.pem'}\n"
            f"    cert_file: {tmp_path / 'cert.pem'}\n"
            f"    key_file: {tmp_path / 'key.pem'}\n"
            "memory:\n  enabled: false\n"
        )
        for name in ("NO_PROXY", "no_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTPS_PROXY", proxy.url)
        app = create_app(load_settings(config, env={}))
        async with running(app) as client:
            response = await client.get("/v1/models")
            ready = await client.get("/readyz")
    assert response.status_code == 200, response.text
    assert response.json() == {"n": 1}
    assert proxy.lines == [f"CONNECT localhost:{server.port} HTTP/1.1".encode()]
    assert ready.status_code == 200
