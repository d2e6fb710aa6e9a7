"""The ASGI application: ``create_app(settings) -> Starlette``.

The lifespan owns every client: the composition root (``proxy/composition.py``) opens them on
the lifespan's exit stack and collects them in one ``Services`` object at
``app.state.services``; the stack closes them on shutdown. Nothing is created at import time.
Tests inject ready-made objects through ``create_app``'s keyword arguments; injected objects are
not closed by the app (their creator owns them).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response

from proxy.bundled_data import use_bundled_data
from proxy.cache.protocol import MemoryCache
from proxy.composition import Provided, open_services
from proxy.error_responses import error_response
from proxy.errors import ConfigError, InternalError, MemproxyError, NotFound, RequestError
from proxy.fastpath import MemproxyApp
from proxy.gc_tuning import freeze_started, tune_gc_for_serving
from proxy.logs import configure_logging
from proxy.memory.embedders import Embedder
from proxy.memory.store import MemoryStore
from proxy.metrics import Metrics
from proxy.middleware import RequestContextMiddleware
from proxy.pipeline.contract import MemoryPipeline
from proxy.request_target import check_target
from proxy.routes import build_routes, chat, messages, responses
from proxy.settings import Settings, load_settings
from proxy.upstream import UpstreamClient

LOGGER = logging.getLogger("memproxy")


async def _on_memproxy_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, MemproxyError)
    return error_response(exc)


async def _on_http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error: MemproxyError
    if exc.status_code == 404:
        try:
            check_target(request.scope)
            error = NotFound(f"Unknown path {request.url.path}.")
        except RequestError as bad:
            return error_response(bad)
    else:
        error = RequestError(str(exc.detail), code=f"http_{exc.status_code}")
    return error_response(error, status=exc.status_code)


async def _on_unexpected(request: Request, exc: Exception) -> Response:
    LOGGER.exception("unhandled error")
    return error_response(InternalError())


def create_app(
    settings: Settings | None = None,
    *,
    upstream: UpstreamClient | None = None,
    anthropic: UpstreamClient | None = None,
    pipeline: MemoryPipeline | None = None,
    store: MemoryStore | None = None,
    embedder: Embedder | None = None,
    cache: MemoryCache | None = None,
    metrics: Metrics | None = None,
    serving: bool = False,
) -> Starlette:
    """Build the app; clients are opened by its lifespan, not here. ``serving``: a server
    process's app, whose lifespan freezes what it opened for the collector (``gc_tuning``)."""
    use_bundled_data(os.environ)  # process start: tiktoken and litellm read local files
    settings = settings or load_settings()
    metrics = metrics or Metrics(settings.server.metrics_dir)
    provided = Provided(
        upstream=upstream,
        anthropic=anthropic,
        pipeline=pipeline,
        store=store,
        embedder=embedder,
        cache=cache,
    )

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with AsyncExitStack() as stack:
            try:
                services = await open_services(settings, metrics, stack, provided)
            except ConfigError as exc:
                if isinstance(app, MemproxyApp):
                    app.start_refused = exc.message
                raise
            app.state.services = services
            if serving:
                freeze_started()
            client = services.upstream
            LOGGER.info(
                "memproxy ready: upstream %s%s, anthropic %s, auth %s, config %s",
                client.display_url,
                f" via proxy {client.display_proxy}" if client.display_proxy else "",
                services.anthropic.display_url,
                settings.auth.mode,
                settings.source,
            )
            yield

    return MemproxyApp(
        # The hot routes skip Starlette's layers (ADR-0008); build_routes() still has them.
        fast_routes={
            ("POST", chat.PATH): chat.endpoint,
            ("POST", responses.PATH): responses.endpoint,
            ("POST", messages.PATH): messages.endpoint,
        },
        metrics=metrics,
        routes=build_routes(),
        middleware=[Middleware(RequestContextMiddleware, metrics=metrics)],
        exception_handlers={
            MemproxyError: _on_memproxy_error,
            HTTPException: _on_http_error,
            Exception: _on_unexpected,
        },
        lifespan=lifespan,
    )


def create_app_from_env() -> Starlette:
    """Factory for uvicorn workers: settings from ``MEMPROXY_*`` / the config file."""
    settings = load_settings()
    configure_logging(settings.server)
    app = create_app(settings, serving=True)
    tune_gc_for_serving()
    return app
