"""/healthz, /readyz and /metrics."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

import httpx
import pytest

from proxy import composition
from proxy.app import create_app
from proxy.settings import Settings, replace
from tests.conftest import proxy_settings
from tests.fakes.embedder import FakeEmbedder
from tests.fakes.servers import ProxyServer
from tests.fakes.store import FailingOpener
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


def test_healthz_and_readyz(fake: FakeServer) -> None:
    with ProxyServer(create_app(proxy_settings(fake.url))) as proxy:
        assert httpx.get(f"{root(proxy)}/healthz").json() == {"status": "ok"}
        ready = httpx.get(f"{root(proxy)}/readyz")
        assert ready.status_code == 200
        # /readyz never calls the upstream: before any request it cannot claim more.
        assert ready.json() == {
            "status": "ready",
            "checks": {"upstream": "not checked"},
            "upstream_url": fake.url,
        }
        httpx.get(f"{proxy.url}/models")
        assert httpx.get(f"{root(proxy)}/readyz").json()["checks"] == {"upstream": "ok"}


def test_readyz_names_why_the_upstream_could_not_be_reached() -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://user:s3cret@127.0.0.1:{port}/v1"
    with ProxyServer(create_app(proxy_settings(url))) as proxy:
        answer = httpx.post(f"{proxy.url}/chat/completions", json={"model": "m", "messages": []})
        ready = httpx.get(f"{root(proxy)}/readyz")
    reason = f"Cannot reach the upstream 127.0.0.1:{port}: connection refused."
    assert answer.status_code == 502
    assert answer.json()["error"]["message"] == reason
    # Passive: the answer stays 200, or nothing would reach the replica to show it is back.
    assert ready.status_code == 200
    assert ready.json()["status"] == "degraded"
    assert ready.json()["checks"] == {"upstream": reason}
    assert "s3cret" not in ready.text
    assert "s3cret" not in answer.text


def test_readyz_degrades_when_a_memory_backend_is_down(fake: FakeServer) -> None:
    # Memory backends fail open: a down one degrades readiness without a 503 (adr/0053).
    app = create_app(proxy_settings(fake.url), store=Backend(True), cache=Backend(False))
    with ProxyServer(app) as proxy:
        ready = httpx.get(f"{root(proxy)}/readyz")
    assert ready.status_code == 200
    assert ready.json()["status"] == "degraded"
    assert ready.json()["checks"] == {
        "upstream": "not checked",
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


def memory_on(upstream_url: str, data_dir: str, *required: str) -> Settings:
    base = proxy_settings(upstream_url)
    server = replace(base.server, ready_requires=("upstream", *required))
    memory = replace(base.memory, enabled=True)
    return replace(base, server=server, memory=memory, store=replace(base.store, data_dir=data_dir))


def metric(text: str, name: str) -> float:
    (line,) = [line for line in text.splitlines() if line.startswith(name)]
    return float(line.rsplit(" ", 1)[1])


def wait_ready(proxy: ProxyServer, timeout: float = 30.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        ready = httpx.get(f"{root(proxy)}/readyz")
        if ready.json()["checks"]["store"] == "ok" or time.monotonic() > deadline:
            return ready
        time.sleep(0.05)


@pytest.mark.parametrize("required", [(), ("store",)])
def test_a_store_down_at_start_comes_back_without_a_restart(
    fake: FakeServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    required: tuple[str, ...],
) -> None:
    opener = FailingOpener(failures=10**9)  # down until the test lets it come back
    monkeypatch.setattr(composition, "open_store", opener)
    settings = memory_on(fake.url, str(tmp_path), *required)
    app = create_app(settings, embedder=FakeEmbedder())
    auth = {"Authorization": "Bearer sk-test"}
    memory = {"content": "Alice prefers green tea", "user": "alice"}
    with ProxyServer(app) as proxy:
        down = httpx.get(f"{root(proxy)}/readyz")
        refused = httpx.post(f"{proxy.url}/memories", headers=auth, json=memory)
        before = httpx.get(f"{root(proxy)}/metrics").text
        opener.failures = opener.calls  # Qdrant is up now: the next attempt opens it
        back = wait_ready(proxy)
        after = httpx.get(f"{root(proxy)}/metrics").text
        stored = httpx.post(f"{proxy.url}/memories", headers=auth, json=memory)
    assert down.status_code == (503 if required else 200)
    assert down.json()["status"] == ("not ready" if required else "degraded")
    assert re.fullmatch(
        r"unavailable: retrying \(\d+ failed attempts, last: ConnectionRefusedError\)",
        down.json()["checks"]["store"],
    )
    assert refused.status_code == 503
    assert metric(before, 'memproxy_backend_up{backend="store"}') == 0
    assert back.status_code == 200
    assert back.json()["checks"]["store"] == "ok"
    assert metric(after, 'memproxy_backend_up{backend="store"}') == 1
    # Every attempt but the start's and the last (which opened it) was a counted retry.
    assert metric(after, 'memproxy_backend_retries_total{backend="store"}') == opener.calls - 2
    assert stored.status_code == 201
    assert opener.store.adds  # the write reached the store that came back
