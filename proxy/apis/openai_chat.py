"""OpenAI chat completions: the pipeline's own shape, and reading an answer (JSON or SSE).

The chat body already is what the pipeline works in (``proxy/apis/adapter.py``): its messages
are the conversation, the turns position ``turn`` puts blocks in, and the body is what the
budget counts, as is, with no copy; but a ``file`` part carrying its bytes is billed as its
pages, read when the request is budgeted (``proxy/context/documents.py``, adr/0152), and one
by ``file_id`` makes the budget hold room back (adr/0143).

Writing blocks: position ``turn`` puts this turn's block in front of the latest user message's
content and earlier blocks back where they were (``proxy/context/position.py``); position
``system`` appends it to the first system message (``proxy/context/inject.py``). Neither ever
puts it in front of a ``cache_control`` breakpoint: where the system prompt would sit in front
of one, position ``system`` takes the turn's slot instead, and position ``turn`` without a slot
injects nothing (adr/0111).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from proxy.apis.adapter import (
    SYSTEM,
    TURN,
    Blocks,
    Conversation,
    Injected,
    TurnRule,
    chat_messages,
    in_turns,
    instead_of_system,
)
from proxy.apis.answer import Answer, read_answer
from proxy.context.documents import Document, read_files
from proxy.context.inject import clear_of_breakpoints, inject, inject_index
from proxy.defaults import Position
from proxy.error_responses import OPENAI, ErrorShape
from proxy.pipeline.contract import Completion
from proxy.sse import iter_events


class OpenAIChat:
    """``POST /v1/chat/completions`` as an ``ApiAdapter``."""

    route = "chat"
    errors: ErrorShape = OPENAI
    openai_credentials = True
    positions: frozenset[Position] = frozenset({SYSTEM, TURN})
    rule = TurnRule()  # user turns; behind a breakpoint in a user or tool message; text parts

    def conversation(self, body: Mapping[str, object]) -> Conversation:
        """The body's messages (none when malformed), also its turns; the body is billed,
        with its files read."""
        messages = chat_messages(body.get("messages"))
        documents: list[Document] = []
        billed, unseen = read_files(messages, documents)
        return Conversation(
            model=str(body.get("model") or ""),
            messages=messages,
            billed=body if billed is messages else {**body, "messages": billed},
            unseen_history=unseen,
            turns=messages,
            documents=tuple(documents),
        )

    def inject(
        self, body: Mapping[str, object], conversation: Conversation, blocks: Blocks
    ) -> Injected:
        """The blocks in the messages (module notes)."""
        messages = conversation.messages
        if blocks.position == TURN and blocks.slot is not None:
            return self._in_turns(body, messages, blocks)
        block = blocks.block
        if not block:
            return Injected(dict(body))
        if not clear_of_breakpoints(messages):
            instead = instead_of_system(messages, blocks, self.rule)
            if instead is None:
                return Injected(dict(body))
            return self._in_turns(body, messages, instead)
        new = inject(messages, block)
        return Injected({**body, "messages": new}, True, inject_index(messages))

    def _in_turns(
        self, body: Mapping[str, object], messages: Sequence[Mapping[str, object]], blocks: Blocks
    ) -> Injected:
        new, held = in_turns(messages, blocks, self.rule)
        return Injected({**body, "messages": new}, held is not None, held)

    def shown(self, body: Mapping[str, object]) -> dict[str, object]:
        """The messages."""
        return {"messages": body.get("messages")}

    def read_completion(self, answer: Answer) -> Completion:
        """See ``read_completion``."""
        return read_completion(answer)


OPENAI_CHAT = OpenAIChat()


def read_completion(answer: Answer) -> Completion:
    """The assistant text (and for a whole answer, its parsed body) of a relayed answer."""
    return read_answer(
        answer, lambda body: (message_text(body), False), lambda events: (delta_text(events), False)
    )


def assistant_text(raw: bytes, *, streamed: bool, body: Mapping[str, Any] | None) -> str:
    """The assistant text of choice 0, from a stream's deltas or a whole response body."""
    return delta_text(iter_events(raw)) if streamed else message_text(body)


def message_text(body: Mapping[str, Any] | None) -> str:
    """Choice 0's message content in a whole response body ("" if none)."""
    for choice in (body or {}).get("choices") or []:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            content = (choice.get("message") or {}).get("content")
            return content if isinstance(content, str) else ""
    return ""


def delta_text(events: Iterable[Mapping[str, Any]]) -> str:
    """Choice 0's text in a stream's events: its deltas' contents joined."""
    parts = []
    for event in events:
        for choice in event.get("choices") or []:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                content = (choice.get("delta") or {}).get("content")
                if isinstance(content, str):
                    parts.append(content)
    return "".join(parts)
