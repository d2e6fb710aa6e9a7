"""The official anthropic SDK through memproxy (memory off) over a real socket: Anthropic's
Messages API forwarded to ``upstream.anthropic.url``, answers exactly as the upstream's."""

from __future__ import annotations

import gzip
from pathlib import Path

import anthropic
import httpx
import pytest

from proxy.app import create_app
from proxy.settings import AnthropicSettings, LimitsSettings, load_settings, replace
from tests.conftest import proxy_settings
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer

KEY = "sk-ant-test-passthrough"
MODEL = "claude-sonnet-4-5"
MESSAGES: list[anthropic.types.MessageParam] = [{"role": "user", "content": "hi"}]
TOOLS: list[anthropic.types.ToolParam] = [
    {
        "name": "get_weather",
        "description": "The weather in a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


# The SDK warns about model names it deprecates; not what is tested.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def client(base_url: str, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=base_url, api_key=KEY, max_retries=0, default_headers=headers or None
    )


def test_create_returns_what_the_upstream_returns(proxy: ProxyServer, fake: FakeServer) -> None:
    direct = client(fake.root).messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    proxied = client(proxy.root).messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    assert proxied.model_dump() == direct.model_dump()
    assert proxied.content[0].type == "text"
    assert proxied.content[0].text == "Hello from the fake upstream"
    received = fake.fake.requests[-1]
    assert received.path == "/v1/messages"
    assert received.json()["messages"] == MESSAGES


def test_stream_helper_returns_what_the_upstream_returns(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    answers = []
    for base in (fake.root, proxy.root):
        with client(base).messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as s:
            texts = list(s.text_stream)
            answers.append((texts, s.get_final_message().model_dump()))
    assert answers[1] == answers[0]
    assert "".join(answers[1][0]) == "Hello from the fake upstream"


async def test_async_stream_events_are_relayed_event_for_event(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    kinds = []
    for base in (fake.root, proxy.root):
        async with anthropic.AsyncAnthropic(base_url=base, api_key=KEY, max_retries=0) as ac:
            stream = await ac.messages.create(
                model=MODEL, max_tokens=64, messages=MESSAGES, stream=True
            )
            kinds.append([event.type async for event in stream])
    assert kinds[1] == kinds[0]
    assert kinds[1][0] == "message_start"
    assert kinds[1][-1] == "message_stop"


@pytest.mark.parametrize("stream", [False, True])
def test_tool_use(proxy: ProxyServer, fake: FakeServer, stream: bool) -> None:
    sdk = client(proxy.root)
    if stream:
        with sdk.messages.stream(
            model=MODEL, max_tokens=64, messages=MESSAGES, tools=TOOLS
        ) as events:
            message = events.get_final_message()
    else:
        message = sdk.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES, tools=TOOLS)
    assert message.stop_reason == "tool_use"
    block = message.content[0]
    assert block.type == "tool_use"
    assert (block.name, block.input) == ("get_weather", {"city": "Paris"})
    assert fake.fake.requests[-1].json()["tools"] == TOOLS


@pytest.mark.parametrize("encoding", ["gzip", "identity"])
def test_streamed_bytes_are_unchanged(proxy: ProxyServer, fake: FakeServer, encoding: str) -> None:
    body = {"model": MODEL, "max_tokens": 64, "messages": MESSAGES, "stream": True}
    headers = {"Accept-Encoding": encoding, "anthropic-version": "2023-06-01"}
    answers = []
    for base in (fake.url, proxy.url):
        with httpx.stream("POST", f"{base}/messages", json=body, headers=headers) as answer:
            answers.append((b"".join(answer.iter_raw()), answer.headers))
    (direct, direct_headers), (proxied, proxied_headers) = answers
    assert proxied == direct  # as sent on the wire: compressed when the upstream compressed
    assert proxied_headers.get("content-encoding") == direct_headers.get("content-encoding")
    assert proxied_headers["request-id"] == direct_headers["request-id"]
    text = gzip.decompress(proxied) if encoding == "gzip" else proxied
    assert text.startswith(b"event: message_start\ndata: ")
    assert text.endswith(b'event: message_stop\ndata: {"type":"message_stop"}\n\n')


def test_credentials_and_anthropic_headers_go_upstream(
    proxy: ProxyServer, fake: FakeServer
) -> None:
    beta = "prompt-caching-2024-07-31,context-1m-2025-08-07"
    sdk = anthropic.Anthropic(
        base_url=proxy.root,
        api_key=None,
        max_retries=0,
        default_headers={"x-api-key": KEY, "anthropic-beta": beta},
    )
    sdk.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    received = fake.fake.requests[-1].headers
    assert received["x-api-key"] == KEY
    assert received["anthropic-beta"] == beta
    assert received["anthropic-version"]  # the SDK's, as sent


def test_count_tokens_is_forwarded(proxy: ProxyServer, fake: FakeServer) -> None:
    direct = client(fake.root).messages.count_tokens(model=MODEL, messages=MESSAGES)
    proxied = client(proxy.root).messages.count_tokens(model=MODEL, messages=MESSAGES)
    assert proxied.input_tokens == direct.input_tokens > 0
    received = fake.fake.requests[-1]
    assert received.path == "/v1/messages/count_tokens"
    assert received.json()["messages"] == MESSAGES


@pytest.mark.parametrize(
    ("status", "error", "kind"),
    [
        (401, anthropic.AuthenticationError, "authentication_error"),
        (429, anthropic.RateLimitError, "rate_limit_error"),
        (529, anthropic.OverloadedError, "overloaded_error"),
    ],
)
def test_upstream_errors_pass_through(
    proxy: ProxyServer, status: int, error: type[anthropic.APIStatusError], kind: str
) -> None:
    sdk = client(proxy.root, **{"X-Fake-Status": str(status), "X-Fake-Retry-After": "7"})
    with pytest.raises(error) as caught:
        sdk.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
    assert caught.value.status_code == status
    assert caught.value.response.headers["retry-after"] == "7"
    assert caught.value.body == {
        "type": "error",
        "error": {"type": kind, "message": f"fake upstream error {status}"},
    }


def test_an_error_event_mid_stream_reaches_the_sdk(proxy: ProxyServer) -> None:
    sdk = client(proxy.root, **{"X-Fake-Stream-Error": "overloaded_error"})
    received = []
    with (
        pytest.raises(anthropic.APIStatusError) as caught,
        sdk.messages.stream(model=MODEL, max_tokens=64, messages=MESSAGES) as stream,
    ):
        received.extend(stream.text_stream)
    assert "overloaded_error" in str(caught.value)
    assert received == ["Hello "]


def test_memproxys_own_errors_are_in_anthropics_shape(proxy: ProxyServer) -> None:
    bad = httpx.post(f"{proxy.url}/messages", content=b"{not json", headers={"x-api-key": KEY})
    assert bad.status_code == 400
    body = bad.json()
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert set(body["error"]) == {"type", "message"}
    unknown = httpx.get(f"{proxy.url}/messages/batches/nope/results", headers={"x-api-key": KEY})
    assert unknown.status_code == 200  # forwarded to Anthropic's upstream (the fake echoes)
    assert unknown.json()["path"] == "/v1/messages/batches/nope/results"


def test_too_large_and_unreachable_in_anthropics_shape(fake: FakeServer) -> None:
    base = proxy_settings(fake.url)
    small = replace(base, limits=LimitsSettings(max_body_bytes=1024))
    too_long: list[anthropic.types.MessageParam] = [{"role": "user", "content": "x" * 4096}]
    with (
        ProxyServer(create_app(small)) as proxy,
        pytest.raises(anthropic.APIStatusError) as caught,
    ):
        client(proxy.root).messages.create(model=MODEL, max_tokens=64, messages=too_long)
    assert caught.value.status_code == 413
    assert caught.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    gone = f"http://127.0.0.1:{closed_port()}"
    upstream = replace(base.upstream, anthropic=AnthropicSettings(url=gone))
    with ProxyServer(create_app(replace(base, upstream=upstream))) as proxy:
        with pytest.raises(anthropic.APIStatusError) as caught:
            client(proxy.root).messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
        assert caught.value.status_code == 502
        assert caught.value.body["error"]["type"] == "api_error"  # type: ignore[index]
        with pytest.raises(anthropic.APIStatusError) as caught:
            client(proxy.root).messages.count_tokens(model=MODEL, messages=MESSAGES)
        assert caught.value.status_code == 502  # count_tokens goes to Anthropic's upstream too
        assert caught.value.body["type"] == "error"  # type: ignore[index]
        # The OpenAI-compatible upstream is another one: chat still reaches the fake.
        assert httpx.get(f"{proxy.url}/models").status_code == 200


def closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_keys_mode_sends_the_operators_anthropic_key_as_x_api_key(
    fake: FakeServer, tmp_path: Path
) -> None:
    config = tmp_path / "memproxy.yaml"
    config.write_text(
        f"upstream:\n  url: {fake.url}\n  api_key: env:OPENAI_KEY\n"
        f"  anthropic:\n    url: {fake.root}\n    api_key: env:ANTHROPIC_KEY\n"
        "memory:\n  enabled: false\n"
        "auth:\n  mode: keys\n  tenants:\n    acme: {keys: [env:ACME_KEY]}\n"
    )
    env = {"OPENAI_KEY": "sk-op", "ANTHROPIC_KEY": "sk-ant-op", "ACME_KEY": "mp-acme"}
    with ProxyServer(create_app(load_settings(config, env=env))) as proxy:
        sdk = anthropic.Anthropic(base_url=proxy.root, api_key="mp-acme", max_retries=0)
        sdk.messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
        sdk.messages.count_tokens(model=MODEL, messages=MESSAGES)
        for received in fake.fake.requests:
            assert received.headers["x-api-key"] == "sk-ant-op"
            assert "authorization" not in received.headers  # the memproxy key stays here
        with pytest.raises(anthropic.AuthenticationError) as caught:
            client(proxy.root).messages.create(model=MODEL, max_tokens=64, messages=MESSAGES)
        assert caught.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
