"""/healthz, /readyz and /metrics."""

from __future__ import annotations

import httpx

from proxy.app import create_app
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer


class Backend:
    """A backend slot that answers readiness as configured."""

    def __init__(self, ok: bool) -> None:
        self.ok = ok

    async def ready(self) -> bool:
        if not self.ok:
            raise ConnectionError("down")
        return True


def root(proxy: ProxyServer) -> str:
    return f"http://{proxy.host}:{proxy.port}"


def test_healthz_and_readyz(proxy: ProxyServer) -> None:
    assert httpx.get(f"{root(proxy)}/healthz").json() == {"status": "ok"}
    ready = httpx.get(f"{root(proxy)}/readyz")
    assert ready.status_code == 200
    assert ready.json()["checks"] == {"upstream": "ok"}


def test_readyz_degrades_when_a_memory_backend_is_down(fake: FakeServer) -> None:
    # Memory backends fail open: a down one degrades readiness without a 503 (adr/0053).
    app = create_app(proxy_settings(fake.url), store=Backend(True), cache=Backend(False))
    with ProxyServer(app) as proxy:
        ready = httpx.get(f"{root(proxy)}/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "degraded"
    assert ready.json()["checks"] == {
        "upstream": "ok",
        "store": "ok",
        "cache": "error: ConnectionError",
    }


def test_metrics_count_requests_latency_and_streams(proxy: ProxyServer) -> None:
    body = {"model": "m", "messages": [], "stream": True}
    httpx.post(f"{proxy.url}/chat/completions", json=body)
    httpx.post(f"{proxy.url}/chat/completions", json={**body, "stream": False})
    httpx.get(f"{proxy.url}/models")
    text = httpx.get(f"{root(proxy)}/metrics").text
    for needle in (
        'memproxy_requests_total{method="POST",route="chat",status="200"}',
        'memproxy_requests_total{method="GET",route="passthrough",status="200"}',
        'memproxy_request_duration_seconds_bucket{le="0.001",route="chat"}',
        'memproxy_upstream_response_seconds_count{route="chat"}',
        "memproxy_time_to_first_chunk_seconds_count",
        "memproxy_requests_in_flight",
        "memproxy_streams_in_flight 0.0",
    ):
        assert needle in text, needle
