"""Reading OpenAI chat responses after the fact (for completion hooks), never on the hot path."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

DATA_PREFIX = b"data:"
DONE = b"[DONE]"


def iter_events(raw: bytes) -> list[dict[str, Any]]:
    """Parse the JSON ``data:`` payloads of an SSE body, skipping ``[DONE]`` and bad lines."""
    events = []
    for line in raw.splitlines():
        if not line.startswith(DATA_PREFIX):
            continue
        payload = line[len(DATA_PREFIX) :].strip()
        if not payload or payload == DONE:
            continue
        try:
            parsed = orjson.loads(payload)
        except orjson.JSONDecodeError:
            continue
        if isinstance(parsed, dict):
            events.append(parsed)
    return events


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
