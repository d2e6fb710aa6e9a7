"""Header filtering, URL mapping, and both upstream clients (fast, aiohttp) against the fake."""

from __future__ import annotations

import pytest

from proxy.errors import UpstreamError, UpstreamTimeout
from proxy.settings import TimeoutSettings, UpstreamSettings
from proxy.upstream import UpstreamClient, request_headers, response_headers
from tests.fakes.upstream import FakeServer

RAW_REQUEST = [
    (b"host", b"proxy:8080"),
    (b"connection", b"keep-alive"),
    (b"content-length", b"12"),
    (b"authorization", b"Bearer client"),
    (b"x-memory-user", b"alice"),
    (b"transfer-encoding", b"chunked"),
    (b"content-type", b"application/json"),
    (b"x-api-key", b"client"),
    (b"openai-beta", b"assistants=v2"),
]


def test_request_headers_strip_hop_by_hop_and_memory_and_keep_client_auth() -> None:
    assert request_headers(RAW_REQUEST) == [
        (b"authorization", b"Bearer client"),
        (b"content-type", b"application/json"),
        (b"x-api-key", b"client"),
        (b"openai-beta", b"assistants=v2"),
    ]


def test_request_headers_withhold_and_add_the_tenants_auth() -> None:
    out = request_headers(
        RAW_REQUEST,
        frozenset({b"authorization", b"x-api-key"}),
        [(b"authorization", b"Bearer upstream")],
    )
    assert out == [
        (b"content-type", b"application/json"),
        (b"openai-beta", b"assistants=v2"),
        (b"authorization", b"Bearer upstream"),
    ]


def test_request_header_values_pass_byte_for_byte() -> None:
    raw = [
        (b"x-note", b"caf\xe9 \xff"),
        (b"Authorization", b"Basic \xe9"),
        (b"X-Memory-Mode", b"off"),
    ]
    assert request_headers(raw) == [(b"x-note", b"caf\xe9 \xff"), (b"authorization", b"Basic \xe9")]


def test_response_headers_keep_retry_after_and_drop_framing() -> None:
    raw = [
        (b"Content-Length", b"10"),
        (b"Transfer-Encoding", b"chunked"),
        (b"Date", b"x"),
        (b"Server", b"upstream"),
        (b"Retry-After", b"7"),
        (b"x-ratelimit-remaining-requests", b"9"),
        (b"Content-Encoding", b"gzip"),
    ]
    assert response_headers(raw) == [
        (b"Retry-After", b"7"),
        (b"x-ratelimit-remaining-requests", b"9"),
        (b"Content-Encoding", b"gzip"),
    ]


@pytest.mark.parametrize(
    ("base", "path", "query", "expected"),
    [
        ("https://api.openai.com/v1", "/v1/models", "", "https://api.openai.com/v1/models"),
        ("http://h:1/v1/", "/v1/files/a", "x=a%20b&y=1", "http://h:1/v1/files/a?x=a%20b&y=1"),
        (
            "http://h:1/openai/v1",
            "/v1/chat/completions",
            "",
            "http://h:1/openai/v1/chat/completions",
        ),
    ],
)
def test_url_for_keeps_base_path_and_raw_query(
    base: str, path: str, query: str, expected: str
) -> None:
    client = UpstreamClient(UpstreamSettings(url=base))
    assert str(client.url_for(path, query)) == expected


CLIENTS = ("fast", "aiohttp")
CHAT_BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}]}'


def client_for(url: str, kind: str, **timeouts: float) -> UpstreamClient:
    timeout_settings = TimeoutSettings(**timeouts)
    settings = UpstreamSettings(url=url, timeouts=timeout_settings, client=kind)  # type: ignore[arg-type]
    return UpstreamClient(settings)


@pytest.mark.parametrize("kind", CLIENTS)
async def test_both_clients_relay_bodies_and_streams(fake: FakeServer, kind: str) -> None:
    client = client_for(fake.url, kind)
    await client.start()
    try:
        headers = [(b"content-type", b"application/json"), (b"authorization", b"Bearer sk-1")]
        url = client.url_for("/v1/chat/completions", "")
        response = await client.send("POST", url, headers, CHAT_BODY)
        assert (response.status, response.is_event_stream) == (200, False)
        assert b"Hello from the fake upstream" in await response.read()
        response.close()
        stream_body = CHAT_BODY[:-1] + b', "stream": true}'
        response = await client.send("POST", url, headers, stream_body)
        assert response.is_event_stream
        raw = b"".join([chunk async for chunk in response.chunks()])
        response.close()
        assert raw.endswith(b"data: [DONE]\n\n")
        assert await client.ready()
    finally:
        await client.close()
    assert fake.fake.requests[0].headers["authorization"] == "Bearer sk-1"


@pytest.mark.parametrize("kind", CLIENTS)
async def test_both_clients_time_out_and_fail_alike(fake: FakeServer, kind: str) -> None:
    client = client_for(fake.url, kind, first_byte=0.2)
    await client.start()
    url = client.url_for("/v1/chat/completions", "")
    try:
        with pytest.raises(UpstreamTimeout):
            await client.send("POST", url, [(b"x-fake-latency-ms", b"1500")], CHAT_BODY)
    finally:
        await client.close()
    closed = client_for("http://127.0.0.1:9/v1", kind)
    await closed.start()
    try:
        with pytest.raises(UpstreamError, match="Cannot reach the upstream") as caught:
            await closed.send("GET", closed.url_for("/v1/models", ""), [], b"")
        assert type(caught.value) is UpstreamError
    finally:
        await closed.close()
