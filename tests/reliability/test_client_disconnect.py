"""A client that leaves in the middle of its body is a client disconnect, not a failure of ours.

It used to surface as a 500 with a traceback on chat and the passthrough, and as a 503 "memory
backend failed" (with a traceback) on the memories API. Now each is logged as one line, counted
as status 499 in ``memproxy_requests`` (and the access log), and no 5xx or traceback appears.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterator

import pytest

from proxy.app import create_app
from tests.fakes.upstream import FakeServer
from tests.reliability.raw_http import connect, exchange, request
from tests.reliability.support import MemoryProxy, memory_settings

PATHS = {
    "chat": "/v1/chat/completions",
    "passthrough": "/v1/embeddings",
    "memories": "/v1/memories",
}
WAIT_S = 10.0


@pytest.fixture(scope="module")
def port(fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """memproxy with memory on (the memories API has a store behind it)."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("disconnect"))
    with MemoryProxy(create_app(settings)) as proxy:
        yield proxy.port


def request_counts(port: int, route: str) -> dict[str, float]:
    """``memproxy_requests_total`` of ``route`` by status, from ``/metrics``."""
    metrics = exchange(port, request("GET", "/metrics", [("Connection", "close")]))
    text = metrics.responses[0].body.decode()
    pattern = rf'memproxy_requests_total{{method="POST",route="{route}",status="(\d+)"}} (\S+)'
    return {status: float(value) for status, value in re.findall(pattern, text)}


def leave_mid_body(port: int, path: str, framing: str) -> None:
    """Send a head and half a body, then close the connection."""
    headers = [("Content-Type", "application/json"), ("Authorization", "Bearer sk-leaving")]
    if framing == "chunked":
        head = request("POST", path, [*headers, ("Transfer-Encoding", "chunked")])
        partial = b"20\r\n" + b'{"model": "m", "messages": [' + b"\r\n"
    else:
        head = request("POST", path, [*headers, ("Content-Length", "1000")])
        partial = b'{"model": "m", "messages": ['
    with connect(port) as sock:
        sock.sendall(head)
        time.sleep(0.05)  # the app is waiting for the body when the client leaves
        sock.sendall(partial)
        time.sleep(0.05)


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
@pytest.mark.parametrize("route", PATHS)
def test_leaving_mid_body_counts_as_499_without_a_traceback(
    port: int, route: str, framing: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    before = request_counts(port, route)
    leave_mid_body(port, PATHS[route], framing)
    deadline = time.monotonic() + WAIT_S
    after = request_counts(port, route)
    while after.get("499", 0) == before.get("499", 0) and time.monotonic() < deadline:
        time.sleep(0.05)
        after = request_counts(port, route)
    assert after.get("499", 0) == before.get("499", 0) + 1, after
    changed = {s for s in after if after[s] != before.get(s, 0)}
    assert changed == {"499"}  # no 5xx recorded
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("client disconnected after") for m in messages), messages
    tracebacks = [
        r.getMessage() for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR
    ]
    assert tracebacks == []
    access = [m for m in messages if m.startswith(f"POST {PATHS[route]} ")]
    assert access
    assert " 499 " in access[-1]
