"""Errors of ours as HTTP answers: the one renderer, with the error shape chosen per API.

Every answer memproxy writes for a ``MemproxyError`` is built here: the app's exception
handlers, the routes, the fast path's guard, the relay (before the upstream answered, and as the
SSE event of a stream that broke) and the HTTP server's own refusals (431, 408, 400).

The JSON shape belongs to the API the client speaks, so it is a parameter (``ErrorShape``), not
a second renderer: ``OPENAI`` (``{"error": {message, type, param, code}}``, the default: every
route today) and ``ANTHROPIC`` (``{"type": "error", "error": {type, message}}``, for a Messages
route). The Responses API writes its JSON errors as chat does, its stream's error event typed
(``OPENAI_RESPONSES``). A route passes its API's shape; answers not tied to a route (unknown
paths, the server's refusals) use the default.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from proxy.errors import MemproxyError

JSON = "application/json"


@dataclass(frozen=True, slots=True)
class ErrorShape:
    """How one API writes an error: its JSON body and the frame of its SSE error event."""

    body: Callable[[MemproxyError], dict[str, Any]]
    event_prefix: bytes  # what precedes the JSON in a stream's error event
    event_body: Callable[[MemproxyError], dict[str, Any]] | None = None  # when not ``body``

    def encode(self, exc: MemproxyError) -> bytes:
        """The JSON body of ``exc``."""
        return orjson.dumps(self.body(exc))

    def event(self, exc: MemproxyError) -> bytes:
        """``exc`` as one SSE event, for a stream that already started."""
        data = self.encode(exc) if self.event_body is None else orjson.dumps(self.event_body(exc))
        return self.event_prefix + data + b"\n\n"


# Anthropic's error types by status (its "Errors" reference); other 4xx are
# invalid_request_error, other 5xx api_error.
ANTHROPIC_TYPES = {
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}


def anthropic_body(exc: MemproxyError) -> dict[str, Any]:
    """``exc`` in Anthropic's shape: ``{"type": "error", "error": {type, message}}``."""
    default = "api_error" if exc.status >= 500 else "invalid_request_error"
    kind = ANTHROPIC_TYPES.get(exc.status, default)
    return {"type": "error", "error": {"type": kind, "message": exc.message}}


def responses_event(exc: MemproxyError) -> dict[str, Any]:
    """``exc`` as the Responses API's stream error: ``{"type": "error", "error": {...}}``.

    The error nested, as api.openai.com sends it (not flat, as its reference shows): the
    ``openai`` SDK raises such an event as ``APIError``. Without the ``sequence_number`` of the
    events before it, which the relay does not read.
    """
    return {"type": "error", **exc.to_body()}


OPENAI = ErrorShape(body=MemproxyError.to_body, event_prefix=b"data: ")
OPENAI_RESPONSES = ErrorShape(
    body=MemproxyError.to_body, event_prefix=b"event: error\ndata: ", event_body=responses_event
)
ANTHROPIC = ErrorShape(body=anthropic_body, event_prefix=b"event: error\ndata: ")


def error_response(
    exc: MemproxyError,
    headers: Mapping[str, str] | None = None,
    *,
    status: int | None = None,
    shape: ErrorShape = OPENAI,
) -> Response:
    """``exc`` as a whole JSON response with its status (or ``status``) and ``headers``."""
    return Response(
        shape.encode(exc),
        status_code=exc.status if status is None else status,
        headers=headers,
        media_type=JSON,
    )


async def send_error(
    exc: MemproxyError,
    scope: Scope,
    receive: Receive,
    send: Send,
    headers: Mapping[str, str] | None = None,
    *,
    shape: ErrorShape = OPENAI,
) -> None:
    """Answer ``exc`` on a raw ASGI exchange (nothing sent yet)."""
    await error_response(exc, headers, shape=shape)(scope, receive, send)


def error_bytes(
    exc: MemproxyError,
    status_line: bytes,
    headers: list[tuple[bytes, bytes]],
    *,
    shape: ErrorShape = OPENAI,
) -> bytes:
    """``exc`` as a whole HTTP/1.1 response, for the server writing to a socket itself.

    ``status_line`` ends with CRLF; ``headers`` go before the response's own (content-length,
    content-type).
    """
    response = error_response(exc, shape=shape)
    parts = [status_line]
    for name, value in [*headers, *response.raw_headers]:
        parts += [name, b": ", value, b"\r\n"]
    parts += [b"\r\n", bytes(response.body)]
    return b"".join(parts)
