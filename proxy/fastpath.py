"""The app class: Starlette, with the hot route served without Starlette's per-request layers.

Every request through Starlette crosses ``ServerErrorMiddleware``, our context middleware,
``ExceptionMiddleware``, the router's linear match and the route's own exception wrapper; each
layer adds a coroutine frame and a wrapped ``send``. For ``POST /v1/chat/completions`` (exact
path, no ``root_path``) ``MemproxyApp`` calls the same endpoint directly, inside the same
``RequestContextMiddleware`` (request id, metrics, access log) and an error guard that answers
an unexpected exception exactly as ``ServerErrorMiddleware`` with the app's handler would (500
in OpenAI's shape, logged, re-raised to the server). Everything else, including routes other
engineers add (memories, ``/openapi.json``), the lifespan and wrong methods, goes through
Starlette unchanged. Measured in ADR-0008.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from proxy.error_responses import send_error
from proxy.errors import InternalError
from proxy.metrics import Metrics
from proxy.middleware import RequestContextMiddleware

LOGGER = logging.getLogger("memproxy")


class ErrorGuard:
    """Answer an unhandled exception with a 500 in OpenAI's shape, then re-raise it."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Run ``app``; on an exception before the response started, send the 500."""
        started = False

        async def send_tracking(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, send_tracking)
        except Exception:
            LOGGER.exception("unhandled error")
            if not started:
                await send_error(InternalError(), scope, receive, send)
            raise


class MemproxyApp(Starlette):
    """Starlette plus direct dispatch of ``fast_routes``: ``{(method, path): endpoint}``."""

    def __init__(
        self,
        *,
        fast_routes: Mapping[tuple[str, str], ASGIApp],
        metrics: Metrics,
        routes: Sequence[Any],
        **kwargs: Any,
    ) -> None:
        super().__init__(routes=routes, **kwargs)
        self.metrics = metrics  # also the HTTP server's, for its connection metrics
        # Set by the lifespan when the configuration refuses the start: the server then reports
        # this one line instead of a traceback.
        self.start_refused: str | None = None
        self.fast_routes = {
            key: ErrorGuard(RequestContextMiddleware(endpoint, metrics=metrics))
            for key, endpoint in fast_routes.items()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Dispatch a fast route directly, anything else through Starlette."""
        if scope["type"] == "http" and not scope.get("root_path"):
            app = self.fast_routes.get((scope["method"], scope["path"]))
            if app is not None:
                scope["app"] = self
                await app(scope, receive, send)
                return
        if scope["type"] == "lifespan":
            send = self._quiet_refusal(send)
        await super().__call__(scope, receive, send)

    def _quiet_refusal(self, send: Send) -> Send:
        """``send`` with a start the configuration refused reported as one line (uvicorn logs
        the failure message it is given: by default the traceback)."""

        async def quiet(message: Message) -> None:
            if message["type"] == "lifespan.startup.failed" and self.start_refused:
                message = {**message, "message": f"configuration error: {self.start_refused}"}
            await send(message)

        return quiet
