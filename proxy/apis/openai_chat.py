"""OpenAI chat completions: the pipeline's own shape, and reading an answer (JSON or SSE).

The chat body already is what the pipeline works in (``proxy/apis/adapter.py``): its messages
are the conversation and the body is what the budget counts, as is, with no copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.apis.adapter import SYSTEM, Conversation, Position, chat_messages
from proxy.apis.answer import Answer
from proxy.context.inject import inject
from proxy.error_responses import OPENAI, ErrorShape
from proxy.pipeline.contract import Completion
from proxy.sse import iter_events


class OpenAIChat:
    """``POST /v1/chat/completions`` as an ``ApiAdapter``."""

    route = "chat"
    errors: ErrorShape = OPENAI
    positions: frozenset[Position] = frozenset({SYSTEM})

    def conversation(self, body: Mapping[str, object]) -> Conversation:
        """The body's messages (none when malformed); the body itself is billed."""
        return Conversation(
            model=str(body.get("model") or ""),
            messages=chat_messages(body.get("messages")),
            billed=body,
        )

    def inject(
        self,
        body: Mapping[str, object],
        conversation: Conversation,
        block: str,
        position: Position,
    ) -> dict[str, object]:
        """The block appended to the first system message (``proxy/context/inject.py``)."""
        return {**body, "messages": inject(conversation.messages, block)}

    def shown(self, body: Mapping[str, object]) -> dict[str, object]:
        """The messages."""
        return {"messages": body.get("messages")}

    def read_completion(self, answer: Answer) -> Completion:
        """See ``read_completion``."""
        return read_completion(answer)


OPENAI_CHAT = OpenAIChat()


def read_completion(answer: Answer) -> Completion:
    """The assistant text (and for a whole answer, its parsed body) of a relayed answer."""
    raw = answer.decoded()
    body = parsed_body(raw) if not answer.streamed and answer.ok else None
    return Completion(
        status=answer.status,
        streamed=answer.streamed,
        ok=answer.ok,
        text=assistant_text(raw, streamed=answer.streamed, body=body),
        body=body,
    )


def parsed_body(raw: bytes) -> dict[str, Any] | None:
    """A whole JSON answer as an object, or ``None`` when it is not one."""
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return parsed if isinstance(parsed, dict) else None


def assistant_text(raw: bytes, *, streamed: bool, body: Mapping[str, Any] | None) -> str:
    """The assistant text of choice 0, from a stream's deltas or a whole response body."""
    if not streamed:
        choices = (body or {}).get("choices") or []
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                content = (choice.get("message") or {}).get("content")
                return content if isinstance(content, str) else ""
        return ""
    parts = []
    for event in iter_events(raw):
        for choice in event.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                content = (choice.get("delta") or {}).get("content")
                if isinstance(content, str):
                    parts.append(content)
    return "".join(parts)
