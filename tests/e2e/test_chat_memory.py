"""End to end with the official ``openai`` SDK: memories reach the upstream's prompt (the
latest user turn by default, the system prompt with position ``system``)."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from proxy.defaults import SOURCES
from proxy.tokenizer import count_tokens, encoding_name_for_model
from tests.e2e.conftest import API_KEY, MemoryProxy

MODEL = "gpt-4o-mini"
FACTS = [
    "The user's dog is called Biscuit and is a beagle.",
    "The user lives in Lisbon and works as a marine biologist.",
    "The user is allergic to peanuts.",
    "The user prefers answers in metric units.",
]


def client(proxy: MemoryProxy) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key=API_KEY, max_retries=0)


def prompt_of(proxy: MemoryProxy, role: str) -> str:
    """The one message of ``role`` the upstream got last (its text)."""
    sent = proxy.fake.fake.requests[-1].json()
    found = [m for m in sent["messages"] if m["role"] == role]
    assert len(found) == 1
    content: str = found[0]["content"]
    return content


def block_of(prompt: str) -> str:
    start, end = prompt.index(BLOCK_OPEN), prompt.index(BLOCK_CLOSE) + len(BLOCK_CLOSE)
    return prompt[start:end]


@pytest.mark.parametrize("position", ["turn", "system"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_upstream_gets_the_block_in_its_position_within_budget(
    memproxy: MemoryProxy, stream: bool, position: str
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is my dog called?"},
    ]
    raw = client(memproxy).chat.completions.with_raw_response.create(
        model=MODEL,
        messages=messages,  # type: ignore[arg-type]
        stream=stream,
        extra_headers={"X-Memory-Max-Tokens": "200", "X-Memory-Position": position},
    )
    if stream:
        chunks = list(raw.parse())  # type: ignore[call-overload]
        assert chunks
    else:
        assert raw.parse().choices[0].message.content  # type: ignore[union-attr]
    headers = raw.headers
    assert headers["x-memory-status"] == "injected"
    if position == "system":
        prompt = prompt_of(memproxy, "system")
        assert prompt.startswith("You are terse.\n\n")  # the app's own prompt stays first
    else:
        assert prompt_of(memproxy, "system") == "You are terse."  # the app's, as sent
        prompt = prompt_of(memproxy, "user")
        assert prompt.endswith("</memories>\n\nWhat is my dog called?")  # the question last
    block = block_of(prompt)
    assert "Biscuit" in block
    tokens = count_tokens(block, encoding_name_for_model(MODEL))
    assert tokens == int(headers["x-memory-tokens"]) <= int(headers["x-memory-budget"]) == 200
    labels = {f"[{source}]" for source in SOURCES}  # one line above each source's memories
    memory_lines = [line for line in block.split("\n")[2:-1] if line not in labels]
    assert int(headers["x-memory-injected"]) == len(memory_lines)
    assert "embed;dur=" in headers["server-timing"]
    assert "search;dur=" in headers["server-timing"]
    assert float(headers["x-memory-overhead-ms"]) > 0


def test_mode_off_and_no_memories(memproxy: MemoryProxy) -> None:
    c = client(memproxy)
    body = {"role": "user", "content": "hello"}
    raw = c.chat.completions.with_raw_response.create(model=MODEL, messages=[body])  # type: ignore[list-item]
    assert raw.headers["x-memory-status"] == "empty"
    assert memproxy.fake.fake.requests[-1].json()["messages"] == [body]
    memproxy.backends.write(memproxy.tenant, FACTS)
    raw = c.chat.completions.with_raw_response.create(
        model=MODEL,
        messages=[body],  # type: ignore[list-item]
        extra_headers={"X-Memory-Mode": "off"},
    )
    assert raw.headers["x-memory-status"] == "off"
    assert memproxy.fake.fake.requests[-1].json()["messages"] == [body]


def test_explain_returns_the_documented_shape_without_an_upstream_call(
    memproxy: MemoryProxy,
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    before = len(memproxy.fake.fake.requests)
    response = httpx.post(
        f"{memproxy.url}/chat/completions",
        headers={"Authorization": f"Bearer {API_KEY}", "X-Memory-Mode": "explain"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "Where do I live?"}]},
    )
    assert response.status_code == 200
    assert len(memproxy.fake.fake.requests) == before
    doc = response.json()
    assert set(doc) == {
        "object",
        "model",
        "budget",
        "candidates",
        "memories",
        "block",
        "messages",
        "placement",
        "dropped",
    }
    assert doc["object"] == "memory.explain"
    assert doc["model"] == MODEL
    assert doc["budget"]["memory_tokens"] == int(response.headers["x-memory-budget"])
    assert {"context_window", "messages_tokens", "response_reserve", "safety_buffer"} <= set(
        doc["budget"]
    )
    assert doc["candidates"] == len(FACTS)
    assert doc["memories"]
    for memory in doc["memories"]:
        assert set(memory) == {"id", "source", "content", "tokens", "metadata", "score"}
        assert set(memory["score"]) == {
            "composite",
            "relevance",
            "recency",
            "usefulness",
            "confidence",
            "frequency",
        }
    assert any("Lisbon" in m["content"] for m in doc["memories"])
    # Position turn: the block in front of the question, in the user's own message.
    assert doc["messages"] == [{"role": "user", "content": doc["block"] + "\n\nWhere do I live?"}]
    assert doc["placement"]["position"] == "turn"
    assert doc["placement"]["message"] == 0


@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Memory-Mode", "loud"),
        ("X-Memory-Max-Tokens", "-5"),
        ("X-Memory-Max-Tokens", "lots"),
        ("X-Memory-Top-K", "0"),
        ("X-Memory-Sources", "learnings,secrets"),
        ("X-Memory-Capture", "everything"),
    ],
)
def test_bad_header_values_are_400_in_openai_shape(
    memproxy: MemoryProxy, header: str, value: str
) -> None:
    with pytest.raises(openai.BadRequestError) as caught:
        client(memproxy).chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={header: value},
        )
    error = caught.value.body
    assert isinstance(error, dict)
    assert error["param"] == header.lower()
    assert error["type"] == "invalid_request_error"
    assert not memproxy.fake.fake.requests


def test_headers_cannot_exceed_the_tenants_limits(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, [f"fact number {i} about lisbon" for i in range(80)])
    cap = memproxy.settings.memory
    response = httpx.post(
        f"{memproxy.url}/chat/completions",
        headers={
            "Authorization": f"Bearer {API_KEY}",
            "X-Memory-Mode": "explain",
            "X-Memory-Max-Tokens": "1000000",
            "X-Memory-Top-K": "100000",
        },
        # No word of the question is in a memory: the lexical branch finds nothing, so the
        # candidates are the search's top_k alone (its extras beyond top_k: adr/0136).
        json={"model": MODEL, "messages": [{"role": "user", "content": "portugal?"}]},
    )
    doc = response.json()
    assert doc["budget"]["memory_tokens"] == cap.max_tokens
    assert doc["candidates"] == min(cap.top_k, 80)
    lowered = httpx.post(
        f"{memproxy.url}/chat/completions",
        headers={
            "Authorization": f"Bearer {API_KEY}",
            "X-Memory-Mode": "explain",
            "X-Memory-Max-Tokens": "60",
            "X-Memory-Top-K": "3",
            "X-Memory-Sources": "playbook",
        },
        json={"model": MODEL, "messages": [{"role": "user", "content": "lisbon facts"}]},
    ).json()
    assert lowered["budget"]["memory_tokens"] == 60
    assert lowered["candidates"] == 0  # every memory is a learning


def test_full_window_gets_no_memories(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    huge = "word " * 9_000  # over gpt-4's 8k window
    raw = client(memproxy).chat.completions.with_raw_response.create(
        model="gpt-4", messages=[{"role": "user", "content": huge + "dog?"}]
    )
    assert raw.headers["x-memory-status"] == "empty"
    assert raw.headers["x-memory-budget"] == "0"
    assert BLOCK_OPEN not in str(memproxy.fake.fake.requests[-1].json())


def test_other_tenants_memories_never_injected(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    other = openai.OpenAI(base_url=memproxy.url, api_key="sk-someone-else", max_retries=0)
    raw = other.chat.completions.with_raw_response.create(
        model=MODEL, messages=[{"role": "user", "content": "What is my dog called?"}]
    )
    assert raw.headers["x-memory-status"] == "empty"
    assert "Biscuit" not in str(memproxy.fake.fake.requests[-1].json())


def test_adaptive_budget_by_default_and_fill_by_header(memproxy: MemoryProxy) -> None:
    """The default budget injects what pays for its tokens and says why the rest is left out;
    ``X-Memory-Budget-Rule: fill`` packs the budget as before (adr/0110)."""
    memproxy.backends.write(memproxy.tenant, FACTS)

    def explain(*extra: tuple[str, str]) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {API_KEY}", "X-Memory-Mode": "explain", **dict(extra)}
        body = {"model": MODEL, "messages": [{"role": "user", "content": "What is my dog called?"}]}
        response = httpx.post(f"{memproxy.url}/chat/completions", headers=headers, json=body)
        assert response.status_code == 200
        document: dict[str, Any] = response.json()
        return document

    adaptive = explain()
    injected = [m["content"] for m in adaptive["memories"]]
    assert injected[0] == FACTS[0]
    assert len(injected) < len(FACTS)
    reasons = {entry["id"]: entry["reason"] for entry in adaptive["dropped"]}
    assert len(reasons) == len(FACTS) - len(injected)
    assert set(reasons.values()) == {"floor"}
    filled = explain(("X-Memory-Budget-Rule", "fill"))
    assert len(filled["memories"]) == len(FACTS)
    assert filled["dropped"] == []
