"""Put the memory block into a chat request's system prompt, never mutating the input.

This is position ``system`` (``proxy/context/position.py`` has the rule choosing between it and
the default, ``turn``).

Integration contract (stable): ``inject(messages, block) -> list[dict]``.

- The block is appended to the first system (or developer) message, after the application's own
  text: the system text before it stays byte-identical, but everything after it (the whole
  conversation) follows a block that changes every turn. String content gets
  ``"\\n\\n" + block``; list content (content parts) gets one more text part; ``None``
  content becomes the block.
- Without a system message, or when its content is of no shape that takes text (a number, an
  object), ``{"role": "system", "content": block}`` is inserted first: the client's message is
  never rewritten into something it did not send.
- An empty block returns an equal copy of the messages.
- The block (from ``render.render_block``) is fenced and carries its own line saying it is
  reference data, not instructions. The few joining tokens (separator, or a new message's
  overhead) are covered by the budget's 5% safety buffer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from proxy.context.position import SEPARATOR, carries_breakpoint, has_breakpoint

SYSTEM_ROLES = ("system", "developer")


def inject(messages: Sequence[Mapping[str, Any]], block: str) -> list[dict[str, Any]]:
    """Return new messages with ``block`` in the system prompt; the input is left untouched."""
    # Shallow copies suffice: only a top-level ``content`` is ever replaced, never edited.
    result = [dict(m) for m in messages]
    if not block:
        return result
    for message in result:
        if message.get("role") in SYSTEM_ROLES:
            content = with_block(message.get("content"), block)
            if content is None:
                break
            message["content"] = content
            return result
    return [{"role": "system", "content": block}, *result]


def inject_index(messages: Sequence[Mapping[str, Any]]) -> int:
    """The index of the message ``inject`` puts a block in (0 when it adds one in front)."""
    for index, message in enumerate(messages):
        if message.get("role") in SYSTEM_ROLES:
            return index if with_block(message.get("content"), "x") is not None else 0
    return 0


def clear_of_breakpoints(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether ``inject`` would leave the block behind every cache breakpoint: none in a later
    message, and none on the system message as a whole (its text then ends at the breakpoint)."""
    for index, message in enumerate(messages):
        if message.get("role") not in SYSTEM_ROLES:
            continue
        if with_block(message.get("content"), "x") is None:
            break  # a system message of its own goes first: every message follows the block
        later = messages[index + 1 :]
        return not has_breakpoint(message) and not any(map(carries_breakpoint, later))
    return not any(map(carries_breakpoint, messages))


def with_block(content: Any, block: str) -> str | list[Any] | None:
    """``content`` with ``block`` appended in its own shape (string or list of parts), or
    ``None`` when it has no shape that takes text."""
    if content is None or content == "":
        return block
    if isinstance(content, str):
        return content + SEPARATOR + block
    if isinstance(content, list):
        return [*content, {"type": "text", "text": block}]
    return None
