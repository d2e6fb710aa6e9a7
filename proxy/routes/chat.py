"""``POST /v1/chat/completions``: parse, let the memory pipeline prepare, forward, relay."""

from __future__ import annotations

import time

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.errors import MemproxyError
from proxy.relay import Relay, error_response
from proxy.routes.forward import parse_json_object, read_body, upstream_headers
from proxy.services import Services

ROUTE = "chat"


async def chat_completions(request: Request) -> Response:
    """Forward a chat completion, streaming or not, after the pipeline's ``prepare``."""
    started = time.perf_counter()
    services: Services = request.app.state.services
    try:
        tenant = services.tenants.resolve(request.headers.get("authorization"))
        raw = await read_body(request, services.settings.limits.max_body_bytes)
        body = parse_json_object(raw)
        # The single plug-in point of the memory pipeline (see proxy/hooks.py).
        prepared = await services.pipeline.prepare(tenant, request.headers, body)
    except MemproxyError as exc:
        return error_response(exc)
    if prepared.reply is not None:
        prepared.reply.headers.update(prepared.response_headers)
        return prepared.reply
    # An untouched body goes upstream byte for byte; a changed one is re-encoded.
    forwarded = raw if prepared.body is body else orjson.dumps(prepared.body)
    return Relay(
        services,
        method="POST",
        url=services.upstream.url_for(
            request.scope["path"], request.scope["query_string"].decode("latin-1")
        ),
        headers=upstream_headers(request, tenant),
        body=forwarded,
        route=ROUTE,
        extra_headers=prepared.response_headers,
        on_complete=prepared.on_complete,
        started=started,
    )


routes = [Route("/v1/chat/completions", chat_completions, methods=["POST"])]
