"""The memories API (README): thin handlers that parse, call ``MemoryService`` and shape.

Every call is scoped to the caller's tenant (its key, ``proxy/tenancy.py``); ids are looked up by
(tenant, id), so another tenant's id is simply "not found" (404), never a hint that it exists.

Deleting is idempotent in effect, not in status: the first ``DELETE /v1/memories/{id}`` answers
200, a repeat 404 (nothing left to delete), and the store is the same either way.
``DELETE /v1/memories?user=U`` always answers 200 with the number of memories forgotten (0 on a
repeat). Backend failures answer 503, bugs 500; see adr/0070 for the rest of the contract.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.error_responses import error_response
from proxy.errors import InternalError, MemproxyError, MethodNotAllowed
from proxy.memory.inputs import SEARCH_ID, InputLimits
from proxy.memory.parsing import (
    parse_feedback,
    parse_list_query,
    parse_search,
    parse_user_scope,
    parse_write_body,
)
from proxy.memory.service import memory_object, search_hit_object
from proxy.request_body import parse_json_object, read_body
from proxy.services import Services
from proxy.tenancy import Tenant

LOGGER = logging.getLogger("memproxy.memories")
Handler = Callable[[Request, Services, Tenant], Awaitable[Response]]


def json_response(body: Any, status: int = 200) -> Response:
    """A JSON response encoded with orjson."""
    return Response(orjson.dumps(body), status_code=status, media_type="application/json")


def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Wrap a handler: resolve the tenant, turn errors into OpenAI-shaped responses.

    Our errors answer with their own status: a backend failure is a ``BackendError`` (503), as
    the stores and embedders translate their clients' failures at their edge. Anything else is a
    bug: logged once with its traceback and answered 500, never reported as an outage.
    """

    async def run(request: Request) -> Response:
        services: Services = request.app.state.services
        try:
            tenant = services.tenants.resolve_owner(request.headers.raw)
            return await handler(request, services, tenant)
        except MemproxyError as exc:
            return error_response(exc)
        except Exception:
            LOGGER.exception("memories API request failed")
            return error_response(InternalError())

    run.__name__ = handler.__name__
    run.__doc__ = handler.__doc__
    return run


async def read_object(request: Request, services: Services) -> dict[str, Any]:
    """The JSON object body, within the body limit (413 above it)."""
    raw = await read_body(request, services.settings.limits.max_body_bytes)
    return parse_json_object(raw)


async def create_memories(request: Request, services: Services, tenant: Tenant) -> Response:
    """``POST /v1/memories``: one memory or ``{"memories": [...]}`` -> 201 with the stored list."""
    body = await read_object(request, services)
    inputs = parse_write_body(body, max_content_chars=tenant.memory.max_content_chars)
    records = await services.memory_service().write(tenant.id, inputs)
    return json_response({"object": "list", "data": [memory_object(r) for r in records]}, 201)


async def list_memories(request: Request, services: Services, tenant: Tenant) -> Response:
    """``GET /v1/memories?user=&source=&limit=&after=``: one page, cursor in ``last_id``."""
    query = parse_list_query(dict(request.query_params))
    page = await services.memory_service().list(
        tenant.id, user=query.user, source=query.source, limit=query.limit, after=query.after
    )
    return json_response(
        {
            "object": "list",
            "data": [memory_object(r) for r in page.records],
            "has_more": page.has_more,
            "last_id": page.last_id,
        }
    )


async def delete_user_memories(request: Request, services: Services, tenant: Tenant) -> Response:
    """``DELETE /v1/memories?user=U``: forget every memory of U (``user=`` is the shared scope)."""
    user = parse_user_scope(dict(request.query_params)).user
    deleted = await services.memory_service().delete_user(tenant.id, user)
    return json_response({"object": "memory.user.deleted", "user": user, "deleted": deleted})


async def get_memory(request: Request, services: Services, tenant: Tenant) -> Response:
    """``GET /v1/memories/{id}``: one memory, 404 if the tenant has none with that id."""
    memory_id = request.path_params["memory_id"]
    service = services.memory_service()
    record = await service.get(tenant.id, memory_id)
    history = await service.history(tenant.id, record)
    return json_response({**memory_object(record), "history": [memory_object(r) for r in history]})


async def delete_memory(request: Request, services: Services, tenant: Tenant) -> Response:
    """``DELETE /v1/memories/{id}``: 200 ``memory.deleted``; 404 when there is none (a repeat)."""
    memory_id = request.path_params["memory_id"]
    await services.memory_service().delete(tenant.id, memory_id)
    return json_response({"object": "memory.deleted", "id": memory_id, "deleted": True})


async def search_memories(request: Request, services: Services, tenant: Tenant) -> Response:
    """``POST /v1/memories/search``: ``{"query", "user", "top_k"}`` -> hits with ``similarity``."""
    body = await read_object(request, services)
    search = parse_search(body, InputLimits(tenant.memory.max_content_chars))
    hits = await services.memory_service().search(
        tenant.id, search.query, user=search.user, top_k=search.top_k, sources=search.sources
    )
    return json_response({"object": "list", "data": [search_hit_object(h) for h in hits]})


async def memory_feedback(request: Request, services: Services, tenant: Tenant) -> Response:
    """``POST /v1/memories/{id}/feedback``: ``{"useful": bool}`` or ``{"usefulness": 0..1}``."""
    memory_id = request.path_params["memory_id"]
    feedback = parse_feedback(await read_object(request, services))
    record = await services.memory_service().feedback(tenant.id, memory_id, feedback)
    return json_response(memory_object(record))


Endpoint = Callable[[Request], Awaitable[Response]]


def dispatch(table: dict[str, Endpoint]) -> Endpoint:
    """One endpoint per path for every method: unknown methods get 405 here instead of
    falling through to the ``/v1/*`` passthrough (memproxy owns these paths)."""
    allowed = ", ".join(sorted(table))

    async def route(request: Request) -> Response:
        handler = table.get(request.method)
        if handler is None:
            exc = MethodNotAllowed(f"{request.method} is not allowed here; use {allowed}.")
            return error_response(exc, {"Allow": allowed})
        return await handler(request)

    return route


_create = endpoint(create_memories)
_list = endpoint(list_memories)
_delete_user = endpoint(delete_user_memories)
_get = endpoint(get_memory)
_delete = endpoint(delete_memory)
_search = endpoint(search_memories)
_feedback = endpoint(memory_feedback)
_item = dispatch({"GET": _get, "HEAD": _get, "DELETE": _delete})
_search_route = dispatch({"POST": _search})


async def memory_path(request: Request) -> Response:
    """``/v1/memories/{id}``, where the id ``search`` (reserved, never stored) is the search."""
    if request.path_params["memory_id"] == SEARCH_ID:
        return await _search_route(request)
    return await _item(request)


class AnyMethod:
    """An ASGI app around an endpoint: Starlette routes every method, even non-standard ones
    (``QUERY``), to an ASGI app, so each unsupported method gets our 405 with ``Allow``."""

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        response = await self.endpoint(Request(scope, receive))
        await response(scope, receive, send)


# No method on these paths reaches the passthrough: memproxy owns them.
routes = [
    Route(
        "/v1/memories",
        AnyMethod(dispatch({"POST": _create, "GET": _list, "HEAD": _list, "DELETE": _delete_user})),
    ),
    Route("/v1/memories/{memory_id}", AnyMethod(memory_path)),
    Route("/v1/memories/{memory_id}/feedback", AnyMethod(dispatch({"POST": _feedback}))),
]
