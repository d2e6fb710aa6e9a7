"""RequestContextMiddleware at the ASGI level: request ids and the count of active requests."""

from __future__ import annotations

import asyncio

import pytest
from starlette.types import Message, Receive, Scope, Send

from proxy.metrics import Metrics
from proxy.middleware import RequestContextMiddleware


def http_scope(path: str = "/v1/chat/completions") -> Scope:
    return {"type": "http", "method": "POST", "path": path, "headers": []}


async def receive() -> Message:
    return {"type": "http.request", "body": b"", "more_body": False}


async def test_active_requests_count_what_is_being_served_and_return_to_zero() -> None:
    metrics = Metrics()
    release = asyncio.Event()
    seen: list[int] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(metrics.active_requests)
        await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def send(message: Message) -> None:
        return None

    middleware = RequestContextMiddleware(app, metrics)
    first = asyncio.create_task(middleware(http_scope(), receive, send))
    second = asyncio.create_task(middleware(http_scope(), receive, send))
    await asyncio.sleep(0.01)
    assert metrics.active_requests == 2
    release.set()
    await asyncio.gather(first, second)
    assert seen == [1, 2]
    assert metrics.active_requests == 0


async def test_a_failing_request_still_leaves_the_count() -> None:
    metrics = Metrics()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    async def send(message: Message) -> None:
        return None

    with pytest.raises(RuntimeError):
        await RequestContextMiddleware(app, metrics)(http_scope(), receive, send)
    assert metrics.active_requests == 0
