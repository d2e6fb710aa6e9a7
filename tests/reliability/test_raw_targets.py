"""Request targets written byte by byte on a raw socket (httpx would normalise them first).

memproxy sits in front of the fake with a prefixed upstream URL (``/openai/v1``). Each target
either reaches the upstream byte for byte inside that prefix (the fake records the raw request
line) or is refused with a 400 in OpenAI's shape, and nothing reaches the upstream.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import orjson
import pytest

from proxy.app import create_app
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

PREFIX = "/openai/v1"


@pytest.fixture(scope="module")
def prefixed(fake_server: FakeServer) -> Iterator[ProxyServer]:
    """memproxy whose upstream URL has a path prefix below the fake's root."""
    url = f"http://{fake_server.host}:{fake_server.port}{PREFIX}"
    with ProxyServer(create_app(proxy_settings(url))) as proxy:
        yield proxy


def exchange(proxy: ProxyServer, request_line: bytes, headers: bytes = b"") -> tuple[int, bytes]:
    """Send one request as raw bytes; the status and body of the answer."""
    with socket.create_connection((proxy.host, proxy.port), timeout=10) as sock:
        sock.sendall(
            request_line + b"\r\nHost: memproxy\r\nConnection: close\r\n" + headers + b"\r\n"
        )
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


@pytest.mark.parametrize(
    ("target", "upstream"),
    [
        (b"/v1/files/a%2Fb", b"/files/a%2Fb"),
        (b"/v1/files/a%3Fb?purpose=x", b"/files/a%3Fb?purpose=x"),
        (b"/v1/files/a%2fb%3f", b"/files/a%2fb%3f"),
        (b"/v1//models", b"//models"),
        (b"/v1/files/x?q=%0d%0a", b"/files/x?q=%0d%0a"),
        (b"http://evil.example/v1/models", b"/models"),  # absolute form: our upstream, not evil
    ],
)
def test_targets_reach_the_upstream_byte_for_byte_inside_the_prefix(
    prefixed: ProxyServer, fake: FakeServer, target: bytes, upstream: bytes
) -> None:
    status, _ = exchange(prefixed, b"GET " + target + b" HTTP/1.1")
    assert status == 200
    (rec,) = fake.fake.requests
    assert rec.raw_path == PREFIX + upstream.decode()
    assert rec.headers["host"] == f"{fake.host}:{fake.port}"


@pytest.mark.parametrize(
    "target",
    [
        b"/v1/%2e%2e/%2e%2e/admin",
        b"/v1/%2E%2E/%2e%2E/admin",
        b"/v1/../../admin",
        b"/v1/./models",
        b"/v1/files/.%2e/.%2e/admin",
        b"/v1/files/a%2F..%2F..%2Fadmin",
        b"/v1/files/%252e%252e/x",
        b"/v1/a%00b",
        b"/v1/a%0d%0ab",
        b"/v1/a%0Db",
        b"/v1/a\\..\\b",
        b"/v1/a\\b",
        b"/v1/a{b}",
    ],
)
def test_hostile_targets_are_refused_before_the_upstream(
    prefixed: ProxyServer, fake: FakeServer, target: bytes
) -> None:
    status, body = exchange(prefixed, b"GET " + target + b" HTTP/1.1")
    assert status == 400, body
    error = orjson.loads(body)["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "invalid_path"
    assert not fake.fake.requests


def test_chat_route_forwards_its_raw_path_too(prefixed: ProxyServer, fake: FakeServer) -> None:
    body = b'{"model": "m", "messages": []}'
    headers = b"Content-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    with socket.create_connection((prefixed.host, prefixed.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completion%73?trace=1 HTTP/1.1\r\nHost: m\r\nConnection: close\r\n"
            + headers
            + b"\r\n"
            + body
        )
        while sock.recv(65536):
            pass
    (rec,) = fake.fake.requests
    assert rec.raw_path == PREFIX + "/chat/completion%73?trace=1"
