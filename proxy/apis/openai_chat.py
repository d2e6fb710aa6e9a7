"""OpenAI chat completions: reading an answer (JSON or SSE) into a ``Completion``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from proxy.apis.answer import Answer
from proxy.pipeline.contract import Completion
from proxy.sse import iter_events


def read_completion(answer: Answer) -> Completion:
    """The assistant text (and for a whole answer, its parsed body) of a relayed answer."""
    raw = answer.decoded()
    body = None
    if not answer.streamed and answer.ok:
        try:
            parsed = orjson.loads(raw)
            body = parsed if isinstance(parsed, dict) else None
        except orjson.JSONDecodeError:
            body = None
    return Completion(
        status=answer.status,
        streamed=answer.streamed,
        ok=answer.ok,
        text=assistant_text(raw, streamed=answer.streamed, body=body),
        body=body,
    )


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
