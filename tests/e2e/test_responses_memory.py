"""``POST /v1/responses`` end to end with the official ``openai`` SDK over real sockets.

Through memproxy, ``responses.create`` (whole and streamed) and ``responses.stream`` return what
they return directly from the fake upstream; the upstream receives the user's memories in front
of the latest user input (position ``turn``, the default), or after the app's own instructions
(position ``system``). There the one difference a client can see is the one the Responses API
itself makes: the response object echoes the ``instructions`` it ran with, the block included.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import orjson
import pytest

from proxy.context.position import SEPARATOR
from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from tests.e2e.conftest import API_KEY, MemoryProxy
from tests.e2e.test_cache_and_capture import wait_for

MODEL = "gpt-4o-mini"
APP_INSTRUCTIONS = "You are terse."
QUESTION = "What is my dog called?"
FACTS = ["The user's dog is called Biscuit and is a beagle.", "The user lives in Lisbon."]
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}


def sdk(base_url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=API_KEY, max_retries=0)


def forwarded(proxy: MemoryProxy) -> dict[str, Any]:
    body: dict[str, Any] = proxy.fake.fake.requests[-1].json()
    return body


def without_instructions(value: Any) -> Any:
    """A dumped response or event with every echoed ``instructions`` left out."""
    if isinstance(value, dict):
        return {k: without_instructions(v) for k, v in value.items() if k != "instructions"}
    if isinstance(value, list):
        return [without_instructions(v) for v in value]
    return value


def assert_memories_before(text: str, question: str = QUESTION) -> None:
    """``text`` is the block, a blank line, then the user's own ``question`` (position turn)."""
    block, _, own = text.partition(SEPARATOR)
    assert own == question
    assert block.startswith(BLOCK_OPEN)
    assert block.endswith(BLOCK_CLOSE)
    assert "Biscuit" in block or "Lisbon" in block


def assert_memories_after_app_instructions(instructions: str) -> None:
    own, _, block = instructions.partition(SEPARATOR)
    assert own == APP_INSTRUCTIONS
    assert block.startswith(BLOCK_OPEN)
    assert block.endswith(BLOCK_CLOSE)
    assert "Biscuit" in block


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_create_returns_what_the_upstream_returns_with_memories_sent(
    memproxy: MemoryProxy, stream: bool
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    ask = {"model": MODEL, "instructions": APP_INSTRUCTIONS, "input": QUESTION, "stream": stream}
    through = sdk(memproxy.url).responses.with_raw_response.create(**ask)
    sent = forwarded(memproxy)
    assert sent["instructions"] == APP_INSTRUCTIONS  # the prompt's start stays the app's
    assert_memories_before(sent["input"])  # a string input stays a string
    assert through.headers["x-memory-status"] == "injected"
    assert int(through.headers["x-memory-injected"]) >= 1
    direct = sdk(memproxy.fake.url).responses.create(**ask)
    if stream:
        events = [e.model_dump() for e in through.parse()]  # type: ignore[attr-defined]
        expected = [e.model_dump() for e in direct]  # type: ignore[attr-defined]
        assert [e["sequence_number"] for e in events] == list(range(len(expected)))
        last = events[-1]["response"]
    else:
        events = [through.parse().model_dump()]
        expected = [direct.model_dump()]  # type: ignore[union-attr]
        last = events[0]
    assert without_instructions(events) == without_instructions(expected)
    assert last["instructions"] == sent["instructions"]  # echoed, as the API does


def test_stream_helper_returns_what_the_upstream_returns(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    ask: dict[str, Any] = {
        "model": MODEL,
        "instructions": APP_INSTRUCTIONS,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}],
        "tools": [WEATHER],
    }
    finals = []
    kinds = []
    for base_url in (memproxy.url, memproxy.fake.url):
        with sdk(base_url).responses.stream(**ask) as stream:
            kinds.append([event.type for event in stream])
            finals.append(stream.get_final_response().model_dump())
        if base_url == memproxy.url:
            sent = forwarded(memproxy)
            assert sent["instructions"] == APP_INSTRUCTIONS
            [block, own] = sent["input"][0]["content"]
            assert block["type"] == "input_text"
            assert block["text"].startswith(BLOCK_OPEN)
            assert own == {"type": "input_text", "text": QUESTION}
    assert kinds[0] == kinds[1]
    assert "response.function_call_arguments.done" in kinds[0]
    assert without_instructions(finals[0]) == without_instructions(finals[1])
    assert finals[0]["output"][0]["name"] == "get_weather"


def test_stream_bytes_relayed_as_the_upstream_sent_them(memproxy: MemoryProxy) -> None:
    """Event for event, byte for byte, compressed as sent: replaying the body memproxy
    forwarded straight to the upstream gives the same bytes."""
    memproxy.backends.write(memproxy.tenant, FACTS)
    body = {"model": MODEL, "input": QUESTION, "stream": True}
    headers = {"Authorization": f"Bearer {API_KEY}", "Accept-Encoding": "gzip"}

    def raw(url: str, content: bytes) -> tuple[bytes, str | None]:
        with httpx.stream("POST", url, content=content, headers=headers) as response:
            return b"".join(response.iter_raw()), response.headers.get("content-encoding")

    through = raw(memproxy.url + "/responses", orjson.dumps(body))
    replayed = memproxy.fake.fake.requests[-1].body
    assert BLOCK_OPEN.encode() in replayed
    assert through == raw(memproxy.fake.url + "/responses", replayed)
    assert through[1] == "gzip"


def test_function_call_round_trip_keeps_items_and_finds_memories(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    items: list[Any] = [
        {"role": "user", "content": "What is the weather where I live?"},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": '{"city": "Lisbon"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": '{"temp_c": 21}'},
    ]
    answer = sdk(memproxy.url).responses.create(model=MODEL, input=items, tools=[WEATHER])
    sent = forwarded(memproxy)
    assert sent["input"][1:] == items[1:]  # the call and its output untouched
    assert_memories_before(sent["input"][0]["content"], items[0]["content"])
    assert "Lisbon" in sent["input"][0]["content"]
    assert "instructions" not in sent
    assert answer.output[0].type == "function_call"


def test_position_system_puts_the_block_after_the_apps_instructions(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    ask = {"model": MODEL, "instructions": APP_INSTRUCTIONS, "input": QUESTION}
    through = sdk(memproxy.url).responses.with_raw_response.create(
        **ask, extra_headers={"X-Memory-Position": "system"}
    )
    sent = forwarded(memproxy)
    assert_memories_after_app_instructions(sent["instructions"])
    assert sent["input"] == QUESTION
    assert through.headers["x-memory-status"] == "injected"
    assert through.parse().instructions == sent["instructions"]  # echoed, as the API does


def explain(proxy: MemoryProxy, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(
        proxy.url + "/responses",
        json=body,
        headers={"Authorization": f"Bearer {API_KEY}", "X-Memory-Mode": "explain"},
    )
    assert response.status_code == 200
    assert response.headers["x-memory-status"] in ("injected", "empty")
    document: dict[str, Any] = response.json()
    return document


def test_explain_shows_instructions_and_input_without_calling_upstream(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    before = len(memproxy.fake.fake.requests)
    body = {"model": MODEL, "instructions": APP_INSTRUCTIONS, "input": QUESTION}
    document = explain(memproxy, body)
    assert len(memproxy.fake.fake.requests) == before
    assert document["object"] == "memory.explain"
    assert document["instructions"] == APP_INSTRUCTIONS
    assert_memories_before(document["input"])
    assert document["placement"]["position"] == "turn"
    assert document["placement"]["message"] == 0  # the input's first (and only) item
    assert "messages" not in document
    assert any("Biscuit" in m["content"] for m in document["memories"])
    assert "notes" not in document


def test_explain_holds_room_back_for_a_previous_response(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    body = {"model": MODEL, "input": QUESTION, "max_output_tokens": 1000}
    alone = explain(memproxy, body)["budget"]
    continued = explain(memproxy, {**body, "previous_response_id": "resp_1"})
    held = continued["budget"]
    window = held["context_window"]
    assert held["available_tokens"] == alone["available_tokens"] - window // 2
    assert any("previous_response_id" in note for note in continued["notes"])


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_capture_stores_the_users_input_and_the_answer(memproxy: MemoryProxy, stream: bool) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    client = sdk(memproxy.url)
    said = "My cat is called Miso. What is my dog called?"
    items: list[Any] = [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Hi!"}]},
        {"role": "user", "content": [{"type": "input_text", "text": said}]},
    ]
    headers = {"X-Memory-Capture": "turn", "X-Memory-Session": "s-7"}
    if stream:
        with client.responses.stream(model=MODEL, input=items, extra_headers=headers) as events:
            answer = events.get_final_response().output_text
    else:
        answer = client.responses.create(model=MODEL, input=items, extra_headers=headers)
        answer = answer.output_text
    assert answer

    def captured() -> list[Any]:
        return [r for r in memproxy.backends.list(memproxy.tenant) if r.source == "conversation"]

    wait_for(lambda: len(captured()) == 2)
    by_role = {r.metadata["role"]: r.content for r in captured()}
    assert by_role == {"user": said, "assistant": answer}
    assert {r.metadata["session"] for r in captured()} == {"s-7"}


def test_bad_memory_header_is_a_400_in_openais_shape(memproxy: MemoryProxy) -> None:
    before = len(memproxy.fake.fake.requests)
    with pytest.raises(openai.BadRequestError) as raised:
        sdk(memproxy.url).responses.create(
            model=MODEL, input=QUESTION, extra_headers={"X-Memory-Max-Tokens": "lots"}
        )
    error = raised.value.body
    assert isinstance(error, dict)
    assert error["param"] == "x-memory-max-tokens"
    assert error["code"] == "invalid_memory_header"
    assert len(memproxy.fake.fake.requests) == before


def test_upstream_error_relayed_with_memory_headers(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    with pytest.raises(openai.RateLimitError) as raised:
        sdk(memproxy.url).responses.create(
            model=MODEL, input=QUESTION, extra_headers={"X-Fake-Status": "429"}
        )
    assert raised.value.response.headers["x-memory-status"] == "injected"
    assert raised.value.code == "fake_429"


def test_memory_off_forwards_the_clients_bytes(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    content = b'{"model": "gpt-4o-mini",  "input": "What is my dog called?"}'
    response = httpx.post(
        memproxy.url + "/responses",
        content=content,
        headers={"Authorization": f"Bearer {API_KEY}", "X-Memory-Mode": "off"},
    )
    assert response.status_code == 200
    assert response.headers["x-memory-status"] == "off"
    assert memproxy.fake.fake.requests[-1].body == content
