"""End to end with the official SDKs (chat completions, the Responses API, Anthropic's Messages
API): over a conversation, each upstream prompt starts with the previous one byte for byte
(position ``turn``, adr/0111), and a lost block costs one prefix."""

from __future__ import annotations

import asyncio
import itertools
from typing import Any, ClassVar

import anthropic
import orjson
import pytest

from proxy.context.render import BLOCK_OPEN
from tests.e2e import test_chat_memory
from tests.e2e.conftest import API_KEY, MemoryProxy

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
# The anthropic SDK warns about model names it deprecates; not what is tested.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def turns_prefix(body: bytes, field: str) -> bytes:
    """The upstream body up to the end of its last turn (what the next prompt must start
    with): the SDK writes the turns (``messages``, ``input``) before the fields that follow
    them, so it is the body up to the array's ``]``."""
    sent = orjson.loads(body)
    last = orjson.dumps(sent[field][-1])
    end = body.index(last) + len(last)
    assert body.count(last) == 1
    assert body[end : end + 1] == b"]"
    return body[:end]


def text_of(content: Any) -> str:
    """A turn's text: string content, or its text parts joined."""
    if isinstance(content, str):
        return content
    return "\n".join(part["text"] for part in content if "text" in part)


class Chat:
    """An app's conversation: it resends its own history (no blocks); keeps the upstream bodies."""

    field = "messages"  # where the upstream body holds the turns

    def __init__(self, proxy: MemoryProxy, **headers: str) -> None:
        self.proxy = proxy
        self.api = test_chat_memory.client(proxy)
        # fill: every turn gets memories (the adaptive rule may find none worth their tokens).
        self.headers = {"X-Memory-Max-Tokens": "45", "X-Memory-Budget-Rule": "fill", **headers}
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

    def system_prompt(self, body: bytes) -> str:
        """The app's system prompt as the upstream got it."""
        return str(orjson.loads(body)["messages"][0]["content"])

    def continues(self, before: bytes, after: bytes) -> bool:
        """Whether the prompt of upstream body ``after`` starts with the whole of ``before``'s."""
        return after.startswith(turns_prefix(before, self.field))


class Responses(Chat):
    """The same app on the Responses API: ``instructions`` and the history as ``input`` items
    (user messages with ``input_text`` parts, the answers as assistant messages)."""

    field = "input"

    def __init__(self, proxy: MemoryProxy, **headers: str) -> None:
        super().__init__(proxy, **headers)
        self.history = []

    def say(self, question: str) -> str:
        """One turn; returns X-Memory-Status."""
        part = {"type": "input_text", "text": question}
        self.history.append({"role": "user", "content": [part]})
        raw = self.api.responses.with_raw_response.create(
            model=MODEL,
            instructions=str(SYSTEM["content"]),
            input=self.history,  # type: ignore[arg-type]
            extra_headers=self.headers,
        )
        self.history.append({"role": "assistant", "content": raw.parse().output_text})
        self.bodies.append(self.proxy.fake.fake.requests[-1].body)
        return raw.headers["x-memory-status"]

    def system_prompt(self, body: bytes) -> str:
        """The instructions as the upstream got them."""
        return str(orjson.loads(body)["instructions"])

    def continues(self, before: bytes, after: bytes) -> bool:
        """The SDK writes ``input`` before ``instructions``, but the prompt starts with the
        instructions: they must be the same, and the body up to the end of ``input`` a prefix."""
        same = self.system_prompt(before) == self.system_prompt(after)
        return same and super().continues(before, after)


class Messages(Chat):
    """The same app on Anthropic's Messages API (the ``anthropic`` SDK): ``system`` and the
    history as ``messages``, its system prompt a cached block (``cache_control``)."""

    CACHED: ClassVar[dict[str, Any]] = {"type": "ephemeral"}

    def __init__(self, proxy: MemoryProxy, **headers: str) -> None:
        # Claude's counts carry a margin (and a longer block header): a cap of 45 fits only the
        # shortest memory, which every turn would choose again.
        super().__init__(proxy, **{"X-Memory-Max-Tokens": "90", **headers})
        self.history = []
        self.client = anthropic.Anthropic(
            base_url=proxy.server.root, api_key=API_KEY, max_retries=0
        )

    def say(self, question: str) -> str:
        """One turn; returns X-Memory-Status."""
        self.history.append({"role": "user", "content": question})
        system = [{"type": "text", "text": SYSTEM["content"], "cache_control": self.CACHED}]
        raw = self.client.messages.with_raw_response.create(
            model="claude-sonnet-4-5",
            max_tokens=256,
            system=system,  # type: ignore[arg-type]
            messages=self.history,  # type: ignore[arg-type]
            extra_headers=self.headers,
        )
        answer = "".join(b.text for b in raw.parse().content if b.type == "text")
        self.history.append({"role": "assistant", "content": answer})
        self.bodies.append(self.proxy.fake.fake.requests[-1].body)
        return raw.headers["x-memory-status"]

    def system_prompt(self, body: bytes) -> str:
        """The system prompt's text as the upstream got it."""
        return text_of(orjson.loads(body)["system"])

    def continues(self, before: bytes, after: bytes) -> bool:
        """The prompt is tools, system, messages; the SDK writes ``system`` after
        ``messages``: it must be the same, and the body up to the end of ``messages`` a
        prefix."""
        same = orjson.loads(before)["system"] == orjson.loads(after)["system"]
        return same and super().continues(before, after)


APIS = [Chat, Responses, Messages]
IDS = ["chat", "responses", "messages"]
Api = type[Chat]


def full_prefixes(chat: Chat) -> list[bool]:
    """Per turn after the first: whether the previous upstream prompt starts this one."""
    return [chat.continues(a, b) for a, b in itertools.pairwise(chat.bodies)]


def user_turns(chat: Chat, body: bytes) -> list[str]:
    """The texts of the user turns the upstream got."""
    return [text_of(m["content"]) for m in orjson.loads(body)[chat.field] if m["role"] == "user"]


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_every_upstream_prompt_starts_with_the_previous_one(
    memproxy: MemoryProxy, api: Api
) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    chat = api(memproxy)
    statuses = [chat.say(q) for q in QUESTIONS]
    # "empty": every memory chosen for that turn is in the prompt already (an earlier block).
    assert set(statuses) <= {"injected", "empty"}
    assert statuses[0] == "injected"
    assert statuses.count("injected") >= 3
    assert full_prefixes(chat) == [True] * 4
    assert chat.system_prompt(chat.bodies[0]) == SYSTEM["content"]
    assert BLOCK_OPEN in user_turns(chat, chat.bodies[0])[0]
    # Each memory is in the prompt once: later blocks leave out what earlier ones show.
    joined = "\n".join(user_turns(chat, chat.bodies[-1]))
    assert all(joined.count(fact) <= 1 for fact in FACTS)
    assert sum(joined.count(fact) for fact in FACTS) > 2


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_position_system_changes_the_prompt_near_its_start(memproxy: MemoryProxy, api: Api) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    chat = api(memproxy, **{"X-Memory-Position": "system"})
    for question in QUESTIONS:
        chat.say(question)
    assert BLOCK_OPEN in chat.system_prompt(chat.bodies[0])
    # Whenever the block changes, the whole conversation after the system prompt moves.
    assert full_prefixes(chat).count(False) >= 2


@pytest.mark.parametrize("api", APIS, ids=IDS)
def test_a_lost_block_breaks_one_prefix_and_nothing_fails(memproxy: MemoryProxy, api: Api) -> None:
    memproxy.backends.write(memproxy.tenant, FACTS)
    chat = api(memproxy)
    for question in QUESTIONS[:3]:
        chat.say(question)
    raw = memproxy.backends.cache.cache  # the in-process LocalCache the proxy shares
    asyncio.run(raw.delete(*[key for key in list(raw._entries) if ":blk:" in key]))
    assert chat.say(QUESTIONS[3]) == "injected"
    assert chat.say(QUESTIONS[4]) == "injected"
    assert full_prefixes(chat) == [True, True, False, True]
