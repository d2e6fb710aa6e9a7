"""Parsing a whole SSE body for completion hooks."""

from __future__ import annotations

from proxy.sse import iter_events


def test_iter_events_skips_done_comments_and_garbage() -> None:
    raw = b': keep-alive\n\ndata: {"a": 1}\n\ndata: not json\n\ndata: [1]\n\ndata: [DONE]\n\n'
    assert iter_events(raw) == [{"a": 1}]
