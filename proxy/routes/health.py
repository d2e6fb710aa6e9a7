"""``/healthz`` (alive), ``/readyz`` (backends and upstream config), ``/metrics`` (Prometheus)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.services import Services

READY_TIMEOUT_S = 2.0
LOGGER = logging.getLogger("memproxy.health")


async def healthz(request: Request) -> Response:
    """The process is up and serving."""
    return JSONResponse({"status": "ok"})


async def _check(name: str, backend: Any) -> tuple[str, str]:
    """Ask a backend if it is ready via its ``ready()`` or ``ping()`` coroutine, if it has one."""
    probe = getattr(backend, "ready", None) or getattr(backend, "ping", None)
    if probe is None:
        return name, "ok"
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            result = await probe()
    except Exception as exc:
        LOGGER.warning("readiness check of %s failed: %s", name, type(exc).__name__)
        return name, f"error: {type(exc).__name__}"
    return name, "ok" if result is not False else "not ready"


async def readyz(request: Request) -> Response:
    """200 when the upstream is configured and every filled backend slot answers, else 503."""
    services: Services = request.app.state.services
    slots = {"upstream": services.upstream}
    for name in ("store", "embedder", "cache"):
        backend = getattr(services, name)
        if backend is not None:
            slots[name] = backend
    results = dict(await asyncio.gather(*(_check(n, b) for n, b in slots.items())))
    ready = all(value == "ok" for value in results.values())
    body = {"status": "ready" if ready else "not ready", "checks": results}
    body["upstream_url"] = services.upstream.base_url
    return JSONResponse(body, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    """Prometheus exposition of this process (or of all workers in multiprocess mode)."""
    services: Services = request.app.state.services
    payload, content_type = services.metrics.render()
    return Response(payload, media_type=content_type)


routes = [
    Route("/healthz", healthz, methods=["GET", "HEAD"]),
    Route("/readyz", readyz, methods=["GET", "HEAD"]),
    Route("/metrics", metrics, methods=["GET"]),
]
