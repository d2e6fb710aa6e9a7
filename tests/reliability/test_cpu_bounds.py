"""CPU work on the request path stays bounded: no large or pathological body holds the loop.

Found here: counting the tokens of one 16 MB message of a single character ran on the event loop
for 8-12 s (tiktoken's BPE is superlinear on one long pre-token), and ``/healthz`` on another
connection waited as long; hashing the messages for the count cache (~7 ms a MiB) ran there too;
and cutting memory fences out of the retrieval query rebuilt the text once per fence, so a
message of 100,000 fences never finished.

Speed is measured by ``bench/healthz_under_load.py``; here the structure is checked: every
tokenizer call on more than ``COUNT_ON_LOOP_BYTES`` of text, and every message hashed beyond
``KEYS_ON_LOOP_BYTES``, runs off the event loop's thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest
import tiktoken.core

import proxy.pipeline.pipeline as pipeline_module
from proxy.app import create_app
from proxy.pipeline.pipeline import COUNT_ON_LOOP_BYTES, KEYS_ON_LOOP_BYTES
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.support import MemoryProxy, memory_settings

AUTH = {"Authorization": "Bearer sk-cpu-bounds"}
Calls = list[tuple[int, bool]]


def on_event_loop() -> bool:
    """Whether the calling thread is running an event loop right now."""
    return asyncio._get_running_loop() is not None


@pytest.fixture(scope="module")
def server(
    fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyServer]:
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("cpu-bounds"))
    with MemoryProxy(create_app(settings)) as proxy:
        stored = httpx.post(f"{proxy.url}/memories", json={"content": "likes tea"}, headers=AUTH)
        assert stored.status_code == 201
        yield proxy


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> tuple[Calls, Calls]:
    """(tokenizer calls, message hashes) as (text size, ran on the event loop's thread)."""
    encoded: Calls = []
    hashed: Calls = []

    def spy(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, text: str, *args: Any, **kwargs: Any) -> Any:
            encoded.append((len(text), on_event_loop()))
            return method(self, text, *args, **kwargs)

        return call

    for name in ("encode_ordinary", "encode"):
        monkeypatch.setattr(
            tiktoken.core.Encoding, name, spy(getattr(tiktoken.core.Encoding, name))
        )
    key = pipeline_module.message_key

    def hashing(message: Any, encoding: str) -> str:
        hashed.append((len(orjson.dumps(message)), on_event_loop()))
        return key(message, encoding)

    monkeypatch.setattr(pipeline_module, "message_key", hashing)
    return encoded, hashed


ONE_CHAR = "a" * 1_000_000
PROSE = "The tea was served hot, with biscuits on the side. " * 6_000  # ~300 KB


@pytest.mark.parametrize(
    ("model", "content"),
    [("gpt-4o", ONE_CHAR), ("gpt-4.1", ONE_CHAR), ("gpt-4o", PROSE), ("gpt-4.1", PROSE)],
    ids=["one-char-gpt-4o", "one-char-gpt-4.1", "prose-gpt-4o", "prose-gpt-4.1"],
)
@pytest.mark.parametrize("mode", ["inject", "explain"])
def test_large_texts_are_never_counted_on_the_event_loop(
    server: ProxyServer, spied: tuple[Calls, Calls], model: str, content: str, mode: str
) -> None:
    encoded, hashed = spied
    body = {"model": model, "messages": [{"role": "user", "content": content + " tea?"}]}
    response = httpx.post(
        f"{server.url}/chat/completions",
        json=body,
        headers={**AUTH, "X-Memory-Mode": mode},
        timeout=60,
    )
    assert response.status_code == 200, response.text
    on_loop = [size for size, looped in encoded if looped and size > COUNT_ON_LOOP_BYTES]
    assert on_loop == []
    assert [size for size, looped in hashed if looped and size > KEYS_ON_LOOP_BYTES] == []


def test_a_huge_one_char_message_needs_no_tokenizer_at_all(
    server: ProxyServer, spied: tuple[Calls, Calls]
) -> None:
    """16 MB in a 128k window: its byte length already proves there is no room for memories."""
    encoded, _ = spied
    body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "a" * 16_000_000}]}
    response = httpx.post(f"{server.url}/chat/completions", json=body, headers=AUTH, timeout=60)
    assert response.status_code == 200
    assert response.headers["x-memory-status"] == "empty"
    assert response.headers["x-memory-budget"] == "0"
    assert [size for size, _ in encoded if size > COUNT_ON_LOOP_BYTES] == []


def test_a_message_of_many_memory_fences_is_answered(server: ProxyServer) -> None:
    """160,000 fences (~960k tokens) still fit gpt-4.1's window, so they reach the query stage,
    which cut them one by one, copying the rest of the text each time: ~30 s of loop."""
    fences = "<memories></memories>" * 160_000
    body = {"model": "gpt-4.1", "messages": [{"role": "user", "content": fences + "tea?"}]}
    # A liveness bound with a wide margin (the linear cut takes milliseconds), not a speed target.
    response = httpx.post(f"{server.url}/chat/completions", json=body, headers=AUTH, timeout=20)
    assert response.status_code == 200
    assert response.headers["x-memory-status"] == "injected"
