"""``POST /v1/responses`` as a route (memory off here; with memory: tests/e2e): the official SDK
over a real socket, our own errors in the Responses API's shapes, the rest of
``/v1/responses/*`` forwarded as is."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

MODEL = "gpt-4o"


def client(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key="sk-test", max_retries=0)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_sdk_gets_what_the_upstream_sends(
    proxy: ProxyServer, fake: FakeServer, stream: bool
) -> None:
    ask = {"model": MODEL, "instructions": "Be brief.", "input": "hi", "stream": stream}
    through = client(proxy.url).responses.create(**ask)  # type: ignore[call-overload]
    direct = client(fake.url).responses.create(**ask)  # type: ignore[call-overload]
    if stream:
        assert [e.model_dump() for e in through] == [e.model_dump() for e in direct]
    else:
        assert through.model_dump() == direct.model_dump()
    assert fake.fake.requests[-1].path == "/v1/responses"


def test_midstream_failure_is_the_responses_error_event(proxy: ProxyServer) -> None:
    headers = {"X-Fake-Reset-After": "2", "Accept-Encoding": "identity"}
    stream = client(proxy.url).responses.create(
        model=MODEL, input="hi", stream=True, extra_headers=headers
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        received.extend(stream)
    assert "upstream" in caught.value.message.lower()
    assert [e.type for e in received] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
    ]
    body = {"model": MODEL, "input": "hi", "stream": True}
    chunks: list[bytes] = []
    opened = httpx.stream("POST", f"{proxy.url}/responses", json=body, headers=headers)
    # No terminating chunk: no client can take the stream for a clean finish.
    with opened as response, pytest.raises(httpx.RemoteProtocolError):
        chunks.extend(response.iter_raw())
    raw = b"".join(chunks)
    assert b'\n\nevent: error\ndata: {"type":"error","error":{' in raw


def test_bad_json_is_a_400_in_openais_shape(proxy: ProxyServer, fake: FakeServer) -> None:
    response = httpx.post(f"{proxy.url}/responses", content=b"{not json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_json"
    assert not fake.fake.requests


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/responses/resp_1"),
        ("DELETE", "/responses/resp_1"),
        ("POST", "/responses/resp_1/cancel"),
        ("GET", "/responses/resp_1/input_items"),
        ("POST", "/responses/input_tokens"),
    ],
)
def test_the_rest_of_responses_is_forwarded_as_is(
    proxy: ProxyServer, fake: FakeServer, method: str, path: str
) -> None:
    response = httpx.request(method, proxy.url + path, content=b"{}" if method == "POST" else None)
    assert response.status_code == 200
    assert response.json()["path"] == "/v1" + path
    assert "x-memory-status" not in response.headers
