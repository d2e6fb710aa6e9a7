"""Every error memproxy raises itself: status and OpenAI's shape."""

from __future__ import annotations

import socket

import httpx
import pytest

from proxy.app import create_app
from proxy.settings import LimitsSettings, replace
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def assert_openai_error(response: httpx.Response, status: int, code: str) -> None:
    assert response.status_code == status
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == code
    assert error["message"]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.parametrize("stream", [False, True])
def test_connect_failure_is_502(stream: bool) -> None:
    settings = proxy_settings(f"http://127.0.0.1:{closed_port()}/v1")
    with ProxyServer(create_app(settings)) as proxy:
        response = httpx.post(f"{proxy.url}/chat/completions", json={**CHAT, "stream": stream})
    assert_openai_error(response, 502, "upstream_unavailable")


def test_first_byte_timeout_is_504(fake: FakeServer) -> None:
    settings = proxy_settings(fake.url, first_byte=0.2)
    with ProxyServer(create_app(settings)) as proxy:
        response = httpx.post(
            f"{proxy.url}/chat/completions", json=CHAT, headers={"X-Fake-Latency-Ms": "1500"}
        )
    assert_openai_error(response, 504, "upstream_timeout")


def test_idle_timeout_mid_stream_ends_with_error_event(fake: FakeServer) -> None:
    settings = proxy_settings(fake.url, idle=0.2)
    # Uncompressed: memproxy cannot splice its error event into a compressed stream
    # (proxy/relay.py); a client that does not ask for compression gets plain SSE.
    headers = {"X-Fake-Interval-Ms": "1000", "X-Fake-Chunks": "3", "Accept-Encoding": "identity"}
    received: list[bytes] = []

    def read_stream(url: str) -> None:
        body = {**CHAT, "stream": True}
        with httpx.stream("POST", url, json=body, headers=headers) as response:
            received.extend(response.iter_raw())

    with ProxyServer(create_app(settings)) as proxy, pytest.raises(httpx.RemoteProtocolError):
        read_stream(f"{proxy.url}/chat/completions")
    joined = b"".join(received)
    assert b'"code":"upstream_timeout"' in joined
    assert b"[DONE]" not in joined


def test_malformed_json_is_400(proxy: ProxyServer) -> None:
    response = httpx.post(f"{proxy.url}/chat/completions", content=b"{not json")
    assert_openai_error(response, 400, "invalid_json")
    response = httpx.post(f"{proxy.url}/chat/completions", content=b"[1, 2]")
    assert_openai_error(response, 400, "invalid_json")


def test_body_over_limit_is_413(fake: FakeServer) -> None:
    settings = replace(proxy_settings(fake.url), limits=LimitsSettings(max_body_bytes=1000))
    big = {**CHAT, "messages": [{"role": "user", "content": "x" * 2000}]}
    with ProxyServer(create_app(settings)) as proxy:
        declared = httpx.post(f"{proxy.url}/chat/completions", json=big)

        def chunked() -> bytes:  # no Content-Length: the limit applies while reading
            yield b'{"pad": "' + b"x" * 2000 + b'"}'

        streamed = httpx.post(f"{proxy.url}/embeddings", content=chunked())
        small = httpx.post(f"{proxy.url}/chat/completions", json=CHAT)
    assert_openai_error(declared, 413, "payload_too_large")
    assert_openai_error(streamed, 413, "payload_too_large")
    assert small.status_code == 200
    assert fake.fake.requests[-1].json() == CHAT


def test_unknown_path_outside_v1_is_404(proxy: ProxyServer) -> None:
    assert_openai_error(httpx.get(f"http://{proxy.host}:{proxy.port}/nope"), 404, "not_found")


def test_other_methods_on_chat_path_are_forwarded(proxy: ProxyServer, fake: FakeServer) -> None:
    response = httpx.get(f"{proxy.url}/chat/completions?limit=2")
    assert response.status_code == 200  # the upstream decides, as for any other /v1 path
    assert (fake.fake.requests[0].method, fake.fake.requests[0].query) == ("GET", "limit=2")


def test_upstream_error_body_passes_through_unchanged(proxy: ProxyServer) -> None:
    direct_body = {
        "error": {
            "message": "fake upstream error 400",
            "type": "invalid_request_error",
            "param": None,
            "code": "fake_400",
        }
    }
    response = httpx.post(
        f"{proxy.url}/chat/completions", json=CHAT, headers={"X-Fake-Status": "400"}
    )
    assert response.status_code == 400
    assert response.json() == direct_body
