"""``/healthz`` (alive), ``/readyz`` (backends and upstream config), ``/metrics`` (Prometheus).

Readiness policy (adr/0053): only what a chat request cannot do without makes ``/readyz``
answer 503 (today: the upstream client). The memory backends (store, embedder, cache) fail
open, so a down one shows in ``checks`` and turns ``status`` into ``degraded`` while the answer
stays 200: every replica shares the same Redis and Qdrant, and a 503 would make the load
balancer drain the whole fleet, turning a memory outage into a chat outage.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.services import Probe, Services

READY_TIMEOUT_S = 2.0
REQUIRED = frozenset({"upstream"})
LOGGER = logging.getLogger("memproxy.health")


async def healthz(request: Request) -> Response:
    """The process is up and serving."""
    return JSONResponse({"status": "ok"})


async def _check(name: str, probe: Probe | None) -> tuple[str, str]:
    """Ask one backend whether it is ready; ``None`` could not be opened at start."""
    if probe is None:
        return name, "unavailable"
    try:
        async with asyncio.timeout(READY_TIMEOUT_S):
            result = await probe.ready()
    except Exception as exc:
        LOGGER.warning("readiness check of %s failed: %s", name, type(exc).__name__)
        return name, f"error: {type(exc).__name__}"
    return name, "ok" if result is not False else "not ready"


async def readyz(request: Request) -> Response:
    """200 unless a required check fails (503); a failing memory backend only degrades."""
    services: Services = request.app.state.services
    checks = services.probes.items()
    results = dict(await asyncio.gather(*(_check(name, probe) for name, probe in checks)))
    ready = all(results[name] == "ok" for name in results if name in REQUIRED)
    healthy = all(value == "ok" for value in results.values())
    status = "ready" if healthy else ("degraded" if ready else "not ready")
    body = {"status": status, "checks": results}
    # Redacted: /readyz needs no auth, and the URL may carry credentials.
    body["upstream_url"] = services.upstream.display_url
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
