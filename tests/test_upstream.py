"""Header rules, URL mapping and redaction of the upstream client (no network here).

The transports themselves run through one contract suite in ``tests/test_transport.py``.
"""

from __future__ import annotations

import pytest

from proxy.errors import RequestError
from proxy.settings import MemorySettings, UpstreamSettings
from proxy.tenancy import Tenant, bearer_auth
from proxy.upstream import (
    UpstreamClient,
    redact_url,
    request_headers,
    response_headers,
    upstream_headers,
)

KEYS_TENANT = Tenant(
    "acme", MemorySettings(), forwards_credentials=False, upstream_key="sk-operator"
)
PASSTHROUGH_TENANT = Tenant("t-client", MemorySettings())
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
        (b"x-note", b"caf\xe9 \xff\ttab"),
        (b"Authorization", b"Basic \xe9"),
        (b"X-Memory-Mode", b"off"),
    ]
    assert request_headers(raw) == [
        (b"x-note", b"caf\xe9 \xff\ttab"),
        (b"authorization", b"Basic \xe9"),
    ]


def test_headers_named_by_connection_are_hop_by_hop_both_ways() -> None:
    raw = [
        (b"connection", b"close, X-Foo"),
        (b"connection", b" x-bar ,"),
        (b"x-foo", b"1"),
        (b"x-bar", b"2"),
        (b"x-kept", b"3"),
    ]
    assert request_headers(raw) == [(b"x-kept", b"3")]
    upstream = [
        (b"Connection", b"X-Secret-Route"),
        (b"X-Secret-Route", b"internal"),
        (b"Content-Type", b"application/json"),
    ]
    assert response_headers(upstream) == [(b"Content-Type", b"application/json")]


def test_keys_mode_drops_what_would_choose_the_operators_billing_or_leak_keys() -> None:
    raw = [
        (b"openai-organization", b"org-client"),
        (b"openai-project", b"proj-client"),
        (b"x-api-key", b"mp-tenant-key"),
        (b"api-key", b"mp-tenant-key"),
        (b"openai-beta", b"assistants=v2"),
    ]
    operator = bearer_auth(KEYS_TENANT)
    out = request_headers(raw, operator.withhold, operator.add)
    assert out == [(b"openai-beta", b"assistants=v2"), (b"authorization", b"Bearer sk-operator")]
    client = bearer_auth(PASSTHROUGH_TENANT)
    assert (b"openai-organization", b"org-client") in request_headers(
        raw, client.withhold, client.add
    )


@pytest.mark.parametrize("client_sent_one", [False, True])
def test_upstream_headers_carry_the_request_id_once_and_the_tenants_auth(
    client_sent_one: bool,
) -> None:
    sent = [(b"x-request-id", b"rid-client")] if client_sent_one else []
    scope = {"headers": [*RAW_REQUEST, *sent], "state": {"request_id": "rid-1"}}
    out = upstream_headers(scope, bearer_auth(KEYS_TENANT))
    ids = [value for name, value in out if name == b"x-request-id"]
    assert ids == ([b"rid-client"] if client_sent_one else [b"rid-1"])
    assert (b"authorization", b"Bearer sk-operator") in out
    assert (b"authorization", b"Bearer client") not in out
    assert upstream_headers({"headers": []}, bearer_auth(PASSTHROUGH_TENANT)) == []


@pytest.mark.parametrize(
    ("name", "value"),
    [(b"x-note", b"a\r\nx-injected: 1"), (b"x-note", b"a\x00"), (b"x note", b"v"), (b"", b"v")],
)
def test_a_client_header_that_is_not_a_valid_field_is_a_400(name: bytes, value: bytes) -> None:
    with pytest.raises(RequestError) as caught:
        request_headers([(b"x-fine", b"ok"), (name, value)], None)
    assert (caught.value.status, caught.value.code) == (400, "invalid_header")


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
    ("base", "target", "expected"),
    [
        ("https://api.openai.com/v1", "/models", "https://api.openai.com/v1/models"),
        ("http://h:1/v1/", "/files/a?x=a%20b&y=1", "http://h:1/v1/files/a?x=a%20b&y=1"),
        ("http://h:1/openai/v1", "/chat/completions", "http://h:1/openai/v1/chat/completions"),
        ("https://u:p@h/v1", "/models", "https://h/v1/models"),  # never sent
        ("https://h/o/v1?api-version=2", "/models", "https://h/o/v1/models?api-version=2"),
        ("https://h/o/v1?api-version=2", "/m?x=1", "https://h/o/v1/m?api-version=2&x=1"),
    ],
)
def test_join_keeps_base_path_and_queries(base: str, target: str, expected: str) -> None:
    assert UpstreamClient(UpstreamSettings(url=base), environ={}).join(target) == expected


def test_url_for_forwards_the_raw_path() -> None:
    client = UpstreamClient(UpstreamSettings(url="https://h/openai/v1"), environ={})
    scope = {"path": "/v1/files/a/b", "raw_path": b"/v1/files/a%2Fb", "query_string": b"x=1"}
    assert client.url_for(scope) == "https://h/openai/v1/files/a%2Fb?x=1"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://api.openai.com/v1", "https://api.openai.com/v1"),
        ("https://user:s3cret@h:8443/v1", "https://***@h:8443/v1"),
        ("https://token@h/v1", "https://***@h/v1"),
        ("https://h/v1?api-key=s3cret&api-version=1", "https://h/v1?api-key=***&api-version=***"),
        ("https://h/v1?s3cret", "https://h/v1?***"),
        ("https://h/v1#s3cret", "https://h/v1"),
    ],
)
def test_redact_url(url: str, shown: str) -> None:
    assert redact_url(url) == shown
    assert "s3cret" not in UpstreamClient(UpstreamSettings(url=url), environ={}).display_url
