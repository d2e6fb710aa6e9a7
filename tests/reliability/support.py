"""Helpers of the reliability tests: error-shape checks, dead endpoints, SSE parsing."""

from __future__ import annotations

import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
from starlette.applications import Starlette

from proxy.settings import Settings, StageTimeouts, StoreSettings, load_settings, replace
from tests.fakes.servers import ProxyServer

SLOW_START_S = 90.0
CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
ERROR_FIELDS = {"message", "type", "param", "code"}


def assert_openai_error(response: httpx.Response, status: int, code: str | None = None) -> None:
    """The response is an error of ``status`` in OpenAI's shape (and ``code`` if given)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    error = response.json()["error"]
    assert set(error) == ERROR_FIELDS
    assert isinstance(error["message"], str)
    assert error["message"]
    if code is not None:
        assert error["code"] == code


def closed_port() -> int:
    """A local port nobody listens on (connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextmanager
def unanswered_port() -> Iterator[int]:
    """A port whose SYNs go unanswered: a listener with a full accept queue (connect timeout).

    Linux drops a SYN when the accept queue is full, so a connect() hangs until its timeout.
    """
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = int(listener.getsockname()[1])
    fillers = []
    try:
        for _ in range(8):
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex(("127.0.0.1", port))
            fillers.append(filler)
        yield port
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


@asynccontextmanager
async def running(app: Starlette) -> AsyncIterator[httpx.AsyncClient]:
    """Run the app's lifespan and give an in-process httpx client for it."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://memproxy") as client:
            yield client


def read_stream(url: str, body: dict[str, Any], headers: dict[str, str], into: list[bytes]) -> None:
    """POST a streaming request and append the raw body bytes to ``into`` as they arrive."""
    with httpx.stream("POST", url, json=body, headers=headers) as response:
        assert response.status_code == 200  # the headers were relayed before any failure
        for chunk in response.iter_raw():
            into.append(chunk)


def sse_events(raw: bytes) -> list[bytes]:
    """The ``data:`` payloads of an SSE body, in order."""
    events = []
    for block in raw.split(b"\n\n"):
        block = block.strip()
        if block.startswith(b"data: "):
            events.append(block[len(b"data: ") :])
    return events


def content_of(events: list[bytes]) -> list[str]:
    """The content deltas of choice 0 of a chat stream, in order."""
    out = []
    for data in events:
        if data == b"[DONE]":
            continue
        chunk = orjson.loads(data)
        for choice in chunk.get("choices", ()):
            piece = (choice.get("delta") or {}).get("content")
            if choice.get("index") == 0 and piece:
                out.append(piece)
    return out


def memory_settings(upstream_url: str, data_dir: Path, **memory: Any) -> Settings:
    """Memory on (embedded store in ``data_dir``) with roomy deadlines.

    The shared 2-core machine would otherwise turn slow moments into ``degraded`` requests; the
    reliability tests want the memory path to really run.
    """
    base = load_settings(env={})
    timeouts = StageTimeouts(embed_ms=5000, search_ms=5000, cache_ms=1000)
    return replace(
        base,
        upstream=replace(base.upstream, url=upstream_url),
        memory=replace(
            base.memory, enabled=True, deadline_ms=10_000, stage_timeouts=timeouts, **memory
        ),
        store=StoreSettings(kind="edge", data_dir=str(data_dir)),
    )


class MemoryProxy(ProxyServer):
    """``ProxyServer`` with a start timeout for memory on: the first start in a process imports
    litellm (model context windows), measured at 4-11 s on the shared 2-core machine."""

    def __enter__(self) -> MemoryProxy:
        self._thread.start()
        deadline = time.monotonic() + SLOW_START_S
        while not self.server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("memproxy did not start")
            time.sleep(0.02)
        return self
