"""ASGI-level checks: incremental relay and disconnect handling, with the app called directly."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import orjson
from starlette.applications import Starlette

from proxy.app import create_app
from tests.conftest import proxy_settings
from tests.fakes.upstream import FakeServer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[Starlette]:
    """Run the app's lifespan around the block (what uvicorn does at start and stop)."""
    async with app.router.lifespan_context(app):
        yield app


class Client:
    """A hand-driven ASGI client: records what is sent and can disconnect on demand."""

    def __init__(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        self.body = orjson.dumps(body)
        self.headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
        self.messages: list[tuple[float, dict[str, Any]]] = []
        self.first_body = asyncio.Event()
        self.gone = asyncio.Event()
        self._body_sent = False

    def scope(self) -> dict[str, Any]:
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/chat/completions",
            "raw_path": b"/v1/chat/completions",
            "query_string": b"",
            "root_path": "",
            "headers": [(b"content-type", b"application/json"), *self.headers],
            "client": ("127.0.0.1", 1),
            "server": ("127.0.0.1", 8080),
        }

    async def receive(self) -> dict[str, Any]:
        if not self._body_sent:
            self._body_sent = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.messages.append((time.monotonic(), message))
        if message["type"] == "http.response.body" and message.get("body"):
            self.first_body.set()


async def test_first_chunk_arrives_before_upstream_finishes(fake: FakeServer) -> None:
    app = create_app(proxy_settings(fake.url))
    client = Client({**CHAT, "stream": True}, {"X-Fake-Interval-Ms": "150", "X-Fake-Chunks": "4"})
    async with running(app):
        call = asyncio.create_task(app(client.scope(), client.receive, client.send))
        await asyncio.wait_for(client.first_body.wait(), timeout=5)
        (upstream_request,) = [
            r for r in fake.fake.requests if r.headers.get("x-fake-chunks") == "4"
        ]
        # The first chunk is with the client while the upstream is still writing the rest.
        assert not upstream_request.finished
        await asyncio.wait_for(call, timeout=10)
        # The fake (another thread) marks the request finished just after its last write.
        for _ in range(40):
            if upstream_request.finished:
                break
            await asyncio.sleep(0.025)
    assert upstream_request.finished
    bodies = [m for _, m in client.messages if m["type"] == "http.response.body"]
    assert bodies[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    content = [m for m in bodies if m["body"]]
    # Chunks arrive spread over time, not in one buffered burst.
    times = [t for t, m in client.messages if m["type"] == "http.response.body" and m["body"]]
    assert len(content) >= 4
    assert times[-1] - times[0] > 0.3


async def test_disconnect_mid_stream_closes_upstream(fake: FakeServer) -> None:
    app = create_app(proxy_settings(fake.url))
    client = Client({**CHAT, "stream": True}, {"X-Fake-Interval-Ms": "100", "X-Fake-Chunks": "50"})
    async with running(app):
        call = asyncio.create_task(app(client.scope(), client.receive, client.send))
        await asyncio.wait_for(client.first_body.wait(), timeout=5)
        client.gone.set()
        await asyncio.wait_for(call, timeout=2)  # returns promptly, not after 50 chunks
        (upstream_request,) = [
            r for r in fake.fake.requests if r.headers.get("x-fake-chunks") == "50"
        ]
        for _ in range(50):  # the fake notices on its next write (every 100 ms)
            if upstream_request.disconnected:
                break
            await asyncio.sleep(0.05)
        assert upstream_request.disconnected
        assert not upstream_request.finished
        metrics = app.state.services.metrics.render()[0].decode()
    assert 'memproxy_upstream_errors_total{kind="disconnect"} 1.0' in metrics


async def test_disconnect_while_waiting_non_streaming_closes_upstream(fake: FakeServer) -> None:
    app = create_app(proxy_settings(fake.url))
    client = Client(CHAT, {"X-Fake-Latency-Ms": "3000"})
    async with running(app):
        started = time.monotonic()
        call = asyncio.create_task(app(client.scope(), client.receive, client.send))
        await asyncio.sleep(0.2)
        client.gone.set()
        await asyncio.wait_for(call, timeout=2)
        assert time.monotonic() - started < 1.5
        metrics = app.state.services.metrics.render()[0].decode()
    assert client.messages == []  # nothing was sent to a client that is gone
    assert 'memproxy_upstream_errors_total{kind="disconnect"} 1.0' in metrics
