"""Every other ``/v1/*`` path and method, forwarded as is (query string included)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.errors import MemproxyError
from proxy.relay import Relay, error_response
from proxy.routes.forward import read_body, upstream_headers
from proxy.services import Services

ROUTE = "passthrough"
METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]


async def forward(request: Request) -> Response:
    """Forward the request unchanged except for hop-by-hop headers and auth."""
    services: Services = request.app.state.services
    try:
        tenant = services.tenants.resolve(request.headers.get("authorization"))
        body = await read_body(request, services.settings.limits.max_body_bytes)
    except MemproxyError as exc:
        return error_response(exc)
    return Relay(
        services,
        method=request.method,
        url=services.upstream.url_for(
            request.scope["path"], request.scope["query_string"].decode("latin-1")
        ),
        headers=upstream_headers(request, tenant),
        body=body,
        route=ROUTE,
    )


# Must stay last: routes added later (memories) are matched before this catch-all.
routes = [Route("/v1/{path:path}", forward, methods=METHODS)]
