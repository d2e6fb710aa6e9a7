"""Header filtering and URL mapping of the upstream client."""

from __future__ import annotations

import pytest

from proxy.settings import UpstreamSettings
from proxy.upstream import UpstreamClient, request_headers, response_headers


def test_request_headers_strip_hop_by_hop_memory_and_auth() -> None:
    raw = [
        (b"host", b"proxy:8080"),
        (b"connection", b"keep-alive"),
        (b"content-length", b"12"),
        (b"authorization", b"Bearer client"),
        (b"x-memory-user", b"alice"),
        (b"transfer-encoding", b"chunked"),
        (b"content-type", b"application/json"),
        (b"openai-beta", b"assistants=v2"),
    ]
    out = request_headers(raw, "Bearer upstream")
    assert out == [
        ("content-type", "application/json"),
        ("openai-beta", "assistants=v2"),
        ("authorization", "Bearer upstream"),
    ]
    assert ("authorization", "Bearer upstream") not in request_headers(raw, None)


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
