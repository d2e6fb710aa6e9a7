"""Anthropic's Messages API: ``POST /v1/messages`` with memory, the rest of ``/v1/messages/*``
(``count_tokens``, message batches) forwarded as is, all to ``upstream.anthropic.url``.

``count_tokens`` counts the request as the client sent it, without memories: what an app
learns from it is the size of its own conversation (Claude Code compacts by it); the memories a
``messages.create`` adds fit within the budget of the model's window.
"""

from __future__ import annotations

from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from proxy.apis.anthropic_messages import ANTHROPIC_MESSAGES
from proxy.error_responses import ANTHROPIC as ANTHROPIC_ERRORS
from proxy.providers import ANTHROPIC
from proxy.routes.passthrough import METHODS, ROUTE, forward
from proxy.routes.with_memory import MemoryEndpoint

PATH = "/v1/messages"
endpoint = MemoryEndpoint(ANTHROPIC_MESSAGES, ANTHROPIC)


class AnthropicForwardEndpoint:
    """Every other Messages API call, forwarded to Anthropic as a raw ASGI app."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request."""
        await forward(scope, receive, send, ANTHROPIC, ANTHROPIC_ERRORS, ROUTE)


routes = [
    Route(PATH, endpoint, methods=["POST"]),
    Route(PATH + "/{path:path}", AnthropicForwardEndpoint(), methods=METHODS),
]
