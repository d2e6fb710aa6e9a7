"""End to end with the official ``anthropic`` SDK: memories reach Anthropic's ``system``, the
answers come back exactly as the upstream sent them, explain and capture work, and one key is
one tenant whichever header (and SDK) carries it."""

from __future__ import annotations

from typing import Any

import anthropic
import httpx
import openai
import pytest

from proxy.claude_tokenizer import normalized
from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from proxy.tokenizer import tiktoken_tokenizer
from tests.e2e.conftest import API_KEY, MemoryProxy
from tests.e2e.test_cache_and_capture import wait_for

MODEL = "claude-sonnet-4-5"
FACTS = [
    "The user's dog is called Biscuit and is a beagle.",
    "The user lives in Lisbon and works as a marine biologist.",
]
QUESTION: list[anthropic.types.MessageParam] = [
    {"role": "user", "content": "What is my dog called?"}
]


# The SDK warns about model names it deprecates; not what is tested.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def client(base_url: str, **headers: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(
        base_url=base_url, api_key=API_KEY, max_retries=0, default_headers=headers or None
    )


def sent(proxy: MemoryProxy) -> dict[str, Any]:
    body: dict[str, Any] = proxy.fake.fake.requests[-1].json()
    return body


def block_in(text: str) -> str:
    start, end = text.index(BLOCK_OPEN), text.index(BLOCK_CLOSE) + len(BLOCK_CLOSE)
    return text[start:end]


def test_create_gets_memories_in_the_latest_turn_and_returns_the_upstreams_answer(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    direct = client(memproxy.fake.root).messages.create(
        model=MODEL, max_tokens=256, system="You are terse.", messages=QUESTION
    )
    raw = client(memproxy.server.root).messages.with_raw_response.create(
        model=MODEL,
        max_tokens=256,
        system="You are terse.",
        messages=QUESTION,
        extra_headers={"X-Memory-Max-Tokens": "200"},
    )
    assert raw.parse().model_dump() == direct.model_dump()
    assert raw.headers["x-memory-status"] == "injected"
    assert sent(memproxy)["system"] == "You are terse."  # the prompt's start stays the app's
    [turn] = sent(memproxy)["messages"]
    assert turn["content"].endswith("\n\n" + QUESTION[0]["content"])  # the block in front
    block = block_in(turn["content"])
    assert turn["content"].startswith(block)
    assert "Biscuit" in block
    # Counted in Claude's encoding with its margin, line by line: each line's count rounds up,
    # so the block's figure is at most a token a line above counting it whole (never below).
    tokens = tiktoken_tokenizer().counter("claude")(block)
    reported = int(raw.headers["x-memory-tokens"])
    assert tokens <= reported <= tokens + block.count("\n") + 1
    assert reported <= int(raw.headers["x-memory-budget"]) == 200


def test_stream_helper_gets_memories_and_relays_the_upstreams_events(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    system: list[anthropic.types.TextBlockParam] = [
        {"type": "text", "text": "Long rules.", "cache_control": {"type": "ephemeral"}}
    ]
    results = []
    for base in (memproxy.fake.root, memproxy.server.root):
        with client(base).messages.stream(
            model=MODEL, max_tokens=256, system=system, messages=QUESTION
        ) as stream:
            texts = list(stream.text_stream)
            results.append((texts, stream.get_final_message().model_dump()))
            headers = stream.response.headers
    assert results[1] == results[0]
    assert headers["x-memory-status"] == "injected"
    assert sent(memproxy)["system"] == system  # the cached prompt is byte for byte the app's
    assert "Biscuit" in block_in(sent(memproxy)["messages"][0]["content"])


def test_a_breakpoint_in_the_conversation_keeps_system_and_history_untouched(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    cached = {"type": "text", "text": "Here is my diary.", "cache_control": {"type": "ephemeral"}}
    history: list[Any] = [
        {"role": "user", "content": [cached]},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "What is my dog called?"},
    ]
    client(memproxy.server.root).messages.create(
        model=MODEL, max_tokens=256, system="S.", messages=history
    )
    body = sent(memproxy)
    assert body["system"] == "S."
    assert body["messages"][:2] == history[:2]
    assert "Biscuit" in block_in(body["messages"][2]["content"])  # position turn: the latest
    client(memproxy.server.root).messages.create(
        model=MODEL,
        max_tokens=256,
        system="S.",
        messages=history,
        extra_headers={"X-Memory-Position": "system"},
    )
    # Position system: system would precede the breakpoint, so the block takes the turn's
    # place (adr/0123), not a place deep in the history right after the breakpoint.
    body = sent(memproxy)
    assert body["system"] == "S."
    assert body["messages"][:2] == history[:2]
    assert "Biscuit" in block_in(body["messages"][2]["content"])


def test_explain_shows_system_and_messages_without_calling_the_upstream(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    body = {"model": MODEL, "max_tokens": 256, "system": "S.", "messages": QUESTION}
    reply = httpx.post(
        f"{memproxy.url}/messages",
        json=body,
        headers={"x-api-key": API_KEY, "X-Memory-Mode": "explain"},
    )
    assert reply.status_code == 200
    document = reply.json()
    assert document["object"] == "memory.explain"
    assert document["budget"]["context_window"] == 200_000
    assert document["budget"]["encoding"] == "claude"
    assert document["budget"]["response_reserve"] == 256
    assert document["system"] == "S."
    assert "Biscuit" in block_in(document["messages"][0]["content"])
    assert document["placement"]["message"] == 0
    assert any("Biscuit" in m["content"] for m in document["memories"])
    assert memproxy.fake.fake.requests == type(memproxy.fake.fake.requests)()


def test_a_bad_memory_header_is_an_error_in_anthropics_shape(memproxy: MemoryProxy) -> None:
    with pytest.raises(anthropic.BadRequestError) as caught:
        client(memproxy.server.root, **{"X-Memory-Mode": "sometimes"}).messages.create(
            model=MODEL, max_tokens=64, messages=QUESTION
        )
    body: Any = caught.value.body
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert "x-memory-mode" in body["error"]["message"].lower()
    assert not memproxy.fake.fake.requests


def captured(proxy: MemoryProxy) -> dict[str, Any]:
    records = [r for r in proxy.backends.list(proxy.tenant) if r.source == "conversation"]
    return {r.metadata["role"]: r for r in records}


@pytest.mark.parametrize("stream", [False, True], ids=["create", "stream"])
def test_capture_turn(memproxy: MemoryProxy, stream: bool) -> None:
    said = "My cat is called Miso."
    sdk = client(memproxy.server.root, **{"X-Memory-Capture": "turn", "X-Memory-Session": "s-1"})
    question: list[anthropic.types.MessageParam] = [{"role": "user", "content": said}]
    if stream:
        with sdk.messages.stream(model=MODEL, max_tokens=64, messages=question) as events:
            answer = "".join(events.text_stream)
    else:
        message = sdk.messages.create(model=MODEL, max_tokens=64, messages=question)
        answer = "".join(b.text for b in message.content if b.type == "text")
    wait_for(lambda: len(captured(memproxy)) == 2)
    by_role = captured(memproxy)
    assert by_role["user"].content == said
    assert by_role["assistant"].content == answer == "Hello from the fake upstream"
    assert by_role["user"].metadata["session"] == "s-1"


def test_a_failed_stream_captures_no_answer(memproxy: MemoryProxy) -> None:
    sdk = client(
        memproxy.server.root,
        **{"X-Memory-Capture": "turn", "X-Fake-Stream-Error": "overloaded_error"},
    )
    with (
        pytest.raises(anthropic.APIStatusError),
        sdk.messages.stream(model=MODEL, max_tokens=64, messages=QUESTION) as events,
    ):
        list(events.text_stream)
    # The failed turn stores nothing; a later good one does, so the hook had its chance.
    client(memproxy.server.root, **{"X-Memory-Capture": "user"}).messages.create(
        model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "I like tea."}]
    )
    wait_for(lambda: "user" in captured(memproxy))
    assert [r.content for r in captured(memproxy).values()] == ["I like tea."]


def test_a_memory_written_with_bearer_is_found_with_x_api_key(memproxy: MemoryProxy) -> None:
    chat = openai.OpenAI(base_url=memproxy.url, api_key=API_KEY, max_retries=0)
    chat.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Remember: my cat is called Miso."}],
        extra_headers={"X-Memory-Capture": "user"},
    )
    assert memproxy.fake.fake.requests[-1].headers["authorization"] == f"Bearer {API_KEY}"
    wait_for(lambda: "user" in captured(memproxy))
    # The anthropic SDK with only x-api-key: K, no Authorization header at all.
    sdk = anthropic.Anthropic(
        base_url=memproxy.server.root,
        api_key=None,
        max_retries=0,
        default_headers={"x-api-key": API_KEY},
    )
    raw = sdk.messages.with_raw_response.create(
        model=MODEL,
        max_tokens=64,
        messages=[{"role": "user", "content": "What is my cat called?"}],
    )
    assert raw.headers["x-memory-status"] == "injected"
    received = memproxy.fake.fake.requests[-1]
    assert received.headers["x-api-key"] == API_KEY
    assert "authorization" not in received.headers
    assert "Miso" in block_in(received.json()["messages"][0]["content"])


# Hostile input: text NFKC lengthens (U+FDFA, one 3-byte character, is 33 bytes and 15 tokens
# of the published tokenizer). The real count of what the upstream reads must stay within the
# window and the block within its budget, however few bytes the client sent.
WINDOW = 200_000  # claude-sonnet-4-5's, as the budget knows it (explain test above)
EXPANDING = "\ufdfa"


def raw_tokens(text: str) -> int:
    """The published Claude tokenizer's count of ``text`` (NFKC first), without the margin."""
    encoding = tiktoken_tokenizer().encoding("claude")
    return len(encoding.encode_ordinary(normalized(text)))


def read_tokens(body: dict[str, Any]) -> int:
    """The raw tokens of every text the upstream reads in ``body`` (system and messages)."""
    texts = [body.get("system") or ""]
    for message in body["messages"]:
        content = message["content"]
        parts = [content] if isinstance(content, str) else [read_part(p) for p in content]
        texts.extend(parts)
    return sum(map(raw_tokens, texts))


def read_part(part: dict[str, Any]) -> str:
    """A text block's text, or a plain-text document's."""
    return str(part["source"]["data"] if part["type"] == "document" else part["text"])


def hostile_text(tokens: int) -> str:
    """A text of exactly ``tokens`` raw tokens, nearly all of them from U+FDFA."""
    unit = " " + EXPANDING
    per_unit = raw_tokens(unit * 100) / 100
    text = unit * int((tokens - 100) / per_unit)
    text += " a" * (tokens - raw_tokens(text))  # one token each, never merged with the rest
    assert raw_tokens(text) == tokens
    return text


def test_a_hostile_prompt_near_the_window_gets_no_block_past_it(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    max_tokens = 256
    room = WINDOW - max_tokens - raw_tokens(QUESTION[0]["content"])
    system = hostile_text(room - 10)  # fits as sent: 10 tokens to spare, ~52 KB of UTF-8
    request = {"model": MODEL, "max_tokens": max_tokens, "system": system, "messages": QUESTION}
    assert read_tokens(request) + max_tokens <= WINDOW
    raw = client(memproxy.server.root).messages.with_raw_response.create(**request)
    assert raw.headers["x-memory-status"] in ("injected", "empty")
    assert read_tokens(sent(memproxy)) + max_tokens <= WINDOW


def test_a_hostile_memory_stays_within_the_block_budget(memproxy: MemoryProxy) -> None:
    hostile = "The user's dog is called Biscuit " + EXPANDING * 30  # 123 bytes, 458 tokens
    memproxy.backends.write(memproxy.tenant, [*FACTS, hostile])
    raw = client(memproxy.server.root).messages.with_raw_response.create(
        model=MODEL,
        max_tokens=256,
        messages=QUESTION,
        extra_headers={"X-Memory-Max-Tokens": "200"},
    )
    assert raw.headers["x-memory-status"] == "injected"
    block = block_in(sent(memproxy)["messages"][0]["content"])
    assert "beagle" in block  # the plain memories still fit
    reported = int(raw.headers["x-memory-tokens"])
    assert raw_tokens(block) <= reported <= int(raw.headers["x-memory-budget"]) == 200


def test_a_text_document_near_the_window_gets_no_block_past_it(memproxy: MemoryProxy) -> None:
    # A plain-text document is read as its text, not as a file of a guessed 1,000 tokens.
    memproxy.backends.write(memproxy.tenant, FACTS)
    max_tokens, question = 256, QUESTION[0]["content"]
    data = " a" * (WINDOW - max_tokens - raw_tokens(question) - 10)  # a token each, ~400 KB
    source = {"type": "text", "media_type": "text/plain", "data": data}
    content: list[Any] = [
        {"type": "document", "source": source},
        {"type": "text", "text": question},
    ]
    request = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": content}],
    }
    assert read_tokens(request) + max_tokens <= WINDOW
    raw = client(memproxy.server.root).messages.with_raw_response.create(**request)
    assert raw.headers["x-memory-status"] in ("injected", "empty")
    assert read_tokens(sent(memproxy)) + max_tokens <= WINDOW
