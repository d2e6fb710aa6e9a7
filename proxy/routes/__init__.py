"""The HTTP routes, in matching order. The ``/v1/{path}`` catch-all must stay last."""

from __future__ import annotations

from starlette.routing import BaseRoute

from proxy.routes import chat, health, memories, messages, openapi, passthrough, responses


def build_routes() -> list[BaseRoute]:
    """All routes; specific ``/v1/*`` routes (chat, responses, messages, memories) go before
    the passthrough."""
    return [
        *chat.routes,
        *responses.routes,
        *messages.routes,
        *memories.routes,
        *health.routes,
        *openapi.routes,
        *passthrough.routes,
    ]
