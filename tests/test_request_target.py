"""The request target rules (``proxy/request_target.py``): tables, and a property for the prefix."""

from __future__ import annotations

import posixpath
from typing import Any
from urllib.parse import unquote_to_bytes

import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.errors import RequestError
from proxy.request_target import check_target, forward_target


def scope(raw_path: bytes | None, query: bytes = b"", **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"path": "/v1/unused", "query_string": query, **extra}
    if raw_path is not None:
        out["raw_path"] = raw_path
    return out


@pytest.mark.parametrize(
    ("raw", "query", "target"),
    [
        (b"/v1/chat/completions", b"", "/chat/completions"),
        (b"/v1/files/a%2Fb", b"", "/files/a%2Fb"),  # an escaped slash stays escaped
        (b"/v1/files/a%3Fb", b"x=1", "/files/a%3Fb?x=1"),  # so does an escaped '?'
        (b"/v1//x", b"", "//x"),
        (b"/v1/", b"", "/"),
        (b"/v1/models/ft:gpt-4o:org:x:1", b"", "/models/ft:gpt-4o:org:x:1"),
        (b"/v1/files/report.v2.jsonl", b"", "/files/report.v2.jsonl"),
        (b"/v1/files/...", b"", "/files/..."),  # three dots are a name, not a dot segment
        (b"/v1/files/.hidden", b"", "/files/.hidden"),
        (b"/v1/files/a%20b", b"", "/files/a%20b"),
        (b"/v1/files/x", b"q=%0d%0a&n=%00", "/files/x?q=%0d%0a&n=%00"),  # escaped data
        (b"/v1/responses/r", b"include[]=a&q='x'", "/responses/r?include[]=a&q='x'"),
    ],
)
def test_allowed_targets_go_byte_for_byte(raw: bytes, query: bytes, target: str) -> None:
    assert forward_target(scope(raw, query)) == target


@pytest.mark.parametrize(
    "raw",
    [
        b"/v1/../x",
        b"/v1/x/..",
        b"/v1/./x",
        b"/v1/%2e%2e/%2e%2e/admin",
        b"/v1/%2E%2e/x",
        b"/v1/.%2E/x",
        b"/v1/%2e/x",
        b"/v1/%252e%252e/x",  # decoded twice by a careless gateway
        b"/v1/a%2F..%2Fb",  # an escaped slash is a separator once decoded
        b"/v1/a%5C..%5Cb",  # and so is an escaped backslash
        b"/v1/a\\b",
        b"/v1/a%00b",
        b"/v1/a%0d%0ab",
        b"/v1/a%0Ab",
        b"/v1/a%7f",
        b"/v1/a%2500",  # an escaped NUL under one more layer
        b"/v1/a\x00b",
        b"/v1/a\rb",
        b"/v1/a b",
        b"/v1/caf\xc3\xa9",
        b'/v1/a"b',
        b"/v1/a{b}",
        b"/v1/a%zz",
        b"/v1/a%2",
        b"/v2/x",
        b"/%76%31/models",  # /v1 spelled with escapes: not the prefix as written
        b"/v1",
        b"http://evil/v1/x",
    ],
)
def test_refused_paths(raw: bytes) -> None:
    with pytest.raises(RequestError) as caught:
        forward_target(scope(raw))
    assert (caught.value.status, caught.value.code) == (400, "invalid_path")


@pytest.mark.parametrize("query", [b"a=\x01", b"a=\r\n", b"a b", b"a=\xc3\xa9", b"a#b", b"a=\x7f"])
def test_refused_queries(query: bytes) -> None:
    with pytest.raises(RequestError, match="query string"):
        forward_target(scope(b"/v1/models", query))


def test_root_path_is_not_forwarded() -> None:
    assert forward_target(scope(b"/proxy/v1/models", root_path="/proxy")) == "/models"


def test_without_raw_path_the_decoded_path_is_escaped_again() -> None:
    got = forward_target({"path": "/v1/files/my file?", "query_string": b""})
    assert got == "/files/my%20file%3F"


def test_check_target_ignores_the_prefix_but_not_the_rest() -> None:
    check_target(scope(b"/healthz"))
    with pytest.raises(RequestError):
        check_target(scope(b"/anything/a%0d%0ab"))


SEGMENTS = st.lists(
    st.sampled_from(
        ["a", "b.c", ".", "..", "%2e", "%2E%2e", "%252e", "%2f", "%2F..", "%5c", "%25", "", "x%2e"]
    ),
    max_size=6,
)


def resolved(path: bytes) -> str:
    """Where a server lands that decodes ``path`` and then resolves its dot segments."""
    text = path.replace(b"\\", b"/").decode("latin-1")
    return posixpath.normpath("/" + text.lstrip("/"))


@given(SEGMENTS)
def test_an_accepted_path_never_leaves_the_prefix_however_often_decoded(
    segments: list[str],
) -> None:
    raw = ("/v1/" + "/".join(segments)).encode()
    try:
        tail = forward_target(scope(raw))
    except RequestError:
        return
    upstream = b"/openai/v1" + tail.encode()
    for _ in range(4):  # a gateway may decode once, twice, ...
        assert resolved(upstream) == "/openai/v1" or resolved(upstream).startswith("/openai/v1/")
        upstream = unquote_to_bytes(upstream)
