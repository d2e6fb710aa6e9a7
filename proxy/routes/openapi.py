"""``GET /openapi.json``: the OpenAPI 3.1 document of memproxy's own endpoints."""

from __future__ import annotations

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from proxy.openapi import build_openapi
from proxy.services import Services


async def openapi_json(request: Request) -> Response:
    """The document for the running settings (built per call: it is cheap and rarely asked)."""
    services: Services = request.app.state.services
    body = orjson.dumps(build_openapi(services.settings))
    return Response(body, media_type="application/json")


routes = [Route("/openapi.json", openapi_json, methods=["GET"])]
