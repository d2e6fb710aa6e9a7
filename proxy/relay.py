"""Relay: an ASGI response that sends one request upstream and relays the answer as it arrives.

- An SSE answer (``text/event-stream``) is relayed chunk by chunk as the bytes arrive: never
  buffered, never re-framed, ``[DONE]`` and usage chunks untouched.
- Any other answer (including upstream 4xx/5xx) is relayed whole with its status and headers
  (``Retry-After`` included).
- A client disconnect, noticed by a small watcher on ``receive``, cancels the relay and closes
  the upstream response, whether streaming or not. The watcher starts ``WATCH_AFTER_S`` into
  the exchange: quick exchanges (most non-streamed ones) never pay for it.
- An upstream failure mid-stream sends one SSE ``error`` event in OpenAI's shape (unless the
  stream is compressed: it cannot be spliced in), then ends the HTTP response *without* its
  terminating chunk (the server drops the connection): neither an SDK nor a raw HTTP client can
  mistake it for a clean finish.
- A compressed answer (``Content-Encoding``) reaches the client exactly as the upstream sent it.
- The relay reads nothing of the answer: once it is done, an ``on_answer`` hook gets the bytes
  as relayed and the upstream's headers (``proxy.apis.answer.Answer``); the route's API module
  reads them (``proxy/apis/``). Errors of ours are written in the route's ``ErrorShape``.
- Work that needs no answer (``on_sent``: the memory pipeline's cache writes) starts once the
  transport has handed the request to its connection, and runs while the upstream answers
  (adr/0128): after the answer, at concurrency 1 it held up the client's next request on the
  connection instead. A request that never went out starts none of it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.apis.answer import CONTENT_ENCODING, Answer, AnswerHook
from proxy.background import Job, Spawner
from proxy.content_encoding import is_identity
from proxy.eager import Rest, finish, start
from proxy.error_responses import OPENAI, ErrorShape, send_error
from proxy.errors import MemproxyError, UpstreamTimeout
from proxy.transport import Written
from proxy.upstream import UpstreamClient, UpstreamResponse, response_headers

if TYPE_CHECKING:
    from proxy.services import Services

LOGGER = logging.getLogger("memproxy.relay")
STREAM_HEADERS = [(b"cache-control", b"no-cache"), (b"x-accel-buffering", b"no")]
NO_BODY_STATUSES = frozenset({204, 304})
WATCH_AFTER_S = 0.05


class Relay(Response):
    """Forwards one request and relays the upstream response to the client."""

    def __init__(
        self,
        services: Services,
        *,
        method: str,
        url: str,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        route: str,
        extra_headers: Mapping[str, str] | None = None,
        on_answer: AnswerHook | None = None,
        errors: ErrorShape = OPENAI,
        started: float | None = None,
        client: UpstreamClient | None = None,
        on_sent: Callable[[], Job] | None = None,
    ) -> None:
        self.services = services
        # The upstream ``url`` belongs to: the OpenAI-compatible one unless told otherwise.
        self.client = client if client is not None else services.upstream
        self.method = method
        self.url = url
        self.headers_out = headers
        self.body_out = body
        self.route = route
        self.extra_headers = extra_headers
        self.extra = [(k.lower().encode(), v.encode()) for k, v in (extra_headers or {}).items()]
        self.on_answer = on_answer
        self.on_sent = on_sent
        self.errors = errors
        self.started = started if started is not None else time.perf_counter()
        self.status_code = 0
        self._finished = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run the exchange; see the module docstring for the failure behaviour."""
        task = asyncio.current_task()
        assert task is not None
        disconnected = False
        self._finished = False

        async def watch_disconnect() -> None:
            nonlocal disconnected
            while (await receive())["type"] != "http.disconnect":
                pass
            # uvicorn also reports "disconnect" once the response is complete: not a client leaving.
            if not self._finished:
                disconnected = True
                task.cancel()

        # The watcher task costs ~8 us per request (ADR-0008): start it only once the exchange
        # has lasted WATCH_AFTER_S. A client gone earlier is noticed then (uvicorn keeps the
        # disconnect), so an upstream is closed at most WATCH_AFTER_S late.
        loop = asyncio.get_running_loop()
        watcher: asyncio.Task[None] | None = None

        def start_watcher() -> None:
            nonlocal watcher
            watcher = loop.create_task(watch_disconnect())

        timer = loop.call_later(WATCH_AFTER_S, start_watcher)
        upstream: UpstreamResponse | None = None
        chunks: list[bytes] | None = [] if self.on_answer else None
        completion_ok = False
        streamed = False
        metrics = self.services.metrics
        try:
            try:
                upstream = await self._open()
            except MemproxyError as exc:
                kind = "timeout" if isinstance(exc, UpstreamTimeout) else "connect"
                metrics.upstream_errors.labels(kind).inc()
                LOGGER.warning("upstream request failed: %s", exc.message)
                self.status_code = exc.status
                await self._send_error(exc, scope, receive, send)
                return
            self.status_code = upstream.status
            streamed = upstream.is_event_stream
            if streamed:
                completion_ok = await self._stream(upstream, send, chunks)
            else:
                completion_ok = await self._whole(upstream, scope, receive, send, chunks)
        except asyncio.CancelledError:
            if not (disconnected and task.uncancel() == 0):
                raise
            metrics.upstream_errors.labels("disconnect").inc()
            LOGGER.info("client disconnected; upstream response closed")
        finally:
            timer.cancel()
            if watcher is not None:
                watcher.cancel()
            if upstream is not None:
                upstream.close()
        if self.on_answer is not None and chunks is not None:
            answer = Answer(
                status=self.status_code,
                streamed=streamed,
                ok=completion_ok,
                chunks=chunks,
                headers=upstream.raw_headers if upstream is not None else (),
            )
            self.services.spawn(self.on_answer(answer))

    async def _open(self) -> UpstreamResponse:
        sent = time.perf_counter()
        on_sent, self.on_sent = self.on_sent, None  # once, even if the relay is run again
        written = None if on_sent is None else starter(self.services.spawn, on_sent)
        response = await self.client.send(
            self.method, self.url, self.headers_out, self.body_out, written
        )
        self.services.metrics.upstream_latency_for(self.route).observe(time.perf_counter() - sent)
        return response

    async def _stream(
        self, upstream: UpstreamResponse, send: Send, chunks: list[bytes] | None
    ) -> bool:
        metrics = self.services.metrics
        headers = response_headers(upstream.raw_headers)
        headers = [h for h in headers if h[0].lower() not in (b"cache-control",)]
        await send(
            {
                "type": "http.response.start",
                "status": upstream.status,
                "headers": [*headers, *STREAM_HEADERS, *self.extra],
            }
        )
        metrics.streams.inc()
        first = True
        try:
            async for chunk in upstream.chunks():
                if first:
                    metrics.first_chunk.observe(time.perf_counter() - self.started)
                    first = False
                if chunks is not None:
                    chunks.append(chunk)
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
        except MemproxyError as exc:
            kind = "timeout" if isinstance(exc, UpstreamTimeout) else "midstream"
            metrics.upstream_errors.labels(kind).inc()
            LOGGER.warning("upstream stream failed: %s", exc.message)
            if is_identity(upstream.raw_headers_get(CONTENT_ENCODING)):
                event = self.errors.event(exc)
                await send({"type": "http.response.body", "body": event, "more_body": True})
            # else: plain bytes spliced into a compressed body would only make the client fail
            # to decode it; the abort alone says the stream broke.
            # Returning without the final message makes the server drop the connection.
            return False
        finally:
            metrics.streams.dec()
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        self._finished = True
        return True

    async def _whole(
        self,
        upstream: UpstreamResponse,
        scope: Scope,
        receive: Receive,
        send: Send,
        chunks: list[bytes] | None,
    ) -> bool:
        try:
            body = await upstream.read()
        except MemproxyError as exc:
            self.status_code = exc.status
            await self._send_error(exc, scope, receive, send)
            return False
        headers = response_headers(upstream.raw_headers)
        if self.method == "HEAD":
            # A HEAD answer has no body but announces the length of the GET one.
            length = upstream.raw_headers_get(b"content-length")
            if length is not None:
                headers.append((b"content-length", length))
        elif upstream.status not in NO_BODY_STATUSES:
            headers.append((b"content-length", str(len(body)).encode()))
        await send(
            {
                "type": "http.response.start",
                "status": upstream.status,
                "headers": headers + self.extra,
            }
        )
        await send({"type": "http.response.body", "body": body, "more_body": False})
        self._finished = True
        if chunks is not None:
            chunks.append(body)
        return 200 <= upstream.status < 300

    async def _send_error(
        self, exc: MemproxyError, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Answer an error of ours (nothing was sent yet), with the route's extra headers."""
        await send_error(exc, scope, receive, send, self.extra_headers, shape=self.errors)


def starter(spawn: Spawner, work: Callable[[], Job]) -> Written:
    """A callback that runs ``work`` when the request has gone out: at once, as far as it goes
    without waiting (all of it with the in-process cache), the rest in the background."""

    def written() -> None:
        started = start(quietly(work))
        if isinstance(started, Rest):
            spawn(finish(started))

    return written


async def quietly(work: Callable[[], Job]) -> None:
    """Run ``work`` (background work of a request); a failure is logged, never raised."""
    try:
        await work()
    except Exception:
        LOGGER.exception("work after sending the request failed")
