"""Put the memory block into a chat request's messages, never mutating the input.

Integration contract (stable): ``inject(messages, block) -> list[dict]``.

- The block is appended to the first system (or developer) message, after the application's own
  text, so the provider's prompt-cache prefix (everything before it) stays byte-identical across
  requests. String content gets ``"\\n\\n" + block``; list content gets one more text part;
  ``None`` content becomes the block.
- Without a system message, ``{"role": "system", "content": block}`` is inserted first.
- An empty block returns an equal copy of the messages.
- The block (from ``render.render_block``) is fenced and carries its own line saying it is
  reference data, not instructions. The few joining tokens (separator, or a new message's
  overhead) are covered by the budget's 5% safety buffer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

SYSTEM_ROLES = ("system", "developer")
SEPARATOR = "\n\n"


def inject(messages: Sequence[Mapping[str, Any]], block: str) -> list[dict[str, Any]]:
    """Return new messages with ``block`` in the system prompt; the input is left untouched."""
    # Shallow copies suffice: only a top-level ``content`` is ever replaced, never edited.
    result = [dict(m) for m in messages]
    if not block:
        return result
    for message in result:
        if message.get("role") in SYSTEM_ROLES:
            message["content"] = with_block(message.get("content"), block)
            return result
    return [{"role": "system", "content": block}, *result]


def with_block(content: Any, block: str) -> Any:
    """``content`` with ``block`` appended, keeping its shape (string or list of parts)."""
    if content is None or content == "":
        return block
    if isinstance(content, str):
        return content + SEPARATOR + block
    if isinstance(content, list):
        return [*content, {"type": "text", "text": block}]
    return f"{content}{SEPARATOR}{block}"
