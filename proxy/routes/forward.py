"""Helpers shared by the forwarding routes: bounded body reading and upstream headers.

The forwarding routes are raw ASGI endpoints (no ``Request`` object): ``receive_body`` and
``upstream_headers`` work on the ASGI scope and ``receive`` directly. ``read_body`` is the same
for Starlette ``Request`` handlers (the memories API).
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from starlette.requests import ClientDisconnect, Request
from starlette.types import Receive, Scope

from proxy.errors import ClientDisconnected, PayloadTooLarge, RequestError
from proxy.tenancy import Tenant, bearer_auth
from proxy.transport import Headers
from proxy.upstream import request_headers

CONTENT_LENGTH = b"content-length"
REQUEST_ID = b"x-request-id"
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
    """Read the request body, refusing (413) anything over ``limit`` bytes, declared or sent."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
    parts = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"Request body is larger than the limit of {limit} bytes.")
            parts.append(chunk)
    except ClientDisconnect:
        raise client_left(size, declared) from None
    return b"".join(parts)


def client_left(received: int, declared: str | None) -> ClientDisconnected:
    """The client went away mid-body: logged and answered (to no one) as a 499, not a failure."""
    LOGGER.info("client disconnected after %d of %s body bytes", received, declared or "unknown")
    return ClientDisconnected("The client closed the connection before sending its body.")


def parse_json_object(raw: bytes) -> dict[str, Any]:
    """Parse a JSON object body or raise a 400 in OpenAI's shape."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(
            f"We could not parse the JSON body of your request: {exc}", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object.", code="invalid_json")
    return body


def upstream_headers(scope: Scope, tenant: Tenant) -> Headers:
    """The client's headers as they go upstream, with the request id and the tenant's auth."""
    auth = bearer_auth(tenant)
    headers = request_headers(scope["headers"], auth.withhold, auth.add)
    request_id = scope.get("state", {}).get("request_id")
    if request_id and not any(name == REQUEST_ID for name, _ in headers):
        headers.append((REQUEST_ID, request_id.encode("latin-1")))
    return headers
