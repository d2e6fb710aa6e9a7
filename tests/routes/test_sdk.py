"""The official openai SDK, sync and async, through memproxy over a real socket."""

from __future__ import annotations

import httpx
import openai
import pytest

from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

KEY = "sk-test-passthrough"
MESSAGES = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def sync_client(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)


def async_client(proxy: ProxyServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)


def test_non_streaming(proxy: ProxyServer, fake: FakeServer) -> None:
    reply = sync_client(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.choices[0].message.content == "Hello from the fake upstream"
    assert reply.usage is not None
    assert reply.usage.total_tokens == 15
    (received,) = fake.fake.requests
    assert received.path == "/v1/chat/completions"
    assert received.json()["messages"] == MESSAGES
    assert received.headers["authorization"] == f"Bearer {KEY}"


def test_streaming(proxy: ProxyServer) -> None:
    stream = sync_client(proxy).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from the fake upstream"
    assert chunks[-1].choices == []
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.total_tokens == 15


async def test_async_streaming(proxy: ProxyServer) -> None:
    client = async_client(proxy)
    stream = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES, stream=True)
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello from the fake upstream"
    await client.close()


async def test_async_non_streaming(proxy: ProxyServer) -> None:
    client = async_client(proxy)
    reply = await client.chat.completions.create(model="gpt-4o", messages=MESSAGES)
    assert reply.choices[0].finish_reason == "stop"
    await client.close()


@pytest.mark.parametrize("stream", [False, True])
def test_tool_calls(proxy: ProxyServer, stream: bool) -> None:
    client = sync_client(proxy)
    if stream:
        chunks = list(
            client.chat.completions.create(
                model="gpt-4o", messages=MESSAGES, tools=TOOLS, stream=True
            )
        )
        calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
        finish = [c.choices[0].finish_reason for c in chunks if c.choices][-1]
        name = calls[0].function.name if calls[0].function else None
    else:
        reply = client.chat.completions.create(model="gpt-4o", messages=MESSAGES, tools=TOOLS)
        tool_calls = reply.choices[0].message.tool_calls
        assert tool_calls is not None
        call = tool_calls[0]
        assert call.type == "function"
        name = call.function.name
        finish = reply.choices[0].finish_reason
    assert name == "get_weather"
    assert finish == "tool_calls"


def test_n_greater_than_one(proxy: ProxyServer) -> None:
    reply = sync_client(proxy).chat.completions.create(model="gpt-4o", messages=MESSAGES, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    stream = sync_client(proxy).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, n=2, stream=True
    )
    texts = {0: "", 1: ""}
    for chunk in stream:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {0: "Hello from the fake upstream", 1: "Hello from the fake upstream"}


def test_models(proxy: ProxyServer, fake: FakeServer) -> None:
    models = sync_client(proxy).models.list()
    assert [m.id for m in models] == ["fake-model", "gpt-4o"]
    assert fake.fake.requests[0].method == "GET"


@pytest.mark.parametrize(
    ("status", "error"),
    [
        (401, openai.AuthenticationError),
        (429, openai.RateLimitError),
        (500, openai.InternalServerError),
    ],
)
def test_upstream_errors_pass_through(
    proxy: ProxyServer, status: int, error: type[openai.APIStatusError]
) -> None:
    headers = {"X-Fake-Status": str(status), "X-Fake-Retry-After": "7"}
    with pytest.raises(error) as caught:
        sync_client(proxy).chat.completions.create(
            model="gpt-4o", messages=MESSAGES, extra_headers=headers
        )
    assert caught.value.status_code == status
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.code == f"fake_{status}"


async def test_async_rate_limit(proxy: ProxyServer) -> None:
    client = async_client(proxy)
    with pytest.raises(openai.RateLimitError) as caught:
        await client.chat.completions.create(
            model="gpt-4o",
            messages=MESSAGES,
            stream=True,
            extra_headers={"X-Fake-Status": "429", "X-Fake-Retry-After": "3"},
        )
    assert caught.value.response.headers["retry-after"] == "3"
    await client.close()


def test_midstream_failure_is_an_error_not_a_clean_finish(proxy: ProxyServer) -> None:
    # Uncompressed, memproxy's error event reaches the SDK, which raises it as an APIError.
    headers = {"X-Fake-Reset-After": "2", "Accept-Encoding": "identity"}
    stream = sync_client(proxy).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, extra_headers=headers
    )
    received = []
    with pytest.raises(openai.APIError) as caught:
        received.extend(stream)
    assert "upstream" in caught.value.message.lower()
    assert len(received) == 3  # role chunk + the two content chunks sent before the reset


def test_midstream_failure_of_a_compressed_stream_is_an_error(proxy: ProxyServer) -> None:
    # Compressed (the SDK's default), no event can be spliced in: the abort is the error.
    stream = sync_client(proxy).chat.completions.create(
        model="gpt-4o", messages=MESSAGES, stream=True, extra_headers={"X-Fake-Reset-After": "2"}
    )
    received = []
    with pytest.raises((openai.APIError, httpx.RemoteProtocolError)):
        received.extend(stream)
    assert len(received) == 3


def test_streamed_bytes_are_unchanged(proxy: ProxyServer, fake: FakeServer) -> None:
    body = {"model": "m", "messages": MESSAGES, "stream": True, "n": 2}
    direct = httpx.post(f"{fake.url}/chat/completions", json=body).content
    proxied = httpx.post(f"{proxy.url}/chat/completions", json=body)
    assert proxied.content == direct
    assert proxied.headers["content-type"] == "text/event-stream"
    assert proxied.headers["cache-control"] == "no-cache"
    assert proxied.headers["x-accel-buffering"] == "no"
    assert proxied.content.endswith(b"data: [DONE]\n\n")
