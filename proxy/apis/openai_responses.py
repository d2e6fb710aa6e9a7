"""OpenAI's Responses API (``POST /v1/responses``) as an ``ApiAdapter``.

Reading a request: ``instructions`` and ``input`` (a string, or a list of items) become the
chat-shaped conversation the pipeline budgets, queries and captures: message items keep their
role, their ``input_text``/``output_text`` parts become ``text`` parts, images and audio the
parts the chat billing estimates, a file sent as ``file_data`` its pages (read when the request
is budgeted, ``proxy/context/documents.py``, adr/0152), one by ``file_id`` or ``file_url`` a
file the budget holds room back for (adr/0143); a ``function_call`` becomes an assistant tool
call, a ``function_call_output`` a tool message, any other item (reasoning, built-in tool calls) is
counted as its compact JSON, an upper estimate. ``tools``, ``text.format`` and
``max_output_tokens`` count as their chat equivalents. Context the request only points at (a
``previous_response_id``, a stored ``conversation``, a ``prompt`` template, an ``item_reference``)
is unseen: the pipeline holds room back for it (``proxy/pipeline/unseen.py``).

Writing the block: position ``turn`` (the default, adr/0111) puts it in front of the latest user
message item's content, as an ``input_text`` part when the content is a list of parts, as text
in front of it when the content is a string (``input`` given as a string stays a string), so
the prompt before that turn stays byte-identical; earlier turns' blocks go back into the items
that held them. With a ``previous_response_id`` the history lives upstream with its blocks in
it, as they were forwarded: only the new input gets a block, and blocks are keyed by that id
too (``Conversation.preamble``), so none is put back. Without a user message in ``input`` (a
tool output sent back), the block goes where position ``system`` puts it: after the app's own
``instructions``. Instructions are the Responses API's system prompt and hold for one request
only (a ``previous_response_id`` does not carry them over), so a block never piles up in a
stored conversation there (adr/0106). The API has no cache breakpoints to keep clear of.

A body of no shape this reads (``input`` neither a string nor a list of objects, or
``instructions`` not a string) has nothing to retrieve for: it goes upstream untouched, and the
upstream answers it.
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
    in_turns,
)
from proxy.apis.answer import Answer, read_answer
from proxy.context.documents import Document, file_part, pending, unseen_files
from proxy.context.position import SEPARATOR
from proxy.defaults import Position
from proxy.error_responses import OPENAI_RESPONSES, ErrorShape
from proxy.pipeline.contract import Completion

TEXT_PARTS = ("input_text", "output_text", "text")
# Item types that stand for content the proxy never sees.
UNSEEN_ITEMS = ("item_reference",)
UNSEEN_FIELDS = ("previous_response_id", "conversation", "prompt")
# Stream events after which the answer is no answer (nothing is captured).
FAILED_EVENTS = ("error", "response.failed")
FAILED_STATUSES = ("failed", "cancelled")


def input_text_part(text: str) -> dict[str, object]:
    """The Responses API's text part of an input message."""
    return {"type": "input_text", "text": text}


class OpenAIResponses:
    """``POST /v1/responses`` as an ``ApiAdapter``."""

    route = "responses"
    errors: ErrorShape = OPENAI_RESPONSES
    openai_credentials = True
    positions: frozenset[Position] = frozenset({SYSTEM, TURN})
    rule = TurnRule(text_part=input_text_part)

    def conversation(self, body: Mapping[str, object]) -> Conversation:
        """The conversation of ``instructions`` and ``input``; the chat body it costs."""
        model = str(body.get("model") or "")
        instructions = body.get("instructions")
        items = input_items(body.get("input"))
        if items is None or not isinstance(instructions, str | None):
            return Conversation(model=model, messages=(), billed={"model": model})
        messages: list[Mapping[str, object]] = []
        if instructions:
            messages.append({"role": "system", "content": instructions})
        documents: list[Document] = []
        messages += [as_message(item, documents) for item in items]
        unseen = (
            any(body.get(name) is not None for name in UNSEEN_FIELDS)
            or any(item.get("type") in UNSEEN_ITEMS for item in items)
            or unseen_files(messages)
        )
        return Conversation(
            model=model,
            messages=messages,
            billed=billed_body(body, model, messages),
            unseen_history=unseen,
            turns=items,
            preamble=preamble(body),
            documents=tuple(documents),
        )

    def inject(
        self, body: Mapping[str, object], conversation: Conversation, blocks: Blocks
    ) -> Injected:
        """The blocks in ``input`` (position ``turn``) or after ``instructions`` (module notes)."""
        if blocks.position == TURN and blocks.slot is not None:
            items, held = in_turns(conversation.turns, blocks, self.rule)
            given = body.get("input")
            # A string input is one user message: its text, with the block, stays a string.
            value: object = items[0]["content"] if isinstance(given, str) else items
            return Injected({**body, "input": value}, held is not None, held)
        block = blocks.block
        if not block:
            return Injected(dict(body))
        own = body.get("instructions")
        instructions = own + SEPARATOR + block if isinstance(own, str) and own else block
        return Injected({**body, "instructions": instructions}, True)

    def shown(self, body: Mapping[str, object]) -> dict[str, object]:
        """``instructions`` and ``input``, as they would be forwarded."""
        return {"instructions": body.get("instructions"), "input": body.get("input")}

    def read_completion(self, answer: Answer) -> Completion:
        """The output text of a response object, or of a stream's events."""
        return read_answer(answer, whole_text, stream_text)


RESPONSES = OpenAIResponses()


def preamble(body: Mapping[str, object]) -> str | None:
    """What precedes ``input`` in the prompt: instructions and the context pointed at;
    ``None`` when it cannot be written as JSON (no block is then kept or put back)."""
    fields = ("instructions", *UNSEEN_FIELDS)
    try:
        return orjson.dumps([body.get(name) for name in fields]).decode()
    except orjson.JSONEncodeError:
        return None


def input_items(value: object) -> list[Mapping[str, object]] | None:
    """``input`` as a list of items: a string is one user message; ``None`` when malformed."""
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        return None
    items: list[Mapping[str, object]] = [item for item in value if isinstance(item, dict)]
    return items if len(items) == len(value) else None


def as_message(item: Mapping[str, object], found: list[Document]) -> Mapping[str, object]:
    """One input item as the chat message that costs as much and reads the same (``found``
    gets the documents whose pages are to be read)."""
    kind = item.get("type", "message")
    if kind == "message":
        return {"role": item.get("role"), "content": chat_content(item.get("content"), found)}
    if kind == "function_call":
        call = {"name": item.get("name"), "arguments": item.get("arguments")}
        tool_call = {"id": item.get("call_id"), "type": "function", "function": call}
        return {"role": "assistant", "content": None, "tool_calls": [tool_call]}
    if kind == "function_call_output":
        output = chat_content(item.get("output"), found)
        return {"role": "tool", "tool_call_id": item.get("call_id"), "content": output}
    # Reasoning, built-in tool calls and their outputs, references: their JSON, an upper
    # estimate of what they cost (an encrypted reasoning item is base64: more bytes than tokens).
    return {"role": str(kind), "content": orjson.dumps(item).decode()}


def chat_content(content: object, found: list[Document]) -> object:
    """Message content with the Responses API's parts as the chat parts billed the same."""
    if not isinstance(content, list):
        return content
    return [chat_part(part, found) for part in content]


def chat_part(part: object, found: list[Document]) -> object:
    """One content part: text parts as ``text``, media as the chat part of its kind."""
    if not isinstance(part, Mapping):
        return part
    kind = part.get("type")
    if kind in TEXT_PARTS:
        return {"type": "text", "text": part.get("text")}
    if kind == "input_image":
        return {"type": "image_url", "image_url": {"detail": part.get("detail", "auto")}}
    if kind == "input_file":
        data = part.get("file_data")
        return pending(data, found) if isinstance(data, str) else {"type": "file"}
    if kind == "file":  # a chat part (refused upstream): its bytes read when budgeted, not now
        return file_part(part, found)
    return part  # refusal, input_audio: billed as in chat; anything else as its JSON


def billed_body(
    body: Mapping[str, object], model: str, messages: Sequence[Mapping[str, object]]
) -> dict[str, object]:
    """The chat completions body that costs what ``body`` costs."""
    billed: dict[str, object] = {"model": model, "messages": messages}
    tools = body.get("tools")
    if tools is not None:
        billed["tools"] = tools
    text = body.get("text")
    if isinstance(text, Mapping) and isinstance(text.get("format"), Mapping):
        billed["response_format"] = text["format"]  # {"type": "text"} costs nothing
    limit = body.get("max_output_tokens")
    if limit is not None:
        billed["max_completion_tokens"] = limit
    return billed


def whole_text(body: Mapping[str, Any]) -> tuple[str, bool]:
    """The output text of a response object, and whether its ``status`` says it failed."""
    return output_text(body.get("output")), body.get("status") in FAILED_STATUSES


def output_text(output: object) -> str:
    """The text of a response's ``output``: its messages' ``output_text`` parts, joined.

    What the SDK's ``Response.output_text`` gives; tool calls and reasoning carry none.
    """
    if not isinstance(output, list):
        return ""
    texts: list[str] = []
    for item in output:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        for part in item.get("content") or ():
            if isinstance(part, dict) and part.get("type") == "output_text":
                text = part.get("text")
                if isinstance(text, str):
                    texts.append(text)
    return "".join(texts)


def stream_text(events: Sequence[Mapping[str, Any]]) -> tuple[str, bool]:
    """The answer text of a stream, and whether it failed.

    From ``response.completed`` when it came (the whole response object), else the
    ``response.output_text.delta`` events that did (a stream cut short, or one whose last event
    was left out).
    """
    deltas: list[str] = []
    failed = False
    for event in events:
        kind = event.get("type")
        if kind == "response.completed":
            response = event.get("response")
            if isinstance(response, Mapping):
                return output_text(response.get("output")), failed
        elif kind == "response.output_text.delta":
            delta = event.get("delta")
            if isinstance(delta, str):
                deltas.append(delta)
        elif kind in FAILED_EVENTS:
            failed = True
    return "".join(deltas), failed
