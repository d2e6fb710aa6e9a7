"""Assistant text extraction for completion hooks."""

from __future__ import annotations

import pytest

from proxy.sse import assistant_text, iter_events
from tests.fakes.upstream import completion, stream_events


@pytest.mark.parametrize("chunks", [1, 3, 8])
def test_stream_text_is_the_concatenated_deltas_of_choice_zero(chunks: int) -> None:
    raw = b"".join(stream_events("m", 2, chunks, tools=False, usage=True))
    expected = completion("m", 1, chunks, tools=False)["choices"][0]["message"]["content"]
    assert assistant_text(raw, streamed=True, body=None) == expected


def test_whole_body_text_and_tool_calls() -> None:
    body = completion("m", 1, 5, tools=False)
    assert assistant_text(b"", streamed=False, body=body) == "Hello from the fake upstream"
    assert assistant_text(b"", streamed=False, body=completion("m", 1, 4, tools=True)) == ""
    assert assistant_text(b"", streamed=False, body=None) == ""


def test_iter_events_skips_done_comments_and_garbage() -> None:
    raw = b': keep-alive\n\ndata: {"a": 1}\n\ndata: not json\n\ndata: [1]\n\ndata: [DONE]\n\n'
    assert iter_events(raw) == [{"a": 1}]
