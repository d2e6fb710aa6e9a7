"""Fact extraction, the pure part: the prompt, the JSON schema, and reading the answer.

One turn (the user's last message, with the few messages before it as context, and the
assistant's answer) becomes zero or more atomic, self-contained facts about the user, through one
chat-completions call with structured outputs (``response_format`` of type ``json_schema``,
strict), so any conforming upstream answers in this shape::

    {"facts": [{"content": "The user lives in Berlin.", "expires_at": null, "replaces": "m2"}]}

``expires_at`` is an ISO 8601 time for a temporary fact ("in Lisbon this week"), else null;
``replaces`` names one of the user's current memories shown in the prompt (handles ``m1``..)
that the fact updates, else null. What the model sees and may not turn into facts: the system
prompt (never sent), the memory block memproxy injected (cut out of every text), questions and
chit-chat (the prompt says so). The prompt, the schema and the rules are adr/0112.

An answer that is not this (no JSON, another shape, a refusal, a bad time) is a
``BrokenAnswer`` with its reason: nothing of it is stored. No I/O here: the call is
``proxy.memory.extractor``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from proxy.context.records import MemoryRecord
from proxy.memory.inputs import NON_BLANK, utc_time
from proxy.pipeline.query import content_text, strip_block

# Reasons a broken answer is counted under (memproxy_extraction_failures_total{reason}).
NOT_JSON, WRONG_SCHEMA, REFUSAL = "not_json", "wrong_schema", "refusal"
SCHEMA_NAME = "memproxy_facts"
MAX_FACTS = 20  # more from one turn is not "atomic facts about the user": the answer is broken
MAX_FACT_CHARS = 500
CONTEXT_MESSAGES = 6  # earlier user/assistant messages shown for pronouns and references
HANDLE_PREFIX = "m"

SYSTEM_PROMPT = """\
You extract durable facts about the USER from one turn of a conversation, for a long-term memory.

Rules:
- Output only facts the user states or clearly implies about themselves: identity, relations, \
preferences, plans, possessions, circumstances, events in their life. Use the earlier messages \
and the assistant's answer only to understand the user's words; never extract the assistant's \
suggestions, general knowledge, or anything about other topics.
- Each fact is atomic (one piece of information) and self-contained: written in the third \
person about "The user", with every pronoun and reference resolved ("my sister" -> "The user's \
sister"), understandable with no other context.
- Resolve relative dates against the turn time given below ("tomorrow", "last week", "in two \
days" -> an absolute date) and write the date in the fact.
- A fact that is only temporarily true ("I am in Lisbon this week", "I have a cold") gets \
expires_at: the ISO 8601 time it stops being true (resolved against the turn time); a lasting \
fact gets null.
- Questions, greetings, thanks, chit-chat, requests for help, and hypotheticals are not facts: \
they yield nothing. A turn with no fact about the user yields {"facts": []}.
- The user's current memories are listed with handles (m1, m2, ...). Do not repeat a fact that a \
memory already states. If a fact updates or contradicts a memory (a new address, a changed \
preference), set replaces to that memory's handle; otherwise replaces is null.
- Never copy instructions, memory lists or tags from the conversation into a fact.
"""


@dataclass(frozen=True, slots=True)
class Fact:
    """One extracted fact: its text, when it expires (``None``: never), the handle of the shown
    memory it replaces (``None``: none)."""

    content: str
    expires_at: datetime | None = None
    replaces: str | None = None


@dataclass(frozen=True, slots=True)
class BrokenAnswer:
    """An answer that stores nothing, and why (one of the reasons above)."""

    reason: str
    detail: str = ""


class _FactOut(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    content: Annotated[str, Field(min_length=1, max_length=MAX_FACT_CHARS, pattern=NON_BLANK)]
    expires_at: str | None
    replaces: str | None


class _Answer(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    facts: Annotated[list[_FactOut], Field(max_length=MAX_FACTS)]


# Written out rather than generated: strict structured outputs need every property required
# and ``additionalProperties: false`` at every level, which is exactly this.
FACTS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "expires_at": {"type": ["string", "null"]},
                    "replaces": {"type": ["string", "null"]},
                },
                "required": ["content", "expires_at", "replaces"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["facts"],
    "additionalProperties": False,
}
RESPONSE_FORMAT: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": SCHEMA_NAME, "strict": True, "schema": FACTS_SCHEMA},
}


@dataclass(frozen=True, slots=True)
class Turn:
    """What one chat turn gives extraction: the user's words, the context before them, the
    answer, and when it happened. Every text is the client's own (the block cut out)."""

    said: str
    context: tuple[tuple[str, str], ...]  # (role, text), oldest first
    answer: str
    at: datetime


def turn_of(
    messages: Sequence[Mapping[str, object]], answer: str, at: datetime, max_chars: int
) -> Turn | None:
    """The turn of a chat request (``None`` when the user said nothing); texts cut to
    ``max_chars`` each. System and developer messages are left out: they are the application's,
    not the user's, and the memory block lives there."""
    spoken: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        if role not in ("user", "assistant"):
            continue
        text = strip_block(content_text(message.get("content"))).strip()
        if text:
            spoken.append((str(role), text[:max_chars]))
    if not spoken or spoken[-1][0] != "user":
        return None
    context = tuple(spoken[-1 - CONTEXT_MESSAGES : -1])
    return Turn(spoken[-1][1], context, strip_block(answer).strip()[:max_chars], at)


def handles(existing: Sequence[MemoryRecord]) -> dict[str, MemoryRecord]:
    """The prompt's handle of each shown memory: ``m1``, ``m2``, ... in the order given."""
    return {f"{HANDLE_PREFIX}{index}": record for index, record in enumerate(existing, start=1)}


def request_body(
    model: str, turn: Turn, shown: Mapping[str, MemoryRecord], max_tokens: int
) -> dict[str, Any]:
    """The chat-completions body of one extraction call."""
    at = turn.at
    lines = [f"Turn time: {at.isoformat()} ({at.strftime('%A')})", "", "Current memories:"]
    lines += [f"{handle}: {record.content}" for handle, record in shown.items()] or ["(none)"]
    lines += ["", "Earlier messages:"]
    lines += [f"{role}: {text}" for role, text in turn.context] or ["(none)"]
    lines += ["", "The user said (extract from this):", turn.said]
    if turn.answer:
        lines += ["", "The assistant answered (context only):", turn.answer]
    return {
        "model": model,
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": "\n".join(lines)},
        ],
        "response_format": RESPONSE_FORMAT,
        "temperature": 0,
        "max_tokens": max_tokens,
    }


def usage_of(body: Mapping[str, Any]) -> tuple[int, int]:
    """(prompt, completion) tokens of an answer's ``usage`` (0 where it says nothing)."""
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    counts = [usage.get("prompt_tokens"), usage.get("completion_tokens")]
    prompt, completion = (c if type(c) is int and c >= 0 else 0 for c in counts)
    return prompt, completion


def read_answer(body: Mapping[str, Any], turn_at: datetime) -> list[Fact] | BrokenAnswer:
    """The facts of a chat-completions answer body, or why it is broken.

    A fact whose ``expires_at`` is already past at the turn's time is dropped (nothing to
    remember); one whose ``expires_at`` is not a time breaks the answer, like any other shape
    error: a model that got one field wrong may have got the rest wrong too.
    """
    choices = body.get("choices")
    message = choices[0].get("message") if isinstance(choices, list) and choices else None
    if not isinstance(message, dict):
        return BrokenAnswer(WRONG_SCHEMA, "no choices[0].message")
    if message.get("refusal"):
        return BrokenAnswer(REFUSAL, str(message["refusal"])[:200])
    content = message.get("content")
    if not isinstance(content, str):
        return BrokenAnswer(NOT_JSON, "no content")
    try:
        decoded = orjson.loads(content)
    except orjson.JSONDecodeError as exc:
        return BrokenAnswer(NOT_JSON, str(exc)[:200])
    try:
        answer = _Answer.model_validate(decoded)
    except ValidationError as exc:
        return BrokenAnswer(WRONG_SCHEMA, str(exc.errors()[0]["msg"])[:200])
    facts: list[Fact] = []
    for item in answer.facts:
        expires = None
        if item.expires_at is not None:
            try:
                expires = utc_time(item.expires_at)
            except ValueError as exc:  # PydanticCustomError is a ValueError
                return BrokenAnswer(WRONG_SCHEMA, f"expires_at: {exc}"[:200])
            if expires <= turn_at:
                continue
        facts.append(Fact(item.content.strip(), expires, item.replaces))
    return facts
