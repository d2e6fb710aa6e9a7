"""Anthropic's Messages API (``POST /v1/messages``) as an ``ApiAdapter``.

Reading a request: ``system`` (a string or text blocks) and ``messages`` become the
chat-shaped conversation the pipeline budgets, queries and captures. Text blocks stay text
parts; an image counts as two high-detail chat images (1,530 tokens: Anthropic bills an image
of its largest size, 1.15 megapixels, ~1,600 = pixels / 750); a document with its text in the
body (a plain-text or content source) as that text, a base64 PDF by its pages (read when the
request is budgeted, ``proxy/context/documents.py``, adr/0152), a PDF by URL or file id as a
file the budget holds room back for (adr/0143); a ``tool_use`` becomes an assistant tool
call, a ``tool_result`` a tool message; ``thinking`` counts as its text; any other block as
its compact JSON, an upper estimate. ``tools`` count as chat tools, ``max_tokens`` (required by
the API) is the response reserve. Claude models are counted with Claude's tokenizer and a margin
(``proxy/claude_tokenizer.py``); the system prompt Anthropic adds for tool use (a few hundred
tokens) is left to the budget's 5% safety buffer.

Writing the block, position ``turn`` (the default, adr/0111): a text block at the start of the
latest user message's content, after any ``tool_result`` blocks (the API wants them first) and
after its last ``cache_control`` breakpoint (string content: the block, a blank line, the text);
earlier turns' blocks go back where they were, so the previous prompt stays a prefix. This is
the shared rule (``proxy/context/position.py``) with the API's roles and pins (``rule``).

Position ``system`` (adr/0123): the block goes in ``system``, after the app's own text (a string
gets ``"\n\n" + block``; blocks get one more text block at the end, after any breakpoint, and
an existing block is never edited; none becomes the block). Anthropic caches the prefix tools ->
system -> messages up to each breakpoint, so breakpoints on tools or system never stand in the
way; one in ``messages`` does: the system prompt would sit in front of it. Then, as for chat
completions (``adapter.instead_of_system``), position ``system`` takes the turn's slot by the
same shared rule, and position ``turn`` without a slot injects nothing; so does a conversation
whose last breakpoint is on an assistant message after the latest user turn (a prefill).

A body of no shape this reads (``messages`` not a list of objects, ``system`` neither a string
nor a list of objects) has nothing to retrieve for: it goes upstream untouched, and the upstream
answers it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson

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
from proxy.context.documents import Document, file_part, pending, unseen_files
from proxy.context.position import BREAKPOINT, SEPARATOR, carries_breakpoint, has_breakpoint
from proxy.defaults import Position
from proxy.error_responses import ANTHROPIC, ErrorShape
from proxy.pipeline.contract import Completion

USER = "user"
TOOL_RESULT = "tool_result"
HIGH_DETAIL_IMAGE = {"type": "image_url", "image_url": {"detail": "high"}}
IMAGE_PARTS = 2  # chat images an Anthropic image counts as (2 x 765 >= ~1,600 max)
FAILED_EVENTS = ("error",)
# A document's text in the chat shape: a part the billing counts as text (as a Responses text
# part) that the query and capture, reading ``text`` parts, leave out.
DOCUMENT_TEXT = "input_text"


def pinned(part: object) -> bool:
    """Whether the block must come after ``part``: a breakpoint or a ``tool_result``."""
    return has_breakpoint(part) or (isinstance(part, Mapping) and part.get("type") == TOOL_RESULT)


def preamble(system: object) -> str | None:
    """The system prompt as text for the blocks' keys, breakpoints left out (moving one changes
    no prompt token); ``None`` when it cannot be written as JSON."""
    if isinstance(system, list):
        system = [
            {k: v for k, v in part.items() if k != BREAKPOINT}
            if isinstance(part, Mapping)
            else part
            for part in system
        ]
    try:
        return orjson.dumps(system).decode()
    except orjson.JSONEncodeError:
        return None


class AnthropicMessages:
    """``POST /v1/messages`` as an ``ApiAdapter``."""

    route = "messages"
    errors: ErrorShape = ANTHROPIC
    # An Anthropic key means nothing to the OpenAI-compatible upstream extraction calls.
    openai_credentials = False
    positions: frozenset[Position] = frozenset({SYSTEM, TURN})
    # Tool results open a user message (the API requires them first): the block follows them.
    rule = TurnRule(behind_roles=(USER,), pinned=pinned)

    def conversation(self, body: Mapping[str, object]) -> Conversation:
        """The conversation of ``system`` and ``messages``; the chat body it costs."""
        model = str(body.get("model") or "")
        system = body.get("system")
        sent = chat_messages(body.get("messages"))
        if not sent or system_blocks(system) is None:
            return Conversation(model=model, messages=(), billed={"model": model})
        messages: list[Mapping[str, object]] = []
        documents: list[Document] = []
        if system:
            messages.append({"role": "system", "content": chat_content(system, documents)})
        for message in sent:
            messages += as_messages(message, documents)
        return Conversation(
            model=model,
            messages=messages,
            billed=billed_body(body, messages),
            unseen_history=unseen_files(messages),
            turns=sent,
            preamble=preamble(system),
            documents=tuple(documents),
        )

    def inject(
        self, body: Mapping[str, object], conversation: Conversation, blocks: Blocks
    ) -> Injected:
        """Position ``turn``: at the start of the latest user message, after its ``tool_result``
        blocks and breakpoints; ``system``: at the end of ``system`` (module notes)."""
        if blocks.position == TURN and blocks.slot is not None:
            new, held = in_turns(conversation.turns, blocks, self.rule)
            return Injected({**body, "messages": new}, held is not None, held)
        block = blocks.block
        if not block:
            return Injected(dict(body))
        turns = conversation.turns
        if any(map(carries_breakpoint, turns)):  # the system prompt would precede one
            instead = instead_of_system(turns, blocks, self.rule)
            if instead is None:
                return Injected(dict(body))
            new, held = in_turns(turns, instead, self.rule)
            return Injected({**body, "messages": new}, held is not None, held)
        return Injected({**body, "system": with_block(body.get("system"), block)}, True)

    def shown(self, body: Mapping[str, object]) -> dict[str, object]:
        """``system`` and ``messages``, as they would be forwarded."""
        return {"system": body.get("system"), "messages": body.get("messages")}

    def read_completion(self, answer: Answer) -> Completion:
        """The text of a message object's text blocks, or of a stream's ``text_delta`` events."""
        return read_answer(answer, whole_text, stream_text)


ANTHROPIC_MESSAGES = AnthropicMessages()


def system_blocks(system: object) -> list[Mapping[str, object]] | str | None:
    """``system`` as sent when the API takes it (a string or a list of objects, absent as
    ``""``); ``None`` when malformed."""
    if system is None or isinstance(system, str):
        return system or ""
    if not isinstance(system, list):
        return None
    blocks: list[Mapping[str, object]] = [b for b in system if isinstance(b, dict)]
    return blocks if len(blocks) == len(system) else None


def as_messages(message: Mapping[str, object], found: list[Document]) -> list[Mapping[str, object]]:
    """One Anthropic message as the chat messages that cost as much and read the same
    (``found`` gets the documents whose pages are to be read).

    Tool results become tool messages (after the message's other content, in order); the
    rest stays one message of the same role, tool uses as its tool calls.
    """
    role, content = message.get("role"), message.get("content")
    if not isinstance(content, list):
        return [{"role": role, "content": content}]
    parts: list[object] = []
    calls: list[dict[str, object]] = []
    results: list[Mapping[str, object]] = []
    for block in content:
        kind = block.get("type") if isinstance(block, Mapping) else None
        if kind == "tool_use" and isinstance(block, Mapping):
            arguments = orjson.dumps(block.get("input")).decode()
            function = {"name": block.get("name"), "arguments": arguments}
            calls.append({"id": block.get("id"), "type": "function", "function": function})
        elif kind == "tool_result" and isinstance(block, Mapping):
            output = chat_content(block.get("content"), found)
            results.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": output}
            )
        else:
            parts += chat_parts(block, found)
    out: list[Mapping[str, object]] = []
    if parts or calls or not results:
        chat: dict[str, object] = {"role": role, "content": parts}
        if calls:
            chat["tool_calls"] = calls
        out.append(chat)
    return [*results, *out] if role == USER else [*out, *results]


def chat_content(content: object, found: list[Document]) -> object:
    """Content (a string or blocks) with Anthropic's blocks as the chat parts billed the same."""
    if not isinstance(content, list):
        return content
    parts: list[object] = []
    for block in content:
        parts += chat_parts(block, found)
    return parts


def chat_parts(block: object, found: list[Document]) -> list[object]:
    """One content block as chat parts: text as ``text``, media as the parts of their cost."""
    if not isinstance(block, Mapping):
        return [block]
    kind = block.get("type")
    if kind == "text":
        return [{"type": "text", "text": block.get("text")}]
    if kind == "thinking":
        return [{"type": "text", "text": block.get("thinking")}]
    if kind == "image":
        return [HIGH_DETAIL_IMAGE] * IMAGE_PARTS
    if kind == "document":
        return document_parts(block, found)
    if kind == "file":  # a chat part (refused upstream): its bytes read when budgeted, not now
        return [file_part(block, found)]
    return [block]  # redacted thinking, server tool blocks...: billed as their JSON


def document_parts(document: Mapping[str, object], found: list[Document]) -> list[object]:
    """A document as chat parts: its title and context, and a plain-text or content source's
    text, as the text Anthropic reads; a base64 PDF as its pages, one by URL or file id as the
    billing's file guess."""
    parts = [
        document_text({"type": "text", "text": document.get(key)})
        for key in ("title", "context")
        if isinstance(document.get(key), str)
    ]
    source = document.get("source")
    kind = source.get("type") if isinstance(source, Mapping) else None
    if kind == "text" and isinstance(source, Mapping):
        return [*parts, document_text({"type": "text", "text": source.get("data")})]
    if kind == "content" and isinstance(source, Mapping):
        content = source.get("content")
        blocks = content if isinstance(content, list) else [content]
        return [*parts, *(part for block in blocks for part in source_parts(block))]
    data = source.get("data") if kind == "base64" and isinstance(source, Mapping) else None
    return [*parts, pending(data, found) if isinstance(data, str) else {"type": "file"}]


def source_parts(block: object) -> list[object]:
    """One block of a content source as chat parts. Anthropic's content source holds only text
    and image blocks, so nothing here recurses (a nested document, which ``chat_parts`` would
    read again, let a hostile body nest deep enough to exhaust the stack): anything else is
    billed as its JSON, as other unknown blocks are."""
    if isinstance(block, Mapping) and block.get("type") == "image":
        return [HIGH_DETAIL_IMAGE] * IMAGE_PARTS
    return [document_text(block)]


def document_text(part: object) -> object:
    """A document's text part as ``DOCUMENT_TEXT`` (a bare string as one), anything else as it
    is: billed as text, but not the user's words, so never the retrieval query or a captured
    turn (those read ``text`` parts only)."""
    if isinstance(part, str):
        return {"type": DOCUMENT_TEXT, "text": part}
    if isinstance(part, Mapping) and part.get("type") == "text":
        return {"type": DOCUMENT_TEXT, "text": part.get("text")}
    return part


def billed_body(
    body: Mapping[str, object], messages: Sequence[Mapping[str, object]]
) -> dict[str, object]:
    """The chat completions body that costs what ``body`` costs."""
    billed: dict[str, object] = {"model": body.get("model"), "messages": messages}
    tools = body.get("tools")
    if tools is not None:
        billed["tools"] = tools
    limit = body.get("max_tokens")
    if limit is not None:
        billed["max_completion_tokens"] = limit
    return billed


def with_block(system: object, block: str) -> str | list[object]:
    """``system`` with the block after the app's text: a string appended to, blocks given
    one more text block at the end (after any breakpoint), nothing replaced by the block."""
    if isinstance(system, list) and system:
        return [*system, {"type": "text", "text": block}]
    if isinstance(system, str) and system:
        return system + SEPARATOR + block
    return block


def whole_text(body: Mapping[str, Any]) -> tuple[str, bool]:
    """The text of a message object (a 200 message never reports a failure of its own)."""
    return message_text(body.get("content")), False


def message_text(content: object) -> str:
    """The text of a message object's ``content``: its text blocks, joined (what the SDK's
    text blocks hold; tool uses and thinking carry none)."""
    if not isinstance(content, list):
        return ""
    texts = [
        block.get("text")
        for block in content
        if isinstance(block, dict) and block.get("type") == "text"
    ]
    return "".join(text for text in texts if isinstance(text, str))


def stream_text(events: Sequence[Mapping[str, Any]]) -> tuple[str, bool]:
    """The answer text of a stream (its ``text_delta`` events), and whether it failed (an
    ``error`` event: the stream's status is 200 even then)."""
    deltas: list[str] = []
    failed = False
    for event in events:
        kind = event.get("type")
        if kind == "content_block_delta":
            delta = event.get("delta")
            if isinstance(delta, Mapping) and delta.get("type") == "text_delta":
                text = delta.get("text")
                if isinstance(text, str):
                    deltas.append(text)
        elif kind in FAILED_EVENTS:
            failed = True
    return "".join(deltas), failed
