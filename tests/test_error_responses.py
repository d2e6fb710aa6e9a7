"""The one renderer of our errors: the same error in each API's shape, as any kind of answer."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from proxy.error_responses import (
    ANTHROPIC,
    OPENAI,
    OPENAI_RESPONSES,
    error_bytes,
    error_response,
    send_error,
)
from proxy.errors import (
    AuthError,
    BackendError,
    HeadTooLarge,
    InternalError,
    MemproxyError,
    NotFound,
    PayloadTooLarge,
    RequestError,
    UpstreamTimeout,
)


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (RequestError("bad", param="x"), "invalid_request_error"),
        (HeadTooLarge("big head"), "invalid_request_error"),
        (AuthError("who"), "authentication_error"),
        (NotFound("gone"), "not_found_error"),
        (PayloadTooLarge("big"), "request_too_large"),
        (UpstreamTimeout("slow"), "api_error"),
        (BackendError("down"), "api_error"),
        (InternalError(), "api_error"),
    ],
)
def test_each_error_in_each_shape(error: MemproxyError, kind: str) -> None:
    assert orjson.loads(OPENAI.encode(error)) == error.to_body()
    body = orjson.loads(ANTHROPIC.encode(error))
    assert body == {"type": "error", "error": {"type": kind, "message": error.message}}


def test_the_openai_shape_has_all_four_fields() -> None:
    body = orjson.loads(OPENAI.encode(RequestError("bad", param="x", code="c")))
    assert body == {
        "error": {"message": "bad", "type": "invalid_request_error", "param": "x", "code": "c"}
    }


def test_internal_error_says_nothing_of_the_bug() -> None:
    error = InternalError()
    assert (error.status, error.type, error.message) == (
        500,
        "server_error",
        "Internal error in memproxy.",
    )


def test_stream_events_are_framed_per_api() -> None:
    error = UpstreamTimeout("slow")
    assert OPENAI.event(error) == b"data: " + orjson.dumps(error.to_body()) + b"\n\n"
    assert ANTHROPIC.event(error) == b"event: error\ndata: " + ANTHROPIC.encode(error) + b"\n\n"
    typed = {"type": "error", **error.to_body()}  # nested, as api.openai.com sends it
    assert OPENAI_RESPONSES.event(error) == b"event: error\ndata: " + orjson.dumps(typed) + b"\n\n"
    assert OPENAI_RESPONSES.encode(error) == OPENAI.encode(error)  # whole errors as chat's


@pytest.mark.parametrize("shape", [OPENAI, ANTHROPIC])
def test_a_response_has_status_json_and_extra_headers(shape: Any) -> None:
    response = error_response(NotFound("gone"), {"Allow": "GET"}, shape=shape)
    assert response.status_code == 404
    assert response.body == shape.encode(NotFound("gone"))
    headers = dict(response.raw_headers)
    assert headers[b"content-type"] == b"application/json"
    assert headers[b"content-length"] == str(len(response.body)).encode()
    assert headers[b"allow"] == b"GET"
    assert error_response(RequestError("x"), status=405).status_code == 405


async def test_send_error_is_the_same_answer_over_asgi() -> None:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    error = PayloadTooLarge("big")
    await send_error(error, {"type": "http"}, receive, send, {"X-Memory-Status": "ok"})
    response = error_response(error, {"X-Memory-Status": "ok"})
    assert sent[0] == {
        "type": "http.response.start",
        "status": 413,
        "headers": response.raw_headers,
    }
    assert sent[1]["body"] == response.body


def test_error_bytes_is_a_whole_http_response() -> None:
    error = HeadTooLarge("big head")
    raw = error_bytes(
        error, b"HTTP/1.1 431 Request Header Fields Too Large\r\n", [(b"connection", b"close")]
    )
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 431 Request Header Fields Too Large"
    fields = dict(line.split(b": ", 1) for line in lines[1:])
    assert fields == {
        b"connection": b"close",
        b"content-type": b"application/json",
        b"content-length": str(len(body)).encode(),
    }
    assert orjson.loads(body) == error.to_body()
