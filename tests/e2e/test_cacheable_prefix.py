"""End to end with the ``openai`` SDK: over a conversation, each upstream prompt starts with the
previous one byte for byte (position ``turn``, adr/0111), and a lost block costs one prefix."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import orjson

from proxy.context.render import BLOCK_OPEN
from tests.e2e import test_chat_memory
from tests.e2e.conftest import MemoryProxy

MODEL = "gpt-4o-mini"
FACTS = [
    *test_chat_memory.FACTS,
    "The user's sister Ana plays the cello in Porto.",
    "The user is training for a marathon in October.",
    "The user drives an old green Volvo.",
    "The user's favourite food is grilled sardines.",
    "The user's cello teacher retired last spring.",
    "The user keeps bees on the roof of the flat.",
    "The user's birthday is on the ninth of March.",
    "The user speaks Portuguese, English and some Danish.",
]
QUESTIONS = [
    "What is my dog called?",
    "Where do I live?",
    "What should I avoid eating?",
    "Which units do I like?",
    "What does my sister play?",
]
SYSTEM = {"role": "system", "content": "You are terse."}


def messages_prefix(body: bytes) -> bytes:
    """The upstream body up to the end of its last message (what the next prompt must start
    with): the SDK writes ``messages`` first, so it is the body up to the array's ``]``."""
    sent = orjson.loads(body)
    last = orjson.dumps(sent["messages"][-1])
    end = body.index(last) + len(last)
    assert body.count(last) == 1
    assert body[end : end + 1] == b"]"
    return body[:end]


class Chat:
    """An app's conversation: it resends its own history (no blocks); keeps the upstream bodies."""

    def __init__(self, proxy: MemoryProxy, **headers: str) -> None:
        self.proxy = proxy
        self.api = test_chat_memory.client(proxy)
        self.headers = {"X-Memory-Max-Tokens": "45", **headers}
        self.history: list[dict[str, Any]] = [SYSTEM]
        self.bodies: list[bytes] = []

    def say(self, question: str) -> str:
        """One turn; returns X-Memory-Status."""
        self.history.append({"role": "user", "content": question})
        raw = self.api.chat.completions.with_raw_response.create(
            model=MODEL,
            messages=self.history,  # type: ignore[arg-type]
            extra_headers=self.headers,
        )
        answer = raw.parse().choices[0].message.content
        self.history.append({"role": "assistant", "content": answer})
        self.bodies.append(self.proxy.fake.fake.requests[-1].body)
        return raw.headers["x-memory-status"]


def full_prefixes(bodies: list[bytes]) -> list[bool]:
    """Per turn after the first: whether the previous upstream prompt starts this one."""
    return [b.startswith(messages_prefix(a)) for a, b in itertools.pairwise(bodies)]


def test_every_upstream_prompt_starts_with_the_previous_one(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    chat = Chat(memproxy)
    statuses = [chat.say(q) for q in QUESTIONS]
    # "empty": every memory chosen for that turn is in the prompt already (an earlier block).
    assert set(statuses) <= {"injected", "empty"}
    assert statuses[0] == "injected"
    assert statuses.count("injected") >= 3
    assert full_prefixes(chat.bodies) == [True] * 4
    first = orjson.loads(chat.bodies[0])["messages"]
    assert first[0] == SYSTEM
    assert BLOCK_OPEN in first[1]["content"]
    last = orjson.loads(chat.bodies[-1])["messages"]
    # Each memory is in the prompt once: later blocks leave out what earlier ones show.
    joined = "\n".join(m["content"] for m in last if m["role"] == "user")
    assert all(joined.count(fact) <= 1 for fact in FACTS)
    assert sum(joined.count(fact) for fact in FACTS) > 2


def test_position_system_changes_the_prompt_near_its_start(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    chat = Chat(memproxy, **{"X-Memory-Position": "system"})
    for question in QUESTIONS:
        chat.say(question)
    assert BLOCK_OPEN in orjson.loads(chat.bodies[0])["messages"][0]["content"]
    # Whenever the block changes, the whole conversation after the system prompt moves.
    assert full_prefixes(chat.bodies).count(False) >= 2


def test_a_lost_block_breaks_one_prefix_and_nothing_fails(memproxy: MemoryProxy) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    chat = Chat(memproxy)
    for question in QUESTIONS[:3]:
        chat.say(question)
    raw = memproxy.backends.cache.cache  # the in-process LocalCache the proxy shares
    asyncio.run(raw.delete(*[key for key in list(raw._entries) if ":blk:" in key]))
    assert chat.say(QUESTIONS[3]) == "injected"
    assert chat.say(QUESTIONS[4]) == "injected"
    assert full_prefixes(chat.bodies) == [True, True, False, True]
