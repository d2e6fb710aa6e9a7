"""Shared fixtures: the fake OpenAI upstream and memproxy in front of it, over real sockets."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import hypothesis
import pytest

from proxy.app import create_app
from proxy.settings import (
    AnthropicSettings,
    Settings,
    TimeoutSettings,
    UpstreamSettings,
    load_settings,
    replace,
)
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

# The machine is shared and small: Hypothesis's timing checks would fail on load, not on bugs.
# Speed is measured by bench/ scripts, never by timed assertions in tests.
hypothesis.settings.register_profile(
    "memproxy",
    deadline=None,
    suppress_health_check=[hypothesis.HealthCheck.too_slow],
    print_blob=True,
)
hypothesis.settings.load_profile("memproxy")


@pytest.fixture(scope="session")
def fake_server() -> Iterator[FakeServer]:
    """One fake upstream for the session (requests are cleared per test by ``fake``)."""
    with FakeServer() as server:
        yield server


@pytest.fixture
def fake(fake_server: FakeServer) -> FakeServer:
    """The fake upstream with an empty request log."""
    fake_server.fake.requests.clear()
    return fake_server


def anthropic_root(upstream_url: str) -> str:
    """The same fake as Anthropic's base URL: without ``/v1`` (nor a query, which an
    OpenAI-compatible URL may carry)."""
    parts = urlsplit(upstream_url)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.removesuffix("/v1"), "", ""))


def proxy_settings(upstream_url: str, **timeouts: float) -> Settings:
    """Default settings pointed at ``upstream_url``, memory off (nothing read from the env).

    The foundation's tests are about proxying; memory-path tests build their own settings.
    """
    base = load_settings(env={})
    upstream = UpstreamSettings(
        url=upstream_url,
        timeouts=TimeoutSettings(**timeouts),
        anthropic=AnthropicSettings(url=anthropic_root(upstream_url)),
    )
    return replace(base, upstream=upstream, memory=replace(base.memory, enabled=False))


@pytest.fixture(scope="session")
def proxy_server(fake_server: FakeServer) -> Iterator[ProxyServer]:
    """memproxy (no-op memory pipeline) in front of the fake, on a real socket."""
    with ProxyServer(create_app(proxy_settings(fake_server.url))) as server:
        yield server


@pytest.fixture
def proxy(proxy_server: ProxyServer, fake: FakeServer) -> ProxyServer:
    """memproxy with the fake's request log cleared."""
    return proxy_server
