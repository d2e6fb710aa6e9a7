"""Faults from the upstream, seen by the official openai SDK and by raw httpx over real sockets.

Each fault must reach the client as what it is: an upstream error status passes through with
its body and ``Retry-After``; an unreachable or silent upstream is a 502/504 in OpenAI's shape;
a stream that breaks ends with an error and an aborted connection, never a made-up finish; a
stream that ends cleanly without ``finish_reason`` passes through as it is; a client that leaves
makes the proxy close its upstream connection. After every fault the proxy keeps serving.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from proxy.app import create_app
from proxy.content_encoding import decode_body
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer, stream_events
from tests.reliability.support import (
    CHAT,
    assert_openai_error,
    closed_port,
    content_of,
    read_stream,
    sse_events,
    unanswered_port,
)

STREAM = {**CHAT, "stream": True}
# A client that does not ask for compression gets plain SSE: the error event memproxy adds to a
# broken stream can only be read there (a compressed stream just ends in an abort).
PLAIN = {"Accept-Encoding": "identity"}


@pytest.fixture(scope="module")
def tight(fake_server: FakeServer) -> Iterator[ProxyServer]:
    """memproxy with short timeouts (idle 0.5 s, first byte 1 s) in front of the shared fake."""
    settings = proxy_settings(fake_server.url, connect=0.5, first_byte=1.0, idle=0.5)
    with ProxyServer(create_app(settings)) as server:
        yield server


def sdk(proxy: ProxyServer, **headers: str) -> openai.OpenAI:
    """An SDK client without retries (a retry would hide what the proxy answered)."""
    return openai.OpenAI(
        base_url=proxy.url, api_key="sk-test", max_retries=0, default_headers=headers
    )


def still_serving(proxy: ProxyServer) -> None:
    """The proxy answers health checks and a normal chat after a fault."""
    base = f"http://{proxy.host}:{proxy.port}"
    assert httpx.get(f"{base}/healthz").status_code == 200


# --- upstream error statuses ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
        (503, openai.InternalServerError),
    ],
)
@pytest.mark.parametrize("stream", [False, True])
def test_upstream_error_statuses_pass_through(
    proxy: ProxyServer, fake: FakeServer, status: int, error: type, stream: bool
) -> None:
    headers = {"X-Fake-Status": str(status), "X-Fake-Retry-After": "7"}
    raw = httpx.post(
        f"{proxy.url}/chat/completions", json={**CHAT, "stream": stream}, headers=headers
    )
    assert_openai_error(raw, status, f"fake_{status}")
    assert raw.headers["retry-after"] == "7"
    with pytest.raises(error) as caught:
        sdk(proxy, **headers).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=stream
        )
    assert caught.value.status_code == status  # type: ignore[attr-defined]
    assert caught.value.response.headers["retry-after"] == "7"  # type: ignore[attr-defined]
    # The proxy itself never retries: one upstream request per client request.
    assert len(fake.fake.requests) == 2
    still_serving(proxy)


# --- unreachable, silent and slow upstreams -------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
def test_connection_refused_is_502(stream: bool) -> None:
    settings = proxy_settings(f"http://127.0.0.1:{closed_port()}/v1")
    with ProxyServer(create_app(settings)) as proxy:
        raw = httpx.post(f"{proxy.url}/chat/completions", json={**CHAT, "stream": stream})
        with pytest.raises(openai.APIStatusError) as caught:
            sdk(proxy).chat.completions.create(model="m", messages=CHAT["messages"], stream=stream)
        still_serving(proxy)
    assert_openai_error(raw, 502, "upstream_unavailable")
    assert caught.value.status_code == 502


def test_connect_timeout_is_an_error_within_the_connect_budget() -> None:
    with unanswered_port() as port:
        settings = proxy_settings(f"http://127.0.0.1:{port}/v1", connect=0.3, first_byte=10.0)
        with ProxyServer(create_app(settings)) as proxy:
            started = time.monotonic()
            raw = httpx.post(f"{proxy.url}/chat/completions", json=STREAM, timeout=10)
            elapsed = time.monotonic() - started
            still_serving(proxy)
    assert raw.status_code in (502, 504)
    assert_openai_error(raw, raw.status_code)
    # Bounded by the connect timeout (0.3 s), not the first-byte one (10 s).
    assert elapsed < 5


def test_slow_headers_past_first_byte_timeout_is_504(tight: ProxyServer, fake: FakeServer) -> None:
    raw = httpx.post(
        f"{tight.url}/chat/completions", json=STREAM, headers={"X-Fake-Latency-Ms": "2500"}
    )
    assert_openai_error(raw, 504, "upstream_timeout")
    still_serving(tight)


def test_slow_first_byte_within_the_idle_timeout_streams_whole(
    tight: ProxyServer, fake: FakeServer
) -> None:
    headers = {"X-Fake-First-Byte-Ms": "300", "X-Fake-Chunks": "4"}
    with httpx.stream("POST", f"{tight.url}/chat/completions", json=STREAM, headers=headers) as r:
        body = b"".join(r.iter_raw())
        encoding = r.headers["content-encoding"]
    assert decode_body(body, encoding) == b"".join(stream_events("m", 1, 4, False, False))


def test_slow_first_byte_past_the_idle_timeout_is_an_error_not_a_finish(
    tight: ProxyServer, fake: FakeServer
) -> None:
    headers = {"X-Fake-First-Byte-Ms": "1500", "X-Fake-Chunks": "4", **PLAIN}
    received: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        read_stream(f"{tight.url}/chat/completions", STREAM, headers, received)
    events = sse_events(b"".join(received))
    assert b"[DONE]" not in events
    assert any(b'"code":"upstream_timeout"' in e for e in events)
    assert not any(b'"finish_reason":"' in e for e in events)
    still_serving(tight)


# --- a stream that breaks -------------------------------------------------------------------


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_reset_mid_stream_raw_client_sees_an_abort(
    proxy: ProxyServer, fake: FakeServer, rst: bool
) -> None:
    headers = {"X-Fake-Chunks": "6", "X-Fake-Reset-After": "3", **PLAIN}
    if rst:
        headers["X-Fake-Reset-Rst"] = "1"
    received: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        read_stream(f"{proxy.url}/chat/completions", STREAM, headers, received)
    events = sse_events(b"".join(received))
    # What arrived before the break is intact; then one error event; no finish, no [DONE].
    assert content_of(events) == ["Hello ", "from ", "the "]
    assert b'"upstream_unavailable"' in events[-1]
    assert b"[DONE]" not in events
    assert not any(b'"finish_reason":"' in e for e in events)
    still_serving(proxy)


@pytest.mark.parametrize("coding", ["gzip", "br", "zstd"])
def test_reset_mid_compressed_stream_is_an_abort_that_still_decodes(
    proxy: ProxyServer, fake: FakeServer, coding: str
) -> None:
    """No plain error event spliced into the compressed bytes: they decode up to the break."""
    headers = {"X-Fake-Chunks": "6", "X-Fake-Reset-After": "3", "X-Fake-Encoding": coding}
    received: list[bytes] = []
    with pytest.raises(httpx.RemoteProtocolError):
        read_stream(f"{proxy.url}/chat/completions", STREAM, headers, received)
    events = sse_events(decode_body(b"".join(received), coding))
    assert content_of(events) == ["Hello ", "from ", "the "]
    assert b"[DONE]" not in events
    assert not any(b'"finish_reason":"' in e or b'"error"' in e for e in events)
    still_serving(proxy)


@pytest.mark.parametrize("rst", [False, True], ids=["fin", "rst"])
def test_reset_mid_stream_sdk_raises(proxy: ProxyServer, fake: FakeServer, rst: bool) -> None:
    headers = {"X-Fake-Chunks": "6", "X-Fake-Reset-After": "2"}
    if rst:
        headers["X-Fake-Reset-Rst"] = "1"
    pieces: list[str] = []
    finishes: list[str | None] = []

    def consume() -> None:
        stream = sdk(proxy, **headers).chat.completions.create(
            model="m", messages=CHAT["messages"], stream=True
        )
        for chunk in stream:
            for choice in chunk.choices:
                pieces.append(choice.delta.content or "")
                finishes.append(choice.finish_reason)

    with pytest.raises((openai.APIError, httpx.RemoteProtocolError)):
        consume()
    assert "".join(pieces) == "Hello from "
    assert all(f is None for f in finishes)


async def test_reset_mid_stream_async_sdk_raises(proxy: ProxyServer, fake: FakeServer) -> None:
    client = openai.AsyncOpenAI(
        base_url=proxy.url,
        api_key="sk-test",
        max_retries=0,
        default_headers={"X-Fake-Chunks": "6", "X-Fake-Reset-After": "1", "X-Fake-Reset-Rst": "1"},
    )
    finishes = []

    async def consume() -> None:
        stream = await client.chat.completions.create(
            model="m", messages=CHAT["messages"], stream=True
        )
        async for chunk in stream:
            finishes.extend(c.finish_reason for c in chunk.choices)

    with pytest.raises((openai.APIError, httpx.RemoteProtocolError)):
        await consume()
    await client.close()
    assert finishes
    assert all(f is None for f in finishes)


# --- a stream that ends cleanly but oddly ---------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        {"X-Fake-No-Finish": "1"},
        {"X-Fake-No-Done": "1"},
        {"X-Fake-No-Finish": "1", "X-Fake-No-Done": "1"},
    ],
    ids=["no-finish", "no-done", "neither"],
)
def test_clean_end_without_finish_reason_passes_through_as_is(
    proxy: ProxyServer, fake: FakeServer, flags: dict[str, str]
) -> None:
    headers = {"X-Fake-Chunks": "3", **flags}
    with httpx.stream("POST", f"{fake.url}/chat/completions", json=STREAM, headers=headers) as r:
        direct = b"".join(r.iter_raw())
    with httpx.stream("POST", f"{proxy.url}/chat/completions", json=STREAM, headers=headers) as r:
        relayed = b"".join(r.iter_raw())
        encoding = r.headers["content-encoding"]
    assert relayed == direct  # nothing added: no synthesized finish, no [DONE]
    events = sse_events(decode_body(relayed, encoding))
    assert (b"[DONE]" in events) == ("X-Fake-No-Done" not in flags)
    assert any(b'"finish_reason":"' in e for e in events) == ("X-Fake-No-Finish" not in flags)
    # The SDK reads it to the end without error; finish_reason stays None when it was absent.
    stream = sdk(proxy, **headers).chat.completions.create(
        model="m", messages=CHAT["messages"], stream=True
    )
    finishes = [c.finish_reason for chunk in stream for c in chunk.choices]
    assert ("stop" in finishes) == ("X-Fake-No-Finish" not in flags)


# --- the client goes away -------------------------------------------------------------------


def wait_for(predicate: object, timeout: float = 5.0) -> bool:
    """Poll ``predicate()`` until true or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.02)
    return False


def test_client_disconnect_mid_stream_closes_the_upstream_connection(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    headers = {"X-Fake-Chunks": "200", "X-Fake-Interval-Ms": "20", "X-Tag": "leave-stream"}
    with httpx.stream("POST", f"{proxy.url}/chat/completions", json=STREAM, headers=headers) as r:
        next(r.iter_raw())  # the first bytes arrived: now leave
    (rec,) = [r for r in fake.fake.requests if r.headers.get("x-tag") == "leave-stream"]
    assert wait_for(lambda: rec.disconnected)
    assert not rec.finished
    still_serving(proxy)


def test_client_disconnect_while_waiting_closes_the_upstream_connection(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    headers = {"X-Fake-Latency-Ms": "800", "X-Tag": "leave-whole"}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(f"{proxy.url}/chat/completions", json=CHAT, headers=headers, timeout=0.2)
    (rec,) = [r for r in fake.fake.requests if r.headers.get("x-tag") == "leave-whole"]
    assert wait_for(lambda: rec.disconnected)
    assert not rec.finished
    still_serving(proxy)
