"""Reading a whole SSE body after the fact (for completion hooks), never on the hot path.

The relay passes streams through untouched; the API modules (``proxy/apis/``) parse what was
relayed with ``iter_events``.
"""

from __future__ import annotations

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
