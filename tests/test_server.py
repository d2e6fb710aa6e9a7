"""``proxy/server.py``: the one server setup, its settings and its metrics.

The hostile inputs themselves are in ``tests/reliability/test_raw_heads.py`` (heads) and
``test_body_limit_answers.py`` (early answers).
"""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import yaml

from proxy.app import create_app
from proxy.errors import ConfigError
from proxy.server import LimitedHttpProtocol, ServerConfig, server_config
from proxy.settings import HttpServerSettings, ServerSettings, load_settings
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.raw_http import (
    connect,
    exchange,
    metric,
    read_all,
    request,
    wait_for_metric,
)

ROOT = Path(__file__).resolve().parents[1]
WAIT_S = 10.0


def test_serve_and_the_tests_use_the_same_server_setup(fake: FakeServer) -> None:
    http = HttpServerSettings(max_headers=7, keepalive_s=3.5)
    server = ServerSettings(host="0.0.0.0", port=9999, workers=3, http=http)
    config = server_config("proxy.app:create_app_from_env", server)
    assert isinstance(config, ServerConfig)
    assert config.http is LimitedHttpProtocol
    assert (config.host, config.port, config.workers, config.factory) == ("0.0.0.0", 9999, 3, True)
    assert config.limits is http
    assert config.ws == "none"
    with ProxyServer(create_app(proxy_settings(fake.url)), server=server) as proxy:
        used = proxy.server.config
        assert isinstance(used, ServerConfig)
        assert used.http is LimitedHttpProtocol
        assert used.limits is http
        assert used.factory is False


def test_config_reaches_worker_processes() -> None:
    """Workers are spawned with the config pickled."""
    http = HttpServerSettings(head_timeout_s=1.5)
    config = server_config("proxy.app:create_app_from_env", ServerSettings(workers=2, http=http))
    copy = pickle.loads(pickle.dumps(config))
    assert copy.limits == http
    assert copy.http is LimitedHttpProtocol


@pytest.mark.parametrize("field", list(HttpServerSettings.model_fields))
def test_http_settings_must_be_positive(tmp_path: Path, field: str) -> None:
    path = tmp_path / "memproxy.yaml"
    path.write_text(f"server:\n  http:\n    {field}: 0\n")
    with pytest.raises(ConfigError, match=rf"'server\.http\.{field}' must be > 0"):
        load_settings(path, env={})


def test_example_config_states_every_default() -> None:
    text = (ROOT / "config" / "memproxy.yaml").read_text()
    stated = yaml.safe_load(text)["server"]["http"]
    assert stated == HttpServerSettings().model_dump()


HEAD_TIMEOUT_S = 2.0


def test_metrics_count_open_connections_and_refused_heads(fake: FakeServer) -> None:
    server = ServerSettings(http=HttpServerSettings(head_timeout_s=HEAD_TIMEOUT_S))
    with ProxyServer(create_app(proxy_settings(fake.url)), server=server) as proxy:
        port = proxy.port
        idle = [connect(port) for _ in range(3)]
        try:
            # The three idle ones and the one asking.
            assert wait_for_metric(port, "memproxy_connections_open", 4.0) == 4.0
            # Never sending, they are closed after the head timeout, without an answer.
            for sock in idle:
                assert read_all(sock, WAIT_S) == (b"", "closed")
        finally:
            for sock in idle:
                sock.close()
        assert wait_for_metric(port, "memproxy_connections_open", 1.0) == 1.0
        refused = 'memproxy_requests_refused_total{reason="%s"}'
        assert metric(port, refused % "head_timeout") == 3.0
        big = request("GET", "/healthz", [("X-Big", "a" * 100_000)])
        assert exchange(port, big).statuses == [431]
        assert exchange(port, b"GARBAGE\r\n\r\n").statuses == [400]
        many = request("GET", "/healthz", [(f"X-{i}", "v") for i in range(200)])
        assert exchange(port, many).statuses == [431]
        assert metric(port, refused % "head_too_large") == 1.0
        assert metric(port, refused % "malformed") == 1.0
        assert metric(port, refused % "too_many_headers") == 1.0
