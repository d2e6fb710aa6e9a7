"""Differential: odd but valid JSON chat bodies with memory off, on, and explain, over sockets.

The rule: memory on never answers differently from memory off except for what memory adds.
The same raw bytes go to memproxy with memory off (a proxy with memory disabled) and memory on
(the same tenant has memories to inject); the statuses must be equal, and the upstream must
receive, apart from the injected block, the body memory off forwards (memory off forwards the
client's bytes as they are). Bodies are compared as parsed by Python's ``json`` (exact
integers), so a number re-encoded into another value would show. Explain always answers 200
with its document, and nothing here may log an ERROR.

Found here: JSON nested 255-1023 levels deep answered 500 with memory on (orjson reads 1024
levels, writes 254); a non-string system ``content`` became Python's repr; malformed ``tools``
or ``tool_calls`` logged an ERROR traceback per request; integers beyond 64 bits came out of
the re-encoding as doubles.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from proxy.app import create_app
from proxy.context.position import SEPARATOR
from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN
from tests.fakes.servers import ProxyServer
from tests.fakes.upstream import FakeServer
from tests.reliability.support import MemoryProxy, memory_settings

KEY = "sk-odd-bodies"
AUTH = {"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"}
MEMORIES = ["The user likes green tea.", "The user's tea is always served hot.", "Tea at 5pm."]
ASK = {"role": "user", "content": "What tea do I like?"}


def chat(**fields: Any) -> bytes:
    """A chat body (gpt-4o, one question about tea) with ``fields`` replacing or adding keys."""
    return orjson.dumps({"model": "gpt-4o", "messages": [ASK], **fields})


DEEP = "@deep@"


def nested(depth: int) -> bytes:
    """``depth`` levels of objects and arrays as JSON text (too deep for orjson to write)."""
    opened = b"".join(b"[" if i % 2 else b'{"k":' for i in range(depth))
    closed = b"".join(b"]" if i % 2 else b"}" for i in reversed(range(depth)))
    return opened + b'"tea"' + closed


def deep(template: bytes, depth: int) -> bytes:
    """``template`` (a body holding the string ``DEEP``) with ``nested(depth)`` in its place."""
    return template.replace(orjson.dumps(DEEP), nested(depth))


def deep_raw(depth: int) -> bytes:
    """A body with ``depth`` levels of arrays in an extra field."""
    return b'{"model":"gpt-4o","messages":[{"role":"user","content":"tea?"}],"x":' + (
        b"[" * depth + b"]" * depth + b"}"
    )


def system(content: Any) -> bytes:
    return chat(messages=[{"role": "system", "content": content}, ASK])


def with_call(call: Any) -> bytes:
    assistant = {"role": "assistant", "content": None, "tool_calls": call}
    return chat(messages=[ASK, assistant, {"role": "tool", "tool_call_id": "c1", "content": "x"}])


TOOL = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
GOOD_CALL = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]

ODD_BODIES: dict[str, bytes] = {
    # nesting
    "deep-60": deep(chat(x=DEEP), 60),
    "deep-254": deep_raw(252),
    "deep-255": deep_raw(255),
    "deep-300-field": deep_raw(300),
    "deep-1000-field": deep_raw(1000),
    "deep-300-content": deep(chat(messages=[{"role": "user", "content": [DEEP]}]), 300),
    "deep-300-part": deep(chat(messages=[{"role": "user", "content": [{"x": DEEP}]}]), 300),
    "deep-300-system": deep(system([{"type": "text", "text": "be terse", "x": DEEP}]), 300),
    "deep-300-tool-args": deep(
        with_call([{"id": "c1", "type": "function", "function": {"name": "f", "arguments": DEEP}}]),
        300,
    ),
    "deep-300-tools": deep(chat(tools=[{"type": "function", "function": DEEP}]), 300),
    # huge strings
    "prose-1mb": chat(messages=[{"role": "user", "content": "tea and biscuits " * 60_000}]),
    "one-char-1mb": chat(messages=[{"role": "user", "content": "a" * 1_000_000}]),
    "one-char-1mb-gpt-4.1": chat(
        model="gpt-4.1", messages=[{"role": "user", "content": "a" * 1_000_000}]
    ),
    "fences": chat(messages=[{"role": "user", "content": "<memories></memories> tea?" * 1_000}]),
    # system contents of every shape
    "system-str": system("Be terse."),
    "system-empty-str": system(""),
    "system-null": system(None),
    "system-parts": system([{"type": "text", "text": "Be terse."}]),
    "system-empty-list": system([]),
    "system-odd-parts": system(["plain", 1, None, {"type": "image_url"}]),
    "system-number": system(42),
    "system-float": system(1.5),
    "system-object": system({"text": "Be terse."}),
    "system-bool": system(True),
    "developer-object": chat(messages=[{"role": "developer", "content": {"a": 1}}, ASK]),
    "system-missing-content": chat(messages=[{"role": "system"}, ASK]),
    "two-systems-first-odd": chat(
        messages=[{"role": "system", "content": 7}, {"role": "system", "content": "x"}, ASK]
    ),
    # user contents
    "user-null": chat(messages=[{"role": "user", "content": None}]),
    "user-number": chat(messages=[{"role": "user", "content": 3}]),
    "user-object": chat(messages=[{"role": "user", "content": {"text": "tea?"}}]),
    "user-odd-parts": chat(messages=[{"role": "user", "content": ["tea", 1, None, [], {}]}]),
    "user-parts": chat(
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "tea?"},
                    {"type": "image_url", "image_url": {"url": "data:x", "detail": 5}},
                    {"type": "input_audio", "input_audio": None},
                    {"type": "hologram"},
                    {"type": "text", "text": None},
                ],
            }
        ]
    ),
    # roles
    "role-number": chat(messages=[{"role": 7, "content": "tea?"}]),
    "role-null": chat(messages=[{"role": None, "content": "tea?"}]),
    "role-object": chat(messages=[{"role": {"r": "user"}, "content": "tea?"}]),
    "role-upper-system": chat(messages=[{"role": "SYSTEM", "content": "x"}, ASK]),
    "role-missing": chat(messages=[{"content": "tea?"}]),
    "name-odd": chat(messages=[{"role": "user", "name": {"n": 1}, "content": "tea?"}]),
    # tools and tool messages
    "tool-exchange": with_call(GOOD_CALL),
    "tool-no-call-id": chat(messages=[ASK, {"role": "tool", "content": "x"}]),
    "tool-call-id-number": chat(messages=[ASK, {"role": "tool", "tool_call_id": 5}]),
    "tools-valid": chat(tools=[TOOL]),
    "tools-number": chat(tools=5),
    "tools-string": chat(tools="get_weather"),
    "tools-object": chat(tools={"type": "function"}),
    "tools-odd-items": chat(tools=[1, "x", None, [], TOOL]),
    "functions-object": chat(functions={"name": "f"}),
    "tool-calls-string": with_call("call it"),
    "tool-calls-numbers": with_call([1, 2]),
    "tool-calls-null-items": with_call([None]),
    "tool-calls-function-string": with_call([{"id": "c1", "function": "f"}]),
    "tool-calls-odd-function": with_call([{"function": {"name": 5, "arguments": {"a": [1]}}}]),
    "function-call-string": chat(
        messages=[ASK, {"role": "assistant", "content": None, "function_call": "f"}]
    ),
    "response-format-string": chat(response_format="json"),
    "response-format-number": chat(response_format=5),
    "response-format-schema": chat(
        response_format={"type": "json_schema", "json_schema": {"name": "w", "schema": {}}}
    ),
    # unicode
    "unicode": chat(
        messages=[{"role": "user", "content": "tea \u0000\u202e\ufeff\u2028\U0010ffff e\u0301 🍵"}]
    ),
    "unicode-keys": chat(**{"\u00e9t\u00e9": "x", "\u0000": 1, "": None}),
    "escapes-raw": b'{"model":"gpt-4o","messages":[{"role":"user","content":"t\\u00e9a \\/ \\"x\\"'
    b' \\ud83c\\udf75"}]}',
    "pretty-printed": json.dumps(
        {"model": "gpt-4o", "messages": [ASK]}, indent=4, ensure_ascii=True
    ).encode(),
    # numbers
    "nan-like-strings": chat(temperature="NaN", top_p="Infinity", n="-Infinity"),
    "float-forms": b'{"model":"gpt-4o","messages":[{"role":"user","content":"tea?"}],'
    b'"temperature":1E0,"top_p":0.10,"x":[-0.0,1e-400,1.0000000000000000000001,1e308]}',
    "big-int-u64": chat(seed=2**64 - 1, x=-(2**63)),
    "big-int-beyond-u64": b'{"model":"gpt-4o","messages":[{"role":"user","content":"tea?"}],'
    b'"seed":18446744073709551616}',
    "big-int-negative": b'{"model":"gpt-4o","messages":[{"role":"user","content":"tea?"}],'
    b'"x":-9223372036854775809}',
    "big-int-huge": b'{"model":"gpt-4o","messages":[{"role":"user","content":"tea?"}],'
    b'"max_tokens":123456789012345678901234567890}',
    "max-tokens-odd": chat(max_tokens=-1, max_completion_tokens="many"),
    # duplicate keys (the last wins for every parser in play)
    "duplicate-model": b'{"model":"gpt-4","model":"gpt-4o","messages":[{"role":"user",'
    b'"content":"tea?"}]}',
    "duplicate-messages": b'{"model":"gpt-4o","messages":[],"messages":[{"role":"user",'
    b'"content":"tea?"}]}',
    "duplicate-content": b'{"model":"gpt-4o","messages":[{"role":"user","content":"x",'
    b'"content":"tea?"}]}',
    # empty and missing
    "messages-empty": chat(messages=[]),
    "messages-empty-objects": chat(messages=[{}, {}]),
    "messages-null": chat(messages=None),
    "messages-string": chat(messages="tea?"),
    "messages-object": chat(messages={"role": "user", "content": "tea?"}),
    "model-missing": orjson.dumps({"messages": [ASK]}),
    "model-number": chat(model=4),
    "model-unknown": chat(model="no-such-model/anywhere"),
    "empty-object": b"{}",
    "many-messages": chat(
        messages=[{"role": "user", "content": f"tea note {i}"} for i in range(3_000)]
    ),
}


@pytest.fixture(scope="module")
def memory_on(
    fake_server: FakeServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ProxyServer]:
    """memproxy with memory on; the tenant has memories about tea to inject."""
    settings = memory_settings(fake_server.url, tmp_path_factory.mktemp("odd-bodies"))
    with MemoryProxy(create_app(settings)) as proxy:
        stored = httpx.post(
            f"{proxy.url}/memories",
            json={"memories": [{"content": m} for m in MEMORIES]},
            headers=AUTH,
        )
        assert stored.status_code == 201, stored.text
        yield proxy


def injected_block(body: Any) -> str | None:
    """The memory block in a forwarded body (a whole text, or its start or end), if any."""
    for message in body.get("messages") or ():
        content = message.get("content") if isinstance(message, dict) else None
        texts = [content] if isinstance(content, str) else []
        if isinstance(content, list):
            texts += [p["text"] for p in content if isinstance(p, dict) and "text" in p]
        for text in texts:
            if isinstance(text, str) and BLOCK_OPEN in text:
                return text[text.index(BLOCK_OPEN) : text.index(BLOCK_CLOSE) + len(BLOCK_CLOSE)]
    return None


def injections(sent: dict[str, Any], block: str) -> list[Any]:
    """Every body memory may make of ``sent``: the block in front of the latest user message's
    text content (position turn), in a system message of its own, first, or added to the first
    system/developer message's text content (string, parts, empty)."""
    messages = sent["messages"]
    bodies = [{**sent, "messages": [{"role": "system", "content": block}, *messages]}]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if users:
        index, content = users[-1], messages[users[-1]].get("content")
        added: Any = None
        if content is None or content == "":
            added = block
        elif isinstance(content, str):
            added = block + SEPARATOR + content
        elif isinstance(content, list):
            added = [{"type": "text", "text": block}, *content]
        if added is not None:
            changed = {**messages[index], "content": added}
            turned = [*messages[:index], changed, *messages[index + 1 :]]
            bodies.append({**sent, "messages": turned})
    for index, message in enumerate(messages):
        if message.get("role") not in ("system", "developer"):
            continue
        content = message.get("content")
        if content is None or content == "":
            added: Any = block
        elif isinstance(content, str):
            added = content + SEPARATOR + block
        elif isinstance(content, list):
            added = [*content, {"type": "text", "text": block}]
        else:
            break
        changed = {**message, "content": added}
        bodies.append({**sent, "messages": [*messages[:index], changed, *messages[index + 1 :]]})
        break
    return bodies


@pytest.mark.parametrize("name", list(ODD_BODIES))
def test_memory_on_changes_nothing_but_the_block(
    name: str,
    memory_on: ProxyServer,
    proxy: ProxyServer,
    fake: FakeServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    raw = ODD_BODIES[name]
    with caplog.at_level(logging.WARNING), httpx.Client(timeout=120) as http:
        off = http.post(f"{proxy.url}/chat/completions", content=raw, headers=AUTH)
        forwarded_off = fake.fake.requests[-1].body if fake.fake.requests else None
        fake.fake.requests.clear()
        on = http.post(f"{memory_on.url}/chat/completions", content=raw, headers=AUTH)
        forwarded_on = fake.fake.requests[-1].body if fake.fake.requests else None
        explain = http.post(
            f"{memory_on.url}/chat/completions",
            content=raw,
            headers={**AUTH, "X-Memory-Mode": "explain"},
        )
    assert on.status_code == off.status_code, (off.text, on.text)
    assert forwarded_off == raw  # memory off: the client's bytes
    assert on.headers["x-memory-status"] in ("injected", "empty", "degraded")
    assert forwarded_on is not None
    if forwarded_on != raw:  # re-encoded with the block: the same body apart from it
        sent, received = json.loads(raw), json.loads(forwarded_on)
        block = injected_block(received)
        assert block is not None
        assert received in injections(sent, block)
        assert on.headers["x-memory-status"] in ("injected", "degraded")
    assert explain.status_code == 200, explain.text
    document = explain.json()
    assert document["object"] == "memory.explain"
    # The fake upstream logs its own crashes on some bodies (it is not under test here).
    ours = [r for r in caplog.records if not r.name.startswith("aiohttp")]
    errors = [r for r in ours if r.levelno >= logging.ERROR]
    assert errors == [], [r.getMessage() for r in errors]


def test_injection_really_happens_for_the_plain_body(
    memory_on: ProxyServer, fake: FakeServer
) -> None:
    """The differential test would pass vacuously if nothing were ever injected."""
    response = httpx.post(f"{memory_on.url}/chat/completions", content=chat(), headers=AUTH)
    assert response.headers["x-memory-status"] == "injected"
    forwarded = json.loads(fake.fake.requests[-1].body)
    assert forwarded["messages"][-1]["content"].startswith(BLOCK_OPEN)  # position turn


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ([{"type": "text", "text": "Be terse."}], "parts"),
        (42, "own-message"),
        ({"text": "Be terse."}, "own-message"),
        (True, "own-message"),
    ],
)
def test_non_string_system_content_is_never_a_repr(
    memory_on: ProxyServer, fake: FakeServer, content: Any, expected: str
) -> None:
    # Position system: where the system prompt's shape decides how the block joins it.
    response = httpx.post(
        f"{memory_on.url}/chat/completions",
        content=system(content),
        headers={**AUTH, "X-Memory-Position": "system"},
    )
    assert response.headers["x-memory-status"] == "injected"
    messages = json.loads(fake.fake.requests[-1].body)["messages"]
    if expected == "parts":  # one more text part, the client's parts untouched
        assert messages[0]["content"][:-1] == content
        assert messages[0]["content"][-1]["text"].startswith(BLOCK_OPEN)
    else:  # the client's message as sent, the block in a system message of its own before it
        assert messages[0]["role"] == "system"
        assert messages[0]["content"].startswith(BLOCK_OPEN)
        assert messages[1] == {"role": "system", "content": content}


@pytest.mark.parametrize("name", ["deep-255", "deep-1000-field", "big-int-beyond-u64"])
def test_a_body_that_cannot_be_re_encoded_goes_as_sent(
    name: str, memory_on: ProxyServer, fake: FakeServer
) -> None:
    raw = ODD_BODIES[name]
    response = httpx.post(f"{memory_on.url}/chat/completions", content=raw, headers=AUTH)
    assert response.status_code == 200
    assert response.headers["x-memory-status"] == "degraded"
    assert response.headers["x-memory-injected"] == "0"
    assert fake.fake.requests[-1].body == raw
    explain = httpx.post(
        f"{memory_on.url}/chat/completions",
        content=raw,
        headers={**AUTH, "X-Memory-Mode": "explain"},
    )
    assert explain.status_code == 200
    notes = explain.json()["notes"]
    assert any("would not be injected" in note for note in notes)
