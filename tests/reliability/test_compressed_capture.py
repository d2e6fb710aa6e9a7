"""Compressed upstream answers: relayed byte for byte, and still captured.

The official openai SDK asks for compressed answers (``Accept-Encoding``) and api.openai.com
sends them; memproxy relays the bytes untouched, and capture used to parse them as plain
JSON/SSE, silently losing the assistant's answer. Here the fake upstream compresses like the
real one, the client is the official SDK, and the stored memories must hold the answer.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from proxy.app import create_app
from tests.fakes.upstream import FakeServer, StackedEncoder, answer_words, stream_events
from tests.reliability.support import MemoryProxy, memory_settings

KEY = "sk-compressed-capture"
CHUNKS = 6
ANSWER = "".join(answer_words(CHUNKS))
# (X-Fake-Encoding, Content-Encoding the client gets); None: the fake's default (gzip).
ENCODINGS = [
    (None, "gzip"),
    ("br", "br"),
    ("zstd", "zstd"),
    ("deflate", "deflate"),
    ("gzip, br", "gzip, br"),
]


@pytest.fixture(scope="module")
def proxy(fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """memproxy with memory on over a real socket; yields its ``/v1`` URL."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("compressed"))
    with MemoryProxy(create_app(settings)) as server:
        yield server.url


def wait_for(check: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "capture did not finish"
        time.sleep(0.05)


def captured(url: str, session: str) -> dict[str, str]:
    """The session's captured memories by role."""
    listed = httpx.get(
        f"{url}/memories", params={"limit": 100}, headers={"Authorization": f"Bearer {KEY}"}
    )
    return {
        m["metadata"]["role"]: m["content"]
        for m in listed.json()["data"]
        if m["metadata"].get("session") == session
    }


def answers(url: str) -> list[str]:
    """Every captured answer of the tenant."""
    listed = httpx.get(
        f"{url}/memories", params={"limit": 100}, headers={"Authorization": f"Bearer {KEY}"}
    )
    return [m["content"] for m in listed.json()["data"] if m["metadata"].get("role") == "assistant"]


@pytest.mark.parametrize(("fake_encoding", "content_encoding"), ENCODINGS)
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_the_sdk_gets_the_answer_and_capture_stores_it(
    proxy: str, fake: FakeServer, stream: bool, fake_encoding: str | None, content_encoding: str
) -> None:
    session = f"s-{stream}-{fake_encoding}"
    headers = {
        "X-Memory-Capture": "turn",
        "X-Memory-Session": session,
        "X-Fake-Chunks": str(CHUNKS),
        **({"X-Fake-Encoding": fake_encoding} if fake_encoding else {}),
    }
    question = f"What did the fake say? ({session})"
    sdk = openai.OpenAI(base_url=proxy, api_key=KEY, max_retries=0)
    messages: Any = [{"role": "user", "content": question}]
    raw = sdk.chat.completions.with_raw_response.create(
        model="gpt-4o", messages=messages, stream=stream, extra_headers=headers
    )
    assert raw.headers["content-encoding"] == content_encoding  # relayed as the upstream sent
    parsed = raw.parse()
    if stream:
        text = "".join(c.choices[0].delta.content or "" for c in parsed if c.choices)
    else:
        text = parsed.choices[0].message.content
    assert text == ANSWER
    # The SDK asked for compression, as it does against api.openai.com.
    assert "gzip" in fake.fake.requests[-1].headers["accept-encoding"]
    # The turn is one write: once the question is in, so is whatever the answer did.
    wait_for(lambda: "user" in captured(proxy, session))
    assert captured(proxy, session)["user"] == question
    # The fake answers the same words every time: the decoded answer is stored once for the
    # tenant (the first turn's), later turns repeat it and write hygiene skips it (adr/0113).
    assert answers(proxy) == [ANSWER]


@pytest.mark.parametrize(("fake_encoding", "content_encoding"), ENCODINGS)
def test_a_compressed_stream_is_relayed_byte_for_byte(
    proxy: str, fake: FakeServer, fake_encoding: str | None, content_encoding: str
) -> None:
    headers = {
        "Authorization": f"Bearer {KEY}",
        "Accept-Encoding": "gzip, deflate, br, zstd",
        "X-Fake-Chunks": str(CHUNKS),
        "X-Memory-Capture": "turn",
        **({"X-Fake-Encoding": fake_encoding} if fake_encoding else {}),
    }
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    with httpx.stream("POST", f"{proxy}/chat/completions", json=body, headers=headers) as reply:
        relayed = b"".join(reply.iter_raw())
        assert reply.headers["content-encoding"] == content_encoding
        assert reply.headers["vary"] == "Accept-Encoding"
    # The fake's events are deterministic, and so is each coder: what the upstream sent.
    coder = StackedEncoder(content_encoding.replace(" ", "").split(","))
    events = stream_events("m", 1, CHUNKS, tools=False, usage=False)
    assert relayed == b"".join(coder.compress(e) for e in events) + coder.finish()


@pytest.mark.parametrize(
    ("accept", "fake_encoding", "expected"),
    [
        ("gzip, deflate", None, "gzip"),
        ("br;q=1.0, gzip;q=0.5", "br", "br"),
        ("gzip;q=0, br", None, None),  # refused explicitly
        ("identity", None, None),
        ("gzip", "zstd", None),  # zstd not accepted: sent plain
        ("*", "zstd", "zstd"),
    ],
)
def test_the_fake_compresses_only_what_the_request_accepts(
    fake: FakeServer, accept: str, fake_encoding: str | None, expected: str | None
) -> None:
    headers = {
        "Accept-Encoding": accept,
        **({"X-Fake-Encoding": fake_encoding} if fake_encoding else {}),
    }
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    with httpx.Client(headers=headers) as client:
        reply = client.post(f"{fake.url}/chat/completions", json=body)
        models = client.get(f"{fake.url}/models")
        error = client.post(
            f"{fake.url}/chat/completions", json=body, headers={"X-Fake-Status": "429"}
        )
    for response in (reply, models, error):
        assert response.headers.get("content-encoding") == expected
        assert response.headers["vary"] == "Accept-Encoding"
        assert response.json()  # httpx decodes what the fake coded
    assert error.status_code == 429
    assert reply.json()["choices"][0]["message"]["content"] == "".join(answer_words(5))
