"""``/healthz`` (alive), ``/readyz`` (backends and upstream), ``/metrics`` (Prometheus).

Readiness policy (adr/0053, adr/0102): only the checks in ``server.ready_requires`` make
``/readyz`` answer 503 (by default the upstream client's pool). The memory backends (store,
embedder, cache) fail open, so a down one shows in ``checks`` and turns ``status`` into
``degraded`` while the answer stays 200: every replica shares the same Redis and Qdrant, and a
503 would make the load balancer drain the whole fleet, turning a memory outage into a chat
outage. An operator of a single node can require them. A store that failed at start is retried
in the background (``proxy/memory/reopening.py``) and shows ``unavailable: retrying ...`` here.

The upstream is never called by ``/readyz`` (it is paid, and in passthrough mode memproxy has no
key of its own): its check says what the last request that went upstream found, ``not checked``
before the first one. Such a passive failure degrades the status but cannot make the answer 503:
a replica taken out of its balancer would get no request that could show the upstream is back.

Each memory backend's result also sets ``memproxy_backend_up{backend}``.
"""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from proxy.memory.reopening import StoreReopening
from proxy.services import Probe, Services
from proxy.upstream import NOT_CHECKED, OK

READY_TIMEOUT_S = 2.0
UPSTREAM = "upstream"
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
    except StoreReopening as exc:
        return name, f"unavailable: {exc.state}"
    except Exception as exc:
        LOGGER.warning("readiness check of %s failed: %s", name, type(exc).__name__)
        return name, f"error: {type(exc).__name__}"
    return name, OK if result is not False else "not ready"


async def readyz(request: Request) -> Response:
    """503 when a required check fails, else 200 (``degraded`` when any other check fails)."""
    services: Services = request.app.state.services
    checks = services.probes.items()
    results = dict(await asyncio.gather(*(_check(name, probe) for name, probe in checks)))
    for name, result in results.items():
        if name != UPSTREAM:
            services.metrics.set_backend_up(name, result == OK)
    required = services.settings.server.ready_requires
    ready = all(results[name] == OK for name in results if name in required)
    if UPSTREAM in results and results[UPSTREAM] == OK:
        # The pool is open; say what the last exchange found instead of claiming more.
        results[UPSTREAM] = services.upstream.status()
    healthy = all(value in (OK, NOT_CHECKED) for value in results.values())
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
