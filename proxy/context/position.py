"""Where the memory block goes in a conversation: the position rule, as pure functions.

Two positions (``proxy.defaults.POSITIONS``; setting ``memory.position``, header
``X-Memory-Position``):

- ``turn`` (the default): the block goes into the latest user turn, in front of the user's own
  content. Everything the application sent before that turn stays byte-identical, so a
  provider's prefix cache (OpenAI's automatic one, Anthropic's ``cache_control``) keeps
  matching from one turn to the next (adr/0111).
- ``system``: the block is appended to the first system message (``inject.inject``), the old
  rule: every turn then changes the prompt near its start.

The block never sits in front of a cache breakpoint: a content part (or a message) carrying
``cache_control`` says "cache everything up to here", so the block goes behind the last such part
of its turn, and when a breakpoint lies in a later message (a tool result), into that message
behind it; when the last breakpoint is in a message that must not carry it (an assistant turn),
there is no slot and nothing is injected.

The application resends its own history, which never held our blocks: to keep the previous
upstream prompt a prefix of the next one, the caller re-inserts each earlier turn's block at the
``Slot`` it had (``place``). Remembering them is I/O and lives outside the engine
(``proxy/cache/blocks.py``); these functions only say where blocks go.

Contract for API adapters (chat completions here; Responses and Anthropic Messages map their
items to the same shape): a *turn list* is a sequence of mappings with ``role`` and
``content``, where ``content`` is a string, a list of parts (mappings, usually with ``type``),
``None`` or absent. ``slot(turns, ...)`` gives where a new block goes (``None``: nowhere);
``place(turns, blocks, ...)`` returns new turns with each ``(Slot, block)`` in place and never
mutates its input. Adapters pass ``anchor_roles`` (the role of a user turn, and of messages
that may take a block behind a breakpoint), ``pinned`` (parts the block must follow, e.g.
Anthropic's ``tool_result`` blocks, which must come first in their message) and ``text_part``
(their text part's shape, e.g. ``{"type": "input_text", ...}`` for Responses).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from proxy.defaults import Position

TURN: Position = "turn"
SYSTEM: Position = "system"
SEPARATOR = "\n\n"
BREAKPOINT = "cache_control"
USER_ROLES = ("user",)
# Where a breakpoint in a message after the latest user turn may take the block behind it.
BEHIND_BREAKPOINT_ROLES = ("user", "tool")

Turn = Mapping[str, Any]
PartPredicate = Callable[[Any], bool]
TextPart = Callable[[str], dict[str, Any]]


def has_breakpoint(part: Any) -> bool:
    """Whether a content part carries a cache breakpoint (``cache_control``)."""
    return isinstance(part, Mapping) and part.get(BREAKPOINT) is not None


def chat_text_part(text: str) -> dict[str, Any]:
    """A chat completions (and Anthropic) text part."""
    return {"type": "text", "text": text}


@dataclass(frozen=True, slots=True)
class Slot:
    """Where a block sits: in message ``index``, behind its first ``after`` content parts.

    String content counts as one part: ``after`` 0 puts the block in front of the text, 1
    behind it.
    """

    index: int
    after: int


def takes_text(content: Any) -> bool:
    """Whether ``content`` has a shape a block can join (string, list of parts, or empty)."""
    return content is None or isinstance(content, str | list)


def parts_of(content: Any) -> int:
    """How many parts ``content`` has in ``Slot.after``'s counting."""
    if isinstance(content, list):
        return len(content)
    return 1 if isinstance(content, str) and content else 0


def slot_in(index: int, turn: Turn, pinned: PartPredicate = has_breakpoint) -> Slot | None:
    """The slot in ``turn``: behind its last pinned part (all of it if the message itself
    carries a breakpoint), else in front; ``None`` when its content takes no text."""
    content = turn.get("content")
    if not takes_text(content):
        return None
    if has_breakpoint(turn):
        return Slot(index, parts_of(content))
    if isinstance(content, list):
        last = max((i + 1 for i, part in enumerate(content) if pinned(part)), default=0)
        return Slot(index, last)
    return Slot(index, 0)


def carries_breakpoint(turn: Turn) -> bool:
    """Whether the message or one of its parts carries a cache breakpoint."""
    content = turn.get("content")
    return has_breakpoint(turn) or (
        isinstance(content, list) and any(has_breakpoint(part) for part in content)
    )


def slot(
    turns: Sequence[Turn],
    *,
    anchor_roles: Sequence[str] = USER_ROLES,
    behind_roles: Sequence[str] = BEHIND_BREAKPOINT_ROLES,
    pinned: PartPredicate = has_breakpoint,
) -> Slot | None:
    """Where a new block goes in ``turns`` (module notes); ``None`` when nowhere.

    The latest message with a role in ``anchor_roles`` whose content takes text; when a later
    message carries a breakpoint, the last such message instead, if its role is in
    ``behind_roles`` and it takes text, else nowhere.
    """
    anchor = next(
        (
            i
            for i in range(len(turns) - 1, -1, -1)
            if turns[i].get("role") in anchor_roles and takes_text(turns[i].get("content"))
        ),
        None,
    )
    if anchor is None:
        return None
    for i in range(len(turns) - 1, anchor, -1):
        if carries_breakpoint(turns[i]):
            if turns[i].get("role") in behind_roles:
                return slot_in(i, turns[i], pinned)
            return None
    return slot_in(anchor, turns[anchor], pinned)


def with_block_at(content: Any, block: str, after: int, text_part: TextPart) -> Any:
    """``content`` with ``block`` behind its first ``after`` parts, in the content's own shape;
    ``None`` when the shape takes no text or has fewer parts than ``after``."""
    if content is None or content == "":
        return block if after == 0 else None
    if isinstance(content, str):
        if after == 0:
            return block + SEPARATOR + content
        return content + SEPARATOR + block if after == 1 else None
    if isinstance(content, list) and after <= len(content):
        return [*content[:after], text_part(block), *content[after:]]
    return None


def place(
    turns: Sequence[Turn],
    blocks: Sequence[tuple[Slot, str]],
    *,
    text_part: TextPart = chat_text_part,
) -> tuple[list[dict[str, Any]], list[Slot]]:
    """New turns with each ``(slot, block)`` in place; the input is never mutated.

    Returns the turns and the slots actually filled: a slot past the end, or whose message no
    longer has its shape (fewer parts, content of no text shape), is skipped. At most one block
    a message (the first given).
    """
    # Shallow copies suffice: only a top-level ``content`` is ever replaced, never edited.
    result = [dict(turn) for turn in turns]
    filled: list[Slot] = []
    seen: set[int] = set()
    for where, block in blocks:
        if not block or where.index in seen or not 0 <= where.index < len(result):
            continue
        message = result[where.index]
        content = with_block_at(message.get("content"), block, where.after, text_part)
        if content is None:
            continue
        message["content"] = content
        seen.add(where.index)
        filled.append(where)
    return result, filled


def candidate_indices(
    turns: Sequence[Turn], until: int, roles: Sequence[str] = BEHIND_BREAKPOINT_ROLES
) -> list[int]:
    """Indices up to ``until`` (inclusive) where an earlier turn's block may sit: the messages
    whose role could have held one."""
    return [i for i in range(min(until + 1, len(turns))) if turns[i].get("role") in roles]


def fitting(tokens: Sequence[int], room: int) -> int:
    """How many of the earlier blocks (in order, ``tokens`` each) fit in ``room``.

    The earliest are kept: the prompt stays a prefix of the previous one up to the first block
    left out, so keeping a prefix of them keeps the longest cacheable prefix.
    """
    used = 0
    for kept, cost in enumerate(tokens):
        used += cost
        if used > room:
            return kept
    return len(tokens)
