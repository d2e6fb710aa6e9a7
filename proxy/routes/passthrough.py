"""Every other ``/v1/*`` path and method, forwarded as is: the raw path and query the client sent
(checked by ``proxy/request_target.py``), the body byte for byte."""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.error_responses import OPENAI as OPENAI_ERRORS
from proxy.error_responses import ErrorShape, send_error
from proxy.errors import MemproxyError
from proxy.providers import OPENAI, Provider
from proxy.relay import Relay
from proxy.request_body import receive_body
from proxy.services import Services
from proxy.upstream import upstream_headers

ROUTE = "passthrough"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def forward(
    scope: Scope,
    receive: Receive,
    send: Send,
    provider: Provider = OPENAI,
    errors: ErrorShape = OPENAI_ERRORS,
    route: str = ROUTE,
) -> None:
    """Forward the request to ``provider`` unchanged except for hop-by-hop headers and auth;
    errors of ours in the ``errors`` shape."""
    services: Services = scope["app"].state.services
    client = provider.client(services)
    try:
        url = client.url_for(scope)
        tenant = services.tenants.resolve(scope["headers"])
        headers = upstream_headers(scope, provider.auth(tenant))
        body = await receive_body(scope, receive, services.settings.limits.max_body_bytes)
    except MemproxyError as exc:
        await send_error(exc, scope, receive, send, shape=errors)
        return
    relay = Relay(
        services,
        client=client,
        method=scope["method"],
        url=url,
        headers=headers,
        body=body,
        route=route,
        errors=errors,
    )
    await relay(scope, receive, send)


class ForwardEndpoint:
    """``forward`` as a raw ASGI app for Starlette's router (no ``Request`` per call)."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request."""
        await forward(scope, receive, send)


# Must stay last: routes added later (memories) are matched before this catch-all.
routes = [Route("/v1/{path:path}", ForwardEndpoint(), methods=METHODS)]
