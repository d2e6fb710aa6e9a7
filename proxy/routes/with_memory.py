"""Forwarding with memory, for any API: parse, let the memory pipeline prepare, forward, relay.

One function serves every route with memory (chat completions, responses, ...); what differs
per API is its ``ApiAdapter`` (``proxy/apis/``): how the pipeline reads and writes its body,
how its answers are read after the relay, and how its errors look. A raw ASGI endpoint (no
Starlette ``Request``): it is the hot path, and the app also serves it without Starlette's
router and middleware layers (``proxy/fastpath.py``, ADR-0008).
"""

from __future__ import annotations

import asyncio
import logging
import time

import orjson
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from proxy.apis.adapter import ApiAdapter
from proxy.apis.answer import completion_hook
from proxy.error_responses import send_error
from proxy.errors import MemproxyError
from proxy.pipeline.contract import Prepared
from proxy.providers import OPENAI, Provider
from proxy.relay import Relay
from proxy.request_body import parse_json_object, receive_body
from proxy.services import Services
from proxy.upstream import upstream_headers

LOGGER = logging.getLogger("memproxy.forward")
YIELD_AFTER_BYTES = 1024 * 1024


def forwarded_bytes(raw: bytes, body: dict[str, object], prepared: Prepared) -> bytes:
    """What goes upstream: the client's bytes unless the pipeline changed the body.

    A changed body the pipeline did not encode itself (another ``MemoryPipeline``) and that
    orjson cannot write (nesting past 254 levels) goes as the client sent it, never as a 500.
    """
    if prepared.body is body:
        return raw
    if prepared.encoded is not None:
        return prepared.encoded
    try:
        return orjson.dumps(prepared.body)
    except orjson.JSONEncodeError as exc:
        LOGGER.warning("the prepared body cannot be encoded (%s); forwarding the original", exc)
        return raw


async def forward_with_memory(
    api: ApiAdapter,
    scope: Scope,
    receive: Receive,
    send: Send,
    provider: Provider = OPENAI,
) -> None:
    """Forward one request of ``api`` to ``provider``, streaming or not, after the pipeline's
    ``prepare``."""
    started = time.perf_counter()
    services: Services = scope["app"].state.services
    headers = Headers(scope=scope)
    try:
        url = provider.client(services).url_for(scope)
        tenant = services.tenants.resolve(scope["headers"])
        forward_headers = upstream_headers(scope, provider.auth(tenant))
        raw = await receive_body(scope, receive, services.settings.limits.max_body_bytes)
        body = parse_json_object(raw)
        if len(raw) > YIELD_AFTER_BYTES:
            # Parsing held the loop for up to ~50 ms (16 MB); let waiting requests go first.
            await asyncio.sleep(0)
        # The single plug-in point of the memory pipeline (see proxy/pipeline/contract.py).
        prepared = await services.pipeline.prepare(tenant, headers, body, api)
    except MemproxyError as exc:
        await send_error(exc, scope, receive, send, shape=api.errors)
        return
    if prepared.reply is not None:
        prepared.reply.headers.update(prepared.response_headers)
        await prepared.reply(scope, receive, send)
        return
    forwarded = forwarded_bytes(raw, body, prepared)
    on_complete = prepared.on_complete
    on_answer = completion_hook(api.read_completion, on_complete) if on_complete else None
    relay = Relay(
        services,
        client=provider.client(services),
        method="POST",
        url=url,
        headers=forward_headers,
        body=forwarded,
        route=api.route,
        extra_headers=prepared.response_headers,
        on_answer=on_answer,
        errors=api.errors,
        started=started,
        on_sent=prepared.on_sent,
    )
    try:
        await relay(scope, receive, send)
    finally:
        # After the response, without a task or reading the answer: at concurrency 1 work
        # spawned here ran just as the client sent its next request (adr/0134). Also when the
        # relay is cancelled: the request's stage histograms are observed here.
        if prepared.on_status is not None:
            try:
                prepared.on_status(relay.status_code)
            except Exception:
                LOGGER.exception("on_status hook failed")


# A plain function would be wrapped as a Request handler: the class instance stays raw ASGI.
class MemoryEndpoint:
    """``forward_with_memory`` for one API, as an ASGI app (Starlette's router, the fast path)."""

    def __init__(self, api: ApiAdapter, provider: Provider = OPENAI) -> None:
        self.api = api
        self.provider = provider

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request."""
        await forward_with_memory(self.api, scope, receive, send, self.provider)
