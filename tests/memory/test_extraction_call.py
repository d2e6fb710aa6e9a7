"""The extraction call against the scripted extractor upstream, over a real socket: retries on
429/5xx with backoff, no retry on other errors, timeouts, usage counted."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from proxy.memory.extraction import Fact, Turn
from proxy.memory.extraction_call import ExtractionCall, Failed
from proxy.metrics import Metrics
from proxy.settings import ExtractionSettings, UpstreamSettings
from proxy.upstream import UpstreamClient
from tests.fakes.extractor import ExtractorUpstream, Step, extractor_server, facts, status
from tests.fakes.upstream import FakeServer

TURN = Turn("I have a cat.", (), "", datetime(2026, 11, 23, tzinfo=UTC))
AUTH = ((b"authorization", b"Bearer sk-tenant"),)


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with extractor_server() as fake:
        yield fake


class Sleeps:
    def __init__(self) -> None:
        self.slept: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


async def call(server: FakeServer, *steps: Step, **conf: float) -> tuple[object, Sleeps, Metrics]:
    fake = server.fake
    assert isinstance(fake, ExtractorUpstream)
    fake.script.extend(steps)
    upstream = UpstreamClient(UpstreamSettings(url=server.url))
    await upstream.start()
    sleeps, metrics = Sleeps(), Metrics()
    settings = ExtractionSettings(**{"backoff_s": 0.5, "max_backoff_s": 4.0, **conf})  # type: ignore[arg-type]
    try:
        result = await ExtractionCall(upstream, settings, metrics, sleep=sleeps).facts(
            TURN, {}, "gpt-4o-mini", AUTH
        )
    finally:
        await upstream.close()
    return result, sleeps, metrics


def sample(metrics: Metrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_ok_counts_usage_and_sends_the_tenants_credentials(server: FakeServer) -> None:
    result, sleeps, metrics = await call(server, facts("The user has a cat."))
    assert result == [Fact("The user has a cat.")]
    assert sleeps.slept == []
    assert sample(metrics, "memproxy_extraction_tokens_total", kind="prompt") == 120
    assert sample(metrics, "memproxy_extraction_tokens_total", kind="completion") == 30
    fake = server.fake
    assert isinstance(fake, ExtractorUpstream)
    assert fake.headers[-1]["authorization"] == "Bearer sk-tenant"


async def test_429_and_5xx_are_retried_with_doubling_backoff(server: FakeServer) -> None:
    result, sleeps, _ = await call(server, status(429), status(503), facts("x"), max_attempts=3)
    assert result == [Fact("x")]
    assert sleeps.slept == [0.5, 1.0]


async def test_retry_after_is_honoured_up_to_the_cap(server: FakeServer) -> None:
    _, sleeps, _ = await call(server, status(429, "2"), status(429, "60"), facts("x"))
    assert sleeps.slept == [2.0, 4.0]


async def test_attempts_run_out(server: FakeServer) -> None:
    result, sleeps, metrics = await call(server, status(500), status(500), max_attempts=2)
    assert result == Failed("upstream_status")
    assert len(sleeps.slept) == 1
    assert sample(metrics, "memproxy_extraction_calls_total", result="error") == 2


async def test_a_client_error_is_not_retried(server: FakeServer) -> None:
    result, sleeps, _ = await call(server, status(401), facts("never"))
    assert result == Failed("upstream_status")
    assert sleeps.slept == []


async def test_a_rate_limit_that_persists(server: FakeServer) -> None:
    result, _, _ = await call(server, status(429), status(429), max_attempts=2)
    assert result == Failed("rate_limited")


async def test_a_slow_answer_times_out(server: FakeServer) -> None:
    result, _, _ = await call(server, facts("x", delay_s=2.0), timeout_s=0.2, max_attempts=1)
    assert result == Failed("timeout")


async def test_an_unreachable_upstream_is_a_transport_failure() -> None:
    upstream = UpstreamClient(UpstreamSettings(url="http://127.0.0.1:9/v1"))
    await upstream.start()
    try:
        result = await ExtractionCall(
            upstream, ExtractionSettings(max_attempts=1), Metrics()
        ).facts(TURN, {}, "m", AUTH)
    finally:
        await upstream.close()
    assert result == Failed("transport")
