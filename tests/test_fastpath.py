"""``MemproxyApp``: the chat route served directly behaves as it does through Starlette."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
import starlette
from starlette.applications import Starlette
from starlette.datastructures import Headers

from proxy.apis.adapter import ApiAdapter
from proxy.app import create_app
from proxy.fastpath import MemproxyApp
from proxy.pipeline.contract import Prepared
from proxy.tenancy import Tenant
from tests.conftest import proxy_settings
from tests.fakes.upstream import FakeServer

CHAT = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})


@asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[Starlette]:
    async with app.router.lifespan_context(app):
        yield app


async def call(
    app: Starlette, method: str, path: str, body: bytes = b"", root_path: str = ""
) -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI app; returns status, headers, body."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": root_path,
        "headers": [(b"content-type", b"application/json"), (b"x-request-id", b"rid-1")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 8080),
    }
    messages = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    body_out = b"".join(m.get("body", b"") for m in sent[1:])
    return start["status"], headers, body_out


async def test_chat_is_served_directly_with_request_id_and_metrics(fake: FakeServer) -> None:
    app = create_app(proxy_settings(fake.url))
    assert isinstance(app, MemproxyApp)
    async with running(app):
        status, headers, body = await call(app, "POST", "/v1/chat/completions", CHAT)
        metrics = app.state.services.metrics.render()[0].decode()
    assert status == 200
    assert headers["x-request-id"] == "rid-1"
    assert b"Hello from the fake upstream" in body
    assert 'memproxy_requests_total{method="POST",route="chat",status="200"} 1.0' in metrics
    assert fake.fake.requests[0].headers["x-request-id"] == "rid-1"


async def test_chat_errors_keep_openai_shape(fake: FakeServer) -> None:
    app = create_app(proxy_settings(fake.url))
    async with running(app):
        status, headers, body = await call(app, "POST", "/v1/chat/completions", b"{nope")
    assert status == 400
    assert headers["x-request-id"] == "rid-1"
    assert orjson.loads(body)["error"]["code"] == "invalid_json"


STARLETTE = Path(starlette.__file__).parent


class CallerRecorder:
    """A pipeline that records which Starlette modules are on the stack when it is called."""

    def __init__(self) -> None:
        self.starlette_modules: set[str] = set()
        self.calls = 0

    async def prepare(
        self, tenant: Tenant, headers: Headers, body: dict[str, Any], api: ApiAdapter
    ) -> Prepared:
        self.calls += 1
        frame = inspect.currentframe()
        while frame is not None:
            path = Path(frame.f_code.co_filename)
            if path.is_relative_to(STARLETTE):
                self.starlette_modules.add(path.relative_to(STARLETTE).as_posix())
            frame = frame.f_back
        return Prepared(body=body)


@pytest.mark.parametrize("root_path", ["", "/mounted"])
async def test_chat_reaches_the_endpoint_without_starlettes_router_and_middleware(
    fake: FakeServer, root_path: str
) -> None:
    recorder = CallerRecorder()
    app = create_app(proxy_settings(fake.url), pipeline=recorder)
    async with running(app):
        status, _, _ = await call(app, "POST", root_path + "/v1/chat/completions", CHAT, root_path)
    assert (status, recorder.calls) == (200, 1)
    layers = {"routing.py", "middleware/errors.py", "middleware/exceptions.py"}
    if root_path:
        # Mounted under a root_path the request takes Starlette's way: the check sees its layers.
        assert layers <= recorder.starlette_modules
    else:
        assert not layers & recorder.starlette_modules


class ExplodingPipeline:
    async def prepare(
        self, tenant: Tenant, headers: Headers, body: dict[str, Any], api: ApiAdapter
    ) -> Prepared:
        raise RuntimeError("boom")


@pytest.mark.parametrize("root_path", ["", "/mounted"])
async def test_unexpected_error_is_a_500_in_openai_shape_then_raised(
    fake: FakeServer, root_path: str
) -> None:
    # With a root_path Starlette's ServerErrorMiddleware answers; both answers must agree.
    app = create_app(proxy_settings(fake.url), pipeline=ExplodingPipeline())
    out: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "method": "POST",
        "path": root_path + "/v1/chat/completions",
        "root_path": root_path,
        "query_string": b"",
        "headers": [],
    }
    messages = [{"type": "http.request", "body": CHAT, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    async with running(app):
        with pytest.raises(RuntimeError, match="boom"):
            await app(scope, receive, send)
    assert out[0]["status"] == 500
    assert dict(out[0]["headers"])[b"content-type"] == b"application/json"
    error = orjson.loads(out[1]["body"])["error"]
    assert (error["type"], error["message"]) == ("server_error", "Internal error in memproxy.")
    assert not fake.fake.requests


async def test_other_routes_and_methods_still_go_through_starlette(fake: FakeServer) -> None:
    app = create_app(proxy_settings(fake.url))
    async with running(app):
        health = await call(app, "GET", "/healthz")
        models = await call(app, "GET", "/v1/models")
        missing = await call(app, "GET", "/nowhere")
    assert health[0] == 200
    assert health[1]["x-request-id"] == "rid-1"
    assert models[0] == 200
    assert b'"object":"list"' in models[2]
    assert missing[0] == 404
    assert orjson.loads(missing[2])["error"]["code"] == "not_found"
