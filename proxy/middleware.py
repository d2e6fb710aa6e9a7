"""Pure ASGI middleware: request id, access log and request metrics.

Pure ASGI (not ``BaseHTTPMiddleware``) so streamed bodies pass through without buffering and
without an extra task per request. Metric children are cached per label set: ``labels()`` is
measurably slow on the hot path.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.logs import request_id_var
from proxy.metrics import Metrics

REQUEST_ID_HEADER = b"x-request-id"
MAX_REQUEST_ID_CHARS = 128
ACCESS_LOGGER = logging.getLogger("memproxy.access")
ACCESS_FORMAT = "%s %s %d %.1fms"


def route_label(path: str) -> str:
    """A bounded label for metrics: never the raw path (unbounded cardinality)."""
    if path == "/v1/chat/completions":
        return "chat"
    if path == "/v1/responses":
        return "responses"
    if path == "/v1/messages":
        return "messages"
    if path.startswith("/v1/memories"):
        return "memories"
    if path.startswith("/v1/"):
        return "passthrough"
    if path in ("/healthz", "/readyz", "/metrics"):
        return path[1:]
    return "other"


def logged_path(scope: Scope) -> str:
    """The path as the client wrote it: decoded, an escaped CR or LF would forge log lines."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else repr(scope["path"])[1:-1]


def accept_request_id(scope: Scope) -> str:
    """The client's ``X-Request-Id`` if it is sane, else a fresh one."""
    for name, value in scope["headers"]:
        if name == REQUEST_ID_HEADER:
            text: str = value.decode("latin-1")
            if 0 < len(text) <= MAX_REQUEST_ID_CHARS and text.isprintable():
                return text
            break
    return os.urandom(16).hex()


class RequestContextMiddleware:
    """Gives each request an id (echoed in the response), logs it and records metrics."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._latency: dict[str, Any] = {}

    def _record(self, route: str, method: str, status: int, elapsed: float) -> None:
        key = (route, method, status)
        counter = self._counters.get(key)
        if counter is None:
            counter = self._counters[key] = self.metrics.requests.labels(route, method, str(status))
        counter.inc()
        histogram = self._latency.get(route)
        if histogram is None:
            histogram = self._latency[route] = self.metrics.latency.labels(route)
        histogram.observe(elapsed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Wrap one HTTP request; other scope types pass straight through."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        request_id = accept_request_id(scope)
        token = request_id_var.set(request_id)
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500
        id_header = (REQUEST_ID_HEADER, request_id.encode("latin-1"))
        in_flight = self.metrics.in_flight
        in_flight.inc()

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()), id_header]
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - start
            in_flight.dec()
            path = scope["path"]
            self._record(route_label(path), scope["method"], status, elapsed)
            if ACCESS_LOGGER.isEnabledFor(logging.INFO):
                # The record ``info()`` would make, minus its caller lookup (a stack walk per
                # call that no access-log format prints).
                record = ACCESS_LOGGER.makeRecord(
                    ACCESS_LOGGER.name,
                    logging.INFO,
                    __file__,
                    0,
                    ACCESS_FORMAT,
                    (scope["method"], logged_path(scope), status, elapsed * 1000),
                    None,
                    extra={"status": status, "duration_ms": round(elapsed * 1000, 2)},
                )
                ACCESS_LOGGER.handle(record)
            request_id_var.reset(token)
