"""Reading a request body at the ASGI edge: bounded by the body limit, parsed as a JSON object.

The forwarding routes are raw ASGI endpoints (no ``Request`` object): ``receive_body`` works on
the ASGI scope and ``receive`` directly; ``read_body`` is the same for Starlette ``Request``
handlers (the memories API).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.requests import Request
from starlette.types import Receive, Scope

from proxy.errors import ClientDisconnected, PayloadTooLarge, RequestError

CONTENT_LENGTH = b"content-length"
LOGGER = logging.getLogger("memproxy")


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of request header ``name`` (lower-case bytes), or ``None``."""
    for key, value in scope["headers"]:
        if key == name:
            text: str = value.decode("latin-1")
            return text
    return None


async def receive_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """Read the request body, refusing (413) anything over ``limit`` bytes, declared or sent."""
    declared = header(scope, CONTENT_LENGTH)
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise client_left(size, declared)
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
        if not message.get("more_body", False):
            if not parts:
                return chunk
            parts.append(chunk)
            return b"".join(parts)
        parts.append(chunk)


async def read_body(request: Request, limit: int) -> bytes:
    """``receive_body`` for a Starlette ``Request`` whose body has not been read yet."""
    return await receive_body(request.scope, request.receive, limit)


def client_left(received: int, declared: str | None) -> ClientDisconnected:
    """The client went away mid-body: logged and answered (to no one) as a 499, not a failure."""
    LOGGER.info("client disconnected after %d of %s body bytes", received, declared or "unknown")
    return ClientDisconnected("The client closed the connection before sending its body.")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Parse a JSON object body or raise a 400 (``invalid_json``)."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(
            f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.", code="invalid_json")
    return body
