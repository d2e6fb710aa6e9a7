"""The retrieval query of a chat request: its last user messages, never the memory block.

The query is the text of the last ``window`` user messages, the latest first (it matters most
and survives the length cap). Assistant and system messages are left out: the system prompt is
where memproxy injects, so the block can never come back as query text, and anything fenced
like a memory block inside a user message (a client replaying a prompt) is cut out too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from proxy.context.render import BLOCK_CLOSE, BLOCK_OPEN

QUERY_MAX_CHARS = 2_000  # embedding, BM25 and keyword overlap all grow with the query
USER_ROLE = "user"
# A fence up to the first close after it (only ever applied where that close exists).
CLOSED_FENCE = re.compile(re.escape(BLOCK_OPEN) + ".*?" + re.escape(BLOCK_CLOSE), re.S)


def content_text(content: object) -> str:
    """The text of a message's content: a string, or the text parts of a list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            part.get("text", "")
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        ]
        return "\n".join(p for p in parts if isinstance(p, str))
    return ""


def strip_block(text: str) -> str:
    """Remove anything fenced like memproxy's memory block (an unclosed fence cuts the rest).

    Linear in the text however many fences it holds: every fence before the last close is
    closed (one regular-expression pass), and the first fence after it never is.
    """
    if BLOCK_OPEN not in text:
        return text
    last = text.rfind(BLOCK_CLOSE)
    split = last + len(BLOCK_CLOSE) if last >= 0 else 0
    head, tail = text[:split], text[split:]
    opened = tail.find(BLOCK_OPEN)
    kept = CLOSED_FENCE.sub("", head) + (tail if opened < 0 else tail[:opened])
    # Cutting can join the halves of a fence ("<memo" + "ries>"): that one cuts the rest too.
    opened = kept.find(BLOCK_OPEN)
    return kept if opened < 0 else kept[:opened]


def last_user_texts(messages: Sequence[Mapping[str, object]], window: int) -> list[str]:
    """The texts of the last ``window`` non-empty user messages, latest first."""
    texts: list[str] = []
    for message in reversed(messages):
        if len(texts) >= window:
            break
        if not isinstance(message, dict) or message.get("role") != USER_ROLE:
            continue
        text = strip_block(content_text(message.get("content"))).strip()
        if text:
            texts.append(text)
    return texts


def query_text(
    messages: Sequence[Mapping[str, object]], window: int, max_chars: int = QUERY_MAX_CHARS
) -> str:
    """The retrieval query: the last ``window`` user messages, latest first, capped."""
    texts = last_user_texts(messages, max(1, window))
    return "\n".join(texts)[:max_chars]
